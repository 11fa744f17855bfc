"""order_wgmma: the wgmma fence, commit and wait around every tensor-core MMA.

Requires: expanded pipelines (mma ops sit in consume bodies, before the slot's release).
Guarantees: each `wgmma` is preceded by `wgmma_fence` (the accumulator registers were written
by ordinary instructions, e.g. acc_zero, or by an epilogue reading them) and followed by
`wgmma_commit` and `wgmma_wait pending=0`, so the accumulator is complete and the smem operands
are no longer read before anything that follows — in particular before the slot is released to
the producer. (Keeping one group in flight across k-steps is a later optimisation.)
"""

from __future__ import annotations

from ..ir import ops
from .rewrite import rewrite_roles


def run(kernel: ops.KernelOp) -> None:
    rewrite_roles(kernel, _fenced)


def _fenced(o: ops.Op) -> list[ops.Op]:
    if not isinstance(o, ops.Wgmma):
        return [o]
    return [ops.WgmmaFence(span=o.span), o, ops.WgmmaCommit(span=o.span), ops.WgmmaWait(0, span=o.span)]
