"""fence_proxy_writes: ordinary smem writes reach the async proxy before an async-proxy op reads them.

Requires: expanded pipelines (stores sit in `elect` blocks), ordered wgmma (a `wgmma_fence`
directly precedes each wgmma).
Threads write shared memory through the generic proxy: tile math (`tile_assign`), epilogues
(`acc_store`, `tmem_epilogue`) and row math into an smem tile (`row_assign`). TMA stores, wgmma,
tcgen05.mma and tcgen05.cp read it through the async proxy, which sees those writes only after
`fence.proxy.async` by each writing thread (PTX ISA, proxies). Guarantees, in every role, along
every path (loops walked to a fixpoint, so a write in one iteration reaches a read in the next):
  - between a generic write to a buffer and a later async-proxy read of it in the same role there
    is `fence kind=proxy_async` run by every thread, then `sync scope=role`: the elected thread of
    a store, and every warpgroup of a wgmma, read tiles that all warps wrote;
  - between a generic write to a buffer and a later arrive (or `tcgen05_commit`) of the role,
    when an async-proxy op of another role reads that buffer, there is `fence kind=proxy_async` run
    by every thread; before an elected arrive also `sync scope=role`, so that the one arriving
    thread hands on every thread's fenced writes. The reader waits on that arrive's phase.
  - a turn (one warpgroup at a time runs it, so no role sync may stand in it) whose ops read
    buffers written before it gets that fence and sync right before its entry, where every
    warpgroup reaches them; only writes inside the turn are fenced inside it.
A `fence proxy_async` written by the user outside `elect` counts; a `sync` just before the reader
is reused instead of adding a second one. Without the fence the async proxy may read stale
smem; without the sync it may read a part of the tile another warp has not written yet.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target

_ARRIVES = (ops.MbarArrive, ops.MbarArriveCluster, ops.MbarArriveExpectTx, ops.Tcgen05Commit)
_LOOPS = (ops.ForRange, ops.ForTiles)
_BRANCHES = (ops.If, ops.InPairLeader, ops.Turn)   # a turn runs once: joining is conservative


def run(kernel: ops.KernelOp, target: Target) -> None:
    tmem = set(ops.decls(kernel, ops.TmemDecl))
    roles = ops.roles(kernel)
    reads = {role.symbol: {b for o in ops.walk(role.body) for b in _async_reads(o)} for role in roles}
    for role in roles:
        foreign = set().union(*(r for name, r in reads.items() if name != role.symbol))
        role.body, _ = _region(role.body, frozenset(), _Context(tmem, foreign))


class _Context:
    def __init__(self, tmem: set[str], foreign: set[str]):
        self.tmem = tmem          # Tensor Memory tiles: a row_assign into one is tcgen05.st, not smem
        self.foreign = foreign    # buffers another role reads through the async proxy


def _region(region: list[ops.Op], dirty: frozenset, cx: _Context):
    """The region with fences inserted, and the buffers still unfenced at its end."""
    out: list[ops.Op] = []
    for o in region:
        need = "sync" if isinstance(o, ops.Turn) and _turn_needs_sync(o, dirty, cx) else _needs_fence(o, dirty, cx)
        if need:
            _fence_before(out, o, sync=need == "sync")
            dirty = frozenset()
        if isinstance(o, ops.Fence) and o.kind == "proxy_async":
            dirty = frozenset()
        elif isinstance(o, _LOOPS):
            dirty = _loop(o, dirty, cx)
        elif isinstance(o, _BRANCHES):
            o.body, after = _region(o.body, dirty, cx)
            dirty = dirty | after
        dirty = dirty | _generic_writes(o, cx)
        out.append(o)
    return out, dirty


def _loop(loop: ops.Op, entry: frozenset, cx: _Context) -> frozenset:
    """The unfenced set at the loop head joins the entry's with the body's end (next iteration);
    it is also the set after the loop, which may run zero times."""
    head = entry
    while True:
        loop.body, end = _region(loop.body, head, cx)
        if end <= head:
            return head
        head = head | end


def _needs_fence(o: ops.Op, dirty: frozenset, cx: _Context) -> str | None:
    """"sync" (fence, then sync) when `o` reads unfenced buffers through the async proxy or hands
    them to another role by one thread's arrive; "fence" when all threads arrive; else None."""
    if not dirty or isinstance(o, (*_LOOPS, *_BRANCHES)):
        return None
    inner = o.body if isinstance(o, ops.Elect) else [o]
    if dirty & {b for s in inner for b in _async_reads(s)}:
        return "sync"
    if dirty & cx.foreign and any(isinstance(s, _ARRIVES) for s in inner):
        return "sync" if isinstance(o, ops.Elect) else "fence"
    return None


def _turn_needs_sync(turn: ops.Turn, dirty: frozenset, cx: _Context) -> bool:
    """Whether something in the turn reads (or hands on by one thread's arrive) buffers written
    before it. The warpgroups pass a turn one at a time, so the role sync that orders those
    writes cannot stand inside it (order_turns refuses it, E531): fence and sync before the
    turn's entry instead, where every warpgroup reaches them."""
    return any(_needs_fence(o, dirty, cx) == "sync" for o in ops.walk(turn.body))


def _fence_before(out: list[ops.Op], o: ops.Op, sync: bool) -> None:
    """Append the fence (and sync) for `o`, ahead of the wgmma_fence that belongs to a wgmma and
    reusing a role sync that already precedes `o`."""
    kept = [out.pop()] if isinstance(o, ops.Wgmma) and out and isinstance(out[-1], ops.WgmmaFence) else []
    if sync and out and isinstance(out[-1], ops.Sync) and out[-1].scope == "role":
        out.insert(len(out) - 1, ops.Fence("proxy_async", span=o.span))
    else:
        out.append(ops.Fence("proxy_async", span=o.span))
        if sync:
            out.append(ops.Sync("role", span=o.span))
    out += kept


def _generic_writes(o: ops.Op, cx: _Context) -> frozenset:
    if isinstance(o, (ops.TileAssign, ops.AccStore, ops.TmemEpilogue)):
        return frozenset({o.dest.name})
    if isinstance(o, ops.RowAssign) and isinstance(o.dest, ex.BufferRef) and o.dest.name not in cx.tmem:
        return frozenset({o.dest.name})
    return frozenset()


def _async_reads(o: ops.Op) -> set[str]:
    """The smem buffers an op itself reads through the async proxy."""
    if isinstance(o, ops.TensorStore):
        return {o.source.name}
    if isinstance(o, ops.Wgmma):
        return {o.b.name} | ({o.a.name} if isinstance(o.a, ex.BufferRef) else set())
    if isinstance(o, ops.Tcgen05Mma):
        return {o.a.name, o.b.name}
    if isinstance(o, ops.Tcgen05Cp):
        return {o.source.name}
    return set()
