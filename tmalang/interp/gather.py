"""Gathered copies (tile::gather4 / tile::scatter4): tile row j of box X ([R, W]) at position p
and column tile c is tensor row idx[p*R + j], columns c*W .. c*W + W - 1.

The issuing thread reads the indices when it issues the copy. A position outside the index
tensor reads no index and names no row: the tile row is filled (the box's oob fill) on a load
and written nowhere on a store, as the backend's row just past the tensor's end is on the GPU. An
index outside the tensor's rows is E497 here: on the GPU it names that same row, so nothing outside the
tensor is touched, but a routing index that names no row is a bug this definition reports at
the copy. Two tile rows of one scatter naming the same row is E498: TMA writes them in no
defined order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import ops
from .state import ProtocolError
from .tiles import box_region, box_tile_bytes, read_box, write_box

NO_ROW = -1   # a position past the index tensor: outside every tensor


def picked(m, w, o: ops.GatherLoad | ops.ScatterStore | ops.GatherPrefetch, box: ops.BoxDecl) -> list[int]:
    """The index of each tile row, read as the issuing thread reads it: NO_ROW past the index tensor."""
    index = m.launch.arrays[o.gather]
    count, position = box.shape[0], m.value(w, o.coords[0])
    return [int(index[p]) if 0 <= p < index.shape[0] else NO_ROW
            for p in range(position * count, position * count + count)]


def rows(m, w, o: ops.GatherLoad | ops.ScatterStore, box: ops.BoxDecl) -> list[int]:
    """The tensor row of each tile row of a copy, NO_ROW past the index tensor; E497 for an index
    outside the tensor's rows."""
    extent = m.launch.arrays[box.tensor].shape[0]
    out = picked(m, w, o, box)
    first = box.shape[0] * m.value(w, o.coords[0])
    for j, row in enumerate(out):
        p = first + j
        if 0 <= p < m.launch.arrays[o.gather].shape[0] and not 0 <= row < extent:
            what = "load" if isinstance(o, ops.GatherLoad) else "store"
            raise ProtocolError("E497", f"gathered {what} through box '{box.symbol}': {o.gather}[{p}] = {row} "
                                f"is not a row of tensor '{box.tensor}' (0..{extent - 1})", o.span,
                                [m.who(w), "on the GPU TMA " + ("fills that tile row (oob)" if what == "load" else
                                 "writes that tile row nowhere") + "; check the routing indices"])
    return out


def _row_box(box: ops.BoxDecl) -> ops.BoxDecl:
    """One row of the box: what each of the four coordinates of a gather4 names."""
    return replace(box, shape=[1, box.shape[1]], mode="tiled")


def regions(tensor_shape, box: ops.BoxDecl, picked: list[int], column: int) -> list[tuple]:
    """The in-bounds part of each named row, for the global-memory race detector."""
    one = _row_box(box)
    found = (box_region(tensor_shape, one, [r, column]) for r in picked if r != NO_ROW)
    return [r for r in found if r is not None]


def read_load(m, w, o: ops.GatherLoad, box: ops.BoxDecl, coords: list[int]):
    """(the tile, the regions read, no steps) of a gathered load: tile rows from the rows its
    index tensor names."""
    tensor, named = m.launch.arrays[box.tensor], rows(m, w, o, box)
    return read_rows(tensor, box, named, coords[1]), regions(tensor.shape, box, named, coords[1]), ()


def read_rows(tensor: np.ndarray, box: ops.BoxDecl, picked: list[int], column: int) -> np.ndarray:
    shape, _ = box_tile_bytes(box)
    one = _row_box(box)
    return np.concatenate([read_box(tensor, one, [r, column]) for r in picked]).reshape(shape)


def check_distinct(m, w, o: ops.ScatterStore, box: ops.BoxDecl, picked: list[int]) -> None:
    seen: dict[int, int] = {}
    for j, r in enumerate(picked):
        if r != NO_ROW and r in seen:
            raise ProtocolError("E498", f"scattered store through box '{box.symbol}' writes row {r} of tensor "
                                f"'{box.tensor}' twice (tile rows {seen[r]} and {j})", o.span,
                                [m.who(w), "TMA writes the rows of one copy in no defined order: which one lands "
                                 "is undefined; make the indices of one store distinct"])
        seen[r] = j


def write_rows(tensor: np.ndarray, box: ops.BoxDecl, picked: list[int], column: int, tile: np.ndarray) -> None:
    one = _row_box(box)
    for j, r in enumerate(picked):
        if r != NO_ROW:
            write_box(tensor, one, [r, column], tile[j:j + 1])
