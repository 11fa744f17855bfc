"""Which part of a tile (or of a tensor in global memory) one access touches, for the race detector.

A share names elements by what decides them on the GPU, never by a warp's absolute number, so
two roles that touch the same elements conflict however their warps are numbered:

    None                                      the whole tile (TMA, tensor-core operands)
    ("rows", start, stop)                     rows start .. stop-1 (an accumulator epilogue's rows,
                                              a multicast slice)
    ("lanes", q)                              rows 32q .. 32q+31 (a warp's Tensor Memory lanes)
    ("vectors", threads, position, width, row_elems, elems)
                                              tile math: the 16-byte vectors v (of `width`
                                              elements) with (v % threads) // 32 == position
    ("region", ((start, stop), ...))          a box's elements of a tensor in global memory; a
                                              dimension (start, stop, step) holds every step-th
                                              element from start (a box with element strides)
"""

from __future__ import annotations

import functools

import numpy as np


def vectors(threads: int, position: int, width: int, shape: tuple[int, ...]) -> tuple:
    """The share of the warp at `position` in a role of `threads` threads, for tile math."""
    elems = int(np.prod(shape))
    return "vectors", threads, position, width, elems // max(shape[0], 1), elems


def vector_elements(elements: int, width: int, threads: int, position: int) -> np.ndarray:
    """Flat indices of the elements the warp at `position` computes: tile math splits the tile
    into 16-byte vectors of `width` elements, dealt round-robin to the role's threads."""
    v = np.arange(elements // width)
    mine = v[(v % threads) // 32 == position]
    return (mine[:, None] * width + np.arange(width)).ravel()


def rows(start: int, stop: int) -> tuple:
    return "rows", start, stop


def _row_range(share: tuple) -> tuple[int, int] | None:
    if share[0] == "rows":
        return share[1], share[2]
    if share[0] == "lanes":
        return 32 * share[1], 32 * share[1] + 32
    return None


def overlaps(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None or a == b:
        return True
    return _overlaps(a, b)


@functools.lru_cache(maxsize=4096)
def _overlaps(a: tuple, b: tuple) -> bool:
    ra, rb = _row_range(a), _row_range(b)
    if ra and rb:
        return ra[0] < rb[1] and rb[0] < ra[1]
    if a[0] == b[0] == "region":
        return all(_dims_meet(da, db) for da, db in zip(a[1], b[1]))
    if a[0] == b[0] == "vectors" and (a[1], a[3], a[5]) == (b[1], b[3], b[5]):
        return a[2] == b[2]
    ma, mb = _mask(a, b), _mask(b, a)
    if ma is None or mb is None:
        return True                  # shares of unrelated kinds: assume they meet
    return bool((ma & mb).any())


def _mask(share: tuple, other: tuple) -> np.ndarray | None:
    """The share's elements as a flat mask of the tile, if either share says how big it is."""
    vec = share if share[0] == "vectors" else other if other[0] == "vectors" else None
    if vec is None:
        return None
    _, _, _, _, row_elems, elems = vec
    mask = np.zeros(elems, dtype=bool)
    if share[0] == "vectors":
        _, threads, position, width, _, _ = share
        mask[vector_elements(elems, width, threads, position)] = True
        return mask
    span = _row_range(share)
    if span is None:
        return None
    mask[span[0] * row_elems : span[1] * row_elems] = True
    return mask


def covers(a: tuple | None, b: tuple | None) -> bool:
    """Whether share a holds every element of share b (so a write to a hides b's access)."""
    if a is None or a == b:
        return True
    if b is None:
        return False
    ra, rb = _row_range(a), _row_range(b)
    if ra and rb:
        return ra[0] <= rb[0] and rb[1] <= ra[1]
    if a[0] == b[0] == "region":
        return all(_dim_covers(da, db) for da, db in zip(a[1], b[1]))
    return False


def _step(dim: tuple) -> int:
    return dim[2] if len(dim) > 2 else 1


def _dims_meet(a: tuple, b: tuple) -> bool:
    """Whether two dimensions of regions share an element: their ranges meet and, with steps,
    some element of one's progression is one of the other's."""
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if lo >= hi:
        return False
    sa, sb = _step(a), _step(b)
    if sa == sb == 1:
        return True
    first = lo + (a[0] - lo) % sa          # a's first element at or after lo
    return any((x - b[0]) % sb == 0 for x in range(first, hi, sa))


def _dim_covers(a: tuple, b: tuple) -> bool:
    """Whether every element of dimension b is one of a's."""
    sa, sb = _step(a), _step(b)
    inside = a[0] <= b[0] and b[1] <= a[1]
    return inside and (sa == 1 or (sb % sa == 0 and (b[0] - a[0]) % sa == 0))
