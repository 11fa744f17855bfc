"""im2col boxes (`im2col A = x[PIXELS, CHANNELS] lower [..] upper [..]`): the TMA's im2col mode.

An im2col box is a tensor map over an N, spatial..., C tensor (rank 3..5; NWC, NHWC, NDHWC) made
by cuTensorMapEncodeIm2col. One load gathers PIXELS pixels, CHANNELS channels each, into an smem
tile [PIXELS, CHANNELS]: the pixels are walked through the pixel box (per spatial dim, from
`lower` to the dim's last element plus `upper`, by the box's `strides`), wrapping into the next
image, and each is read at its position plus the load's `offsets` (the filter position). Every
limit the driver or PTX puts on those numbers is a located error here (E480-E487); what only the
run knows (the start pixel, offsets that are not literals, an empty pixel box over symbolic
dims) is checked by the interpreter (E488) and at launch (E485).

Sources: CUDA Driver API cuTensorMapEncodeIm2col; PTX ISA 5.5.4 (im2col mode: corner and offset
ranges per rank, traversal stride, out-of-bounds fill) and cp.async.bulk.tensor (.im2col)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma
from ..targets.tma_modes import Im2col
from .declarations import (MAX_TX_BYTES, Box, KernelInfo, Tensor, cache_policy, check_option, check_static_strides,
                           declare)


def check_rank(d: ast.BoxDecl, tensor: Tensor) -> int:
    rank = len(tensor.shape)
    if rank not in tma.IM2COL_RANKS:
        raise error("E480", f"an im2col box needs a tensor of rank 3, 4 or 5 (N, spatial dims, C); "
                    f"'{tensor.name}' has rank {rank}", d.span,
                    "NWC, NHWC or NDHWC: the pixels are walked over the dims between N and C")
    return rank


def check_decl(info: KernelInfo, d: ast.BoxDecl) -> None:
    tensor = info.lookup(d.tensor, Tensor, what="tensor")
    rank = check_rank(d, tensor)
    if d.pair:
        raise error("E487", f"im2col box '{d.name}' has no pair form", d.option_spans["pair"],
                    "a CTA pair's box splits rows of a tiled box; declare a tiled box")
    if d.interleave != "none":
        raise error("E487", f"im2col box '{d.name}' has no interleaved form (v0)",
                    d.option_spans.get("interleave", d.span),
                    "an im2col map of an interleaved tensor is not measured on the H100; store the activations NHWC")
    if len(d.shape) != 2:
        raise error("E483", f"an im2col box is [pixels, channels]; '{d.name}' has {len(d.shape)} extents", d.span,
                    "the smem tile holds one row of channels per pixel")
    pixels, channels = d.shape
    if not 1 <= pixels <= tma.IM2COL_MAX_PIXELS:
        raise error("E483", f"an im2col box loads 1..{tma.IM2COL_MAX_PIXELS} pixels, got {pixels}", d.span,
                    "pixelsPerColumn of cuTensorMapEncodeIm2col")
    check_channels(d, tensor, channels)
    spatial = rank - 2
    lower = _corner(d, "lower", spatial, rank)
    upper = _corner(d, "upper", spatial, rank)
    strides = d.strides or [1] * spatial
    if len(strides) != spatial or not all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in strides):
        raise error("E484", f"an im2col box over a rank-{rank} tensor takes {spatial} traversal strides "
                    f"(one per spatial dim) in 1..{tma.MAX_ELEMENT_STRIDE}, got {strides}",
                    d.option_spans.get("strides", d.span), "the convolution stride, outermost first")
    _check_area(d, tensor, lower, upper)
    for key, allowed in (("swizzle", tma.SWIZZLES), ("oob", tma.OOB_FILLS), ("l2", tma.L2_PROMOTIONS)):
        check_option(d, key, allowed)
    if d.oob == "nan" and tensor.dtype.kind != "float":
        raise error("E024", f"oob nan needs a floating-point tensor; '{tensor.name}' is {tensor.dtype.name}",
                    d.option_spans["oob"])
    check_static_strides(tensor, d)
    box = Box(d.name, tensor, [pixels, channels], [1, 1], d.swizzle, d.oob, d.l2, d.span,
              cache=cache_policy(d), im2col=Im2col(tuple(lower), tuple(upper), tuple(strides)))
    if box.bytes > MAX_TX_BYTES:
        raise error("E483", f"an im2col load of {box.bytes} bytes is more than one mbarrier phase counts "
                    f"({MAX_TX_BYTES} bytes)", d.span, "load fewer pixels or channels")
    declare(info, d.name, box, d.span)


def check_channels(d: ast.BoxDecl, tensor: Tensor, channels: int) -> None:
    size, name = tensor.dtype.itemsize, tensor.dtype.name
    if not 1 <= channels <= tma.IM2COL_MAX_CHANNELS:
        raise error("E482", f"an im2col box loads 1..{tma.IM2COL_MAX_CHANNELS} channels per pixel, got {channels}",
                    d.span, "channelsPerPixel of cuTensorMapEncodeIm2col")
    nbytes = channels * size
    if nbytes % tma.GLOBAL_ALIGNMENT:
        raise error("E482", f"{channels} channels of {name} are {nbytes} bytes per pixel; TMA moves a multiple "
                    f"of {tma.GLOBAL_ALIGNMENT} bytes per row", d.span,
                    f"use a multiple of {max(1, tma.GLOBAL_ALIGNMENT // size)} channels")
    span = tma.SWIZZLES[d.swizzle].span if d.swizzle in tma.SWIZZLES else None
    if span is not None and nbytes > span:
        raise error("E482", f"{channels} channels of {name} are {nbytes} bytes per pixel, more than the "
                    f"{d.swizzle} swizzle span", d.option_spans["swizzle"],
                    f"use at most {span // size} channels per pixel, or a wider swizzle")


def _corner(d: ast.BoxDecl, key: str, spatial: int, rank: int) -> list[int]:
    values = getattr(d, key)
    span = d.option_spans.get(key, d.span)
    if values is None:
        raise error("E481", f"im2col box '{d.name}' needs its pixel box's `{key}` corner", d.span,
                    f"e.g. `lower [{', '.join(['-1'] * spatial)}] upper [{', '.join(['-1'] * spatial)}]` "
                    "for a 3-wide filter with padding 1")
    low, high = tma.im2col_corner_range(rank)
    if len(values) != spatial:
        raise error("E481", f"the `{key}` corner of a rank-{rank} im2col box has {spatial} values (one per "
                    f"spatial dim), got {len(values)}", span)
    bad = [v for v in values if not low <= v <= high]
    if bad:
        raise error("E481", f"the `{key}` corner of a rank-{rank} im2col box lies in [{low}, {high}], got {bad[0]}",
                    span, "cuTensorMapEncodeIm2col narrows the corners as the rank grows (16, 8, 5 bits)")
    return list(values)


def _check_area(d: ast.BoxDecl, tensor: Tensor, lower: list[int], upper: list[int]) -> None:
    """The pixel box must hold a pixel (the driver refuses an empty one): along each spatial dim
    it runs from `lower` to `dim - 1 + upper`. Symbolic dims are checked at launch (E485)."""
    for axis, (dim, lo, hi) in enumerate(zip(tensor.shape[1:-1], lower, upper), start=1):
        if isinstance(dim, int) and dim - 1 + hi < lo:
            raise error("E485", f"the pixel box is empty along dim {axis} of '{tensor.name}': it runs from {lo} "
                        f"to {dim} - 1 + ({hi}) = {dim - 1 + hi}", d.option_spans.get("upper", d.span),
                        "widen the corners (lower <= dim - 1 + upper)")


def check_load(info: KernelInfo, s: ast.Load, box: Box) -> None:
    """An im2col load names every tensor coordinate (elements: N, spatial..., C) and one offset
    per spatial dim; a tiled load takes no offsets."""
    if not check_copy(box, s, "load"):
        return
    if s.multicast:
        raise error("E487", f"im2col box '{box.name}' cannot be loaded with multicast (v0)", s.span,
                    "load the im2col tile in each CTA; multicast the tiled operand")
    if info.cta_group == 2:   # a pair's load completes on the leader's barrier (.cta_group::2)
        raise error("E487", f"im2col box '{box.name}' cannot be loaded in a cta_group 2 kernel (v0)", s.span,
                    "the im2col load has no CTA-pair form here; run the convolution without CTA pairs")


def check_copy(box: Box, s, what: str) -> bool:
    """A load or prefetch (`what`) through an im2col box names every tensor coordinate (elements:
    N, spatial..., C) and at most one offset per spatial dim; through another box it takes no
    offsets. True for an im2col copy."""
    if box.im2col is None:
        if s.offsets is not None:
            raise error("E486", f"box '{box.name}' is a tiled box; only an im2col {what} takes offsets",
                        s.offsets_span, "declare the box with `im2col`")
        return False
    rank = len(box.tensor.shape)
    if len(s.coords) != rank:
        raise error("E065", f"an im2col {what} through '{box.name}' takes {rank} element coordinates (N, spatial "
                    f"dims, C) of tensor '{box.tensor.name}', got {len(s.coords)}", s.span)
    offsets = s.offsets or []
    if s.offsets is not None and len(offsets) != rank - 2:
        raise error("E486", f"an im2col {what} over a rank-{rank} tensor takes {rank - 2} offsets (one per "
                    f"spatial dim), got {len(offsets)}", s.offsets_span)
    low, high = tma.im2col_offset_range(rank)
    for e in offsets:
        value = literal(e)
        if value is not None and not low <= value <= high:
            raise error("E486", f"an im2col offset over a rank-{rank} tensor lies in [{low}, {high}], got {value}",
                        e.span, "the filter position, unsigned: 16, 8 or 5 bits by rank")
    return True


def literal(e) -> int | None:
    if isinstance(e, ast.Number) and isinstance(e.value, int):
        return e.value
    if isinstance(e, ast.Neg):
        inner = literal(e.operand)
        return None if inner is None else -inner
    return None


def refuse(box: Box, what: str, span) -> None:
    """What an im2col tensor map does not do in v0: stores, reduces, tile loops."""
    if box.im2col is not None:
        raise error("E487", f"im2col box '{box.name}' cannot {what} (v0)", span,
                    "an im2col box only loads; declare a tiled box over the tensor for this")
