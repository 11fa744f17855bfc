"""The whole-compile cache of `tmalangc`: a compile already done answers from disk.

An entry holds what a command line produced (the PTX, LLVM IR, cubin or header it wrote, and the
manifest if it asked for one), keyed on everything that shapes that output:

    the source text and its name      (the name is in the PTX's line info and the header)
    the options                       (arch, kernel, -D constants, what is emitted)
    tmalang itself                    (its version, and the size and time of each of its files,
                                       so an edited compiler never serves a stale answer)
    the tools                         (llvmlite's library; ptxas, for a cubin)

Reading an entry needs none of the compiler: this module imports only the cache, so a warm
`tmalangc` costs about what starting Python does. Runs that report on the compile itself
(--time-passes, --print-ir-after, --stats, --explain) always compile.

Where it lives and how to turn it off: tmalang/caches/disk.py ($TMALANG_CACHE_DIR, $XDG_CACHE_HOME,
TMALANG_CACHE=0); `tmalangc cache info|clear`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from .disk import DiskCache
from ..version import VERSION

PACKAGE = Path(__file__).parents[1]   # the whole tmalang package, not this folder
OUTPUT = "output"
MANIFEST = "manifest.json"


@functools.cache
def _package_files() -> tuple:
    """(path, size, mtime) of every file of the tmalang package: a compiler edit changes the key."""
    stamps = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                info = os.stat(os.path.join(folder, name))
                stamps.append((os.path.relpath(os.path.join(folder, name), PACKAGE), info.st_size, info.st_mtime_ns))
    return tuple(stamps)


def _file_stamp(path: str | None) -> tuple | None:
    """Which build of a tool: its path, size and time (running it to ask would cost more than
    the whole warm compile)."""
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return (path,)
    return (path, info.st_size, info.st_mtime_ns)


def _llvmlite_stamp() -> tuple | None:
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    library = next(iter(sorted((folder / "binding").glob("libllvmlite*"))), folder / "__init__.py")
    return _file_stamp(str(library))


def compile_key(source: str, name: str, options: dict, ptxas: str | None) -> str:
    """The entry of one compile: `options` are the command line's (JSON-able); `ptxas` the path of
    the assembler when the output is a cubin, else None."""
    tools = {"tmalang": VERSION, "files": _package_files(), "llvmlite": _llvmlite_stamp(),
             "ptxas": _file_stamp(ptxas)}
    return DiskCache.key(source, {"name": name, **options}, tools)


def lookup(key: str) -> dict[str, bytes] | None:
    return DiskCache().get(key)


def store(key: str, output: bytes, manifest: bytes | None) -> None:
    files = {OUTPUT: output}
    if manifest is not None:
        files[MANIFEST] = manifest
    DiskCache().put(key, files)
