"""What a wide im2col load gathers (PTX ISA 5.5.5, im2col::w and im2col::w::128), in NumPy:
the living definition of `wide` boxes.

The tensor is N, spatial dims, C (W innermost of the spatial dims). A load at element
coordinates (n, .., h, w, c) with wOffset o walks W only: D and H stay at the coordinates. The
bounding box runs along W from lower + o to W - 1 + upper + o (wOffset moves both corners and the
start, PTX ISA 5.5.5.4). Tile row j < PIXELS holds pixel (n, .., h, w + o + j * stride); rows
PIXELS .. PIXELS + halo - 1 hold the halo, the next pixels after the row (w + o + PIXELS + k;
sema allows a halo only with stride 1). Each pixel gives channels c .. c + CHANNELS - 1; whatever
lies outside the tensor is the box's oob fill.

The ISA text leaves two cases to figures, so the interpreter refuses them (E509) rather than
guess: a start left of the bounding box, and a row whose pixels run past the box's W end (where
the walk goes on: next row, next image?). So does a wOffset outside [0, 32), which the GPU does
not check either.
"""

from __future__ import annotations

import numpy as np

from ..ir import ops
from ..targets import tma
from .state import ProtocolError
from .tiles import TMA_NAN_HALFWORD


def row(shape: tuple[int, ...], box: ops.BoxDecl, coords: list[int], offset: int) -> np.ndarray:
    """The PIXELS + halo pixels (n, spatial..) a load reads, one per tile row."""
    pixels = box.shape[0] - box.halo
    stride = box.im2col.strides[-1]
    start = coords[-2] + offset
    steps = [start + j * stride for j in range(pixels)] + [start + (pixels - 1) * stride + 1 + k
                                                            for k in range(box.halo)]
    at = np.tile(np.array(coords[:-1], dtype=np.int64), (len(steps), 1))
    at[:, -1] = steps
    return at


def read_im2col_wide(tensor: np.ndarray, box: ops.BoxDecl, coords: list[int], offsets: list[int],
                     o: ops.Op, who: str) -> np.ndarray:
    """The [PIXELS + halo, CHANNELS] tile the load writes into shared memory."""
    at, inside, first, last = _pixels(tensor.shape, box, coords, offsets, o, who)
    tile = np.zeros(box.shape, dtype=tensor.dtype)
    if box.oob == "nan":
        tile.view(np.uint16)[...] = TMA_NAN_HALFWORD
    if first < last and inside.any():
        c0 = coords[-1]
        tile[np.nonzero(inside)[0], first:last] = tensor[tuple(at[inside].T)][:, c0 + first:c0 + last]
    return tile


def elements_inside_wide(shape, box: ops.BoxDecl, coords: list[int], offsets: list[int], o: ops.Op,
                         who: str) -> int:
    """How many of the tile's elements lie inside the tensor: what a wide im2col prefetch brings
    into L2 (checked as the load would be)."""
    _, inside, first, last = _pixels(shape, box, coords, offsets, o, who)
    return int(inside.sum()) * max(0, last - first)


def _pixels(shape, box: ops.BoxDecl, coords: list[int], offsets: list[int], o: ops.Op, who: str):
    """(each row pixel's tensor coordinates but C, whether it lies inside, the channels [first,
    last) of the tile that do) of a wide copy at `coords` with its one wOffset."""
    _check(shape, box, coords, offsets[0], o, who)
    at = row(shape, box, coords, offsets[0])
    inside = np.all((at >= 0) & (at < np.array(shape[:-1])), axis=1)
    c0 = coords[-1]
    return at, inside, max(0, -c0), max(0, min(box.shape[1], shape[-1] - c0))


def _check(shape, box: ops.BoxDecl, coords: list[int], offset: int, o: ops.Op, who: str) -> None:
    if not 0 <= offset < tma.IM2COL_WIDE_OFFSET:
        raise ProtocolError("E509", f"wOffset {offset} of the wide im2col load through '{box.symbol}' is outside "
                            f"[0, {tma.IM2COL_WIDE_OFFSET - 1}]", o.span,
                            [who, "cp.async.bulk.tensor's wOffset is 16-bit unsigned, below 32"])
    pixels, stride = box.shape[0] - box.halo, box.im2col.strides[-1]
    lo, hi = box.im2col.lower[-1] + offset, shape[-2] - 1 + box.im2col.upper[-1] + offset
    start = coords[-2] + offset
    if start < lo:
        raise ProtocolError("E509", f"wide im2col load through '{box.symbol}' starts at W {start}, left of its "
                            f"bounding box [{lo}, {hi}]", o.span,
                            [who, "the PTX ISA allows it but only a figure shows what such a row holds"])
    end = start + (pixels - 1) * stride
    if end > hi:
        raise ProtocolError("E509", f"the {pixels} pixels of the wide im2col load through '{box.symbol}' run from "
                            f"W {start} to {end}, past its bounding box's end {hi}", o.span,
                            [who, "the PTX ISA text does not say where a W-only row goes on past the box; "
                                  "load fewer pixels per row"])
