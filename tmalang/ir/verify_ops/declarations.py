"""Verify hooks of the kernel's declarations (ops/declarations.py): tensors, scalars, assumptions,
pipelines, buffers, mbarriers, and TMA boxes in all their forms (tiled, bulk, gathered, panelled,
interleaved, im2col and wide im2col) against the hardware's limits (targets/tma.py).
"""

from __future__ import annotations

import math

from ...targets import tma, tma_modes
from ...targets.dtypes import DTYPES, SCALAR_DTYPES
from .. import exprs as ex
from .. import ops
from .scope import Hook, Scope, power_of_two


def _tensor(v: Scope, o: ops.TensorDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "dtype", o.dtype in DTYPES, "not an element type")
    v.check(o, "shape", 1 <= len(o.shape) <= tma.MAX_RANK, f"rank not 1..{tma.MAX_RANK}")
    v.check(o, "shape", all(isinstance(d, str) or d >= 1 for d in o.shape), "a dimension below 1")


def _scalar(v: Scope, o: ops.ScalarDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "dtype", o.dtype in SCALAR_DTYPES, "not a scalar parameter type")


def _assume(v: Scope, o: ops.AssumeDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "compare", o.compare in ops.COMPARISONS, f"not one of {' '.join(ops.COMPARISONS)}")
    for side in ("lhs", "rhs"):   # host arithmetic: integers and launch-bound values, nothing of the kernel's
        v.check(o, side, all(_host_integer(x) for x in ex.walk(getattr(o, side))), "not an integer expression of $values")


def _host_integer(x: ex.Expr) -> bool:
    return (isinstance(x, (ex.Param, ex.Neg)) or isinstance(x, ex.Const) and type(x.value) is int
            or isinstance(x, ex.Bin) and x.op in ops.ASSUME_OPS)


def _box(v: Scope, o: ops.BoxDecl) -> None:
    v.within(o, ops.KernelOp)
    tensor = v.decl(o, "tensor", ops.TensorDecl)
    v.check(o, "dtype", o.dtype == tensor.dtype, f"not the dtype of tensor @{tensor.symbol}")
    v.check(o, "mode", o.mode in tma_modes.MODES, f"not a TMA mode ({', '.join(tma_modes.MODES)})")
    pixels = o.mode in ("im2col", "im2col_wide")
    v.check(o, "im2col", pixels == (o.im2col is not None) and (o.mode == "im2col_wide") == bool(o.wide),
            "the record goes with an im2col mode only, and sets wide exactly for im2col_wide")
    if o.im2col:
        _im2col_box(v, o, tensor)
    else:
        v.check(o, "shape", len(o.shape) == len(tensor.shape), f"not the rank of tensor @{tensor.symbol}")
    if o.bulk:   # one row chunk: [1, ..., 1, CHUNK], a multiple of 16 bytes, plain and whole
        v.check(o, "shape", all(n == 1 for n in o.shape[:-1]) and o.shape[-1] >= 1
                and (o.dtype not in DTYPES or o.shape[-1] * DTYPES[o.dtype].itemsize % tma.BULK_ALIGNMENT == 0),
                f"not [1, .., 1, CHUNK] with CHUNK a multiple of {tma.BULK_ALIGNMENT} bytes")
        v.check(o, "swizzle", o.swizzle == "none" and o.cache == "none" and o.multicast == 1 and not o.pair,
                "a bulk box has no tensor map: no swizzle, cache policy, multicast or pair")
    else:
        v.check(o, "shape", all(1 <= n <= tma.MAX_BOX_EXTENT for n in o.shape),
                f"an extent outside 1..{tma.MAX_BOX_EXTENT}")
    v.check(o, "strides", 1 <= len(o.strides) == len(o.shape)
            and all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in o.strides),
            f"not one stride in 1..{tma.MAX_ELEMENT_STRIDE} per dimension")
    v.check(o, "swizzle", o.swizzle in tma.SWIZZLES, "not a TMA swizzle")
    v.check(o, "oob", o.oob in tma.OOB_FILLS, "not a TMA out-of-bounds fill")
    v.check(o, "l2", o.l2 in tma.L2_PROMOTIONS, "not a TMA L2 promotion")
    v.check(o, "cache", o.cache in tma.CACHE_POLICIES, "not an L2 cache policy")
    v.check(o, "interleave", o.interleave in tma.INTERLEAVES and (o.interleave == "none" or not o.bulk
            and len(o.shape) >= tma.INTERLEAVE_MIN_RANK and (o.interleave != "32B" or o.swizzle == "32B")),
            "not a TMA interleave, or one the driver refuses here (a bulk box, rank below 3, 32B without swizzle 32B)")
    if o.strides[-1] != 1:
        v.fail(f"box '@{o.symbol}' has innermost element stride {o.strides[-1]}; TMA ignores it (§4)", o)
    v.check(o, "multicast", o.multicast >= 1 and (o.multicast == 1 or not o.pair), "below 1, or on a pair box")
    span = tma.SWIZZLES[o.swizzle].span if o.swizzle in tma.SWIZZLES else None
    if span and not (o.bulk or o.im2col) and o.dtype in DTYPES and o.shape[-1] * DTYPES[o.dtype].itemsize > span:
        _panelled_box(v, o, span)
    if o.gather:   # a one-row tensor map over a 2-D tensor, copied four rows at a time
        v.check(o, "gather", len(o.shape) == tma.GATHER_RANK and o.shape[0] % tma.GATHER_ROWS == 0
                and o.strides == [1] * len(o.shape) and not (o.bulk or o.pair or o.multicast > 1)
                and (o.dtype not in DTYPES or tma.GATHER_ROWS * o.shape[-1] * DTYPES[o.dtype].itemsize
                     % tma.SMEM_COPY_ALIGNMENT == 0),
                f"a gathered box is 2-D, unstrided, {tma.GATHER_ROWS}k rows of which four are "
                f"{tma.SMEM_COPY_ALIGNMENT}k bytes, not bulk, pair or multicast")


