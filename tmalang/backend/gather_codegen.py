"""Gathered copies (tile::gather4 / tile::scatter4, sm_100a) → LLVM IR and inline PTX.

A gathered load or store of box X ([R, W]) at position p moves tile row j from or to tensor row
idx[p*R + j]: the issuing thread reads the R indices from global memory and issues R/4 copies of
four rows each, tile rows 4g..4g+3 at smem offset 4g * W * itemsize. A position past the index
tensor, and an index outside the tensor's rows (negative included), name the row just past the
tensor's end: TMA fills that row on a load (the box's oob fill) and skips it on a store. So the
indices never move a byte outside the tensors, whatever they hold. Never a negative row: the H100
faults on a tensor store at a negative coordinate (tests/sema/test_offsets.py), and sm_100a's scatter4
is not measured.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import ops
from ..targets import dtypes, tma
from . import ptx_asm

I32, I64 = ir.IntType(32), ir.IntType(64)
INDEX_BYTES = 4   # i32 indices (sema/gather.py)


def row_indices(g, o: ops.GatherLoad | ops.ScatterStore | ops.GatherPrefetch, rows: int) -> list[ir.Value]:
    """The tensor rows of the copy's R tile rows, read by this thread; the tensor's row count (one
    past its last row) past the index tensor or for an index outside the tensor."""
    tensors = ops.decls(g.kernel, ops.TensorDecl)
    length, end = tensors[o.gather].shape[0], tensors[ops.decls(g.kernel, ops.BoxDecl)[o.box].tensor].shape[0]
    length, end = (g.args[d] if isinstance(d, str) else I32(d) for d in (length, end))
    first = g.b.mul(g.expr(o.coords[0]), I32(rows))
    base = g.args[f"{o.gather}.addr"]
    indices = []
    for j in range(rows):
        p = g.b.add(first, I32(j))
        address = g.b.add(base, g.b.mul(g.b.zext(p, I64), I64(INDEX_BYTES)))
        indices.append(g.asm(ptx_asm.PTX["gather_index"], "=r,r,r,l,r", [p, length, address, end], ret=I32))
    return indices


def _copies(g, o, box: ops.BoxDecl):
    """(smem byte offset, [column, row0..row3]) of each four-row copy, in tile order."""
    rows, width = box.shape
    column = g.b.mul(g.expr(o.coords[1]), I32(width))
    indices = row_indices(g, o, rows)
    step = tma.GATHER_ROWS * width * dtypes.itemsize(box.dtype)
    for k in range(rows // tma.GATHER_ROWS):
        yield k * step, [column, *indices[k * tma.GATHER_ROWS:(k + 1) * tma.GATHER_ROWS]]


def gather_load(g, o: ops.GatherLoad) -> None:
    box = g.boxes[o.box]
    dest, barrier = g.address(o.dest), g.address(o.barrier)
    template = ptx_asm.cache_hint(ptx_asm.PTX["gather4_load"], "::bytes", box.cache)
    for offset, coords in _copies(g, o, box):
        g.asm(template, "r,l,r,r,r,r,r,r", [g.b.add(dest, I32(offset)), g.tensor_map(o.box), *coords, barrier])


def gather_prefetch(g, o: ops.GatherPrefetch) -> None:
    box = g.boxes[o.box]
    template = ptx_asm.cache_hint(ptx_asm.PTX["gather4_prefetch"], "tile::gather4", box.cache)
    for _, coords in _copies(g, o, box):
        g.asm(template, "l,r,r,r,r,r", [g.tensor_map(o.box), *coords])


def scatter_store(g, o: ops.ScatterStore) -> None:
    box = g.boxes[o.box]
    source = g.address(o.source)
    template = ptx_asm.cache_hint(ptx_asm.PTX["scatter4_store"], ".bulk_group", box.cache)
    for offset, coords in _copies(g, o, box):
        g.asm(template, "l,r,r,r,r,r,r", [g.tensor_map(o.box), *coords, g.b.add(source, I32(offset))])


GATHER_EMITTERS = {ops.GatherLoad: gather_load, ops.ScatterStore: scatter_store, ops.GatherPrefetch: gather_prefetch}
