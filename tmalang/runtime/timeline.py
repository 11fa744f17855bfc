"""The host side of the hardware timeline (backend/timeline_codegen.py): give a module its buffer,
and turn what the warps stamped into the trace the interpreter writes (contract/trace.py), so the
GPU's run and the interpreter's open side by side in Perfetto.

Waits and role syncs become slices from their first try to their end; arrivals, TMA issues and
MMA commits become instants. Times are microseconds of %globaltimer from the earliest stamp.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..contract import timeline as layout
from ..contract.manifest import Manifest
from ..contract.trace import Trace
from . import driver


@dataclass
class Buffer:
    address: int
    ctas: int
    warps: int
    capacity: int

    @property
    def nbytes(self) -> int:
        return self.ctas * self.warps * layout.region_bytes(self.capacity)


def arm(module, manifest: Manifest, ctas: int, capacity: int = layout.DEFAULT_CAPACITY) -> Buffer:
    """A zeroed buffer for `ctas` CTAs, written into the module's tmalang$timeline."""
    buffer = Buffer(0, ctas, manifest.block_threads // 32, capacity)
    buffer.address = driver.alloc_zeroed(buffer.nbytes)
    driver.write_global(module, layout.GLOBAL, layout.state(buffer.address, ctas, capacity))
    return buffer


def disarm(module) -> None:
    """Stop recording (ctas = 0), so later launches of the module only test and go on."""
    driver.write_global(module, layout.GLOBAL, layout.state(0, 0, 0))


def read(buffer: Buffer, manifest: Manifest) -> Trace:
    """The trace of what the buffer's warps recorded (the kernel has finished); frees the buffer."""
    host = ctypes.create_string_buffer(buffer.nbytes)
    driver.call("cuMemcpyDtoH", ctypes.addressof(host), buffer.address, buffer.nbytes)
    driver.free(buffer.address)
    raw = host.raw
    region = layout.region_bytes(buffer.capacity)
    tracks = {}
    for cta in range(buffer.ctas):
        for warp in range(buffer.warps):
            at = (cta * buffer.warps + warp) * region
            events = layout.events(raw[at:at + region], buffer.capacity)
            if events:
                tracks[(cta, warp)] = events
    return to_trace(tracks, manifest)


def to_trace(tracks: dict[tuple[int, int], list[layout.Event]], manifest: Manifest) -> Trace:
    """Slices and instants on one track per (CTA, warp), named after the warp's role."""
    trace = Trace()
    starts = [e.time_ns for events in tracks.values() for e in events]
    origin = min(starts) if starts else 0

    def us(ns: int) -> float:
        return (ns - origin) / 1000

    for (cta, warp), events in sorted(tracks.items()):
        trace.name_warp(cta, warp, manifest.events[events[0].site].role)
        open_at: dict[int, layout.Event] = {}
        for e in events:
            site = manifest.events[e.site]
            name = f"{site.name}[{e.value}]" if site.kind in ("wait", "arrive") else site.name
            if e.phase == layout.BEGIN:
                open_at[e.site] = e
            elif e.phase == layout.END and e.site in open_at:
                begin = open_at.pop(e.site)
                trace.op(cta, warp, name, us(begin.time_ns), us(e.time_ns), site.where, shortest=0.001)
            elif e.phase == layout.INSTANT:
                trace.instant(cta, warp, name, us(e.time_ns), site.where)
    return trace
