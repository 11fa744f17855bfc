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
"""

from __future__ import annotations

import numpy as np

from ..ir import ops
from .state import ProtocolError


def loop(m, w, o: ops.Loop):
    w.env[o.count] = 0
    while True:
        for inner in o.body:
            if isinstance(inner, ops.LeaveIf):
                if leave(m, w, inner):
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
    _word(m, w, o)[...] = claimed
    m.races.access(_key(m, w, o), w.agent, True, None, o.span, f"the tile claim of {m.who(w)}")


def tile_take(m, w, o: ops.TileTake) -> None:
    m.races.access(_key(m, w, o), w.agent, False, None, o.span, f"the tile read of {m.who(w)}")
    w.env[o.var] = int(_word(m, w, o)[0])


def check_counter(memory, kernel: ops.KernelOp) -> None:
    """After the launch: the counter is where the next launch starts from."""
    if memory.claims and memory.counter != 0:
        loop_op = next((o for o in ops.walk(kernel.body) if isinstance(o, ops.TileClaim)), None)
        raise ProtocolError("E550", f"the kernel ends with its tile counter at {memory.counter}, not 0",
                            loop_op.span if loop_op else None,
                            [f"{memory.claims} claims were made; the last claim of a launch (tiles + CTAs - 1) "
                             "must store 0 back, or the next launch on the stream starts past its first tiles"])


def _word(m, w, o) -> np.ndarray:
    decl = m.queues[o.slot.name]
    offset = decl.offset + 4 * m.value(w, o.slot.index)
    return m.smem.data[offset: offset + 4].view(np.uint32)


def _key(m, w, o) -> tuple:
    return o.slot.name, m.value(w, o.slot.index), m.cta


SEMANTICS = {ops.Loop: loop, ops.LeaveIf: leave, ops.TileClaim: tile_claim, ops.TileTake: tile_take}
