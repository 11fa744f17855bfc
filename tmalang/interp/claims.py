"""Semantics of dynamic tile loops (passes/claim_tiles.py): the global tile counter, the
shared-memory queue a claim goes through, and the loop that leaves on a claim past the end.

The counter lives in the launch's global memory (GlobalMemory.counter) and starts at 0. A claim
is one step of the scheduler, so the CTAs of a dynamic kernel, which the interpreter runs
together (interp/__init__.py), take tiles in whatever order the schedule gives: a random
schedule gives a different assignment of tiles to CTAs, and the results must not change. The
queue words are this CTA's shared memory, checked by the race detector like any tile: a claim
that overwrites a slot some thread has not read yet, or a read of a slot before the claim's
barrier phase, is a race. At the end of the launch the counter must be back at 0 (E421-style
located error E550), as the next launch on the stream needs.

On a grid of tiles (cluster launch control, sm_100a) there is no counter. The launch keeps the
CTAs that have not started yet (Launch.waiting, in launch order; interp/__init__.py starts the
next one whenever a running CTA exits). A CTA publishes its own ctaid first (tile_publish); a
clc_try_cancel is an asynchronous transfer that, when it lands, takes the first waiting CTA off
the list in one indivisible step (or finds it empty), writes the 16-byte response [canceled,
ctaid.x, 0, 0] and completes 16 bytes on its mbarrier; clc_query decodes it. Which CTA cancels
which depends on the schedule, so CTAs end up with different tile counts, and every tile is still
run once: by its own CTA if that CTA started, else by the one CTA whose cancel took it.
"""

from __future__ import annotations

import numpy as np

from ..ir import ops
from .globalmem import walks_tiles
from .meet import expect_tx, settle
from .state import ProtocolError, Transfer

RESPONSE_BYTES = 16


def loop(m, w, o: ops.Loop):
    outer = w.current_tile
    w.env[o.count] = 0
    while True:
        for inner in o.body:
            if isinstance(inner, ops.LeaveIf):
                if leave(m, w, inner):
                    w.current_tile = outer
                    return
                continue
            yield from m.run(w, inner)
        w.env[o.count] += 1


def leave(m, w, o: ops.LeaveIf) -> bool:
    return bool(m.value(w, o.cond))


def tile_claim(m, w, o: ops.TileClaim) -> None:
    memory = m.launch.memory
    claimed = memory.counter
    memory.counter = claimed + 1     # atom.global.add.u32: one indivisible step of the schedule
    memory.claims += 1
    if claimed == m.value(w, o.tiles) + m.ctas - 1:   # the launch's last claim puts the counter back
        memory.counter = 0
    _publish(m, w, o, claimed)


def tile_publish(m, w, o: ops.TilePublish) -> None:
    _publish(m, w, o, m.value(w, o.value))


def _publish(m, w, o: ops.TileClaim | ops.TilePublish | ops.ClcQuery, tile: int) -> None:
    _words(m, w, o.slot)[...] = tile
    m.races.access(_key(m, w, o.slot), w.agent, True, None, o.span, f"the tile claim of {m.who(w)}")


def tile_take(m, w, o: ops.TileTake) -> None:
    m.races.access(_key(m, w, o.slot), w.agent, False, None, o.span, f"the tile read of {m.who(w)}")
    w.env[o.var] = int(_words(m, w, o.slot)[0])
    if walks_tiles(o.var):   # the claimed tile: its global accesses are its own (interp/globalmem.py)
        w.current_tile = w.env[o.var]


def clc_try_cancel(m, w, o: ops.ClcTryCancel) -> None:
    """Asynchronous: the cancel takes a waiting CTA (or none) when it lands, as the GPU's would."""
    bar = m.barrier(w, o.barrier, o)
    if (bar.name, bar.stage) in m.init_unfenced:
        raise ProtocolError("E407", f"a cancel completes on mbarrier '{bar.name}[{bar.stage}]' whose "
                            "initialisation no fence.mbarrier_init made visible to the async proxy", o.span,
                            [m.who(w)])
    response, key = _words(m, w, o.response), _key(m, w, o.response)
    agent, who = m.races.issue(w.agent), f"the cluster launch control cancel issued by {m.who(w)}"

    def land():
        waiting = m.launch.waiting
        canceled = waiting.pop(0) if waiting else None   # one step: no two cancels take the same CTA
        m.races.access(key, agent, True, None, o.span, who)
        response[...] = [0, 0, 0, 0] if canceled is None else [1, canceled, 0, 0]
        expect_tx(m, bar, -RESPONSE_BYTES)
        m.races.release_to_phase(agent, m.phase_key(bar, bar.completed))
        settle(m, bar, o)

    m.put_in_flight(Transfer("cancel", w.index, o.span, land, None, RESPONSE_BYTES,
                                due=m.launch.due(m.step), issued=m.step))


def clc_query(m, w, o: ops.ClcQuery) -> None:
    """The canceled CTA's ctaid.x, or `tiles` (past the end) when the cancel found none waiting."""
    m.races.access(_key(m, w, o.response), w.agent, False, None, o.span, f"the cancel response read by {m.who(w)}")
    canceled, ctaid = (int(x) for x in _words(m, w, o.response)[:2])
    _publish(m, w, o, ctaid if canceled else m.value(w, o.tiles))


def check_counter(memory, kernel: ops.KernelOp) -> None:
    """After the launch: the counter is where the next launch starts from."""
    if memory.claims and memory.counter != 0:
        loop_op = next((o for o in ops.walk(kernel.body) if isinstance(o, ops.TileClaim)), None)
        raise ProtocolError("E550", f"the kernel ends with its tile counter at {memory.counter}, not 0",
                            loop_op.span if loop_op else None,
                            [f"{memory.claims} claims were made; the last claim of a launch (tiles + CTAs - 1) "
                             "must store 0 back, or the next launch on the stream starts past its first tiles"])


def _words(m, w, ref) -> np.ndarray:
    """The u32 words of stage `ref.index` of a tile_queue."""
    decl = m.queues[ref.name]
    offset = decl.offset + decl.stage_bytes * m.value(w, ref.index)
    return m.smem.data[offset: offset + decl.stage_bytes].view(np.uint32)


def _key(m, w, ref) -> tuple:
    return ref.name, m.value(w, ref.index), m.cta


SEMANTICS = {ops.Loop: loop, ops.LeaveIf: leave, ops.TileClaim: tile_claim, ops.TileTake: tile_take,
             ops.TilePublish: tile_publish, ops.ClcTryCancel: clc_try_cancel, ops.ClcQuery: clc_query}
