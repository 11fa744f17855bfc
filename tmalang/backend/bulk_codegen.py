"""Bulk copies → inline PTX (the bulk mode, targets/tma_modes.py): one chunk of a bulk box by
address and byte count, with no tensor map (cp.async.bulk, cp.reduce.async.bulk,
cp.async.bulk.prefetch.L2). A bulk copy has no out-of-bounds handling, so each first checks that
its chunk lies inside the tensor and traps otherwise (codegen's bulk_guard): the kernel stops
rather than reach past the tensor.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import ops
from ..targets import dtypes
from ..targets.reduce import BULK_REDUCE_TYPES
from . import ptx_asm

I32 = ir.IntType(32)


def _size(box: ops.BoxDecl) -> ir.Value:
    return I32(box.shape[-1] * dtypes.itemsize(box.dtype))


def bulk_load(g, o: ops.BulkLoad) -> None:
    box = g.boxes[o.box]
    g.bulk_guard(box, o.coords)
    dest = g.address(o.dest)
    g.asm(ptx_asm.PTX["bulk_load"], "r,l,r,r", [dest, g.bulk_address(box, o.coords), _size(box), g.address(o.barrier)])


def bulk_store(g, o: ops.BulkStore) -> None:
    box = g.boxes[o.box]
    g.bulk_guard(box, o.coords)
    template = ptx_asm.bulk_store(o.reduce and BULK_REDUCE_TYPES[o.reduce][box.dtype], o.reduce)
    g.asm(template, "l,r,r", [g.bulk_address(box, o.coords), g.address(o.source), _size(box)])


def bulk_prefetch(g, o: ops.BulkPrefetch) -> None:
    box = g.boxes[o.box]
    g.bulk_guard(box, o.coords)
    g.asm(ptx_asm.PTX["bulk_prefetch"], "l,r", [g.bulk_address(box, o.coords), _size(box)])


BULK_EMITTERS = {ops.BulkLoad: bulk_load, ops.BulkStore: bulk_store, ops.BulkPrefetch: bulk_prefetch}
