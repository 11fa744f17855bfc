"""prefetch_own_pipelines: a role that both produces and consumes a pipeline loads ahead of itself.

Requires: high-level IR (produce/consume blocks) and sema's pairing rule (E103): in a role that
produces and consumes pipeline P, every block of statements holding a block of P holds exactly
one produce block of P followed by one consume block of P.
Guarantees, for each such pair whose block is the body of a steps loop `for k` with trip count
C, and whose produce block loads with TMA (a multistage loop, as with `cuda::pipeline`):
  - the loop's trip count is computed once, into `%k.trips`;
  - a prologue loop (`%P.fill` = 0 .. min(D, C) − 1) runs the produce block for the first
    min(D, C) iterations, with `k` replaced by `%P.fill`;
  - in the loop, the produce block moves to just after the consume block and loads iteration
    k + D, only while k + D < C: no load past the trip count, none at all when C ≤ 0, and every
    loaded slot is consumed in the same loop.
D, the lookahead, is the ring's depth S when the role itself has freed the slot by the end of
the iteration that consumes it: iteration k loads k + S into the slot it has just released, and
all S slots are busy. That holds for stores and tile math, and for wgmma: its release follows
`wgmma_wait pending=0` in the same step (defer_mma_release never delays the release of a ring
its consumer also produces: with D = S that would deadlock). A tcgen05 slot is released by a
commit when the MMAs reading it complete, so D = S − 1: the loads of k + S − 1 go into k − 1's
slot, whose MMAs are done or nearly so, instead of stalling the issuing thread until MMA k
completes, before it issues k + 1 (the tensor cores would idle). When D = 0 (one stage,
tcgen05) nothing is prefetched.

Every other pair stays in place: the produce block of iteration i right before its consume
block. That is correct for any S ≥ 1 (the slot is free: iteration i − S released it) but loads
nothing ahead: in particular, loads never cross the iterations of a tile loop (the tile an
iteration will take is known only to the loop), so a ring filled once per tile does not overlap
one tile's loads with the previous tile's work; put the loads in a steps loop to pipeline them.

expand_pipelines later gives such a role separate producer and consumer positions (`%P.put`,
`%P.get`), so moving a produce block changes which iteration it loads, never which slot.
"""

from __future__ import annotations

import dataclasses

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target


def run(kernel: ops.KernelOp, target: Target) -> None:
    stages = {p.symbol: p.stages for p in ops.decls(kernel, ops.PipelineDecl).values()}
    for role in ops.roles(kernel):
        own = _own_pipelines(role)
        if own:
            role.body = _region(role.body, {p: stages[p] for p in own})


def _own_pipelines(role: ops.RoleOp) -> set[str]:
    produced = {o.pipeline for o in ops.walk(role.body) if isinstance(o, ops.Produce)}
    return produced & {o.pipeline for o in ops.walk(role.body) if isinstance(o, ops.Consume)}


def _region(region: list[ops.Op], stages: dict[str, int]) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():   # inner loops first: their prologues then sit inside this loop
            r[:] = _region(r, stages)
        pairs = _pairs(o, stages) if isinstance(o, ops.ForRange) else []
        out += _prefetched(o, pairs) if pairs else [o]
    return out


def _pairs(loop: ops.ForRange, stages: dict[str, int]) -> list[tuple[ops.Produce, ops.Consume, int]]:
    """(produce, consume, lookahead) for each own pipeline the loop body loads ahead."""
    pairs = []
    for name, depth in stages.items():
        produce = next((o for o in loop.body if isinstance(o, ops.Produce) and o.pipeline == name), None)
        consume = next((o for o in loop.body if isinstance(o, ops.Consume) and o.pipeline == name), None)
        if produce is None or consume is None or not all(isinstance(x, ops.TensorLoad) for x in produce.body):
            continue
        ahead = depth - 1 if any(isinstance(x, ops.TENSOR_CORE_OPS) for x in ops.walk(consume.body)) else depth
        if ahead > 0:
            pairs.append((produce, consume, ahead))
    return pairs


def _prefetched(loop: ops.ForRange, pairs) -> list[ops.Op]:
    trips = ex.Var(f"{loop.var}.trips")
    out: list[ops.Op] = [ops.Let(trips.name, loop.count, span=loop.span)]
    loop.count = trips
    for produce, consume, ahead in pairs:
        fill = f"{produce.pipeline}.fill"
        first = ex.Bin("min", ex.Const(ahead), trips)
        out.append(ops.ForRange(fill, first, [_shifted(produce, loop.var, ex.Var(fill))], span=produce.span))
        later = ex.add(ex.Var(loop.var), ex.Const(ahead))
        loop.body.remove(produce)
        guarded = ops.If(ex.Bin(">", trips, later), [_shifted(produce, loop.var, later)], span=produce.span)
        loop.body.insert(loop.body.index(consume) + 1, guarded)
    return out + [loop]


def _shifted(produce: ops.Produce, var: str, value: ex.Expr) -> ops.Produce:
    """The produce block with the loop index `var` replaced by `value` in its load coordinates
    (and an im2col load's offsets)."""
    loads = [_shifted_load(l, var, value) for l in produce.body]
    return ops.Produce(produce.pipeline, produce.slot, loads, span=produce.span)


def _shifted_load(load: ops.TensorLoad, var: str, value: ex.Expr) -> ops.TensorLoad:
    shifted = dataclasses.replace(load, coords=[_substitute(c, var, value) for c in load.coords])
    if isinstance(load, ops.Im2colLoad):
        shifted.offsets = [_substitute(c, var, value) for c in load.offsets]
    return shifted


def _substitute(e: ex.Expr, var: str, value: ex.Expr) -> ex.Expr:
    """Integer index expressions hold constants, variables, launch values, + - * / % and negation."""
    if isinstance(e, ex.Var):
        return value if e.name == var else e
    if isinstance(e, ex.Bin):
        return ex.Bin(e.op, _substitute(e.lhs, var, value), _substitute(e.rhs, var, value))
    if isinstance(e, ex.Neg):
        return ex.Neg(_substitute(e.operand, var, value))
    return e
