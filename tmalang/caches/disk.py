"""An on-disk cache of compilation results (PTX, cubin, manifest, ...).

An entry is a directory named by its key, holding the files plus an index with each file's
SHA-256. It is built in a temporary directory and renamed into place, so readers never see a
half-written entry; a reader still verifies the index, so an entry damaged afterwards (a full
disk, a manual edit) is a miss rather than a crash or a wrong kernel.

Reading trusts nothing on disk: an index must be a non-empty object of valid file names, and
every file is opened without following links and must be a regular file (a FIFO would block
the reader, a link could point outside the cache). Anything else is a miss, and the next `put`
replaces the entry, whatever is in its way (a plain file, a damaged directory).

The cache is bounded: after each `put`, the least recently used entries (a hit refreshes an
entry) are removed until at most `$TMALANG_CACHE_MAX_ENTRIES` (default 1000) entries of at most
`$TMALANG_CACHE_MAX_BYTES` (default 1 GiB) in all remain.

`$TMALANG_CACHE_DIR` moves the cache (default `$XDG_CACHE_HOME/tmalang`, and `~/.cache/tmalang`
without XDG_CACHE_HOME); `TMALANG_CACHE=0` turns it off. The variables are read at each use so
they can be changed at run time. This module imports nothing of tmalang: the CLI reads the cache
before it loads the compiler.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import warnings
from pathlib import Path

INDEX = "index.json"
DEFAULT_MAX_ENTRIES = 1000
DEFAULT_MAX_BYTES = 1 << 30
MAX_FILE_BYTES = 1 << 30      # no cache file is larger; a bigger one is damage


def default_root() -> Path:
    if os.environ.get("TMALANG_CACHE_DIR"):
        return Path(os.environ["TMALANG_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tmalang"


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
        entry = self._entry(key)
        files = _read_entry(entry)
        if files is not None:
            _touch(entry)  # least recently used goes first
        return files

    def put(self, key: str, files: dict[str, bytes]) -> None:
        """Store `files` under `key`; a failure to write only warns (the cache is optional)."""
        if not self.enabled:
            return
        for name in files:
            _check_name(name)
        try:
            self._store(key, files)
            self.evict(keep=key)
        except OSError as exc:
            warnings.warn(f"tmalang: could not write cache entry {key}: {exc}", stacklevel=2)

    def evict(self, keep: str | None = None) -> None:
        """Remove least recently used entries until the limits hold (never the entry `keep`)."""
        entries = sorted(_entries(self.root), key=lambda e: e[1])   # oldest first
        max_entries, max_bytes = _limit("TMALANG_CACHE_MAX_ENTRIES", DEFAULT_MAX_ENTRIES), \
            _limit("TMALANG_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)
        count, total = len(entries), sum(size for _, _, size in entries)
        for path, _, size in entries:
            if count <= max_entries and total <= max_bytes:
                return
            if path.name == keep:
                continue
            _remove(path)
            count, total = count - 1, total - size

    def clear(self) -> int:
        """Remove every entry and the parser's tables (syntax/tables.py rebuilds them); staging
        folders of writers at work are left to them. How many entries went."""
        entries = _entries(self.root)
        for path, _, _ in entries:
            _remove(path)
        for tables in _parser_tables(self.root):
            _remove(tables)
        return len(entries)

    def describe(self) -> str:
        """Where the cache is, how full against its limits, and the variables that steer it."""
        entries = _entries(self.root)
        total = sum(size for _, _, size in entries)
        lines = [f"cache:   {self.root}" + ("" if self.enabled else "  (off: TMALANG_CACHE=0)"),
                 f"entries: {len(entries)} of at most {_limit('TMALANG_CACHE_MAX_ENTRIES', DEFAULT_MAX_ENTRIES)}",
                 f"size:    {total / 2**20:.1f} MiB of at most "
                 f"{_limit('TMALANG_CACHE_MAX_BYTES', DEFAULT_MAX_BYTES) / 2**20:.0f} MiB",
                 f"parser:  {len(_parser_tables(self.root))} table file(s) (parser-*.pickle)",
                 "set by:  TMALANG_CACHE_DIR (else $XDG_CACHE_HOME/tmalang, else ~/.cache/tmalang), TMALANG_CACHE=0 "
                 "(off), TMALANG_CACHE_MAX_ENTRIES, TMALANG_CACHE_MAX_BYTES"]
        return "\n".join(lines)

    def _entry(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.root / key[:2] / key

    def _store(self, key: str, files: dict[str, bytes]) -> None:
        final = self._entry(key)
        if _read_entry(final) is not None:
            return
        if final.parent.is_symlink() or (final.parent.exists() and not final.parent.is_dir()):
            _remove(final.parent)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=final.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            index = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
            (staging / INDEX).write_text(json.dumps(index, sort_keys=True))
            _remove(final)  # a damaged entry, or a plain file, in the way
            os.replace(staging, final)
        except OSError:
            if _read_entry(final) is None:  # not merely a concurrent writer who won the race
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _read_entry(entry: Path) -> dict[str, bytes] | None:
    """The files of a complete, undamaged entry; None for anything else."""
    try:
        index = json.loads(_read_regular(entry / INDEX))
        if not isinstance(index, dict) or not index or not all(
            _valid_name(n) and isinstance(h, str) for n, h in index.items()
        ):
            return None
        files = {name: _read_regular(entry / name) for name in index}
    except (OSError, ValueError):
        return None
    if any(hashlib.sha256(data).hexdigest() != index[name] for name, data in files.items()):
        return None
    return files


def read_own_file(path: str | os.PathLike) -> bytes | None:
    """The bytes of `path` if this user may trust them, else None (absent, a link, not a regular
    file, another user's, or writable by group or others, who could have put anything there).
    What a pickle must be before it is unpickled, since unpickling runs whatever the file says.
    The checks are made on the opened file, so the file read is the file checked."""
    try:
        return _read_regular(Path(path), own=True)
    except OSError:
        return None


def write_own_file(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` at `path`, readable by this user alone (0600), whole or not at all: a reader
    never sees half of it. A folder that cannot be written is no error (the cache is optional)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")   # mode 0600
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(staged, path)
    except OSError:
        Path(staged).unlink(missing_ok=True)


def _read_regular(path: Path, own: bool = False) -> bytes:
    """The bytes of `path` if it is a regular file (not a link, FIFO, device or directory), and
    with `own`, this user's and writable by no one else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            raise OSError(f"{path} is not a regular cache file")
        if own and (info.st_uid != os.getuid() or info.st_mode & 0o022):
            raise OSError(f"{path} is not this user's alone")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    """Remove whatever is at `path`: a directory tree, a file, a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _touch(entry: Path) -> None:
    try:
        os.utime(entry)
    except OSError:
        pass  # a read-only cache still serves hits


def _parser_tables(root: Path) -> list[Path]:
    """The parse tables syntax/tables.py keeps beside the entries."""
    try:
        return sorted(root.glob("parser-*.pickle"))
    except OSError:
        return []


def _entries(root: Path) -> list[tuple[Path, float, int]]:
    """(path, last use, bytes) of every entry under `root` (staging directories excluded)."""
    found = []
    try:
        shards = [d for d in root.iterdir() if len(d.name) == 2 and d.is_dir() and not d.is_symlink()]
    except OSError:
        return found
    for shard in shards:
        try:
            children = list(shard.iterdir())
        except OSError:
            continue
        for entry in children:
            if len(entry.name) != 64 or entry.name.startswith("."):
                continue
            try:
                info = entry.lstat()
                size = sum(f.lstat().st_size for f in entry.iterdir()) if stat.S_ISDIR(info.st_mode) else info.st_size
            except OSError:
                continue
            found.append((entry, info.st_mtime, size))
    return found


def _limit(variable: str, default: int) -> int:
    text = os.environ.get(variable, "")
    try:
        value = int(text) if text else default
    except ValueError:
        warnings.warn(f"tmalang: {variable}={text!r} is not an integer; using {default}", stacklevel=3)
        return default
    return max(value, 1)


def _valid_name(name: object) -> bool:
    return (isinstance(name, str) and bool(name) and name != INDEX and not name.startswith(".")
            and "/" not in name and "\\" not in name and "\0" not in name)


def _check_name(name: str) -> None:
    if not _valid_name(name):
        raise ValueError(f"invalid cache file name {name!r}")
