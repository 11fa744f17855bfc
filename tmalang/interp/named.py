"""Named barriers (`bar.sync id, count` / `bar.arrive id, count`) with the hardware's meaning.

A CTA has 16 of them. Each counts the threads that arrive in its current phase; the phase
completes when `count` threads have arrived, and then starts over. A syncing warp arrives and
blocks until the phase it arrived in completes; an arriving warp goes on at once. The first
arrival of a phase sets the phase's count: a later arrival with another count is a protocol
error (E533; on the GPU the behaviour is undefined), and a count no set of warps ever reaches
leaves its syncing warps blocked, which the scheduler reports as a deadlock (E401). Order: every
arrival of a phase happens before each syncing warp leaves it (the PTX memory model: bar.arrive
and bar.sync synchronise with a bar.sync of the same barrier).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from .state import Blocked, ProtocolError


@dataclass
class NamedBarrier:
    id: int
    count: int = 0          # threads the phase in progress waits for (0: nobody arrived yet)
    arrived: int = 0        # threads arrived in it
    completed: int = 0      # phases completed so far
    opened_at: object = None  # the op whose arrival set the phase's count


def _arrive(m, w, o: ops.NamedBarSync | ops.NamedBarArrive) -> tuple[NamedBarrier, int]:
    """Warp `w`'s 32 threads arrive; (the barrier, the phase they arrived in)."""
    bar = m.named.setdefault(o.id, NamedBarrier(o.id))
    if bar.arrived == 0:
        bar.count, bar.opened_at = o.count, o
    elif bar.count != o.count:
        first = bar.opened_at.span.location() if bar.opened_at.span else "?"
        raise ProtocolError("E533", f"named barrier {o.id} is used with {o.count} threads while its phase "
                            f"{bar.completed} already expects {bar.count}", o.span,
                            [m.who(w), f"the phase's first arrival, with count {bar.count}, is at {first}",
                             "every bar.sync and bar.arrive of one phase must name the same thread count"])
    phase = bar.completed
    key = ("named", m.cta, o.id, phase)
    m.races.sync_arrive(w.agent, key)
    m.launch.observer.named((m.cta, o.id), o.count, phase, False)
    bar.arrived += 32
    if bar.arrived >= bar.count:
        bar.arrived, bar.count, bar.completed = 0, 0, bar.completed + 1
    return bar, phase


def bar_sync(m, w, o: ops.NamedBarSync):
    bar, phase = _arrive(m, w, o)
    while bar.completed <= phase:
        yield Blocked(o, f"bar.sync {o.id}, {o.count} ({bar.arrived} of {bar.count} threads arrived)",
                      lambda: bar.completed > phase)
    m.races.sync_leave(w.agent, ("named", m.cta, o.id, phase))
    m.launch.observer.named((m.cta, o.id), o.count, phase, True)


def bar_arrive(m, w, o: ops.NamedBarArrive) -> None:
    _arrive(m, w, o)


def in_warpgroup(m, w, o: ops.InWarpgroup):
    if (w.index - w.role.first_warp) // 4 == o.group:
        yield from m.region(w, o.body)


SEMANTICS = {ops.NamedBarSync: bar_sync, ops.NamedBarArrive: bar_arrive, ops.InWarpgroup: in_warpgroup}
