"""The host side of the watchdog (backend/watchdog_codegen.py): arm it, read its report, recover.

Each device gets one report record in pinned, device-mapped host memory: the kernel writes it
just before it traps, and the host can still read it after the trap has made the context
unusable. Each loaded module learns the record's address, its timeout and a tag naming its
kernel through its `tmalang$watchdog` global.

When a driver call fails after a watchdog fired, `explain` turns the failure into an E218
diagnostic that names every reported wait as the interpreter's E401 names a blocked warp, then
resets the device's primary context (a trap leaves it unusable until then; everything allocated
in it is gone) so that the process can launch again.

TMALANG_WATCHDOG_TIMEOUT sets the timeout in seconds (default 5), read when a kernel is loaded.
"""

from __future__ import annotations

import ctypes
import itertools
import os
from dataclasses import dataclass

from ..contract import watchdog as layout
from ..contract.errors import DRIVER_CALL, LAUNCH_OPTION, WATCHDOG, LaunchError
from ..contract.manifest import Manifest, WaitSite
from ..contract.watchdog import DEFAULT_TIMEOUT_NS, GLOBAL, GLOBAL_BYTES, RECORD_BYTES, Entry
from ..diagnostics import Source, Span, TmalangError
from . import driver

_tags = itertools.count(1)


@dataclass
class _Record:
    host: int                       # the pinned host address the kernel's entries land at
    device: int                     # the same memory as the kernel addresses it
    kernels: dict[int, Manifest]    # tag -> the manifest of a module armed with this record

    def entries(self) -> list[Entry]:
        return layout.entries(ctypes.string_at(self.host, RECORD_BYTES))


_records: dict[int, _Record] = {}


def _record(device: int) -> _Record:
    if device not in _records:
        flags = driver.api().CU_MEMHOSTALLOC_DEVICEMAP | driver.api().CU_MEMHOSTALLOC_PORTABLE
        host = int(driver.call("cuMemHostAlloc", RECORD_BYTES, flags))
        ctypes.memset(host, 0, RECORD_BYTES)
        _records[device] = _Record(host, int(driver.call("cuMemHostGetDevicePointer", host, 0)), {})
    return _records[device]


def timeout_ns() -> int:
    text = os.environ.get("TMALANG_WATCHDOG_TIMEOUT", "")
    if not text:
        return DEFAULT_TIMEOUT_NS
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 2**30:
        raise LaunchError(LAUNCH_OPTION, f"TMALANG_WATCHDOG_TIMEOUT={text!r} is not a number of seconds > 0")
    return max(1, int(seconds * 1e9))


def arm(module, manifest: Manifest, device: int) -> None:
    """Give a freshly loaded module its record, timeout and tag (a kernel compiled without the
    watchdog has nothing to arm)."""
    if not manifest.waits:
        return
    record = _record(device)
    tag = next(_tags)
    record.kernels[tag] = manifest
    address, size = driver.call("cuModuleGetGlobal", module, GLOBAL.encode())
    if int(size) != GLOBAL_BYTES:
        raise LaunchError(DRIVER_CALL, f"the kernel's {GLOBAL} is {int(size)} bytes, expected {GLOBAL_BYTES}")
    state = layout.state(record.device, timeout_ns(), tag)
    driver.call("cuMemcpyHtoD", int(address), state, len(state))


def explain(failure: LaunchError) -> TmalangError:
    """The E218 report if a watchdog fired (its device is reset for the next launch); otherwise
    `failure` itself. A driver call fails after a trap, in this launch or a later one."""
    if failure.code != DRIVER_CALL:
        return failure
    for device, record in list(_records.items()):
        entries = record.entries()
        if entries:
            report = _report(record, entries, failure)
            driver.reset(device)
            return report
    return failure


def _forget(device: int) -> None:
    """The device was reset: its record went with it."""
    _records.pop(device, None)


driver.on_reset(_forget)


def _report(record: _Record, entries: list[Entry], failure: LaunchError) -> TmalangError:
    first = entries[0]
    manifest = record.kernels.get(first.tag)
    if manifest is None or first.site >= len(manifest.waits):
        return failure
    seen, notes = set(), []
    for e in entries:
        m = record.kernels.get(e.tag)
        key = (e.tag, e.site, e.cta_x, e.cta_y, e.cta_z, e.warp)
        if m is not None and e.site < len(m.waits) and key not in seen:
            seen.add(key)
            notes.append(_describe(m, e))
    notes += [f"the failure the driver reported: {failure.message}",
              "the device's context was reset so that this process can launch again: memory allocated on it "
              "before (by tmalang, torch or anyone) is gone",
              "the interpreter finds hangs of the protocol before launch: tmalangc run FILE --interpret "
              "(or kernel.interpret(...)); TMALANG_WATCHDOG_TIMEOUT sets the timeout"]
    return WatchdogError(
        f"watchdog: kernel '{manifest.kernel}' hung on the GPU: a warp waited more than {first.timeout_ns / 1e9:g} s "
        f"for an mbarrier phase that did not complete", _span(manifest.waits[first.site]), notes)


def _describe(m: Manifest, e: Entry) -> str:
    """One reported wait, in the words of the interpreter's E401 notes."""
    site = m.waits[e.site]
    stage = (e.offset - site.offset) // 8
    cta = f"CTA {e.cta_x}" if (e.cta_y, e.cta_z) == (0, 0) else f"CTA ({e.cta_x}, {e.cta_y}, {e.cta_z})"
    if m.cluster != (1, 1, 1):
        cta += f" (cluster rank {e.cluster_rank})"
    where = f"{site.file}:{site.line}:{site.col}" if site.line else "?"
    return (f"{cta}: role '{site.role}', warp {e.warp} waits at {where} on mbarrier {site.barrier}[{stage}] "
            f"parity {e.parity} (the phase in progress has parity {e.phase_parity}; barrier word "
            f"{e.barrier_word:#018x})")


def _span(site: WaitSite | None) -> Span | None:
    if site is None or not site.line:
        return None
    source = Source("\n" * (site.line - 1) + site.text, site.file)
    return Span(source, site.line, site.col, site.line, site.end_col)


class WatchdogError(LaunchError):
    """E218: a watchdog fired; points at the wait it reports first, names every reported wait."""

    def __init__(self, message: str, span: Span | None, notes: list[str]) -> None:
        TmalangError.__init__(self, WATCHDOG, message, span, notes)
