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

A box that passes those rules is still refused (E457): on the H100 the copies fault with the map
this compiler encodes (the physical [N, C/k, spatial.., k] shape with the interleave flag; a
logical (N, spatial.., C) map did not land the expected bytes either), so the encoding is not
settled. The rules above stay, so a user learns every driver rule before that one.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..target import tma


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
    raise error("E457", f"interleaved tensor maps are refused for now: on the H100 a copy through box '{d.name}' "
                "as this compiler encodes it faults (an out-of-range shared address; measured 2026-11-23)",
                _span(d), "store the tensor without interleave (NHWC, channels innermost) and use a plain box; "
                "docs/language.md §23")



def _span(d: ast.BoxDecl):
    return d.option_spans.get("interleave", d.span)
