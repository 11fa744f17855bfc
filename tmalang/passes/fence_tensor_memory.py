"""fence_tensor_memory: tcgen05 work is ordered with thread synchronisation on both sides.

Requires: releases ordered (every sync and arrive of the roles is in place).
Guarantees, in a role that issues tcgen05 operations (PTX ISA 9.7.16.6.4):
  - after each mbarrier wait and each sync comes `tcgen05.fence::after_thread_sync`, so the
    tcgen05 ops that follow (an MMA into a slot the epilogue freed, a tcgen05.ld of an
    accumulator the MMA warp committed) are ordered after what the synchronisation observed;
  - in a role that reads or writes Tensor Memory, before each arrive and each sync comes
    `tcgen05.fence::before_thread_sync`, so the reads and writes (tcgen05.ld and .st, waited
    with wait::ld and wait::st) are ordered before the signal that lets another role at the tile.
`tcgen05.commit` needs neither: it carries the before-fence itself.
"""

from __future__ import annotations

from ..ir import ops
from ..targets.arch import Target

_TCGEN05 = (*ops.TENSOR_CORE_OPS, ops.TmemEpilogue, ops.TmemZero, ops.Tcgen05Commit)
_SIGNALS = (ops.MbarArrive, ops.MbarArriveCluster, ops.Sync)


def run(kernel: ops.KernelOp, target: Target) -> None:
    tmem = set(ops.decls(kernel, ops.TmemDecl))
    for role in ops.roles(kernel):
        ops_in_role = list(ops.walk(role.body))
        accesses = [o for o in ops_in_role if isinstance(o, ops.TmemEpilogue)
                    or (isinstance(o, ops.RowAssign) and o.touches_tmem(tmem))]
        if not accesses and not any(isinstance(o, _TCGEN05) for o in ops_in_role):
            continue
        role.body = _region(role.body, bool(accesses))


def _region(region: list[ops.Op], reads: bool) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():
            r[:] = _region(r, reads)
        if reads and isinstance(o, _SIGNALS):   # an elected arrive gets its fence inside the elect
            out.append(ops.Fence("tcgen05_before_thread_sync", span=o.span))
        out.append(o)
        if isinstance(o, (ops.MbarWait, ops.Sync)):
            out.append(ops.Fence("tcgen05_after_thread_sync", span=o.span))
    return out
