"""The watchdog's contract between the kernel and the host: the module global the runtime arms,
and the layout of the report a firing warp writes (backend/watchdog_codegen.py writes it,
runtime/watchdog.py reads it, the C++ header reads it too).

Module global `tmalang$watchdog`, 32 bytes, at the offsets FIELDS names: the record's device
address, the timeout in ns, the tag naming the kernel (the runtime writes these three when it
loads the module), then `claimed` (entries handed out) and `stop` (raised by the first warp that
timed out), which the runtime sets back to 0 after a report. A record of 0 still stops the
kernel, with no report; a timeout of 0 means DEFAULT_TIMEOUT_NS.

Report: ENTRIES entries of ENTRY_WORDS little-endian u32 words, one per reporting warp, in the
order `Entry` lists them; `written` (word 0) is stored last, after a system-scope fence.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

GLOBAL = "tmalang$watchdog"
GLOBAL_BYTES = 32
FIELDS = {"record": 0, "timeout_ns": 8, "tag": 16, "claimed": 20, "stop": 24}
DEFAULT_TIMEOUT_NS = 5_000_000_000
ENTRIES = 1024                  # 64 KiB: every warp of 128 CTAs of 8 warps
ENTRY_WORDS = 16
RECORD_BYTES = ENTRIES * ENTRY_WORDS * 4


def enabled_by_default() -> bool:
    """Whether a compile gets the watchdog when not told: only with TMALANG_WATCHDOG=1. It costs
    attention_sm90 2-9% (bench/results/watchdog-*.json), above the 1% that would make it the
    default."""
    return os.environ.get("TMALANG_WATCHDOG", "0") == "1"


class Entry(NamedTuple):
    written: int            # 1 once the entry is complete
    site: int               # index into the manifest's `waits`
    tag: int                # the armed module's tag (which kernel)
    cta_x: int
    cta_y: int
    cta_z: int
    cluster_rank: int
    warp: int               # tid.x / 32
    lane: int
    offset: int             # the barrier's shared-memory offset from the aligned base
    parity: int             # the parity waited for
    phase_parity: int       # the parity of the phase in progress when the warp fired
    word_lo: int            # the raw 64-bit barrier word
    word_hi: int
    timeout_lo: int         # the timeout it ran out of, in ns
    timeout_hi: int

    @property
    def barrier_word(self) -> int:
        return self.word_lo | self.word_hi << 32

    @property
    def timeout_ns(self) -> int:
        return self.timeout_lo | self.timeout_hi << 32


def state(record: int, timeout_ns: int, tag: int) -> bytes:
    """The bytes of an armed module global (nothing claimed, not stopped)."""
    return struct.pack("<QQIIII", record, timeout_ns, tag, 0, 0, 0)


def entries(raw: bytes) -> list[Entry]:
    """The written entries of a report."""
    found = (Entry(*struct.unpack_from(f"<{ENTRY_WORDS}I", raw, 4 * ENTRY_WORDS * i)) for i in range(ENTRIES))
    return [e for e in found if e.written == 1]
