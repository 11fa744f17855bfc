"""Semantics of row math: each warp computes over the rows it holds.

Two layouts. In a tcgen05 role (one warpgroup), warp w owns rows (Tensor Memory lanes)
32·(w % 4) .. +31, as tcgen05.ld.32x32b and tcgen05.st.32x32b give them. In a wgmma role (one
that declares register accumulators), warp w of warpgroup g owns rows 64g + 16(w % 4) .. +15 of
the role's accumulators, as the m64nNk16 fragment places them (interp/mma.py): an accumulator
is the N-column row value, and the four threads that share a row agree on its reductions (the
GPU combines them with shuffles). A row register is an array of the warp's rows, [rows, 1] for
one value per row or [rows, N]; every value is f32 and broadcasts like NumPy, so a row value
meets a tile row column by column, and an smem column vector [C] (a wgmma role's) is one
row [1, C] that every row meets. Reading or writing Tensor Memory is a tcgen05 access: it
needs the after_thread_sync fence behind a wait (E417), and leaves the warp owing a
before_thread_sync fence ahead of its next arrive. Reading or writing an accumulator under an
in-flight wgmma is E413. Writes into shared memory are ordinary (generic proxy) stores that a
consumer through the async proxy (an MMA, a TMA store) sees only after fence.proxy.async (E406).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from . import mma, shares, tcgen05, tmem_init
from .tiles import _store_as, float_node

LANE_ROWS = 32         # rows of a warp in a tcgen05 role
FRAGMENT_ROWS = 16     # rows of a warp in a wgmma role


@dataclass
class Held:
    """The rows a warp holds: `rows` index its slice (a tmem tile's lanes, or the rows of its
    warpgroup's 64-row accumulator slice); `first` is the first one's row in the role's tile."""
    rows: slice
    first: int
    share: object
    fragment: bool
    per_row: bool = False   # the statement writes a row register: smem [R] tiles are row vectors


def holds_fragments(w) -> bool:
    if w.fragment_rows is None:
        w.fragment_rows = any(isinstance(o, ops.AccDecl) for o in ops.walk(w.role.body))
    return w.fragment_rows


def held_rows(w) -> Held:
    if holds_fragments(w):
        group, rows = mma.rows_of(w)
        first = 64 * group + rows.start
        return Held(rows, first, shares.rows(first, first + FRAGMENT_ROWS), True)
    quarter = (w.index - w.role.first_warp) % 4
    return Held(slice(LANE_ROWS * quarter, LANE_ROWS * (quarter + 1)), LANE_ROWS * quarter, ("lanes", quarter), False)


def row_decl(m, w, o: ops.RowDecl) -> None:
    held = FRAGMENT_ROWS if holds_fragments(w) else LANE_ROWS
    w.rows[o.symbol] = np.full((held, max(o.cols, 1)), np.nan, np.float32)


def row_assign(m, w, o: ops.RowAssign) -> None:
    held = held_rows(w)
    held.per_row = held.fragment and isinstance(o.dest, ex.RowVar)
    dest_tmem, uses_tmem = o.stores_tmem(m.tmem_tiles), o.touches_tmem(m.tmem_tiles)
    if uses_tmem:
        tcgen05.check_after_fence(m, w, o)
    accumulators = ops.accumulators_touched(o)
    if accumulators:
        mma.touch_registers(m, w, o, accumulators)
    who = f"row math in {m.who(w)}"
    with np.errstate(all="ignore"):
        value = _evaluate(m, w, o.value, held, (who, o.span))
    reads = tmem_init.tmem_reads(m, w, o.value)
    if not dest_tmem:   # the values leave Tensor Memory: each must have been written (E422)
        for tile, stage, col in reads:
            tmem_init.read(m, tile, stage, held.rows, col, None, "row math (tcgen05.ld) reads", o.span, who)
    if isinstance(o.dest, ex.RowVar):
        w.rows[o.dest.name] = np.broadcast_to(value, w.rows[o.dest.name].shape).astype(np.float32)
    elif isinstance(o.dest, ex.AccRef):
        target = mma.acc_slice(m, w, o.dest.name)
        target[held.rows] = mma.rounded_to(m, w, o.dest.name, np.broadcast_to(value, target[held.rows].shape))
    elif dest_tmem:
        m.races.access(tcgen05.tmem_key(m, w, o.dest), w.agent, True, held.share, o.span, who)
        target = tcgen05.tmem_tile(m, w, o.dest)
        target[held.rows] = np.broadcast_to(value, target[held.rows].shape)
        tmem_init.stored(m, o.dest, m.value(w, o.dest.index), held.rows, tmem_init.carried(m, reads, held.rows))
    else:
        m.races.access(m.tile_key(w, o.dest), w.agent, True, held.share, o.span, who)
        _store_rows(m.matrix(w, o.dest), held, value)


def _store_rows(target: np.ndarray, held: Held, value: np.ndarray) -> None:
    """A lane role writes its rows of a [128, N] tile; a fragment role one value per row into
    an [R] (or [1, R]) row vector."""
    if held.fragment:
        flat = target.reshape(-1)
        flat[held.first:held.first + FRAGMENT_ROWS] = _store_as(np.broadcast_to(value, (FRAGMENT_ROWS, 1))[:, 0],
                                                                flat.dtype)
    else:
        target[held.rows] = _store_as(np.broadcast_to(value, target[held.rows].shape), target.dtype)


def _evaluate(m, w, e: ex.Expr, held: Held, access) -> np.ndarray:
    """`e` over this warp's rows: [rows, 1] per row, [rows, N] per element, or a scalar."""
    if isinstance(e, ex.RowVar):
        return w.rows[e.name]
    if isinstance(e, ex.AccRef):
        return mma.acc_slice(m, w, e.name)[held.rows].astype(np.float32)
    if isinstance(e, ex.BufferRef):      # a column vector [C]: one value per column, every row alike
        who, span = access
        m.races.access(m.tile_key(w, e), w.agent, False, held.share, span, who)
        values = m.matrix(w, e).reshape(-1)
        if held.per_row:                 # a row vector [R] into a row register: one value per row
            return values[held.first:held.first + FRAGMENT_ROWS].reshape(-1, 1).astype(np.float32)
        return values.reshape(1, -1).astype(np.float32)
    if isinstance(e, ex.TmemRef):
        who, span = access
        m.races.access(tcgen05.tmem_key(m, w, e.tile), w.agent, False, held.share, span, who)
        return tcgen05.tmem_tile(m, w, e.tile)[held.rows, e.col:].astype(np.float32)
    if isinstance(e, ex.Call):
        return _call(m, w, e, held, access)
    return float_node(m, e, lambda x: _evaluate(m, w, x, held, access))


def _call(m, w, e: ex.Call, held: Held, access) -> np.ndarray:
    x = _evaluate(m, w, e.args[0], held, access)
    if e.func == "exp2":
        return np.exp2(x).astype(np.float32)
    if e.func == "log2":
        return np.log2(x).astype(np.float32)
    if e.func == "rowmax":
        return x.max(axis=1, keepdims=True)
    if e.func == "rowsum":
        return x.sum(axis=1, keepdims=True, dtype=np.float32)
    limit = _limit(m, w, e.args[1])
    columns = np.arange(x.shape[1])[None, :]
    if e.func == "mask_cols":            # columns >= limit read as -inf
        keep = columns < limit
    elif e.func == "mask_left":          # columns < limit read as -inf
        keep = columns >= limit
    elif e.func == "mask_above":         # columns > row + limit read as -inf
        keep = columns <= held.first + np.arange(x.shape[0])[:, None] + limit
    else:                                # mask_below: columns < row + limit read as -inf
        keep = columns >= held.first + np.arange(x.shape[0])[:, None] + limit
    return np.where(keep, x, np.float32(-np.inf)).astype(np.float32)


def _limit(m, w, e: ex.Expr):
    """A mask's limit: an integer, or [rows, 1] integers from a row register (`^hi - n`), each
    value converted toward zero, saturating, NaN as 0 (cvt.rzi.sat, as the GPU converts it)."""
    per_row = ex.row_limit(e)
    if per_row is None:
        return m.value(w, e)
    register, op, rest = per_row
    values = np.nan_to_num(w.rows[register.name][:, :1].astype(np.float64), nan=0.0)
    rows = np.clip(np.trunc(values), -2 ** 31, 2 ** 31 - 1).astype(np.int64)
    if rest is None:
        return rows
    return rows + m.value(w, rest) if op == "+" else rows - m.value(w, rest)


SEMANTICS = {ops.RowDecl: row_decl, ops.RowAssign: row_assign}
