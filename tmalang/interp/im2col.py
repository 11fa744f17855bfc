"""What an im2col load gathers (PTX ISA 5.5.4, im2col mode), in NumPy: the living definition.

The tensor is N, spatial dims S_1..S_k, C (outermost first; k = rank - 2). The box's pixel box
runs along spatial dim i from lower[i] to S_i - 1 + upper[i] (both ends included). A load at
element coordinates (n, p_1..p_k, c) with offsets (o_1..o_k) fills tile row j (j < pixels) with
the channels c .. c + channels - 1 of the j-th pixel of the walk that starts at (n, p): the walk
steps the innermost spatial position by its traversal stride; past the pixel box's end it goes
back to the box's lower corner and steps the next outer dim, and past the outermost spatial
dim it moves to the next image (n + 1). Pixel (n, p) is read at (n, p_1 + o_1, .., p_k + o_k):
whatever lies outside the tensor (padding, channels past C, images past N) is the box's oob fill.

The start pixel must lie in the pixel box (PTX: "the filter corner location must be within the
bounding box") and each offset in its unsigned range; the GPU does not check either, so the
interpreter reports E488 at the load instead of guessing what the hardware would fetch.
"""

from __future__ import annotations

import numpy as np

from ..ir import ops
from ..targets import tma
from .state import ProtocolError
from .tiles import TMA_NAN_HALFWORD


def pixel_box(shape: tuple[int, ...], box: ops.BoxDecl) -> list[tuple[int, int]]:
    """(first, last) position of the pixel box along each spatial dim, outermost first."""
    return [(lo, dim - 1 + hi) for dim, lo, hi in zip(shape[1:-1], box.im2col.lower, box.im2col.upper)]


def walk(shape: tuple[int, ...], box: ops.BoxDecl, start: list[int], count: int) -> np.ndarray:
    """The `count` pixels (n, p_1..p_k) of the walk from `start`, one row each."""
    bounds = pixel_box(shape, box)
    pixel = list(start)
    rows = np.empty((count, len(start)), dtype=np.int64)
    for j in range(count):
        rows[j] = pixel
        axis = len(bounds)               # the innermost spatial dim is pixel[len(bounds)]
        while True:
            if axis == 0:                # past the outermost spatial dim: the next image
                pixel[0] += 1
                break
            lo, hi = bounds[axis - 1]
            pixel[axis] += box.im2col.strides[axis - 1]
            if pixel[axis] <= hi:
                break
            pixel[axis] = lo
            axis -= 1
    return rows


def read_im2col(tensor: np.ndarray, box: ops.BoxDecl, coords: list[int], offsets: list[int],
                o: ops.Op, who: str) -> np.ndarray:
    """The [pixels, channels] tile the load writes into shared memory."""
    at, inside, first, last = _pixels(tensor.shape, box, coords, offsets, o, who)
    tile = np.zeros(box.shape, dtype=tensor.dtype)
    if box.oob == "nan":
        tile.view(np.uint16)[...] = TMA_NAN_HALFWORD
    if first < last and inside.any():
        c0 = coords[-1]
        tile[np.nonzero(inside)[0], first:last] = tensor[tuple(at[inside].T)][:, c0 + first:c0 + last]
    return tile


def elements_inside(shape, box: ops.BoxDecl, coords: list[int], offsets: list[int], o: ops.Op, who: str) -> int:
    """How many of the tile's elements lie inside the tensor: what an im2col prefetch brings into
    L2 (checked as the load would be)."""
    _, inside, first, last = _pixels(shape, box, coords, offsets, o, who)
    return int(inside.sum()) * max(0, last - first)


def _pixels(shape, box: ops.BoxDecl, coords: list[int], offsets: list[int], o: ops.Op, who: str):
    """(each pixel's tensor coordinates but C, whether it lies inside the tensor, the channels
    [first, last) of the tile that do) of a copy at `coords` (N, spatial..., C) with `offsets`."""
    _check(shape, box, coords, offsets, o, who)
    at = walk(shape, box, coords[:-1], box.shape[0]) + np.array([0, *offsets])
    inside = np.all((at >= 0) & (at < np.array(shape[:-1])), axis=1)
    c0 = coords[-1]
    return at, inside, max(0, -c0), max(0, min(box.shape[1], shape[-1] - c0))


def _check(shape, box: ops.BoxDecl, coords: list[int], offsets: list[int], o: ops.Op, who: str) -> None:
    rank = len(shape)
    low, high = tma.im2col_offset_range(rank)
    for axis, value in enumerate(offsets, start=1):
        if not low <= value <= high:
            raise ProtocolError("E488", f"im2col offset {value} along dim {axis} of '{box.tensor}' is outside "
                                f"[{low}, {high}] (rank {rank})", o.span,
                                [who, "the offsets are unsigned and 16, 8 or 5 bits wide by rank"])
    for axis, (p, (lo, hi)) in enumerate(zip(coords[1:-1], pixel_box(shape, box)), start=1):
        if not lo <= p <= hi:
            what = "prefetch" if isinstance(o, ops.TensorPrefetch) else "load"
            raise ProtocolError("E488", f"im2col {what} through '{box.symbol}' starts at {p} along dim {axis} of "
                                f"'{box.tensor}', outside its pixel box [{lo}, {hi}]", o.span,
                                [who, "the start pixel (the filter's corner) must lie in the pixel box"])
