"""What a TMA box and a tile-math statement do to the data, in NumPy.

A box at tile coordinates c covers, along each dim, elements c*extent + j*stride for
j < ceil(extent / stride); at element coordinates (`T@[r, c]`, `elements=True`), elements c + j*stride. Loads fill the part outside the tensor with zeros (or TMA's NaN
with `oob nan`); stores write only the part inside. Tile math follows the backend exactly: the
role's threads split the tile into 16-byte vectors round-robin, floats compute in f32 with
one rounding per operation (no FMA), i32 in i32.
"""

from __future__ import annotations

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from ..targets import tma
from ..targets.dtypes import DTYPES
from . import shares
from .conversions import convert
from .state import ProtocolError


def box_tile_bytes(box: ops.BoxDecl) -> tuple[tuple[int, ...], int]:
    """The tile one CTA holds of the box (half of a pair box), and its bytes."""
    shape = tuple(tma.tile_shape(box.held_shape(), box.strides))
    return shape, box.bytes(DTYPES[box.dtype].itemsize)


def _inside(dim: int, start: int, count: int, stride: int) -> tuple[int, int]:
    """The tile positions [first, last) whose elements start + j*stride lie in [0, dim).

    Coordinates may be negative (TMA coordinates are signed): elements before 0 are out of
    bounds exactly like elements past the end, filled on load and skipped on store."""
    first = min(count, -(-max(0, -start) // stride))
    last = max(first, min(count, -(-(dim - start) // stride)))
    return first, last


def _window(shape: tuple[int, ...], box: ops.BoxDecl, coords: list[int], elements: bool = False):
    """(tensor index, tile index) slices of the part of the box inside the tensor, per dim."""
    tensor_index, tile_index = [], []
    for dim, c, extent, stride in zip(shape, coords, box.shape, box.strides):
        start = c if elements else c * extent
        first, last = _inside(dim, start, -(-extent // stride), stride)
        tensor_index.append(slice(start + first * stride, start + last * stride, stride))
        tile_index.append(slice(first, last))
    return tuple(tensor_index), tuple(tile_index)


def box_region(tensor_shape: tuple[int, ...], box: ops.BoxDecl, coords: list[int],
               elements: bool = False) -> tuple | None:
    """The elements of the tensor a box at `coords` touches, as ((start, stop) per dim), or None
    when none is in bounds: the global memory a TMA load reads or a TMA store writes."""
    tensor_index, _ = _window(tensor_shape, box, coords, elements)
    if any(s.start >= s.stop for s in tensor_index):
        return None
    return tuple((s.start, s.stop - s.step + 1) for s in tensor_index)


def check_bulk_inside(tensor_shape: tuple[int, ...], box: ops.BoxDecl, coords: list[int], o: ops.Op,
                      who: str) -> None:
    """E477 when a bulk box's chunk at `coords` is not wholly inside the tensor: a bulk copy has
    no out-of-bounds handling, so on the GPU it would reach past the tensor (the backend traps)."""
    if all(0 <= c * n and c * n + n <= dim for c, n, dim in zip(coords, box.shape, tensor_shape)):
        return
    what = ("reduce" if isinstance(o, ops.BulkStore) and o.reduce else "load" if isinstance(o, ops.BulkLoad)
            else "prefetch" if isinstance(o, ops.BulkPrefetch) else "store")
    raise ProtocolError("E477", f"bulk {what} through box '{box.symbol}' at tile {list(coords)} lies outside "
                        f"tensor '{box.tensor}' of shape {list(tensor_shape)}", o.span,
                        [who, "a bulk copy has no out-of-bounds fill or clipping; on the GPU the kernel traps"])


def check_element_start(box: ops.BoxDecl, coords: list[int], o: ops.Op, who: str) -> None:
    """What the H100 faults on at element coordinates (targets/tma.py INNER_START_ALIGNMENT): an
    innermost start that is not a multiple of 16 bytes (E476), and a store or reduce at a negative
    coordinate (E461). Sema refuses both where it can see them; this is the definition."""
    step = max(1, tma.INNER_START_ALIGNMENT // DTYPES[box.dtype].itemsize)
    if coords[-1] % step:
        raise ProtocolError("E476", f"copy through box '{box.symbol}' at element {list(coords)}: the innermost "
                            f"start {coords[-1]} is not a multiple of {step} {box.dtype} elements (16 bytes)",
                            o.span, [who, "on the H100 the copy faults (illegal instruction)"])
    if isinstance(o, ops.TmaStore) and min(coords) < 0:
        what = f"TMA reduce '{o.reduce}'" if o.reduce else "TMA store"
        raise ProtocolError("E461", f"{what} through box '{box.symbol}' at negative element coordinates "
                            f"{list(coords)}", o.span, [who, "on the H100 the store faults (illegal instruction)"])


def read_box(tensor: np.ndarray, box: ops.BoxDecl, coords: list[int], elements: bool = False) -> np.ndarray:
    shape, _ = box_tile_bytes(box)
    tile = np.zeros(shape, dtype=tensor.dtype)
    if box.oob == "nan":
        tile.view(np.uint16)[...] = TMA_NAN_HALFWORD
    src, dst = _window(tensor.shape, box, coords, elements)
    tile[dst] = tensor[src]
    return tile


# The NaN that TMA writes for `oob nan`, measured on the H100: the 16-bit pattern 0x7FF7 in every
# half-word of the element (f32 0x7FF77FF7, f16/bf16 0x7FF7), not the canonical quiet NaN.
TMA_NAN_HALFWORD = 0x7FF7


def write_box(tensor: np.ndarray, box: ops.BoxDecl, coords: list[int], tile: np.ndarray, combine=None,
              elements: bool = False) -> None:
    """Write the in-bounds part of `tile`; with `combine(old, new)` (a TMA reduce), write what it
    makes of the tensor's elements and the tile's."""
    dst, src = _window(tensor.shape, box, coords, elements)
    tensor[dst] = tile[src] if combine is None else combine(tensor[dst], tile[src])


def _split(m, w, o: ops.TileAssign) -> tuple[int, int, int]:
    """(the role's threads, the warp's position in the role, elements per 16-byte vector)."""
    refs = [o.dest, *ex.buffer_refs(o.value)]
    width = 16 // max(DTYPES[m.boxes[m.buffers[r.name].box].dtype].itemsize for r in refs)
    return 32 * (w.role.last_warp - w.role.first_warp + 1), w.index - w.role.first_warp, width


def math_share(m, w, o: ops.TileAssign, ref: ex.BufferRef) -> tuple:
    """The elements of tile `ref` that this warp's share of `o` touches, for the race detector."""
    threads, position, width = _split(m, w, o)
    return shares.vectors(threads, position, width, m.tile(w, ref).shape)


def tile_math_share(m, w, o: ops.TileAssign) -> None:
    threads, position, width = _split(m, w, o)
    dest = m.tile(w, o.dest).reshape(-1)
    index = shares.vector_elements(dest.size, width, threads, position)
    with np.errstate(all="ignore"):
        value = _evaluate(m, w, o.value, index)
        dest[index] = _store_as(value, dest.dtype)


def _evaluate(m, w, e: ex.Expr, index: np.ndarray) -> np.ndarray:
    if isinstance(e, ex.BufferRef):
        return _compute_type(m.tile(w, e).reshape(-1)[index])
    if isinstance(e, ex.Const):
        return np.float32(e.value) if isinstance(e.value, float) else np.int32(e.value)
    if isinstance(e, ex.Param):
        value = m.launch.params[e.name]
        return np.float32(value) if isinstance(value, (float, np.floating)) else np.int32(value)
    if isinstance(e, ex.Neg):
        return -_evaluate(m, w, e.operand, index)
    if isinstance(e, ex.Cast):
        stored = _store_as(_evaluate(m, w, e.operand, index), m.launch.np_dtype(e.dtype))
        return _compute_type(stored)
    lhs, rhs = _evaluate(m, w, e.lhs, index), _evaluate(m, w, e.rhs, index)
    if np.result_type(lhs, rhs).kind == "f":
        lhs, rhs = np.float32(lhs) if np.isscalar(lhs) else lhs.astype(np.float32), rhs
        rhs = np.float32(rhs) if np.isscalar(rhs) else rhs.astype(np.float32)
        return np.asarray(FLOAT_OPS[e.op](lhs, rhs), dtype=np.float32)
    return np.asarray(INT_OPS[e.op](lhs, rhs), dtype=np.int32)


def _compute_type(values: np.ndarray) -> np.ndarray:
    """A tile's elements as computed: i32, or floats widened to f32 (interp/conversions.py)."""
    return values.astype(np.int32) if values.dtype.kind in "iu" else convert(values, np.float32)


def _store_as(values, dtype: np.dtype) -> np.ndarray:
    """A computed value converted to a tile's dtype: the cast's semantics of interp/conversions.py
    (toward zero and saturating into i32, NaN 0; round to nearest even into f16/bf16)."""
    return convert(values, dtype)


def float_node(m, e, child):
    """An f32 elementwise node whose operands `child(x)` evaluates (the caller owns the leaves that
    read tiles, accumulators or registers): constants, scalar parameters, -, casts and binary ops."""
    if isinstance(e, ex.Const):
        return np.float32(e.value)
    if isinstance(e, ex.Param):
        return np.float32(m.launch.params[e.name])
    if isinstance(e, ex.Neg):
        return -child(e.operand)
    if isinstance(e, ex.Cast):
        return _store_as(child(e.operand), m.launch.np_dtype(e.dtype)).astype(np.float32)
    return np.asarray(FLOAT_OPS[e.op](child(e.lhs), child(e.rhs)), dtype=np.float32)


FLOAT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
             "max": np.maximum, "min": np.minimum}
INT_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply,
           "/": lambda a, b: np.trunc(np.divide(a, b)).astype(np.int32),
           "max": np.maximum, "min": np.minimum}
