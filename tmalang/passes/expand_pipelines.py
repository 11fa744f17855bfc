"""expand_pipelines: produce/consume blocks become explicit stage, phase and barrier operations.

Requires: high-level IR from lowering (pipelines declared, produce/consume blocks in roles).
Guarantees: no `pipeline`, `produce` or `consume` op remains. Each pipeline P with S stages
becomes one smem buffer per field (`@P.field`, S stages) and two mbarrier arrays, `@P.full` and
`@P.empty`, with counts left for schedule_barriers. Each role that uses P counts its uses in
`%P.it`; use i takes stage i mod S; consumers wait `full` on parity (i / S) & 1 and producers wait
`empty` on the opposite parity, so their first pass over the ring does not block. A role that
both produces and consumes P keeps the two positions apart, `%P.put` for its produce blocks and
`%P.get` for its consume blocks: it runs ahead of itself (prefetch_own_pipelines). The
producer's single elected thread arms `full` with the bytes of all its loads and issues them;
the consumer's elected thread issues its stores and then arrives on `empty`. When another
CTA's producer multicasts into the slot, the release arrives on `empty` in every CTA that does
(`mbar_arrive_cluster ctas=S`, S the union of the multicast loads' CTA sets: the cluster, a row, a
column, or the cross of a row and a column; targets/cluster.py): no producer may refill a slot any
of its receivers still reads, and `empty` counts the releases of exactly those CTAs.

A tmem pipeline's fields become Tensor Memory tiles (`tmem @P.field`, S stages). Its producer is
an MMA role: after the `empty` wait, the block's MMAs run, and one thread's `tcgen05_commit` on
`full` arrives once they have completed. Operand slots that such a role consumes with `mma` are
released the same way, by a `tcgen05_commit` on their `empty` barrier: the slot is free when the
tensor cores have read it, not when the issuing thread moves on (`tcgen05_commit_cluster`, in
every CTA of the same set, when other CTAs multicast into the slot). Such a commit arrives whenever
the tensor cores finish, so the ring's producer, after its last block, waits until every slot
has been released (`%P.tail`): no commit may land on the barrier of a CTA that has exited.

A produce block without loads or MMAs is filled by the role's threads with row math: they wait
`empty`, write the slot, fence shared-memory writes to the async proxy and all arrive on `full`.
Blocks nest: an inner block expands first, inside the outer block's wait and release.

A role that walks its tiles by warpgroup (one role per warpgroup, `by warpgroup`, §15f) takes
every n-th tile, and the rings it consumes are filled for every tile: its position skips the
other warpgroups' tiles' uses (g tiles' worth before the loop, n - 1 after each of its tiles).

A peer pipeline (`peer +K`, distributed shared memory) also gets send slots `@P.f.send`: its
produce blocks write them and push them into the receive slots of the CTA K ranks on, and its
consumers release on that CTA's `empty` (passes/peer_slots.py says why that is sound).
"""

from __future__ import annotations

import dataclasses

from ..ir import exprs as ex
from ..ir import ops
from ..targets import cluster, tma
from ..targets.arch import Target
from ..targets.dtypes import DTYPES
from . import peer_slots


def run(kernel: ops.KernelOp, target: Target) -> None:
    boxes = ops.decls(kernel, ops.BoxDecl)
    body: list[ops.Op] = []
    pipelines: dict[str, ops.PipelineDecl] = {}
    for o in kernel.body:
        if isinstance(o, ops.PipelineDecl):
            pipelines[o.symbol] = o
            body += _declare(o, boxes)
        else:
            body.append(o)
    blocks = [o for role in ops.roles(kernel) for o in ops.walk(role.body) if isinstance(o, (ops.Produce, ops.Consume))]
    multicast = _release_sets(kernel, blocks)
    committed = {o.pipeline for o in blocks if isinstance(o, ops.Consume)
                 and any(isinstance(x, ops.TENSOR_CORE_OPS) for x in ops.walk(o.body))}
    buffers = {b.symbol: b for b in body if isinstance(b, ops.BufferDecl)}
    for role in ops.roles(kernel):
        sides = _sides(role)
        used = [p for p in pipelines if (p, True) in sides or (p, False) in sides]
        own = {p for p in used if (p, True) in sides and (p, False) in sides}
        counters = [ops.Let(name, ex.Const(0), span=pipelines[p].span)
                    for p in used for name in _counter_names(p, own)]
        skips = _warpgroup_skips(role.body, own)
        role.body = counters + _expand(role.body, pipelines, boxes, multicast, own, (buffers, kernel.cluster))
        role.body = _skip_other_warpgroups(role.body, skips)
        role.body += [_drain(pipelines[p], _counter(p, True, own))
                      for p in used if p in committed and (p, True) in sides]
    kernel.body = body


