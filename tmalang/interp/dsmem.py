"""Semantics of distributed shared memory: a bulk push from this CTA's shared memory into a peer
CTA's, and the arrives that reach a peer's barrier (peer pipelines, passes/peer_slots.py).

A push is a transfer of the TMA engine like a load: issued by one thread, it lands later, when
it reads the local source tile, writes the peer's destination tile and completes its bytes on
the peer's barrier, all as one agent of the race detector (whose epoch the peer's wait on that
phase acquires). Nothing completes on this CTA: only the peer's release tells the pusher the
source was read, so a rewrite of the source before that release is a race (E401-style reports
from the detector), and a peer that exits before observing the phase is E412.
"""

from __future__ import annotations

from ..ir import ops
from .meet import expect_tx, settle
from .state import ProtocolError, Transfer


def peer(m, offset: int):
    """The CTA `offset` ranks on from `m` in its cluster."""
    ctas = m.cluster.ctas
    return ctas[(m.rank + offset) % len(ctas)]


def bulk_push(m, w, o: ops.BulkPush) -> None:
    target = peer(m, o.peer)
    bar = target.barrier(w, o.barrier, o)
    if (bar.name, bar.stage) in target.init_unfenced:
        raise ProtocolError("E407", f"a bulk push completes on mbarrier '{bar.name}[{bar.stage}]' of CTA {target.cta}, "
                            "whose initialisation no fence.mbarrier_init made visible to the async proxy", o.span,
                            [m.who(w), "fence and sync the cluster after mbarrier.init, before any push"])
    source, dest = m.tile(w, o.source), target.tile(w, o.dest)
    source_key, dest_key = m.tile_key(w, o.source), target.tile_key(w, o.dest)
    agent, who = m.races.issue(w.agent), f"the bulk push issued by {m.who(w)} (CTA {m.cta} to CTA {target.cta})"
    target.fed[(bar.name, bar.stage)] = (bar.completed, o)

    def apply():
        m.races.access(source_key, agent, False, None, o.span, who)
        target.races.access(dest_key, agent, True, None, o.span, who)
        dest[...] = source
        expect_tx(target, bar, -o.bytes)
        target.races.release_to_phase(agent, target.phase_key(bar, bar.completed))
        settle(target, bar, o)

    transfer = Transfer("push", w.index, o.span, apply, None, o.bytes, due=m.launch.due(m.step), issued=m.step)
    transfer.agent = agent
    m.put_in_flight(transfer)


SEMANTICS = {ops.BulkPush: bulk_push}
