"""Bulk boxes (`bulk Row = x[CHUNK]`): copies without a tensor map (cp.async.bulk).

A bulk box names CHUNK contiguous elements of the tensor's innermost dimension; internally it is
a box of shape [1, ..., 1, CHUNK], so loads, stores, pipelines and tile loops treat it like any
other box. What the hardware adds (PTX ISA, cp.async.bulk): the size and both addresses are
multiples of 16 bytes, and a bulk copy fills nothing out of bounds, so the innermost dim must
be a whole number of chunks: checked here when the dim is a literal, at launch (E206) when it
is symbolic. A bulk copy has no tensor map, so no multicast, no pair slicing and no swizzle; a
reduce through it names its element type (check_reduce). A prefetch through it is a bulk
prefetch (cp.async.bulk.prefetch.L2: an address and a byte count) with the copies' range rule."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma
from ..targets.reduce import BULK_DTYPE, BULK_REDUCE_TYPES
from . import reduce
from .declarations import MAX_TX_BYTES, Box, KernelInfo, Tensor, check_static_strides, declare


def check_decl(info: KernelInfo, d: ast.BoxDecl) -> None:
    tensor = info.lookup(d.tensor, Tensor, what="tensor")
    chunk = d.shape[0]
    size = tensor.dtype.itemsize
    nbytes = chunk * size
    if chunk < 1 or nbytes % tma.BULK_ALIGNMENT:
        raise error("E470", f"a bulk chunk of {chunk} x {tensor.dtype.name} is {nbytes} bytes; "
                    f"cp.async.bulk moves a positive multiple of {tma.BULK_ALIGNMENT} bytes", d.span,
                    f"use a multiple of {max(1, tma.BULK_ALIGNMENT // size)} {tensor.dtype.name} elements")
    if nbytes > MAX_TX_BYTES:
        raise error("E471", f"a bulk chunk of {nbytes} bytes is more than one mbarrier phase counts "
                    f"({MAX_TX_BYTES} bytes)", d.span, "use a smaller chunk")
    inner = tensor.shape[-1]
    if isinstance(inner, int) and inner % chunk:
        raise error("E475", f"tensor '{tensor.name}' has {inner} elements innermost, not a whole number of "
                    f"{chunk}-element chunks", d.span,
                    "a bulk copy cannot clip or fill out of bounds: pick a chunk that divides the dim")
    check_static_strides(tensor, d)
    shape = [1] * (len(tensor.shape) - 1) + [chunk]
    box = Box(d.name, tensor, shape, [1] * len(shape), "none", "zero", "none", d.span, bulk=True)
    declare(info, d.name, box, d.span)


def check_load(s: ast.Load, box: Box) -> None:
    if box.bulk and s.multicast:
        raise error("E472", f"bulk box '{box.name}' cannot be loaded with multicast", s.span,
                    "cp.async.bulk writes one CTA's shared memory; use a tensor box for multicast")


def check_reduce(s: ast.Store, box: Box) -> None:
    """A bulk reduce names its element type (no tensor map gives it): targets/reduce.py's
    BULK_REDUCE_TYPES, which differ from the tensor reduce's (f64 add, i64 bitwise)."""
    reduce.check_operation(s)
    types = BULK_REDUCE_TYPES[s.reduce]
    if box.dtype.name not in types:
        raise error(BULK_DTYPE, f"bulk reduce '{s.reduce}' does not take {box.dtype.name} elements "
                    f"(tensor '{box.tensor.name}')", s.span,
                    reduce.hint(s.reduce, box.dtype, list(types), tensor_map=False))

