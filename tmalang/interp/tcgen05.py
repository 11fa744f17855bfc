"""Semantics of the Blackwell tensor-core ops: Tensor Memory, tcgen05.mma, commit, and epilogues.

Tensor Memory is the target's lanes x columns (128 x 512 on sm_100a) of f32 per CTA, poisoned with NaN until written. A
`tmem` tile of [M, N] occupies lanes 0..M-1 and its columns, stage after stage `pitch()` columns
apart; every tcgen05 op's base column must be a multiple of 4 (E419).

tcgen05.mma is asynchronous: issuing one only queues it on the issuing warp, with an agent of its
own for the race detector. `tcgen05_commit` hands the warp's queue to the engine as one
transfer; when the engine completes it, every queued MMA up to the commit runs in issue order
(reading its smem operands and writing Tensor Memory, as that agent), and the commit arrives
once on its barrier, releasing the MMAs' clocks to the phase. A later commit completing first
runs the earlier MMAs too: tcgen05 operations of one thread complete in order.

An epilogue from Tensor Memory reads the warp's quarter of the lanes, 32·(warp % 4) .. +31.
The thread-sync fences of PTX ISA 9.7.16.6.4 are checked (E417): after a wait or sync, a tcgen05
op needs `tcgen05.fence::after_thread_sync` first; after a tcgen05.ld, an arrive or sync needs
`tcgen05.fence::before_thread_sync` first.
"""

from __future__ import annotations

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from . import pairs, tmem_init
from .meet import settle
from .mma import _evaluate  # the register epilogue's expression semantics, shared
from .races import join
from .state import ProtocolError, Transfer
from .tiles import _store_as

def tmem_tile(m, w, ref: ex.BufferRef) -> np.ndarray:
    """The cells of stage `ref.index` of a tmem tile, for the tcgen05 op `w` runs (mma, cp, ld or
    st), whose base column must be aligned (E419)."""
    decl = m.tmem_tiles[ref.name]
    start = decl.stage_column(m.value(w, ref.index))
    check_aligned(m, w, f"{ref.name}[{m.value(w, ref.index)}]", start)
    return m.tmem[: decl.shape[0], start : start + decl.shape[1]]


def check_aligned(m, w, what: str, column: int) -> None:
    """A Tensor Memory base off the 4-column granule: the hardware reports a misaligned address."""
    if column % ops.TMEM_GRANULE:
        raise ProtocolError("E419", f"{w.current.name} uses Tensor Memory at column {column} ({what}), which "
                            f"is not a multiple of {ops.TMEM_GRANULE}", w.current.span,
                            [m.who(w), "tcgen05.mma, cp, ld and st need an aligned base column (a misaligned "
                             "address faults on the device); plan_tmem aligns every tile it places"])


def tmem_key(m, w, ref: ex.BufferRef) -> tuple:
    return "tmem:" + ref.name, m.value(w, ref.index), m.cta


def synchronised(w) -> None:
    """A wait or sync completed: tcgen05 ops after it need the after_thread_sync fence."""
    w.tc_after_sync = True


def check_signal(m, w, o) -> None:
    """An arrive or sync: Tensor Memory reads before it need the before_thread_sync fence."""
    if w.tc_reads_unfenced:
        raise ProtocolError("E417", "an arrive or sync follows tcgen05.ld with no tcgen05.fence::before_thread_sync",
                            o.span, [m.who(w), "the signal could overtake the Tensor Memory reads"])


def check_after_fence(m, w, o) -> None:
    if w.tc_after_sync:
        raise ProtocolError("E417", "a tcgen05 operation follows a wait or sync with no "
                            "tcgen05.fence::after_thread_sync", o.span,
                            [m.who(w), "it is not ordered after what the synchronisation observed"])


def fence(m, w, kind: str) -> None:
    if kind == "tcgen05_after_thread_sync":
        w.tc_after_sync = False
    elif kind == "tcgen05_before_thread_sync":
        w.tc_reads_unfenced = False


def _flag_key(m, ref: ex.BufferRef) -> tuple:
    """Whether the next MMA into a tile accumulates is one flag per tile name (every stage), as
    the backend keeps it in the issuing thread: a tile's first MMA overwrites, `t.d = 0` re-arms."""
    return ref.name, m.cta


