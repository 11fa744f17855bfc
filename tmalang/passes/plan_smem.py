"""plan_smem: every shared-memory buffer and mbarrier gets an offset; the total must fit.

Requires: all buffers and mbarriers declared (pipelines expanded).
Guarantees: `offset` of each buffer is a multiple of its alignment (128 B for TMA tiles, 256/512/
1024 B for 32/64/128B-swizzled tiles, the period of the swizzle pattern), mbarriers sit 8-byte
aligned after the tiles, and `kernel.smem_bytes` is the dynamic smem to request: the plan plus
the slack the backend needs to align the dynamic smem base at run time (the driver only
guarantees 16 B). More than the target's shared memory per CTA is an error showing the map.
The A tile of a short accumulator (R rows, not a multiple of 64) spans R rounded up to 64 rows
of its layout in every stage: each wgmma reads 64 rows, and the last one's rows past R (which
TMA never writes, and whose accumulator rows no epilogue reads) stay inside the tile's bytes.
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import ops
from ..targets.arch import Target
from ..targets.dtypes import DTYPES

BASE_ALIGN_GUARANTEED = 16


def run(kernel: ops.KernelOp, target: Target) -> None:
    _widen_short_operands(kernel)
    buffers = sorted(ops.decls(kernel, ops.BufferDecl).values(), key=lambda b: -b.align)
    offset = 0
    for b in buffers:
        offset = _round_up(offset, b.align)
        b.offset = offset
        offset += b.bytes * b.stages
    for m in ops.decls(kernel, ops.MbarrierDecl).values():
        offset = _round_up(offset, 8)
        m.offset = offset
        offset += 8 * m.stages
    for alloc in (o for o in kernel.body if isinstance(o, ops.TmemAlloc)):
        alloc.offset = offset       # tcgen05.alloc writes the 32-bit TMEM base address here
        offset += ops.TMEM_ADDRESS_BYTES
    _settle(kernel, target, buffers, offset)


def _widen_short_operands(kernel: ops.KernelOp) -> None:
    buffers, boxes = ops.decls(kernel, ops.BufferDecl), ops.decls(kernel, ops.BoxDecl)
    for name, rows in ops.short_a_operands(ops.roles(kernel)).items():
        b = buffers[name]
        box = boxes[b.box]        # R rows of whole swizzle atoms: 64 W rows are 64 W / R times the bytes
        b.bytes = max(b.bytes, box.bytes(DTYPES[box.dtype].itemsize) // rows * (-(-rows // 64) * 64))


def extend(kernel: ops.KernelOp, target: Target, nbytes: int, align: int) -> int:
    """Room for `nbytes` more after the plan (for what a pass after this one declares): its offset."""
    buffers = list(ops.decls(kernel, ops.BufferDecl).values())
    offset = _round_up(max((end for _, end, _ in ops.smem_ranges(kernel)), default=0), align)
    _settle(kernel, target, buffers, offset + nbytes)
    return offset


def _settle(kernel: ops.KernelOp, target: Target, buffers: list, offset: int) -> None:
    max_align = max([b.align for b in buffers] + [8])
    kernel.smem_bytes = offset + max(0, max_align - BASE_ALIGN_GUARANTEED)
    largest = max(buffers, key=lambda b: b.bytes * b.stages, default=None)   # where an overflow is reported
    if kernel.smem_bytes > target.smem_per_cta:
        raise error("E032", f"shared memory plan needs {kernel.smem_bytes} bytes; a CTA may use {target.smem_per_cta}",
                    largest.span, *smem_map(kernel))
    per_sm = kernel.occupancy * (kernel.smem_bytes + target.smem_reserved_per_cta)
    if kernel.occupancy > 1 and per_sm > target.smem_per_sm:
        raise error("E602", f"occupancy {kernel.occupancy} needs {per_sm} bytes of shared memory a multiprocessor "
                    f"({kernel.occupancy} x ({kernel.smem_bytes} + {target.smem_reserved_per_cta} the system keeps a "
                    f"CTA)); it holds {target.smem_per_sm}", largest.span, *smem_map(kernel))


def smem_map(kernel: ops.KernelOp) -> list[str]:
    rows = [d for d in kernel.body if isinstance(d, (ops.BufferDecl, ops.MbarrierDecl, ops.TileQueueDecl))]
    rows.sort(key=lambda d: d.offset)
    lines = []
    for d in rows:
        size = d.stages * (d.bytes if isinstance(d, ops.BufferDecl) else
                           d.stage_bytes if isinstance(d, ops.TileQueueDecl) else 8)
        lines.append(f"{d.offset:>7} +{size:<7} {d.symbol} ({d.stages} stage{'s' * (d.stages > 1)})")
    return lines


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align
