"""confine_idle_waits: no warp waits on a pipeline barrier that it could fall two phases behind.

A wait with parity p succeeds once *the* phase of parity p has completed; it cannot tell that
phase from the one two phases later. So a warp that waits on a barrier must not be overtaken by
two phase completions, which holds when the barrier's next-but-one phase needs something that
comes after the wait in that warp: its own arrival, or a role `sync` before the release. In a
block whose slot only the role's elected thread touches (a consume block that only stores, a
produce block that only loads), the other warps of the role would wait and then run on without
any such tie: the elected thread releases the slot, the producer refills it twice, and a warp
that was descheduled meanwhile waits for a phase that has already passed (a hang on the GPU,
E401 in the interpreter).

Requires: expanded pipelines, and order_slot_release's role syncs before releases (a release
with such a sync ties every warp; one without it has only the elected thread in the block).
Guarantees: in a role of several warps, a pipeline wait followed, up to the end of its block
(the increment of the role's counter: `%P.it`, or `%P.put` / `%P.get` in a role on both sides
of P) by nothing but `elect scope=role` ops is itself run by
the elected thread only, inside an `elect scope=role`. Other waits are left alone: their warps
touch the slot, and the release waits for them (sync) or counts them (arrivals).
"""

from __future__ import annotations

from ..ir import ops
from ..targets.arch import Target


def run(kernel: ops.KernelOp, target: Target) -> None:
    for role in ops.roles(kernel):
        if role.last_warp > role.first_warp:
            role.body = _region(role.body)


def _region(region: list[ops.Op]) -> list[ops.Op]:
    out: list[ops.Op] = []
    for i, o in enumerate(region):
        for r in o.regions():
            r[:] = _region(r)
        if isinstance(o, ops.MbarWait) and _only_elected_until_block_end(region, i):
            o = ops.Elect("role", [o], span=o.span)
        out.append(o)
    return out


def _only_elected_until_block_end(region: list[ops.Op], i: int) -> bool:
    pipeline = ops.pipeline_of(region[i].barrier.name)
    if pipeline is None:
        return False
    for o in region[i + 1:]:
        if isinstance(o, ops.Let) and ops.pipeline_of(o.var, ops.PIPELINE_COUNTERS) == pipeline:
            return True
        if not (isinstance(o, ops.Elect) and o.scope == "role"):
            return False
    return False
