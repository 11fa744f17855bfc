"""Semantics of prefetches: a tensor box into L2, a tensor-map descriptor into the cache.

Neither changes any value a program can observe: no shared memory, no barrier, no global write.
The interpreter still evaluates a box prefetch's coordinates as the hardware would (tile index
× box extent, which must fit the signed 32-bit coordinates TMA takes; a box outside the tensor is
fine, the hardware skips it), so an IR that would fault is caught here, and the trace shows the
prefetch on the TMA engine's track with the bytes that lie inside the tensor. L2 cache policies
(the box's `cache`) are hints only and have no semantics at all. A bulk box's prefetch
(cp.async.bulk.prefetch.L2) is an address range, which must lie inside the tensor like a bulk
copy's: E477 here, a trap on the GPU. An im2col box's prefetch (cp.async.bulk.prefetch.tensor
.im2col) names the pixels an im2col load at the same coordinates and offsets would read, and is
held to the same rules (E488: offsets in range, the start inside the pixel box).
"""

from __future__ import annotations

from math import prod

from ..ir import ops
from ..targets import tma
from ..targets.dtypes import DTYPES
from . import gather
from .im2col import elements_inside
from .im2col_wide import elements_inside_wide
from .state import ProtocolError
from .tiles import box_region, check_bulk_inside, check_element_start


def tma_prefetch(m, w, o: ops.TmaPrefetch | ops.BulkPrefetch) -> None:
    """A tiled box's (or a bulk chunk's, which must lie inside the tensor) prefetch."""
    box = m.boxes[o.box]
    coords = [m.value(w, c) for c in o.coords]
    elements = isinstance(o, ops.TmaPrefetch) and o.elements
    if isinstance(o, ops.BulkPrefetch):
        check_bulk_inside(m.launch.arrays[box.tensor].shape, box, coords, o, m.who(w))
    low, high = tma.TMA_COORDINATE_RANGE
    for c, extent in zip(coords, box.shape):
        element = c if elements else c * extent
        if not low <= element <= high:
            raise ProtocolError("E456", f"prefetch of box '{box.symbol}' at {'element' if elements else 'tile'} "
                                f"{c}: element coordinate {element} is outside the signed 32-bit range TMA takes",
                                o.span, [m.who(w)])
    if elements:
        check_element_start(box, coords, o, m.who(w))
    if m.trace is not None:
        region = box_region(m.launch.arrays[box.tensor].shape, box, coords, elements)
        inside = 0 if region is None else prod(-(-(stop - start) // s) for (start, stop), s in zip(region, box.strides))
        _trace(m, o, inside * DTYPES[box.dtype].itemsize)


def _trace(m, o: ops.TensorPrefetch, inside_bytes: int) -> None:
    """The prefetch on the TMA engine's track, with the bytes that lie inside the tensor."""
    if m.trace is not None:
        m.trace.transfer(m.cta, "prefetch", m.step, m.step + 1, inside_bytes, o.span.location() if o.span else "")


def im2col_prefetch(m, w, o: ops.Im2colPrefetch) -> None:
    """The pixels an im2col load at the same place would read, checked as its are."""
    box = m.boxes[o.box]
    coords = [m.value(w, c) for c in o.coords]
    inside = (elements_inside_wide if box.wide else elements_inside)(
        m.launch.arrays[box.tensor].shape, box, coords, [m.value(w, c) for c in o.offsets], o, m.who(w))
    _trace(m, o, inside * DTYPES[box.dtype].itemsize)


def gather_prefetch(m, w, o: ops.GatherPrefetch) -> None:
    """Four rows per gather4 prefetch, the rows its index tensor names: a hint like any prefetch,
    so no row is checked; only the column is a coordinate the index math computes (the rows are
    the index values, i32 already)."""
    box = m.boxes[o.box]
    coords = [m.value(w, c) for c in o.coords]
    low, high = tma.TMA_COORDINATE_RANGE
    if not low <= coords[1] * box.shape[1] <= high:
        raise ProtocolError("E456", f"prefetch of box '{box.symbol}' at column tile {coords[1]}: element "
                            f"coordinate {coords[1] * box.shape[1]} is outside the signed 32-bit range TMA takes",
                            o.span, [m.who(w)])
    if m.trace is not None:
        tensor = m.launch.arrays[box.tensor]
        inside = sum(len(range(*r[1])) for r in gather.regions(tensor.shape, box, gather.picked(m, w, o, box),
                                                               coords[1]))
        _trace(m, o, inside * DTYPES[box.dtype].itemsize)


SEMANTICS = {
    ops.TmaPrefetch: tma_prefetch, ops.BulkPrefetch: tma_prefetch, ops.Im2colPrefetch: im2col_prefetch,
    ops.GatherPrefetch: gather_prefetch,
    ops.TensorMapPrefetch: lambda m, w, o: None,   # the descriptor is read-only; caching it changes nothing
}
