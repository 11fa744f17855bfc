"""Source and output files of the command line, read and written with diagnostics (E007, E009)
instead of tracebacks; shared by `tmalangc` and `tmalangc run`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..diagnostics import error
from ..syntax.encoding import decode


MAX_SOURCE_BYTES = 16 << 20   # far above any kernel; stops a read of /dev/zero or a runaway file


STDIO = "-"        # a path that means standard input (a source) or standard output (-o -)


def read_source(path: str) -> str:
    """The text of a source file (`-`: standard input): E009 if it cannot be read or is huge, E007
    if it is not UTF-8."""
    try:
        if path == STDIO:
            data = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise error("E009", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise error("E009", f"cannot read {path}: larger than {MAX_SOURCE_BYTES >> 20} MiB, which no kernel is")
    return decode(data, path)


def check_outputs(paths: list) -> None:
    """E009 for an output whose directory is missing or not writable, or that is a directory."""
    for path in (Path(p) for p in paths if str(p) != STDIO):
        folder = path.parent
        if not folder.is_dir():
            raise error("E009", f"cannot write {path}: directory '{folder}' does not exist")
        if path.is_dir():
            raise error("E009", f"cannot write {path}: it is a directory")
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise error("E009", f"cannot write {path}: permission denied")


def write_file(path, data: str | bytes) -> None:
    """Write an output (`-`: standard output); a failure (disk full, a race with the checks above)
    is E009, not a traceback."""
    try:
        if str(path) == STDIO:
            sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
            sys.stdout.flush()
        elif isinstance(data, bytes):
            Path(path).write_bytes(data)
        else:
            Path(path).write_text(data)
    except OSError as exc:
        raise error("E009", f"cannot write {path}: {exc.strerror or exc}") from None
