"""order_wgmma: the wgmma fence, commit and wait around every tensor-core MMA.

Requires: expanded pipelines (mma ops sit in consume bodies, before the slot's release).
Guarantees:
  - each `wgmma` is preceded by `wgmma_fence` (the accumulator registers were written by
    ordinary instructions, e.g. acc_zero, or by an epilogue reading them) and followed by
    `wgmma_commit` and `wgmma_wait pending=0`, so the accumulator is complete and the smem
    operands are no longer read before anything that follows — in particular before the slot
    is released to the producer. (Keeping one group in flight across k-steps is a later
    optimisation, defer_mma_release.)
  - a thread write into a shared tile (tile math, an epilogue, row math) that a wgmma of the
    role read since the role's last `sync` is preceded by `sync scope=role`: each warpgroup's
    wait covers only its own MMAs, and the other warpgroups' may still be reading the tile (all
    of B; the interpreter also counts A whole). Loops are walked to a fixpoint, so a read in
    one iteration orders the write in the next.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target
from .rewrite import rewrite_roles

_WRITES = (ops.TileAssign, ops.AccStore, ops.TmemEpilogue, ops.RowAssign)


def run(kernel: ops.KernelOp, target: Target) -> None:
    rewrite_roles(kernel, _fenced)
    for role in ops.roles(kernel):
        if any(isinstance(o, ops.Wgmma) for o in ops.walk(role.body)):
            role.body, _ = _ordered(role.body, frozenset())


def _fenced(o: ops.Op) -> list[ops.Op]:
    if not isinstance(o, ops.Wgmma):
        return [o]
    return [ops.WgmmaFence(span=o.span), o, ops.WgmmaCommit(span=o.span), ops.WgmmaWait(0, span=o.span)]


def _ordered(region: list[ops.Op], read: frozenset):
    """The region with syncs before writes into tiles wgmmas read, and the tiles read since the
    last sync at its end."""
    out: list[ops.Op] = []
    for o in region:
        if isinstance(o, _WRITES) and isinstance(o.dest, ex.BufferRef) and o.dest.name in read:
            out.append(ops.Sync("role", span=o.span))
            read = frozenset()
        if isinstance(o, ops.Sync):
            read = frozenset()
        elif isinstance(o, ops.Wgmma):
            read = read | {o.b.name} | ({o.a.name} if isinstance(o.a, ex.BufferRef) else set())
        elif isinstance(o, (ops.ForRange, ops.ForTiles)):
            read = _loop(o, read)
        elif isinstance(o, (ops.If, ops.InPairLeader, ops.Turn)):
            o.body, after = _ordered(o.body, read)
            read = read | after
        out.append(o)
    return out, read


def _loop(loop: ops.Op, entry: frozenset) -> frozenset:
    head = entry
    while True:
        loop.body, end = _ordered(loop.body, head)
        if end <= head:
            return head
        head = head | end
