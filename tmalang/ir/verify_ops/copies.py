"""Verify hooks of data movement (ops/copies.py): TMA loads, stores and reduces against their box
(multicast and CTA sets, pairs, element coordinates, gathers, im2col offsets), staged stores,
prefetches, bulk groups, and the push of a whole tile into a peer CTA.
"""

from __future__ import annotations

from ...targets import cluster
from ...targets.tma_modes import MODES
from ...targets.dtypes import DTYPES
from ...targets.reduce import BULK_REDUCE_TYPES, REDUCE_OPS
from .. import exprs as ex
from .. import ops
from .barriers import barrier_op, peer
from .scope import Hook, Scope, cta_set, one_thread, pair_kernel, pending, statement


def _tma_load(v: Scope, o: ops.TmaLoad) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    _pixels_or_box(v, o, box)
    if box.im2col:
        v.check(o, "pair", not o.multicast and not o.pair, f"im2col box @{box.symbol} has no multicast or pair load")
    v.tile(o, "dest", "smem")
    if o.barrier is not None:
        v.tile(o, "barrier", "mbarrier")
    v.check(o, "multicast", not o.multicast or box.multicast > 1, f"box @{box.symbol} is not multicast")
    cta_set(v, o, ("cluster", "row", "column"))
    v.check(o, "ctas", o.ctas == "cluster" or o.multicast, "a CTA set on a load without multicast")
    if o.multicast and o.ctas in cluster.SETS:   # each CTA of the set loads one slice
        size = cluster.size(v.kernel.cluster_shape(), o.ctas)
        v.check(o, "ctas", box.multicast == size, f"{size} CTAs, but box @{box.symbol} has {box.multicast} slices")
    v.check(o, "pair", not (box.bulk and o.pair), f"bulk box @{box.symbol} has no pair form")
    v.check(o, "elements", not o.elements or box.slices() == 1,
            "element coordinates on a sliced box (multicast or pair), whose slices are placed by tile")
    v.check(o, "elements", not (o.elements and box.bulk), "element coordinates on a bulk box (whole chunks)")
    if o.pair:
        pair_kernel(v, o)
    _gathered(v, o, box)


def _pixels_or_box(v: Scope, o: ops.TmaLoad | ops.TmaPrefetch, box: ops.BoxDecl) -> None:
    """Through an im2col box: element coordinates of the tensor and an offset per spatial dim (a
    wide box's one wOffset); through another box: a coordinate per box dim and no offsets."""
    if box.im2col:
        rank = len(v.decl(box, "tensor", ops.TensorDecl).shape)
        v.check(o, "coords", len(o.coords) == rank, f"not one per dimension of im2col box @{box.symbol}'s tensor")
        v.check(o, "offsets", len(o.offsets) == (1 if box.wide else rank - 2),
                f"not one per spatial dimension of @{box.symbol}'s tensor (a wide box: one wOffset)")
    else:
        v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
        v.check(o, "offsets", not o.offsets, f"box @{box.symbol} is not an im2col box")


def _tma_store(v: Scope, o: ops.TmaStore) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
    v.tile(o, "source", "smem")
    v.check(o, "elements", not (o.elements and box.bulk), "element coordinates on a bulk box (whole chunks)")
    _gathered(v, o, box)
    v.check(o, "reduce", not (o.gather and o.reduce), "a gathered store has no reduce form (no .tile::scatter4)")
    v.check(o, "box", not box.im2col, "an im2col box only loads")
    if o.reduce and box.bulk:
        v.check(o, "reduce", box.dtype in BULK_REDUCE_TYPES.get(o.reduce, {}),
                f"not a bulk reduce of box @{box.symbol}'s {box.dtype} elements")
    elif o.reduce:
        v.check(o, "reduce", o.reduce in REDUCE_OPS, f"not one of {', '.join(REDUCE_OPS)}")
        v.check(o, "reduce", box.dtype not in DTYPES or DTYPES[box.dtype].tma in REDUCE_OPS[o.reduce].types,
                f"does not reduce box @{box.symbol}'s {box.dtype} elements")


def _staged_store(v: Scope, o: ops.StagedStore) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    staging = v.decl(o, "staging", ops.BufferDecl)
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
    v.check(o, "staging", staging.box == box.symbol, f"@{staging.symbol} holds box @{staging.box}, not @{box.symbol}")
    v.check(o, "blocks", o.blocks >= 1, "not a positive block count")
    v.check(o, "reduce", not o.reduce or o.reduce in REDUCE_OPS, f"not one of {', '.join(REDUCE_OPS)}")
    v.check(o, "box", not (box.im2col or box.bulk or box.gather), "not a dense tensor-map box")
    v.check(o, "value", any(isinstance(e, (ex.AccRef, ex.TmemRef)) for e in ex.walk(o.value)),
            "reads no accumulator")


def _gathered(v: Scope, o: ops.TmaLoad | ops.TmaStore | ops.TmaPrefetch, box: ops.BoxDecl) -> None:
    """A copy (or prefetch) by rows names a 1-D i32 index tensor and goes through a gathered box;
    a box copy does not go through one (its tensor map holds one row)."""
    v.check(o, "box", bool(o.gather) == box.gather,
            f"box @{box.symbol} {'is' if box.gather else 'is not'} gathered, unlike the copy")
    if o.gather:
        index = v.decl(o, "gather", ops.TensorDecl)
        v.check(o, "gather", index.dtype == "i32" and len(index.shape) == 1, "not a 1-D i32 tensor")
        v.check(o, "multicast", not getattr(o, "multicast", False) and not getattr(o, "pair", False),
                "a gathered load has no multicast or pair form")


def _tma_prefetch(v: Scope, o: ops.TmaPrefetch) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    _gathered(v, o, box)
    _pixels_or_box(v, o, box)
    v.check(o, "box", box.slices() == 1, "a sliced box (multicast or pair): its tensor map covers part of it")
    v.check(o, "box", MODES[box.mode].prefetch is not None, f"a {box.mode} box has no prefetch (v0)")
    one_thread(v, o)


def _tensormap_prefetch(v: Scope, o: ops.TensorMapPrefetch) -> None:
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", not box.bulk, "a bulk box: it has no tensor map")
    one_thread(v, o)


def _bulk_push(v: Scope, o: ops.BulkPush) -> None:
    """One thread pushes a whole smem tile into the same tile of a peer CTA."""
    barrier_op(v, o)
    v.tile(o, "source", "smem")
    v.tile(o, "dest", "smem")
    peer(v, o, 1)
    sizes = {getattr(v.symbols.get(r.name), "bytes", None) for r in (o.source, o.dest)}
    v.check(o, "bytes", sizes <= {o.bytes, None} and 0 < o.bytes <= 0xFFFFF and o.bytes % 16 == 0,
            "not the bytes of its tiles, a positive multiple of 16 below 2^20")
    one_thread(v, o)


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TmaLoad: _tma_load, ops.TmaStore: _tma_store, ops.StagedStore: _staged_store, ops.TmaPrefetch: _tma_prefetch,
    ops.TensorMapPrefetch: _tensormap_prefetch, ops.BulkCommit: statement, ops.BulkWait: pending,
    ops.BulkPush: _bulk_push,
}
