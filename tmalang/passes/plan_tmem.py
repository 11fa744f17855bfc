"""plan_tmem: Tensor Memory tiles get columns; the kernel allocates them once and frees them.

Requires: barriers initialised (schedule_barriers put the block-wide sync before the roles).
Guarantees: each `tmem` declaration has a first `column` (its stages side by side); when there
is any, warp 0 allocates the next power of two of columns (at least 32) before the roles start,
the base address is published through shared memory by the block-wide sync that follows
(tcgen05.fence::before/after_thread_sync around it, PTX ISA 9.7.16.6.4), and after every role
has finished, a second block-wide sync precedes warp 0's dealloc: TMEM must be freed before the
kernel exits. Over-allocation was rejected by sema (E096).
"""

from __future__ import annotations

from ..ir import ops


def run(kernel: ops.KernelOp) -> None:
    tiles = list(ops.decls(kernel, ops.TmemDecl).values())
    if not tiles:
        return
    column = 0
    for t in tiles:
        t.column = column
        column += t.stages * t.shape[1]
    size = max(32, 1 << (column - 1).bit_length())
    span = kernel.span
    first_role = next(i for i, o in enumerate(kernel.body) if isinstance(o, ops.RoleOp))
    start = [ops.TmemAlloc(size, -1, span=span), *_published(span)]
    if isinstance(kernel.body[first_role - 1], ops.Sync):   # join the barrier-init sync
        first_role -= 1
        start = start[:-2] + [kernel.body[first_role], start[-1]]
        del kernel.body[first_role]
    kernel.body[first_role:first_role] = start
    kernel.body += [*_published(span), ops.TmemDealloc(size, span=span)]


def _published(span) -> list[ops.Op]:
    """A block-wide sync that orders tcgen05 work on either side of it."""
    return [ops.Fence("tcgen05_before_thread_sync", span=span), ops.Sync("block", span=span),
            ops.Fence("tcgen05_after_thread_sync", span=span)]