def _panelled_box(v: Scope, o: ops.BoxDecl, span: int) -> None:
    """A box of several swizzle spans per row (§4): whole spans, at most MAX_PANELS, panels of whole
    8-row atoms, and none of the forms whose copies are not one box (pair, gather, interleave)."""
    rows = math.prod(tma.tile_shape(o.shape[:-1], o.strides[:-1]))
    v.check(o, "shape", o.shape[-1] * DTYPES[o.dtype].itemsize % span == 0 and o.panels() <= tma.MAX_PANELS
            and rows % 8 == 0, f"a panelled box: rows not whole {span}-byte spans, more than {tma.MAX_PANELS} "
            "panels, or panels that are not whole 8-row swizzle atoms")
    v.check(o, "swizzle", not (o.pair or o.gather or o.interleave != "none"),
            "a panelled box that is pair, gathered or interleaved")


def _im2col_box(v: Scope, o: ops.BoxDecl, tensor: ops.TensorDecl) -> None:
    """[pixels, channels] over a rank 3..5 tensor; corners and strides per spatial dim, in range."""
    rank = len(tensor.shape)
    v.check(o, "shape", rank in tma.IM2COL_RANKS and len(o.shape) == 2, "not [pixels, channels] over a rank 3..5 tensor")
    if rank not in tma.IM2COL_RANKS:
        return
    v.check(o, "multicast", o.multicast == 1 and not o.pair and not o.bulk, "an im2col box is not sliced")
    if o.wide:
        _im2col_wide_box(v, o, rank)
        return
    v.check(o, "im2col", not o.halo, "halo: a halo belongs to a wide im2col box")
    low, high = tma.im2col_corner_range(rank)
    for name in ("lower", "upper"):
        corner = getattr(o.im2col, name)
        v.check(o, "im2col", len(corner) == rank - 2 and all(low <= c <= high for c in corner),
                f"{name}: not {rank - 2} values in [{low}, {high}]")
    strides = o.im2col.strides
    v.check(o, "im2col", len(strides) == rank - 2 and all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in strides),
            f"strides: not {rank - 2} traversal strides in 1..{tma.MAX_ELEMENT_STRIDE}")
    v.check(o, "shape", len(o.shape) == 2 and 1 <= o.shape[0] <= tma.IM2COL_MAX_PIXELS
            and 1 <= o.shape[1] <= tma.IM2COL_MAX_CHANNELS, "pixels or channels out of range")