def _warpgroup_skips(region: list[ops.Op], own: set[str]) -> dict[int, list[tuple[ex.Var, ex.Expr]]]:
    """For each tile loop `by warpgroup` (id -> ...): the ring counters of the pipelines it
    consumes, with the uses one tile makes of each (sema: the same for every tile)."""
    skips = {}
    for o in ops.walk(region):
        if isinstance(o, ops.ForTiles) and o.every > 1:
            consumed = sorted({x.pipeline for x in ops.walk(o.body) if isinstance(x, ops.Consume)})
            skips[id(o)] = [(_counter(p, False, own), _uses_per_pass(o.body, p)) for p in consumed]   # sema: not None
    return skips


def _uses_per_pass(region: list[ops.Op], pipeline: str) -> ex.Expr | None:
    """How many consume blocks of `pipeline` one pass over `region` runs (loops by their counts);
    None for none."""
    terms: list[ex.Expr] = []
    for o in region:
        if isinstance(o, ops.Consume) and o.pipeline == pipeline:
            terms.append(ex.Const(1))
        for r in o.regions():
            inner = _uses_per_pass(r, pipeline)
            if inner is not None:
                times = isinstance(o, ops.ForRange) and inner != ex.Const(1)
                terms.append(ex.Bin("*", o.count, inner) if times else o.count if isinstance(o, ops.ForRange)
                             else inner)
    if not terms:
        return None
    total = terms[0]
    for t in terms[1:]:
        total = ex.add(total, t)
    return total


def _times(n: int, e: ex.Expr) -> ex.Expr:
    return e if n == 1 else ex.Bin("*", ex.Const(n), e)


def _skip_other_warpgroups(region: list[ops.Op], skips: dict) -> list[ops.Op]:
    """Warpgroup g of n walking tiles by warpgroup takes the CTA's tiles g, g + n, ..: each ring
    it consumes is filled for every tile, so its position starts g tiles' uses in and moves on
    n - 1 tiles' uses after each of its own (the other warpgroups' slots)."""
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():
            r[:] = _skip_other_warpgroups(r, skips)
        for at, per_tile in skips.get(id(o), []):
            if o.offset:
                out.append(ops.Let(at.name, ex.add(at, _times(o.offset, per_tile)), span=o.span))
            o.body.append(ops.Let(at.name, ex.add(at, _times(o.every - 1, per_tile)), span=o.span))
        out.append(o)
    return out


def _release_sets(kernel: ops.KernelOp, blocks) -> dict[str, str]:
    """Pipeline -> the CTA set its releases reach: every CTA that multicasts into its slots (the
    union of its multicast loads' sets; targets/cluster.py). Pipelines without multicast are absent."""
    sets: dict[str, set[str]] = {}
    for o in blocks:
        if isinstance(o, ops.Produce):
            for x in o.body:
                if isinstance(x, ops.TmaLoad) and x.multicast:
                    sets.setdefault(o.pipeline, set()).add(x.ctas)
    return {p: cluster.union(kernel.cluster_shape(), found) for p, found in sets.items()}


def _sides(role: ops.RoleOp) -> set[tuple[str, bool]]:
    """(pipeline, producing) for each side of a pipeline that this role's blocks take."""
    return {(o.pipeline, isinstance(o, ops.Produce)) for o in ops.walk(role.body)
            if isinstance(o, (ops.Produce, ops.Consume))}


