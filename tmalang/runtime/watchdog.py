"""The host side of the watchdog (backend/watchdog_codegen.py): arm it, wait for kernels with it,
turn its report into E218.

Each device gets one report record in pinned, device-mapped host memory; each loaded module
learns the record's address, its timeout and a tag naming its kernel through its
`tmalang$watchdog` global (`arm`). A kernel whose wait timed out stops by itself (its warps exit),
so the context stays usable: the runtime notices the report when it waits for the kernel (`wait`:
a NumPy launch, `Kernel.synchronize`) or before the next launch (`check`), raises E218 naming
every reported wait as the interpreter's E401 names a blocked warp, and clears the record and
the modules' `stop` flags for the next launch. NumPy outputs are not copied back.

A kernel whose warps stay blocked at a named barrier cannot end; `wait` then reports after
DRAIN_S seconds that the GPU stays busy until the process exits.

TMALANG_WATCHDOG_TIMEOUT sets the timeout in seconds (default 5), read when a kernel is loaded.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import time
from dataclasses import dataclass, field

from ..contract import watchdog as layout
from ..contract.errors import LAUNCH_OPTION, WATCHDOG, LaunchError
from ..contract.manifest import Manifest, WaitSite
from ..contract.watchdog import DEFAULT_TIMEOUT_NS, GLOBAL, RECORD_BYTES, Entry
from ..diagnostics import Source, Span, TmalangError
from . import driver

DRAIN_S = 2.0                  # how long a stopped kernel may take to end before it counts as stuck
LISTED_RUNS = 8                # a note lists this many runs of CTA numbers, then "..."
_tags = itertools.count(1)


@dataclass
class _Armed:
    manifest: Manifest
    state: int                      # the device address of the module's tmalang$watchdog
    stream: int = 0                 # where its last launch went


@dataclass
class _Record:
    device: int
    host: int                       # the pinned host address the kernels' entries land at
    mapped: int                     # the same memory as the kernels address it
    kernels: dict[int, _Armed] = field(default_factory=dict)   # tag -> the module armed with it

    def __post_init__(self) -> None:
        self._first_written = ctypes.c_uint32.from_address(self.host)   # entry 0's `written`

    def fired(self) -> bool:
        return self._first_written.value == 1

    def entries(self) -> list[Entry]:
        return layout.entries(ctypes.string_at(self.host, RECORD_BYTES))

    def rearm(self) -> None:
        """Clear the report and every module's `claimed` and `stop` for the next launch."""
        ctypes.memset(self.host, 0, RECORD_BYTES)
        for tag, armed in self.kernels.items():
            driver.write(armed.state, layout.state(self.mapped, timeout_ns(), tag))


_records: dict[int, _Record] = {}


def _record(device: int) -> _Record:
    if device not in _records:
        flags = driver.api().CU_MEMHOSTALLOC_DEVICEMAP | driver.api().CU_MEMHOSTALLOC_PORTABLE
        host = int(driver.call("cuMemHostAlloc", RECORD_BYTES, flags))
        ctypes.memset(host, 0, RECORD_BYTES)
        _records[device] = _Record(device, host, int(driver.call("cuMemHostGetDevicePointer", host, 0)))
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


def arm(module, manifest: Manifest, device: int) -> int | None:
    """Give a freshly loaded module its record, timeout and tag; the tag, or None for a kernel
    compiled without the watchdog."""
    if not manifest.waits:
        return None
    record = _record(device)
    tag = next(_tags)
    address = driver.write_global(module, GLOBAL, layout.state(record.mapped, timeout_ns(), tag))
    record.kernels[tag] = _Armed(manifest, address)
    return tag


def launched(device: int, tag: int, stream: int) -> None:
    """Remember where a watched kernel went, so that `check` knows what to wait for."""
    _records[device].kernels[tag].stream = stream


def check() -> None:
    """E218 if a kernel launched earlier reported a hang (after it has ended)."""
    for record in _records.values():
        if record.fired():
            streams = {armed.stream for armed in record.kernels.values()}
            for stream in streams:
                _drain(record, stream)
            raise _report(record, stuck=False)


