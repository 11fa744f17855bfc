"""pair_ctas: the two CTAs of a tcgen05 pair (cta_group 2) share one MMA role, in the leader.

Requires: pipelines expanded, releases ordered and fenced (every arrive site exists); sema's
pair rules (sema/pairs.py): the MMA role holds only loops, blocks, MMAs and `t.d = 0`, the rings
it consumes are filled by TMA loads, the tmem pipelines it produces are drained by other roles.
Guarantees, in a kernel with `cta_group 2` (any other kernel is left as it is):
  - the role that issues `tcgen05_mma` runs in the pair's leader CTA only (even
    %cluster_ctarank): its body sits in `in_pair_leader`. Each of its MMAs computes for both
    CTAs, and each of its `tcgen05_commit`s arrives on the barrier in both CTAs (the backend and
    the interpreter read `kernel.cta_group`);
  - loads into the rings that role consumes complete at the leader (`tma_load pair=true`): the
    leader's `full` barrier receives the bytes of both CTAs, so only the leader arms it, for
    twice the bytes, and the MMA role's wait there covers both CTAs' operands;
  - the releases of the tmem pipelines that role produces arrive on the leader's `empty`
    (`mbar_arrive_leader`), where it waits for both CTAs' epilogues.
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target


def run(kernel: ops.KernelOp, target: Target) -> None:
    if kernel.cta_group != 2:
        return
    mma_roles = [r for r in ops.roles(kernel) if any(isinstance(o, ops.Tcgen05Mma) for o in ops.walk(r.body))]
    consumed, produced = set(), set()
    for role in mma_roles:
        for o in ops.walk(role.body):
            if isinstance(o, ops.MbarWait) and o.barrier.name.endswith(".full"):
                consumed.add(o.barrier.name)
            elif isinstance(o, ops.Tcgen05Commit) and o.barrier.name.endswith(".full"):
                produced.add(o.barrier.name[: -len(".full")] + ".empty")
        role.body = [ops.InPairLeader(role.body, span=role.span)]
    for role in ops.roles(kernel):
        if role not in mma_roles:
            role.body = _rewrite(role.body, consumed, produced)


def _rewrite(region: list[ops.Op], consumed: set[str], produced: set[str]) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():
            r[:] = _rewrite(r, consumed, produced)
        if isinstance(o, ops.TensorLoad) and o.barrier is not None and o.barrier.name in consumed:
            if not isinstance(o, ops.TmaLoad):   # the leader's expect_tx counts both CTAs' bytes
                raise error("E999", f"internal compiler error: '{o.name}' has no CTA-pair form, and sema "
                            "admits none into a pair's ring", o.span, "please report this with the source file")
            o.pair = True
        elif isinstance(o, ops.MbarArriveExpectTx) and o.barrier.name in consumed:
            both = ex.Const(2 * o.bytes.value) if isinstance(o.bytes, ex.Const) else ex.Bin("*", o.bytes, ex.Const(2))
            o = ops.InPairLeader([ops.MbarArriveExpectTx(o.barrier, both, span=o.span)], span=o.span)
        elif type(o) is ops.MbarArrive and o.barrier.name in produced:
            o = ops.MbarArriveLeader(o.barrier, span=o.span)
        out.append(o)
    return out
