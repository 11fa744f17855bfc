"""Gathered rows: `load X[idx[p], c] -> t`, `store X[idx[p], c] <- t` and `prefetch X[idx[p], c]`
(sm_100a).

A row coordinate written `idx[p]` names an index tensor and a tile position in it: the copy
moves tile rows j = 0..R-1 of box X (R rows, W columns) to or from tensor rows
`idx[p*R + j]`, at column tile c. It lowers to R/4 copies of TMA's `.tile::gather4` (load)
or `.tile::scatter4` (store), each moving four rows named by four row coordinates (PTX ISA
5.5.3.4), and the issuing thread reads the indices from global memory just before.

What the hardware requires and sema checks: the tensor is 2-D and the box's tensor map has one
row (every copy through the box is by rows: E494), rows come in fours (E493), four rows are a
whole number of 128 bytes (each four-row copy's smem address is 128-byte aligned: E499), and no
strides (the rows are not a box to stride through) (E492); the index tensor is a 1-D i32
tensor (TMA coordinates are signed 32-bit: a wider index would be truncated into some row)
(E491) that the kernel does not write (E496: one thread reads it while the kernel runs);
there is no multicast, pair or reduce form (E495), and no such copy on sm_90a (E490,
sema/available.py). Soundness of the indices is the runtime's: a position past the index
tensor reads no index, and it and an index outside the tensor's rows name the row just past the
tensor's end, which TMA fills on a load and skips on a store (never a negative row: the H100
faults on a store there); an index outside the rows is E497 in the interpreter.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma
from . import panels
from .declarations import Box, KernelInfo, Tensor
from .scope import Scope, int_expr

INDEX_DTYPE = "i32"


def is_gathered(c) -> bool:
    """`idx[p]` as a whole tile coordinate: a name with one bracketed position. In element
    coordinates (`X@[...]`) and inside a larger expression, `t[i]` is an element read (§18)."""
    return isinstance(c, ast.Ref) and c.block is not None and c.field is None


def check_copy(info: KernelInfo, s, box: Box, coords: list, scope: Scope) -> list:
    """Check a load's, store's or prefetch's coordinates for an `idx[p]` row operand. Returns the
    coordinates as plain index expressions (the position in place of `idx[p]`); sets `s.gather`."""
    if s.elements or not any(is_gathered(c) for c in coords):
        _use(info, box, False, s.span)
        return coords
    first, *rest = coords
    stray = next((c for c in rest if is_gathered(c)), None)
    if stray is not None or not is_gathered(first):
        raise error("E491", "only the row coordinate (the first) of a copy may name an index tensor",
                    (stray or next(c for c in coords if is_gathered(c))).span,
                    "gathered copies pick rows of a 2-D tensor: `load X[idx[m], k] -> s.a`")
    index = _index_tensor(info, first)
    info.gather_sites.append(first.span)
    info.index_tensors.setdefault(index.name, first.span)
    index.read = True
    _check_box(info, s, box)
    _use(info, box, True, s.span)
    int_expr(info, first.block[0], scope)
    s.gather = index.name
    return [first.block[0], *rest]


def _index_tensor(info: KernelInfo, ref: ast.Ref) -> Tensor:
    index = info.lookup(ast.Ref(ref.span, ref.name), Tensor, what="index tensor")
    if len(index.shape) != 1 or index.dtype.name != INDEX_DTYPE:
        shape = ", ".join(map(str, index.shape))
        raise error("E491", f"index tensor '{index.name}' is {index.dtype.name}[{shape}]; row indices come from "
                    f"a 1-D {INDEX_DTYPE} tensor", ref.span,
                    f"TMA row coordinates are signed 32-bit: declare it `{index.name}: {INDEX_DTYPE}[M]`")
    if len(ref.block) != 1:
        raise error("E491", f"'{ref.name}[...]' takes one position (a tile index into the index tensor), "
                    f"got {len(ref.block)}", ref.span)
    return index


def _check_box(info: KernelInfo, s, box: Box) -> None:
    what = ("gathered load" if isinstance(s, ast.Load) else "gathered prefetch" if isinstance(s, ast.Prefetch)
            else "scattered reduce" if s.reduce else "scattered store")
    panels.refuse(box, f"a {what}", s.span)   # four rows per copy, not panels
    if box.bulk or len(box.shape) != tma.GATHER_RANK or box.strided:
        kind = ("a bulk box" if box.bulk else f"rank {len(box.shape)}" if len(box.shape) != tma.GATHER_RANK
                else "strided")
        raise error("E492", f"box '{box.name}' is {kind}; a {what} moves whole rows of a 2-D tensor through an "
                    "unstrided tensor box", s.span, "declare `box X = x[ROWS, COLS]` over a 2-D tensor")
    rows = box.shape[0]
    if rows % tma.GATHER_ROWS:
        raise error("E493", f"box '{box.name}' has {rows} rows; a {what} moves them {tma.GATHER_ROWS} at a time "
                    f"(.tile::{'scatter4' if what.startswith('scattered') else 'gather4'})", s.span,
                    f"use a multiple of {tma.GATHER_ROWS} rows")
    block = tma.GATHER_ROWS * box.shape[1] * box.dtype.itemsize
    if block % tma.SMEM_COPY_ALIGNMENT:
        raise error("E499", f"four rows of box '{box.name}' are {block} bytes, so its second four-row copy would "
                    f"land {block} bytes into the tile; a TMA copy's shared-memory address is "
                    f"{tma.SMEM_COPY_ALIGNMENT}-byte aligned", s.span,
                    f"use rows of a multiple of {tma.SMEM_COPY_ALIGNMENT // tma.GATHER_ROWS} bytes "
                    f"({tma.SMEM_COPY_ALIGNMENT // tma.GATHER_ROWS // box.dtype.itemsize} {box.dtype.name} elements)")
    if getattr(s, "multicast", False):
        raise error("E495", "a gathered load has no multicast form", s.span, "load the rows in each CTA")
    if box.pair:
        raise error("E495", f"a {what} has no pair form", s.span, "declare a box without `pair`")
    if what == "scattered reduce":
        raise error("E495", "a TMA reduce cannot scatter rows", s.span,
                    "cp.reduce.async.bulk.tensor has no .tile::scatter4 mode: scatter with a plain store")


def _use(info: KernelInfo, box: Box, gathered: bool, span) -> None:
    """A box's tensor map has one row when copies go by rows, R rows otherwise: not both."""
    first = info.gather_boxes.setdefault(box.name, (gathered, span))
    if first[0] != gathered:
        raise error("E494", f"box '{box.name}' is copied both by gathered rows and as a box", span,
                    f"its tensor map has one row for a gathered copy (the other use is at "
                    f"{first[1].location()}): declare a second box over '{box.tensor.name}'")
    box.gather = gathered or box.gather


def check_kernel(info: KernelInfo) -> None:
    """The index tensor is read by the issuing thread while the kernel runs: nothing may write it."""
    for name, span in info.index_tensors.items():
        if info.symbols[name].written:
            raise error("E496", f"index tensor '{name}' is also written by this kernel", span,
                        "its elements are read while the kernel runs (a gathered copy's rows, an index "
                        "expression's `t[i]`); a store to them would race the reads")
