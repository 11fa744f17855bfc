"""Semantics of row math: a one-warpgroup role computing over rows, one row per thread.

Warp w of the role owns rows (Tensor Memory lanes) 32·(w % 4) .. +31, as tcgen05.ld.32x32b and
tcgen05.st.32x32b give them. A row register is an array of those 32 rows, [32, 1] for one value
per row or [32, N]; every value is f32 and broadcasts like NumPy, so a row value meets a tile
row column by column. Reading or writing Tensor Memory is a tcgen05 access: it needs the
after_thread_sync fence behind a wait (E417), and leaves the warp owing a before_thread_sync
fence ahead of its next arrive. Writes into shared memory are ordinary (generic proxy) stores
that a consumer through the async proxy (tcgen05.mma, a TMA store) sees only after
fence.proxy.async (E406).
"""

from __future__ import annotations

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from . import tcgen05
from .tiles import _store_as, float_node

ROWS_PER_WARP = 32


def row_decl(m, w, o: ops.RowDecl) -> None:
    w.rows[o.symbol] = np.full((ROWS_PER_WARP, max(o.cols, 1)), np.nan, np.float32)


def row_assign(m, w, o: ops.RowAssign) -> None:
    quarter = (w.index - w.role.first_warp) % 4
    rows = slice(ROWS_PER_WARP * quarter, ROWS_PER_WARP * (quarter + 1))
    dest_tmem, uses_tmem = o.stores_tmem(m.tmem_tiles), o.touches_tmem(m.tmem_tiles)
    if uses_tmem:
        tcgen05.check_after_fence(m, w, o)
    who = f"row math in {m.who(w)}"
    with np.errstate(all="ignore"):
        value = _evaluate(m, w, o.value, rows, (who, quarter, o.span))
    if isinstance(o.dest, ex.RowVar):
        w.rows[o.dest.name] = np.broadcast_to(value, w.rows[o.dest.name].shape).astype(np.float32)
    elif dest_tmem:
        m.races.access(tcgen05.tmem_key(m, w, o.dest), w.agent, True, ("lanes", quarter), o.span, who)
        target = tcgen05.tmem_tile(m, w, o.dest)
        target[rows] = np.broadcast_to(value, target[rows].shape)
    else:
        m.races.access(m.tile_key(w, o.dest), w.agent, True, ("lanes", quarter), o.span, who)
        target = m.tile(w, o.dest)
        target[rows] = _store_as(np.broadcast_to(value, target[rows].shape), target.dtype)
    if uses_tmem:
        w.tc_reads_unfenced = True


def _evaluate(m, w, e: ex.Expr, rows: slice, access) -> np.ndarray:
    """`e` over this warp's rows: [32, 1] per row, [32, N] per element, or a scalar."""
    if isinstance(e, ex.RowVar):
        return w.rows[e.name]
    if isinstance(e, ex.TmemRef):
        who, quarter, span = access
        m.races.access(tcgen05.tmem_key(m, w, e.tile), w.agent, False, ("lanes", quarter), span, who)
        return tcgen05.tmem_tile(m, w, e.tile)[rows, e.col:].astype(np.float32)
    if isinstance(e, ex.Call):
        return _call(m, w, e, rows, access)
    return float_node(m, e, lambda x: _evaluate(m, w, x, rows, access))


def _call(m, w, e: ex.Call, rows: slice, access) -> np.ndarray:
    x = _evaluate(m, w, e.args[0], rows, access)
    if e.func == "exp2":
        return np.exp2(x).astype(np.float32)
    if e.func == "rowmax":
        return x.max(axis=1, keepdims=True)
    if e.func == "rowsum":
        return x.sum(axis=1, keepdims=True, dtype=np.float32)
    limit = m.value(w, e.args[1])          # mask_cols: columns >= limit read as -inf
    return np.where(np.arange(x.shape[1]) < limit, x, np.float32(-np.inf)).astype(np.float32)


SEMANTICS = {ops.RowDecl: row_decl, ops.RowAssign: row_assign}