def _counter_names(pipeline: str, own: set[str]) -> list[str]:
    return [f"{pipeline}.put", f"{pipeline}.get"] if pipeline in own else [f"{pipeline}.it"]


def _counter(pipeline: str, producing: bool, own: set[str]) -> ex.Var:
    """The role's position in the ring; a role that takes both sides keeps one per side, since
    its produce blocks run ahead of its consume blocks."""
    if pipeline not in own:
        return ex.Var(f"{pipeline}.it")
    return ex.Var(f"{pipeline}.put" if producing else f"{pipeline}.get")


def _declare(p: ops.PipelineDecl, boxes) -> list[ops.Op]:
    decls = []
    for entry in p.fields:
        name, box_name = entry.split(":", 1)
        if box_name.startswith("tmem:"):
            shape = [int(x) for x in box_name[len("tmem:"):].split("x")]
            decls.append(ops.TmemDecl(f"{p.symbol}.{name}", p.stages, shape, -1, span=p.span))
            continue
        box = boxes[box_name]
        decls.append(ops.BufferDecl(f"{p.symbol}.{name}", box_name, p.stages, box.bytes(DTYPES[box.dtype].itemsize),
                                    tma.SWIZZLES[box.swizzle].tile_alignment, -1, span=p.span))
    if p.peer:
        decls += peer_slots.send_buffers(p, [d for d in decls if isinstance(d, ops.BufferDecl)])
    for role in ("full", "empty"):
        decls.append(ops.MbarrierDecl(f"{p.symbol}.{role}", p.stages, -1, 0, -1, span=p.span))
    return decls


def _expand(region: list[ops.Op], pipelines, boxes, multicast: dict[str, str], own: set[str], peers) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():   # nested blocks first: an enclosing block sees their explicit ops
            r[:] = _expand(r, pipelines, boxes, multicast, own, peers)
        if not isinstance(o, (ops.Produce, ops.Consume)):
            out.append(o)
            continue
        p, at = pipelines[o.pipeline], _counter(o.pipeline, isinstance(o, ops.Produce), own)
        if isinstance(o, ops.Consume):
            out += _consume(o, p, at, multicast.get(o.pipeline), peers[1])
        elif p.peer:
            slot = [_slot(p, at, o.slot, o.span), _wait_free(p, at, o.slot, o.span)]
            out += peer_slots.produce(o, p, slot, _advance(at, o.span), peers[0])
        elif any(isinstance(x, ops.TENSOR_CORE_OPS) for x in ops.walk(o.body)):
            out += _produce_accumulators(o, p, at)
        elif any(isinstance(x, ops.TensorLoad) for x in o.body):
            out += _produce(o, p, at, boxes)
        else:
            out += _produce_by_threads(o, p, at)
    return out


def _slot(p: ops.PipelineDecl, at: ex.Var, name: str, span) -> ops.Let:
    """`name` = the stage of this use of the ring, the use counted by `at`."""
    return ops.Let(name, ex.stage_of(at, p.stages), span=span)


def _wait_free(p: ops.PipelineDecl, at: ex.Var, name: str, span) -> ops.MbarWait:
    """The producer waits until the consumer released stage `name` (its first pass is free)."""
    parity = ex.other_parity(ex.parity_of(at, p.stages))
    return ops.MbarWait(ex.BufferRef(f"{p.symbol}.empty", ex.Var(name)), parity, span=span)


def _advance(at: ex.Var, span) -> ops.Let:
    return ops.Let(at.name, ex.add(at, ex.Const(1)), span=span)