def _im2col_wide_box(v: Scope, o: ops.BoxDecl, rank: int) -> None:
    """sm_100a W-only modes: one W corner per side (D, H: 0), one W stride (D, H: 1), the halo's
    range, [pixels + halo, channels] with 128 pixels in w128, and a swizzle."""
    v.check(o, "im2col", o.wide in tma_modes.WIDE_QUALIFIERS, "wide: not a wide im2col mode (w, w128)")
    if o.wide not in tma_modes.WIDE_QUALIFIERS:
        return
    low, high = tma.IM2COL_WIDE_CORNER
    for name in ("lower", "upper"):
        corner = getattr(o.im2col, name)
        v.check(o, "im2col", len(corner) == rank - 2 and all(c == 0 for c in corner[:-1])
                and low <= corner[-1] <= high, f"{name}: not {rank - 3} zeros and a W corner in [{low}, {high}]")
    strides = o.im2col.strides
    v.check(o, "im2col", len(strides) == rank - 2 and all(s == 1 for s in strides[:-1])
            and 1 <= strides[-1] <= tma.MAX_ELEMENT_STRIDE, "strides: not ones and a W traversal stride")
    v.check(o, "im2col", 0 <= o.halo < tma.IM2COL_WIDE_HALO[o.wide] and not (o.wide == "w128" and o.halo),
            "halo: out of range for the mode")
    pixels = o.shape[0] - o.halo if len(o.shape) == 2 else 0
    v.check(o, "shape", len(o.shape) == 2 and 1 <= pixels <= tma.IM2COL_MAX_PIXELS
            and (o.wide != "w128" or pixels == tma.IM2COL_W128_PIXELS)
            and 1 <= o.shape[1] <= tma.IM2COL_MAX_CHANNELS, "pixels (+ halo) or channels out of range")
    v.check(o, "swizzle", o.swizzle in tma.IM2COL_WIDE_SWIZZLES, "a wide im2col box swizzles 64B or 128B")


def _pipeline(v: Scope, o: ops.PipelineDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", 1 <= o.stages <= 32, "not 1..32")
    for entry in o.fields:
        name, _, what = entry.partition(":")
        tmem = what.startswith("tmem:") and all(n.isdigit() for n in what[5:].split("x"))
        if not name or not (tmem or isinstance(v.symbols.get(what), ops.BoxDecl)):
            v.fail(f"pipeline field '{entry}' is not FIELD:BOX or FIELD:tmem:MxN", o)


def _buffer(v: Scope, o: ops.BufferDecl) -> None:
    v.within(o, ops.KernelOp)
    v.decl(o, "box", ops.BoxDecl)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "bytes", o.bytes >= 1, "empty")
    v.check(o, "align", power_of_two(o.align) and o.align >= 16, "not a power of two from 16")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % o.align == 0, "not a multiple of align")


def _mbarrier(v: Scope, o: ops.MbarrierDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "count", o.count == -1 or 1 <= o.count <= 0xFFFFF, "not -1 (unscheduled) or 1..1048575")
    v.check(o, "tx_bytes", o.tx_bytes >= 0, "negative")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % 8 == 0, "not 8-byte aligned")


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TensorDecl: _tensor, ops.ScalarDecl: _scalar, ops.BoxDecl: _box, ops.AssumeDecl: _assume,
    ops.PipelineDecl: _pipeline, ops.BufferDecl: _buffer, ops.MbarrierDecl: _mbarrier,
}
