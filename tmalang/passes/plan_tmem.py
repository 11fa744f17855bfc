"""plan_tmem: Tensor Memory tiles get aligned columns; the kernel allocates them once and frees them.

Requires: barriers initialised (schedule_barriers put the block-wide sync before the roles).
Guarantees: each `tmem` declaration has a first `column`, its stages `pitch()` columns apart (the
width rounded up to the 4-column granule). Every tile starts on a multiple of 32 columns when the
kernel's tiles fit the target's columns (512 on sm_100a) that way, else on a multiple of 4 (E096 when even that does
not fit), so every tcgen05 base (mma D, cp, ld, st) is aligned. When there is any tile, warp 0
allocates the next power of two of columns (at least 32) before the roles start, the base
address is published through shared memory by the block-wide sync that follows
(tcgen05.fence::before/after_thread_sync around it, PTX ISA 9.7.16.6.4), and after every role
has finished, a second block-wide sync precedes warp 0's dealloc: TMEM must be freed before the
kernel exits. Sema checked the packed sum of columns (E096).
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import ops
from ..targets.arch import Target

# Why 32, then 4. The PTX ISA allocates TMEM in units of 32 columns (tcgen05.alloc), so a tile that
# starts on 32 columns sits where an allocation of its own would; it states no finer rule for the
# mma D address or the tcgen05.ld/st/cp address. Compilers that packed tiles tighter met
# misaligned-address faults: Triton aligns every TMEM allocation to 4 columns (triton#6205), and
# CUTLASS's attention keeps its TMEM regions on 32-column boundaries. 32 is what is known safe;
# 4 is the floor, used only when 32 would not fit, and the interpreter refuses less (E419).
ALIGNMENTS = (32, ops.TMEM_GRANULE)


def run(kernel: ops.KernelOp, target: Target) -> None:
    tiles = list(ops.decls(kernel, ops.TmemDecl).values())
    if not tiles:
        return
    memory = target.tensor_memory
    column = _place(tiles, memory.columns)
    size = max(memory.min_allocation, 1 << (column - 1).bit_length())
    span = kernel.span
    first_role = next(i for i, o in enumerate(kernel.body) if isinstance(o, ops.RoleOp))
    start = [ops.TmemAlloc(size, -1, span=span), *_published(span)]
    if isinstance(kernel.body[first_role - 1], ops.Sync):   # join the barrier-init sync
        first_role -= 1
        start = start[:-2] + [kernel.body[first_role], start[-1]]
        del kernel.body[first_role]
    kernel.body[first_role:first_role] = start
    kernel.body += [*_published(span), ops.TmemDealloc(size, span=span)]


def _place(tiles: list[ops.TmemDecl], columns: int) -> int:
    """Give each tile its first column, in declaration order, on the widest alignment that fits;
    return the first column past the last tile."""
    for alignment in ALIGNMENTS:
        column = 0
        for t in tiles:
            t.column = -(-column // alignment) * alignment
            column = t.column + t.stages * t.pitch()
        if column <= columns:
            return column
    over = next(t for t in tiles if t.column + t.stages * t.pitch() > columns)
    raise error("E096", f"Tensor Memory over-allocated: {column} columns once every stage starts on a multiple "
                f"of {ops.TMEM_GRANULE} columns, a CTA has {columns}", over.span,
                *(f"{t.symbol}: {t.stages} x {t.pitch()} columns from column {t.column}" for t in tiles),
                f"tcgen05 addresses need that alignment: narrow tiles take {ops.TMEM_GRANULE} columns per stage")


def _published(span) -> list[ops.Op]:
    """A block-wide sync that orders tcgen05 work on either side of it."""
    return [ops.Fence("tcgen05_before_thread_sync", span=span), ops.Sync("block", span=span),
            ops.Fence("tcgen05_after_thread_sync", span=span)]
