"""Whether compiles verify by default: `TMALANG_VERIFY=1` (compile(verify=None), `tmalangc`).

Kept apart from tmalang.verify so that the CLI's front reads it without loading the verifier
(a warm compile, answered from the cache, starts in tens of milliseconds)."""

from __future__ import annotations

import os


def enabled_by_default() -> bool:
    return os.environ.get("TMALANG_VERIFY") == "1"