def tmem_zero(m, w, o: ops.TmemZero) -> None:
    m.tmem_accumulating.discard(_flag_key(m, o.tile))


def tcgen05_mma(m, w, o: ops.Tcgen05Mma) -> None:
    """D (+)= A · Bᵀ for each CTA the MMA works for. A CTA pair's MMA (cta_group 2) reads B as
    the two CTAs' halves one above the other, and each CTA's A into that CTA's Tensor Memory."""
    check_after_fence(m, w, o)
    ctas = pairs.pair(m)
    overwrite = _flag_key(m, o.d) not in m.tmem_accumulating
    m.tmem_accumulating.add(_flag_key(m, o.d))
    stage, who = m.value(w, o.d.index), f"tcgen05.mma issued by {m.who(w)}"
    b = np.concatenate([c.tile(w, o.b) for c in ctas])
    a, d = [c.tile(w, o.a) for c in ctas], [tmem_tile(c, w, o.d) for c in ctas]
    operands = [(c, c.tile_key(w, ref), ref.name) for c in ctas for ref in (o.a, o.b)]

    def compute():
        for c, a_c, d_c in zip(ctas, a, d):
            tmem_init.mma_into(c, o, stage, overwrite, who)
            product = _as_input(a_c) @ _as_input(b).T
            d_c[...] = product if overwrite else d_c + product

    _queue(m, w, o, operands, ctas, compute, "tcgen05.mma")


def tcgen05_cp(m, w, o: ops.Tcgen05Cp) -> None:
    """Tensor Memory columns col.. of tile d take the f32 smem tile, lane i row i, bit for bit;
    the next MMA into d adds onto them."""
    check_after_fence(m, w, o)
    m.tmem_accumulating.add(_flag_key(m, o.d))
    source = m.tile(w, o.source)
    dest = tmem_tile(m, w, o.d)[:, o.col : o.col + source.shape[1]]
    check_aligned(m, w, f"{o.d.name} + {o.col}", m.tmem_tiles[o.d.name].stage_column(m.value(w, o.d.index)) + o.col)
    copied = tmem_init.cells(m, o.d, m.value(w, o.d.index), o.col, source.shape[1])

    def compute():
        dest[...] = source
        tmem_init.wrote(m, copied)

    _queue(m, w, o, [(m, m.tile_key(w, o.source), o.source.name)], [m], compute, "tcgen05.cp")


def _queue(m, w, o, operands: list, ctas: list, compute, what: str) -> None:
    """Issue an asynchronous tensor-core op: it reads its smem `operands` and writes `o.d` in
    each of `ctas` when a later commit of this warp completes, after the warp's earlier ones."""
    agent = m.races.issue(w.agent)
    join(m.races.clock(agent), w.tc_summary)   # one thread's tcgen05 ops complete in issue order
    join(w.tc_summary, m.races.clock(agent))
    who = f"{what} issued by {m.who(w)}"   # unfenced generic writes of its operands: races.access, E406
    stage = m.value(w, o.d.index)   # at issue: the warp's variables move on before the op runs
    written = [tmem_key(c, w, o.d) for c in ctas]

    def run():
        for c in ctas:
            _check_allocated(c, stage, o)
        for _, tile_key, _ in operands:
            m.races.access(tile_key, agent, False, None, o.span, who)
        for key in written:
            m.races.access(key, agent, True, None, o.span, who)
        compute()

    w.tc_queue.append((w.tc_issued, run))
    w.tc_issued += 1


def _check_allocated(c, stage: int, o) -> None:
    decl = c.tmem_tiles[o.d.name]
    end = decl.stage_column(stage) + decl.shape[1]
    if c.tmem_columns < end:
        raise ProtocolError("E418", f"{o.name} writes columns up to {end} of CTA {c.cta}'s Tensor Memory, "
                            f"which holds {c.tmem_columns}", o.span,
                            [("tcgen05.alloc the columns in every CTA the MMA writes (with cta_group 2, both "
                              "CTAs of the pair)")])