def _produce(o: ops.Produce, p: ops.PipelineDecl, at: ex.Var, boxes) -> list[ops.Op]:
    full = ex.BufferRef(f"{p.symbol}.full", ex.Var(o.slot))
    loads = [dataclasses.replace(l, barrier=full) for l in o.body]   # each load keeps its mode's op
    nbytes = sum(boxes[l.box].bytes(DTYPES[boxes[l.box].dtype].itemsize) for l in loads)
    issue = ops.Elect("role", [ops.MbarArriveExpectTx(full, ex.Const(nbytes), span=o.span), *loads], span=o.span)
    return [_slot(p, at, o.slot, o.span), _wait_free(p, at, o.slot, o.span), issue, _advance(at, o.span)]


def _produce_accumulators(o: ops.Produce, p: ops.PipelineDecl, at: ex.Var) -> list[ops.Op]:
    """An MMA role fills a tmem slot: wait until the epilogue freed it, run the MMAs, commit."""
    full = ex.BufferRef(f"{p.symbol}.full", ex.Var(o.slot))
    commit = ops.Elect("role", [ops.Tcgen05Commit(full, span=o.span)], span=o.span)
    return [_slot(p, at, o.slot, o.span), _wait_free(p, at, o.slot, o.span), *o.body, commit, _advance(at, o.span)]


def _produce_by_threads(o: ops.Produce, p: ops.PipelineDecl, at: ex.Var) -> list[ops.Op]:
    """Row math or an epilogue fills the slot: every thread writes its rows, fences its
    shared-memory writes to the async proxy (the consumer, an MMA or a TMA store, reads through
    it), and arrives."""
    full = ex.BufferRef(f"{p.symbol}.full", ex.Var(o.slot))
    smem_fields = {f"{p.symbol}.{entry.split(':', 1)[0]}" for entry in p.fields if ":tmem:" not in entry}
    written = {x.dest.name for x in ops.walk(o.body) if isinstance(x, (ops.RowAssign, ops.AccStore))
               and isinstance(x.dest, ex.BufferRef)}
    fence = [ops.Fence("proxy_async", span=o.span)] if written & smem_fields else []
    return [_slot(p, at, o.slot, o.span), _wait_free(p, at, o.slot, o.span), *o.body, *fence,
            ops.MbarArrive(full, span=o.span), _advance(at, o.span)]


def _drain(p: ops.PipelineDecl, at: ex.Var) -> ops.ForRange:
    """After its last block, the producer waits until the consumer has released every slot: the
    releases of an MMA consumer are tcgen05.commits, which arrive whenever the tensor cores finish,
    and one must not land on the barrier of a CTA that has exited."""
    stage = f"{p.symbol}.drained"
    return ops.ForRange(f"{p.symbol}.tail", ex.Const(p.stages),
                        [_slot(p, at, stage, p.span), _wait_free(p, at, stage, p.span), _advance(at, p.span)],
                        span=p.span)


def _consume(o: ops.Consume, p: ops.PipelineDecl, at: ex.Var, ctas: str | None, cluster: int) -> list[ops.Op]:
    """`ctas`: the CTA set that multicasts into the slot, which the release reaches (None: this CTA);
    a peer pipeline's release goes to the CTA that pushed into the slot instead."""
    stage = ex.Var(o.slot)
    body = [ops.Elect("role", [s], span=s.span) if isinstance(s, ops.TensorStore) else s for s in o.body]
    empty = ex.BufferRef(f"{p.symbol}.empty", stage)
    tensor_cores = any(isinstance(s, ops.TENSOR_CORE_OPS) for s in ops.walk(o.body))   # free once they read it
    if ctas is None:
        arrive = (ops.Tcgen05Commit if tensor_cores else ops.MbarArrive)(empty, span=o.span)
    else:
        arrive = (ops.Tcgen05CommitCluster if tensor_cores else ops.MbarArriveCluster)(empty, ctas, span=o.span)
    release = ops.Elect("role", [arrive], span=o.span)
    if p.peer:
        release = peer_slots.release(p, stage, cluster, o.span)
    ready = ops.MbarWait(ex.BufferRef(f"{p.symbol}.full", stage), ex.parity_of(at, p.stages), span=o.span)
    return [_slot(p, at, o.slot, o.span), ready, *body, release, _advance(at, o.span)]
