"""An on-disk cache of compilation results (PTX, cubin, manifest, ...).

An entry is a directory named by its key, holding the files plus an index with each file's
SHA-256. It is built in a temporary directory and renamed into place, so readers never see a
half-written entry; a reader still verifies the index, so an entry damaged afterwards (a full
disk, a manual edit) is a miss rather than a crash or a wrong kernel.

`$TMALANG_CACHE_DIR` moves the cache (default `~/.cache/tmalang`); `TMALANG_CACHE=0` turns it
off, which is read at each use so it can be flipped at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

INDEX = "index.json"


def default_root() -> Path:
    return Path(os.environ.get("TMALANG_CACHE_DIR") or Path.home() / ".cache" / "tmalang")


class DiskCache:
    """Files by key; `key()` derives keys from everything that determines a compilation."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    @property
    def enabled(self) -> bool:
        return os.environ.get("TMALANG_CACHE", "1") != "0"

    @staticmethod
    def key(source: str, options: dict, versions: dict) -> str:
        """SHA-256 of a canonical JSON of the inputs (sorted keys, no whitespace)."""
        canonical = json.dumps(
            {"source": source, "options": options, "versions": versions},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def get(self, key: str) -> dict[str, bytes] | None:
        """The files stored under `key`, or None if absent, damaged or the cache is off."""
        if not self.enabled:
            return None
        return _read_entry(self._entry(key))

    def put(self, key: str, files: dict[str, bytes]) -> None:
        """Store `files` under `key`; a failure to write only warns (the cache is optional)."""
        if not self.enabled:
            return
        for name in files:
            _check_name(name)
        try:
            self._store(key, files)
        except OSError as exc:
            warnings.warn(f"tmalang: could not write cache entry {key}: {exc}", stacklevel=2)

    def _entry(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / key

    def _store(self, key: str, files: dict[str, bytes]) -> None:
        final = self._entry(key)
        if _read_entry(final) is not None:
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=final.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            index = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
            (staging / INDEX).write_text(json.dumps(index, sort_keys=True))
            shutil.rmtree(final, ignore_errors=True)  # a damaged entry in the way
            os.replace(staging, final)
        except OSError:
            if _read_entry(final) is None:  # not merely a concurrent writer who won the race
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _read_entry(entry: Path) -> dict[str, bytes] | None:
    try:
        index = json.loads((entry / INDEX).read_text())
        if not isinstance(index, dict):
            return None
        files = {name: (entry / name).read_bytes() for name in index}
    except (OSError, ValueError):
        return None
    if any(hashlib.sha256(data).hexdigest() != index[name] for name, data in files.items()):
        return None
    return files


def _check_name(name: str) -> None:
    if not name or name == INDEX or name.startswith(".") or "/" in name or "\\" in name:
        raise ValueError(f"invalid cache file name {name!r}")