def _as_input(tile: np.ndarray) -> np.ndarray:
    """Operand values as the tensor cores read them: f32 tiles as tf32, whose 13 low mantissa
    bits the multiplier ignores; narrower types exactly."""
    if tile.dtype == np.float32:
        return (tile.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return tile.astype(np.float32)


def tcgen05_commit(m, w, o: ops.Tcgen05Commit) -> None:
    """One arrival, once every tcgen05 op this warp issued before it has run: on the barrier of
    this CTA, or with cta_group 2 on the barrier at the same offset in both CTAs of the pair;
    a `tcgen05_commit_cluster` (.multicast::cluster) on it in every CTA of its set (ctaMask)."""
    ctas = m.members(o.ctas) if isinstance(o, ops.Tcgen05CommitCluster) else pairs.pair(m)
    targets = [(c, c.barrier(w, o.barrier, o)) for c in ctas]
    upto, queue = w.tc_issued, w.tc_queue
    known = dict(w.tc_summary)
    join(known, m.races.clock(w.agent))
    m.races.tick(w.agent)

    def apply():
        while queue and queue[0][0] < upto:
            queue.pop(0)[1]()
        for c, bar in targets:
            _commit_arrive(c, w, bar, o, known)

    m.put_in_flight(Transfer("mma", w.index, o.span, apply, due=m.launch.due(m.step), issued=m.step))


def _commit_arrive(c, w, bar, o: ops.Tcgen05Commit, known: dict) -> None:
    if c.exited:
        raise ProtocolError("E412", f"tcgen05.commit arrives on mbarrier '{bar.name}[{bar.stage}]' of CTA {c.cta}, "
                            "which has exited", o.span, ["wait for the barrier's last phase before the CTA ends"])
    if bar.pending < 1:
        raise ProtocolError("E402", f"tcgen05.commit arrives on mbarrier '{bar.name}[{bar.stage}]' beyond its "
                            "count in one phase", o.span, [c.who(w), bar.describe()])
    c.launch.observer.arrive((c.cta, bar.name, bar.stage), 1, bar.completed)
    bar.pending -= 1
    join(c.races.phases.setdefault(c.phase_key(bar, bar.completed), {}), known)
    c.fed[(bar.name, bar.stage)] = (bar.completed, o)   # a wait must observe it before the CTA exits
    settle(c, bar, o)


def tmem_epilogue(m, w, o: ops.TmemEpilogue) -> None:
    check_after_fence(m, w, o)
    ref = next(e for e in ex.walk(o.value) if isinstance(e, ex.TmemRef))
    dest = m.tile(w, o.dest)
    quarter = (w.index - w.role.first_warp) % 4
    rows = slice(32 * quarter, 32 * quarter + 32)
    who = f"epilogue (tcgen05.ld) in {m.who(w)}"
    m.races.access(tmem_key(m, w, ref.tile), w.agent, False, ("lanes", quarter), o.span, who)
    m.races.access(m.tile_key(w, o.dest), w.agent, True, ("lanes", quarter), o.span, who)
    for tile in {r.name: r for r in ex.buffer_refs(o.value)}.values():
        m.races.access(m.tile_key(w, tile), w.agent, False, ("lanes", quarter), o.span, who)
    accumulator = tmem_tile(m, w, ref.tile)[rows, ref.col : ref.col + dest.shape[-1]]
    check_aligned(m, w, f"{ref.tile.name} + {ref.col}",
                  m.tmem_tiles[ref.tile.name].stage_column(m.value(w, ref.tile.index)) + ref.col)
    tmem_init.read(m, ref.tile, m.value(w, ref.tile.index), rows, ref.col, dest.shape[-1],
                   "an epilogue (tcgen05.ld) reads", o.span, who)
    with np.errstate(all="ignore"):
        value = _evaluate(m, w, o.value, accumulator, (rows, slice(None)))
        dest[rows] = _store_as(np.broadcast_to(value, dest[rows].shape), dest.dtype)
    w.tc_reads_unfenced = True


SEMANTICS = {ops.TmemZero: tmem_zero, ops.Tcgen05Mma: tcgen05_mma, ops.Tcgen05Cp: tcgen05_cp, ops.Tcgen05Commit: tcgen05_commit,
             ops.Tcgen05CommitCluster: tcgen05_commit, ops.TmemEpilogue: tmem_epilogue}
