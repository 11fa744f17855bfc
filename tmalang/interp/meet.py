"""Where warps meet: a rendezvous of member warps at one op (`sync`, warpgroup-collective wgmma
steps), and the completion of an mbarrier phase once its arrivals and bytes are in. Shared by the
machine and the tensor-core semantics, which both stand on it."""

from __future__ import annotations

from ..ir import ops
from .state import Blocked, Mbarrier, ProtocolError


def barrier(m, w, o: ops.Op, members: list[int], what: str):
    """Block until every member warp reaches this op; each leaves knowing what all knew.

    The n-th time a warp passes `o` meets the n-th time of the others (they run the same code).
    """
    count = w.passes.get(id(o), 0)
    w.passes[id(o)] = count + 1
    key = (id(o), tuple(members), count)
    arrived = m.sync_arrivals.setdefault(key, set())
    arrived.add((m.cta, w.index))
    m.races.sync_arrive(w.agent, key)
    m.launch.observer.meet(key, tuple(members), False)
    while not set(members) <= arrived:
        yield Blocked(o, f"{what} ({len(arrived)} arrived)", lambda: set(members) <= arrived)
    m.races.sync_leave(w.agent, key)
    m.launch.observer.meet(key, tuple(members), True)


def expect_tx(m, bar: Mbarrier, nbytes: int) -> None:
    """The transaction count of barrier `bar` of CTA `m` moves by `nbytes`: + expected, - landed."""
    m.launch.observer.tx((m.cta, bar.name, bar.stage), nbytes, bar.completed)
    bar.tx += nbytes


def settle(m, bar: Mbarrier, o: ops.Op) -> None:
    """Complete the barrier's phase if its arrivals and bytes are all in (E403 if more bytes landed)."""
    if bar.pending == 0 and bar.tx < 0:
        raise ProtocolError("E403", f"mbarrier '{bar.name}[{bar.stage}]' completes its arrivals with "
                            f"{-bar.tx} more bytes landed than expected", o.span, [bar.describe()])
    if bar.settle():
        for key in [k for k in m.phase_arrivals if k[:2] == (bar.name, bar.stage)]:
            del m.phase_arrivals[key]
        if m.trace is not None:
            m.trace.phase(m.cta, bar.name, bar.stage, bar.completed - 1, m.step)
