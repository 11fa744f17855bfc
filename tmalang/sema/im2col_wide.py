"""Wide im2col boxes (`im2col A = x[PIXELS, CHANNELS] wide w|w128 lower [L] upper [U] halo H`):
the sm_100a TMA modes `.im2col::w` and `.im2col::w::128`.

A wide box is an im2col box whose walk moves along W only: D and H stay where the load's
coordinates put them (the bounding box is one pixel deep there), and W runs from the load's W
coordinate by the traversal stride. `lower`/`upper` are the bounding box's two W corners (one
value each, 16-bit signed at every rank: cuTensorMapEncodeIm2colWide's pixelBoxLower/UpperCornerWidth),
`strides [s]` the W traversal stride, `halo H` the wHalo operand: H more pixels of the walk,
landing in smem right after the PIXELS row pixels, so the tile is [PIXELS + H, CHANNELS]. A load
takes `offsets [o]`, the wOffset operand, which shifts the bounding box and the start along W.
`wide w128` always loads 128 pixels (PIXELS must say so).

Refused here because the PTX ISA text leaves it undefined (only a figure shows it): a halo in
w128 mode (where in smem the halo after every 32 pixels lands), and a halo with a traversal
stride other than 1 (whether halo pixels step by it). The walk's own undefined cases
(a row that runs past the bounding box, a start left of it) are refused by the interpreter (E509).
Codes: E503 (target), E504 (mode, pixels), E505 (corners, stride), E506 (swizzle, interleave,
pair), E507 (halo), E508 (the load's wOffset), E489 (`halo` on a box that is not wide).

Sources: CUDA Driver API cuTensorMapEncodeIm2colWide; PTX ISA 5.5.5 (im2col::w and
im2col::w::128 modes) and cp.async.bulk.tensor (im2colInfo {wHalo, wOffset})."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma, tma_modes
from .declarations import (MAX_TX_BYTES, Box, KernelInfo, Tensor, cache_policy, check_option, check_static_strides,
                           declare)
from .im2col import check_channels, check_rank, literal


def check_decl(info: KernelInfo, d: ast.BoxDecl) -> None:
    if not d.wide:
        raise error("E489", f"`halo` belongs to a wide im2col box; '{d.name}' is not wide", d.option_spans["halo"],
                    "add `wide w` (sm_100a), or drop `halo`")
    span = d.option_spans["wide"]
    if not info.target.has_im2col_w:
        raise error("E503", f"wide im2col box '{d.name}' (.im2col::{'w::128' if d.wide == 'w128' else 'w'}) needs "
                    f"sm_100a, not {info.target.name}", span, "compile with --arch sm_100a, or drop `wide`")
    if d.wide not in tma_modes.WIDE_QUALIFIERS:
        raise error("E504", f"unknown wide im2col mode '{d.wide}'", span, "expected `wide w` or `wide w128`")
    tensor = info.lookup(d.tensor, Tensor, what="tensor")
    rank = check_rank(d, tensor)
    if d.pair or d.interleave != "none":
        key = "pair" if d.pair else "interleave"
        raise error("E506", f"wide im2col box '{d.name}' has no {key} form", d.option_spans[key],
                    "PTX ISA 5.5.6: the W-only modes take no interleaved layout; a pair splits tiled rows")
    pixels, channels = _shape(d)
    check_channels(d, tensor, channels)
    lower, upper, stride = _corner(d, "lower"), _corner(d, "upper"), _stride(d)
    _check_area(d, tensor, lower, upper)
    halo = _halo(d, stride)
    if d.swizzle not in tma.IM2COL_WIDE_SWIZZLES:
        raise error("E506", f"wide im2col box '{d.name}' needs swizzle 64B or 128B, got {d.swizzle}",
                    d.option_spans.get("swizzle", d.span), "PTX ISA 5.5.5: the W-only modes must swizzle")
    for key, allowed in (("oob", tma.OOB_FILLS), ("l2", tma.L2_PROMOTIONS)):
        check_option(d, key, allowed)
    if d.oob == "nan" and tensor.dtype.kind != "float":
        raise error("E024", f"oob nan needs a floating-point tensor; '{tensor.name}' is {tensor.dtype.name}",
                    d.option_spans["oob"])
    check_static_strides(tensor, d)
    spatial = rank - 2   # D and H: a one-pixel bounding box at the load's coordinates
    pixel_box = tma_modes.Im2col((0,) * (spatial - 1) + (lower,), (0,) * (spatial - 1) + (upper,),
                       (1,) * (spatial - 1) + (stride,), wide=d.wide, halo=halo)
    box = Box(d.name, tensor, [pixels + halo, channels], [1, 1], d.swizzle, d.oob, d.l2, d.span,
              cache=cache_policy(d), im2col=pixel_box)
    if box.bytes > MAX_TX_BYTES:
        raise error("E504", f"a wide im2col load of {box.bytes} bytes is more than one mbarrier phase counts "
                    f"({MAX_TX_BYTES} bytes)", d.span, "load fewer pixels or channels")
    declare(info, d.name, box, d.span)


def _shape(d: ast.BoxDecl) -> tuple[int, int]:
    if len(d.shape) != 2:
        raise error("E504", f"a wide im2col box is [pixels, channels]; '{d.name}' has {len(d.shape)} extents", d.span)
    pixels, channels = d.shape
    if d.wide == "w128" and pixels != tma.IM2COL_W128_PIXELS:
        raise error("E504", f"a `wide w128` box loads {tma.IM2COL_W128_PIXELS} pixels, got {pixels}", d.span,
                    "im2col::w::128 ignores pixelsPerColumn: write [128, CHANNELS], or use `wide w`")
    if not 1 <= pixels <= tma.IM2COL_MAX_PIXELS:
        raise error("E504", f"a wide im2col box loads 1..{tma.IM2COL_MAX_PIXELS} pixels, got {pixels}", d.span,
                    "pixelsPerColumn of cuTensorMapEncodeIm2colWide")
    return pixels, channels


def _corner(d: ast.BoxDecl, key: str) -> int:
    values, span = getattr(d, key), d.option_spans.get(key, d.span)
    if values is None:
        raise error("E505", f"wide im2col box '{d.name}' needs its bounding box's `{key} [W]` corner", d.span,
                    "e.g. `lower [-1] upper [-1]` for a 3-wide filter with padding 1")
    low, high = tma.IM2COL_WIDE_CORNER
    if len(values) != 1 or not low <= values[0] <= high:
        raise error("E505", f"the `{key}` corner of a wide im2col box is one W offset in [{low}, {high}], "
                    f"got {values}", span, "the W-only modes have one corner per side, along W")
    return values[0]


def _stride(d: ast.BoxDecl) -> int:
    strides = d.strides or [1]
    if len(strides) != 1 or not 1 <= strides[0] <= tma.MAX_ELEMENT_STRIDE:
        raise error("E505", f"a wide im2col box takes one traversal stride (along W) in "
                    f"1..{tma.MAX_ELEMENT_STRIDE}, got {strides}", d.option_spans.get("strides", d.span))
    return strides[0]


def _check_area(d: ast.BoxDecl, tensor: Tensor, lower: int, upper: int) -> None:
    width = tensor.shape[-2]
    if isinstance(width, int) and width - 1 + upper < lower:
        raise error("E485", f"the bounding box is empty along W of '{tensor.name}': it runs from {lower} to "
                    f"{width} - 1 + ({upper}) = {width - 1 + upper}", d.option_spans.get("upper", d.span),
                    "widen the corners (lower <= W - 1 + upper)")


def _halo(d: ast.BoxDecl, stride: int) -> int:
    halo = d.halo or 0
    span = d.option_spans.get("halo", d.span)
    if d.wide == "w128" and halo:
        raise error("E507", "a `wide w128` box takes no halo (v0)", span,
                    "the PTX ISA text does not say where w128's halo after every 32 pixels lands in smem")
    if halo and stride != 1:
        raise error("E507", f"a halo with traversal stride {stride} (v0)", span,
                    "the PTX ISA text does not say whether halo pixels step by the stride; use stride 1")
    if not 0 <= halo < tma.IM2COL_WIDE_HALO[d.wide]:
        raise error("E507", f"the halo of a `wide {d.wide}` box lies in [0, {tma.IM2COL_WIDE_HALO[d.wide]}), "
                    f"got {halo}", span, "wHalo: the pixels past the row that the filter's width needs")
    return halo


def check_load(info: KernelInfo, s: ast.Load, box: Box) -> None:
    """A wide load names every tensor coordinate (elements: N, D, H, W, C) and at most one
    offset, the wOffset operand."""
    check_copy(box, s, "load")
    if s.multicast or info.cta_group == 2:
        raise error("E508", f"wide im2col box '{box.name}' cannot be loaded with multicast or in a cta_group 2 "
                    "kernel (v0)", s.span, "load the wide im2col tile in each CTA")


def check_copy(box: Box, s, what: str) -> None:
    """A wide load or prefetch (`what`): every tensor coordinate, and at most the one wOffset."""
    rank = len(box.tensor.shape)
    if len(s.coords) != rank:
        raise error("E065", f"a wide im2col {what} through '{box.name}' takes {rank} element coordinates (N, "
                    f"spatial dims, C) of tensor '{box.tensor.name}', got {len(s.coords)}", s.span)
    offsets = s.offsets or []
    if len(offsets) > 1:
        raise error("E508", f"a wide im2col {what} takes one offset (wOffset, along W), got {len(offsets)}",
                    s.offsets_span, "D and H come from the coordinates: the walk moves along W only")
    value = literal(offsets[0]) if offsets else None
    if value is not None and not 0 <= value < tma.IM2COL_WIDE_OFFSET:
        raise error("E508", f"wOffset lies in [0, {tma.IM2COL_WIDE_OFFSET}), got {value}", offsets[0].span,
                    "cp.async.bulk.tensor's wOffset: 16-bit unsigned, below 32")
