"""Tensor-core semantics: register accumulators, wgmma and accumulator epilogues.

An accumulator of R rows lives as R / 64 float32 slices of [64, C], one per warpgroup of its
role. As on the GPU, warp j of a warpgroup holds rows 16j .. 16j + 15 of its slice (the wgmma
m64nNk16 fragment), so each warp executes its own share of every collective op. wgmma reads
its smem operands asynchronously: the reads belong to an agent of the race detector that the
issuing warp acquires only at `wgmma_wait`, so releasing a slot before the wait is a race.
Products of bf16/f16 values are exact in f32; the sum order differs from the tensor cores', so
results agree with the GPU to rounding, not bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from . import shares
from .meet import barrier
from .state import ProtocolError


from .conversions import convert
from .tiles import _store_as, float_node


def rows_of(w) -> tuple[int, slice]:
    """(warpgroup, rows of its slice) this warp holds."""
    offset = w.index - w.role.first_warp
    return offset // 4, slice(16 * (offset % 4), 16 * (offset % 4) + 16)


def acc_slice(m, w, name: str) -> np.ndarray:
    group, _ = rows_of(w)
    return m.accumulators[(w.role.symbol, name, group)]


def acc_decl(m, w, o: ops.AccDecl) -> None:
    group, _ = rows_of(w)
    m.accumulator_decls[(w.role.symbol, o.symbol)] = o
    width = o.shape[1] // o.parts    # a short accumulator's last warpgroup holds its rows up to R: the
    rows = min(64, o.shape[0] - 64 * group) if o.parts == 1 else 64   # wgmma's others are no program's
    m.accumulators.setdefault((w.role.symbol, o.symbol, group), np.zeros((rows, width), np.float32))


def rounded_to(m, w, name: str, values: np.ndarray) -> np.ndarray:
    """Values written into accumulator `name`, rounded to its dtype: a bf16/f16 accumulator holds
    an A fragment (kept as f32 arrays whose values are exactly representable in that dtype)."""
    dtype = m.accumulator_decls[(w.role.symbol, name)].dtype
    return values if dtype == "f32" else _store_as(values, m.launch.np_dtype(dtype)).astype(np.float32)


def columns_of(m, w, name: str) -> slice:
    """The accumulator's columns this warp's warpgroup holds: all, or its part of a `by columns` one."""
    return m.accumulator_decls[(w.role.symbol, name)].columns_of(rows_of(w)[0])


def split_by_columns(m, w, name: str) -> bool:
    return m.accumulator_decls[(w.role.symbol, name)].parts > 1


def touch_registers(m, w, o, names: set[str]) -> None:
    """Ordinary instructions read or write accumulators `names`: no wgmma still in flight may
    write them or read them as its register A (other accumulators' wgmmas may run on)."""
    in_flight = [*w.mma_open, *(agent for g in w.mma_groups for agent in g)]
    busy = sorted(n for agent in in_flight for n in w.mma_targets.get(agent, ()) if n in names)
    if busy:
        raise ProtocolError("E413", f"accumulator '{busy[0]}' is accessed while wgmma operations on it are in "
                            "flight", o.span, [m.who(w), "wait with wgmma_wait before reading or resetting it"])
    w.acc_dirty = True


def acc_zero(m, w, o: ops.AccZero) -> None:
    touch_registers(m, w, o, {o.acc})
    _, rows = rows_of(w)
    acc_slice(m, w, o.acc)[rows] = 0


def wgmma(m, w, o: ops.Wgmma) -> None:
    if w.acc_dirty:
        raise ProtocolError("E414", "wgmma after ordinary instructions touched the accumulator, with no "
                            "wgmma.fence in between", o.span, [m.who(w)])
    group, rows = rows_of(w)
    b = m.matrix(w, o.b)
    agent = m.races.issue(w.agent)
    for ref in (o.a, o.b) if isinstance(o.a, ex.BufferRef) else (o.b,):
        m.races.access(m.tile_key(w, ref), agent, False, None, o.span, f"wgmma issued by {m.who(w)}")
    split = split_by_columns(m, w, o.acc)      # every warpgroup: the same A rows, its own B columns
    if isinstance(o.a, ex.BufferRef):
        a = m.matrix(w, o.a)
        a_rows = (a.T if o.km else a)[0 if split else 64 * group:][rows].astype(np.float32)   # km: a is [K, R]
    else:
        a_rows = _register_operand(m, w, o)[rows]
    b = (b if o.kn else b.T).astype(np.float32)     # kn: b is [K, C]
    acc_slice(m, w, o.acc)[rows] += a_rows @ b[:, columns_of(m, w, o.acc)]
    w.mma_open.append(agent)
    w.mma_written[agent] = o.acc
    w.mma_targets[agent] = {o.acc} | o.register_a()


def _register_operand(m, w, o: ops.Wgmma) -> np.ndarray:
    """A from registers: accumulator p rounded to the operand dtype. p must be complete: a wgmma
    still writing it would race with this one's register reads (E413)."""
    source = o.a.name if isinstance(o.a, ex.AccRef) else o.a.operand.name
    in_flight = [*w.mma_open, *(agent for g in w.mma_groups for agent in g)]
    if any(w.mma_written.get(agent) == source for agent in in_flight):
        raise ProtocolError("E413", f"wgmma reads accumulator '{source}' while wgmma operations writing it "
                            "are in flight", o.span, [m.who(w), "wait with wgmma_wait before using it as an operand"])
    if isinstance(o.a, ex.AccRef):
        return acc_slice(m, w, source)       # a 16-bit accumulator: rounded when row math wrote it
    return _store_as(acc_slice(m, w, source), m.launch.np_dtype(o.a.dtype)).astype(np.float32)


def wgmma_fence(m, w, o) -> None:
    w.acc_dirty = False


def wgmma_commit(m, w, o) -> None:
    w.mma_groups.append(w.mma_open)
    w.mma_open = []


def wgmma_wait(m, w, o: ops.WgmmaWait):
    """Retire groups, then meet the warpgroup: wgmma.wait_group is .sync.aligned, and an MMA is one
    warpgroup operation, so after the wait every warp knows all four warps' MMAs finished."""
    while len(w.mma_groups) > o.pending:
        for agent in w.mma_groups.pop(0):
            m.races.acquire_transfer(w.agent, agent)
            w.mma_targets.pop(agent, None)
            w.mma_written.pop(agent, None)
    offset = w.index - w.role.first_warp
    first = w.index - offset % 4
    members = [(m.cta, i) for i in range(first, first + 4)]
    yield from barrier(m, w, o, members, "wgmma.wait_group across the warpgroup")


def acc_store(m, w, o: ops.AccStore) -> None:
    """The warp's rows of `dest` = the epilogue over its accumulator fragment; with `acc[col]`,
    over the dest-wide block of columns starting at `col`."""
    acc = next(e for e in ex.walk(o.value) if isinstance(e, ex.AccRef))
    touch_registers(m, w, o, {acc.name})
    group, rows = rows_of(w)
    dest = m.matrix(w, o.dest)
    split = split_by_columns(m, w, acc.name)
    held = columns_of(m, w, acc.name)        # the dest columns this warpgroup writes
    columns = slice(acc.col, acc.col + dest.shape[-1]) if not split else slice(0, held.stop - held.start)
    first = 0 if split else 64 * group
    block = slice(first + rows.start, first + rows.stop)
    at = (block, held if split else slice(None))
    share = (("region", ((block.start, block.stop), (held.start, held.stop))) if split      # by position in the role
             else shares.rows(block.start, block.stop))
    who = f"epilogue in {m.who(w)}"
    m.races.access(m.tile_key(w, o.dest), w.agent, True, share, o.span, who)
    for ref in {r.name: r for r in ex.buffer_refs(o.value)}.values():
        m.races.access(m.tile_key(w, ref), w.agent, False, share if m.matrix(w, ref).ndim > 1 else None, o.span, who)
    with np.errstate(all="ignore"):
        value = _evaluate(m, w, o.value, acc_slice(m, w, acc.name)[rows, columns], at)
        dest[at] = _store_as(np.broadcast_to(value, dest[at].shape), dest.dtype)


def _evaluate(m, w, e: ex.Expr, acc: np.ndarray, at: tuple[slice, slice]):
    """The epilogue over this warp's elements `at` (rows, columns); a row vector broadcasts over them."""
    if isinstance(e, (ex.AccRef, ex.TmemRef)):
        return acc
    if isinstance(e, ex.RowVar):      # the warp's 16 rows; a short accumulator's warp holds fewer
        return w.rows[e.name][:acc.shape[0]]
    if isinstance(e, ex.BufferRef):
        tile = convert(m.matrix(w, e), np.float32)     # widened as cvt.f32.f16/bf16 do
        return tile[None, at[1]] if tile.ndim == 1 else tile[at]
    return float_node(m, e, lambda x: _evaluate(m, w, x, acc, at))


SEMANTICS = {
    ops.AccDecl: acc_decl, ops.AccZero: acc_zero, ops.Wgmma: wgmma, ops.WgmmaFence: wgmma_fence,
    ops.WgmmaCommit: wgmma_commit, ops.WgmmaWait: wgmma_wait, ops.AccStore: acc_store,
}
