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
    ("region", ((start, stop), ...))          a box's elements of a tensor in global memory
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
        return all(s0 < e1 and s1 < e0 for (s0, e0), (s1, e1) in zip(a[1], b[1]))
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
        return all(s0 <= s1 and e1 <= e0 for (s0, e0), (s1, e1) in zip(a[1], b[1]))
    return False
