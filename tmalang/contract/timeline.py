"""The hardware timeline's contract between the kernel and the host (backend/timeline_codegen.py
writes it, runtime/timeline.py reads it).

Module global `tmalang$timeline`, 16 bytes: {u64 buffer, u32 ctas, u32 capacity}. CTAs with a
linear index below `ctas` record; the others only test that. The buffer holds one region per
(CTA, warp), CTA-major: a 16-byte header whose first u32 counts the events written, then
`capacity` events of 16 bytes: u64 %globaltimer (ns), u32 the event site (an index into the
manifest's `events`), u32 PHASE | value << 2 (value: the barrier stage of a wait or arrival).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

GLOBAL = "tmalang$timeline"
GLOBAL_BYTES = 16
FIELDS = {"buffer": 0, "ctas": 8, "capacity": 12}
EVENT_BYTES = 16
HEADER_BYTES = 16
BEGIN, END, INSTANT = 0, 1, 2
DEFAULT_CAPACITY = 4096


class Event(NamedTuple):
    time_ns: int
    site: int
    phase: int
    value: int


def region_bytes(capacity: int) -> int:
    return HEADER_BYTES + capacity * EVENT_BYTES


def state(buffer: int, ctas: int, capacity: int) -> bytes:
    return struct.pack("<QII", buffer, ctas, capacity)


def events(region: bytes, capacity: int) -> list[Event]:
    """The events one warp recorded, in order."""
    (count,) = struct.unpack_from("<I", region, 0)
    found = []
    for i in range(min(count, capacity)):
        time_ns, site, word = struct.unpack_from("<QII", region, HEADER_BYTES + i * EVENT_BYTES)
        found.append(Event(time_ns, site, word & 3, word >> 2))
    return found
