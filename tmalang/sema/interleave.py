"""Interleaved layouts (`interleave 16B|32B` on a box): tensors stored NC/8HWC8 or NC/16HWC16,
channels in slices of 16 or 32 bytes, one slice innermost.

The tensor is declared in its physical shape, slice innermost: NC/8HWC8 of f16 is
`f16[N, C/8, H, W, 8]`, and the box takes whole slices. Under that rule the tile a load fills is
the box's elements in row-major order, as without interleave, so tile math, stores and the
interpreter need nothing new; what interleave changes is the tensor map's description of global
memory. The cuTensorMapEncodeTiled rules become located errors here: rank 3..5 (E446), with 32B
swizzle 32B only (E449), and outer strides and the base address 32-byte aligned: a dense tensor's
strides are whole slices, so only a padded array can break that, which the launch checks (E207,
E208).

The tensor map leaves the slice out: on the H100 (measured with hand-written PTX, 2026-11-23) an
interleaved map moves one whole slice per index of its innermost dim, so a physical
[N, C/k, spatial.., k] tensor is described as the rank-1 map (spatial.., C/k, N) with the slice
as its element; its innermost box extent counts slices, and the driver still checks it as if it
counted dtype elements: a multiple of 16 / itemsize (E457). The tile then lands exactly as the
physical box in row-major order. A box more than one image or one slice deep is refused too
(E457): on the H100 such a copy never completed its barrier. (Describing the slice as a dim of its own makes every index of
it a whole slice: eight times the bytes, and a fault.)
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma


def check(d: ast.BoxDecl, tensor) -> None:
    """`tensor` is the box's sema Tensor (declarations.py, which calls this)."""
    if d.interleave not in tma.INTERLEAVES:
        raise error("E445", f"unknown interleave '{d.interleave}'", _span(d),
                    f"expected one of: {', '.join(tma.INTERLEAVES)}")
    if d.interleave == "none":
        return
    rank, size = len(tensor.shape), tensor.dtype.itemsize
    slice_bytes = tma.INTERLEAVES[d.interleave].slice_bytes
    if rank < tma.INTERLEAVE_MIN_RANK:
        raise error("E446", f"interleave needs a tensor of rank {tma.INTERLEAVE_MIN_RANK} to {tma.MAX_RANK}; "
                    f"'{tensor.name}' has rank {rank}", _span(d),
                    "an interleaved tensor is NC/8HWC8-like: batch, channel slices, spatial dims, the slice")
    inner = tensor.shape[-1]
    if not isinstance(inner, int) or inner * size != slice_bytes:
        elements = max(1, slice_bytes // size)
        raise error("E447", f"interleave {d.interleave} needs tensor '{tensor.name}' to hold one {slice_bytes}-byte "
                    f"channel slice innermost ({elements} x {tensor.dtype.name}), got {inner}", tensor.span,
                    f"declare the tensor in its interleaved shape, e.g. [N, C / {elements}, H, W, {elements}]")
    if d.shape[-1] != inner:
        raise error("E448", f"box '{d.name}' takes {d.shape[-1]} of the {inner} elements of a channel slice",
                    d.span, f"an interleaved box moves whole slices: make its innermost extent {inner}")
    if d.interleave == "32B" and d.swizzle != "32B":
        raise error("E449", f"interleave 32B needs swizzle 32B, got swizzle {d.swizzle}",
                    d.option_spans.get("swizzle", _span(d)), "add `swizzle 32B` (the driver's rule)")
    outer = [(dim, extent) for dim, extent in zip(("the batch", "the slices"), d.shape[:2]) if extent != 1]
    if outer:
        raise error("E457", f"box '{d.name}' takes {outer[0][1]} along {outer[0][0]} dim; with interleave a box takes "
                    "one image and one channel slice", d.span,
                    "measured on the H100 (2026-11-23): a box two slices deep never completes its barrier; load "
                    "one slice per copy")
    pixels = d.shape[-2]
    if (pixels * size) % tma.GLOBAL_ALIGNMENT:
        step = tma.GLOBAL_ALIGNMENT // size
        raise error("E457", f"box '{d.name}' takes {pixels} slices along its second-innermost dim; with interleave "
                    f"that must be a multiple of {step}", d.span,
                    f"the tensor map counts one slice per {tensor.dtype.name} element along that dim, and the driver "
                    f"wants that extent x {size} bytes to be a multiple of 16")



def _span(d: ast.BoxDecl):
    return d.option_spans.get("interleave", d.span)