def wait(stream: int) -> None:
    """Wait for `stream` like cuStreamSynchronize, but without hanging on a kernel that reported a
    hang and cannot end; then E218 if one reported."""
    if not any(r.kernels for r in _records.values()):
        driver.synchronize(stream)
        return
    ready = driver.api().CUresult.CUDA_SUCCESS
    pause = 20e-6
    while True:
        (status,) = driver.api().cuStreamQuery(stream)
        if status == ready:
            break
        if status != driver.api().CUresult.CUDA_ERROR_NOT_READY:
            driver.synchronize(stream)    # raises the driver's error
        fired = next((r for r in _records.values() if r.fired()), None)
        if fired is not None:
            _drain(fired, stream)
            break
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)
    check()


def _drain(record: _Record, stream: int) -> None:
    """Wait up to DRAIN_S for a stopped kernel's stream to end; E218 (stuck) if it does not."""
    deadline = time.monotonic() + DRAIN_S
    ready = driver.api().CUresult.CUDA_SUCCESS
    while driver.api().cuStreamQuery(stream)[0] != ready:
        if time.monotonic() > deadline:
            raise _report(record, stuck=True)
        time.sleep(1e-3)


def _report(record: _Record, stuck: bool) -> TmalangError:
    entries = record.entries()
    known = [e for e in entries if e.tag in record.kernels and e.site < len(record.kernels[e.tag].manifest.waits)]
    if not known:   # a record nobody here armed: clear it rather than report nonsense
        record.rearm()
        return LaunchError(WATCHDOG, "watchdog: a kernel reported a hang that names no known wait")
    first = known[0]
    manifest = record.kernels[first.tag].manifest
    groups: dict[tuple, list[Entry]] = {}    # the same wait of the same warp, in many CTAs: one note
    for e in known:
        groups.setdefault((e.tag, e.site, e.offset, e.parity, e.phase_parity, e.warp), []).append(e)
    notes = [_describe_group(record.kernels[g[0].tag].manifest, g) for g in groups.values()]
    if stuck:
        notes.append(f"the kernel has not ended {DRAIN_S:g} s after it stopped: warps are blocked at a named "
                     "barrier, and the GPU stays busy until this process exits")
    else:
        notes.append("the kernel stopped; this process can launch again (outputs in device memory hold what "
                     "the kernel wrote before it stopped; NumPy outputs are left as they were)")
        record.rearm()
    notes.append("the interpreter finds protocol hangs before launch: tmalangc run FILE --interpret (or "
                 "kernel.interpret(...)); TMALANG_WATCHDOG_TIMEOUT sets the timeout")
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
            f"parity {e.parity} (the phase in progress has parity {e.phase_parity})")


def _describe_group(m: Manifest, entries: list[Entry]) -> str:
    """`_describe` of the first entry, naming every CTA the same wait blocked (lanes of one warp
    that reported twice count once)."""
    ctas = sorted({(e.cta_x, e.cta_y, e.cta_z) for e in entries})
    if len(ctas) == 1:
        return _describe(m, entries[0])
    text = _describe(m, entries[0])
    return f"{len(ctas)} CTAs ({_cta_list(ctas)})" + text[text.index(":"):]


def _cta_list(ctas: list[tuple[int, int, int]]) -> str:
    """'0-5, 9' for CTAs of a 1-D grid; '(x, y, z), ...' otherwise."""
    if any(y or z for _, y, z in ctas):
        return ", ".join(f"({x}, {y}, {z})" for x, y, z in ctas)
    runs: list[list[int]] = []
    for x, _, _ in ctas:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    return ", ".join(shown if len(shown) <= LISTED_RUNS else [*shown[:LISTED_RUNS], "..."])


def _span(site: WaitSite) -> Span | None:
    if not site.line:
        return None
    source = Source("\n" * (site.line - 1) + site.text, site.file)
    return Span(source, site.line, site.col, site.line, site.end_col)


class WatchdogError(LaunchError):
    """E218: a watchdog fired; points at the wait it reports first, names every reported wait."""

    def __init__(self, message: str, span: Span | None, notes: list[str]) -> None:
        TmalangError.__init__(self, WATCHDOG, message, span, notes)
