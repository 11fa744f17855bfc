"""Verify hooks of data movement (ops/copies.py): each mode's loads, stores, reduces and prefetches
against their box, whose mode must be the op's (tiled: multicast and CTA sets, pairs, element
coordinates; im2col: pixels and offsets; gather4: the index tensor; bulk: chunks), staged stores,
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


def _through(v: Scope, o: ops.TensorLoad | ops.TensorStore | ops.TensorPrefetch, *modes: str) -> ops.BoxDecl:
    """The copy's box, whose TMA mode (targets/tma_modes.py) must be its op's."""
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", box.mode in modes, f"box @{box.symbol} is a {box.mode} box, not {' or '.join(modes)}")
    return box


def _box_coords(v: Scope, o, box: ops.BoxDecl) -> None:
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")


def _pixels(v: Scope, o: ops.Im2colLoad | ops.Im2colPrefetch, box: ops.BoxDecl) -> None:
    """Element coordinates of the tensor and an offset per spatial dim (a wide box: one wOffset)."""
    rank = len(v.decl(box, "tensor", ops.TensorDecl).shape)
    v.check(o, "coords", len(o.coords) == rank, f"not one per dimension of im2col box @{box.symbol}'s tensor")
    v.check(o, "offsets", len(o.offsets) == (1 if box.wide else rank - 2),
            f"not one per spatial dimension of @{box.symbol}'s tensor (a wide box: one wOffset)")


def _index(v: Scope, o: ops.GatherLoad | ops.ScatterStore | ops.GatherPrefetch) -> None:
    """A copy by rows names a 1-D i32 index tensor."""
    index = v.decl(o, "gather", ops.TensorDecl)
    v.check(o, "gather", index.dtype == "i32" and len(index.shape) == 1, "not a 1-D i32 tensor")


def _into_tile(v: Scope, o: ops.TensorLoad) -> None:
    v.in_role(o)
    v.tile(o, "dest", "smem")
    if o.barrier is not None:
        v.tile(o, "barrier", "mbarrier")


def _tma_load(v: Scope, o: ops.TmaLoad) -> None:
    _into_tile(v, o)
    box = _through(v, o, "tiled")
    _box_coords(v, o, box)
    v.check(o, "multicast", not o.multicast or box.multicast > 1, f"box @{box.symbol} is not multicast")
    cta_set(v, o, ("cluster", "row", "column"))
    v.check(o, "ctas", o.ctas == "cluster" or o.multicast, "a CTA set on a load without multicast")
    if o.multicast and o.ctas in cluster.SETS:   # each CTA of the set loads one slice
        size = cluster.size(v.kernel.cluster_shape(), o.ctas)
        v.check(o, "ctas", box.multicast == size, f"{size} CTAs, but box @{box.symbol} has {box.multicast} slices")
    v.check(o, "elements", not o.elements or box.slices() == 1,
            "element coordinates on a sliced box (multicast or pair), whose slices are placed by tile")
    if o.pair:
        pair_kernel(v, o)


def _im2col_load(v: Scope, o: ops.Im2colLoad) -> None:
    _into_tile(v, o)
    _pixels(v, o, _through(v, o, "im2col", "im2col_wide"))


def _gather_load(v: Scope, o: ops.GatherLoad) -> None:
    _into_tile(v, o)
    _box_coords(v, o, _through(v, o, "gather4"))
    _index(v, o)


def _bulk_load(v: Scope, o: ops.BulkLoad) -> None:
    _into_tile(v, o)
    _box_coords(v, o, _through(v, o, "bulk"))


def _from_tile(v: Scope, o: ops.TensorStore, *modes: str) -> ops.BoxDecl:
    v.in_role(o)
    v.tile(o, "source", "smem")
    box = _through(v, o, *modes)
    _box_coords(v, o, box)
    return box


def _tma_store(v: Scope, o: ops.TmaStore) -> None:
    box = _from_tile(v, o, "tiled")
    if o.reduce:
        v.check(o, "reduce", o.reduce in REDUCE_OPS, f"not one of {', '.join(REDUCE_OPS)}")
        v.check(o, "reduce", box.dtype not in DTYPES or DTYPES[box.dtype].tma in REDUCE_OPS[o.reduce].types,
                f"does not reduce box @{box.symbol}'s {box.dtype} elements")


def _scatter_store(v: Scope, o: ops.ScatterStore) -> None:
    _from_tile(v, o, "gather4")
    _index(v, o)


def _bulk_store(v: Scope, o: ops.BulkStore) -> None:
    box = _from_tile(v, o, "bulk")
    if o.reduce:
        v.check(o, "reduce", box.dtype in BULK_REDUCE_TYPES.get(o.reduce, {}),
                f"not a bulk reduce of box @{box.symbol}'s {box.dtype} elements")


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


def _tma_prefetch(v: Scope, o: ops.TmaPrefetch) -> None:
    box = _through(v, o, "tiled")
    _box_coords(v, o, box)
    v.check(o, "box", box.slices() == 1, "a sliced box (multicast or pair): its tensor map covers part of it")
    one_thread(v, o)


def _im2col_prefetch(v: Scope, o: ops.Im2colPrefetch) -> None:
    box = _through(v, o, *(m for m in ("im2col", "im2col_wide") if MODES[m].prefetch is not None))
    _pixels(v, o, box)
    one_thread(v, o)


def _gather_prefetch(v: Scope, o: ops.GatherPrefetch) -> None:
    _box_coords(v, o, _through(v, o, "gather4"))
    _index(v, o)
    one_thread(v, o)


def _bulk_prefetch(v: Scope, o: ops.BulkPrefetch) -> None:
    _box_coords(v, o, _through(v, o, "bulk"))
    one_thread(v, o)


def _tensormap_prefetch(v: Scope, o: ops.TensorMapPrefetch) -> None:
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", not box.bulk, "a bulk box: it has no tensor map")
    one_thread(v, o)


def _tile_bytes(v: Scope, name: str) -> set | None:
    """What a buffer's tile may span: a stage, or its box (a short accumulator's A, whose stages
    plan_smem widened); None for an unknown buffer (the tile check reports it)."""
    decl = v.symbols.get(name)
    if not isinstance(decl, ops.BufferDecl):
        return None
    box = v.symbols.get(decl.box)
    return {decl.bytes} | ({box.bytes(DTYPES[box.dtype].itemsize)} if isinstance(box, ops.BoxDecl) else set())


def _bulk_push(v: Scope, o: ops.BulkPush) -> None:
    """One thread pushes a whole smem tile into the same tile of a peer CTA."""
    barrier_op(v, o)
    v.tile(o, "source", "smem")
    v.tile(o, "dest", "smem")
    peer(v, o, 1)
    tiles = all(spans is None or o.bytes in spans for spans in (_tile_bytes(v, r.name) for r in (o.source, o.dest)))
    v.check(o, "bytes", tiles and 0 < o.bytes <= 0xFFFFF and o.bytes % 16 == 0,
            "not the bytes of its tiles, a positive multiple of 16 below 2^20")
    one_thread(v, o)


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TmaLoad: _tma_load, ops.Im2colLoad: _im2col_load, ops.GatherLoad: _gather_load, ops.BulkLoad: _bulk_load,
    ops.TmaStore: _tma_store, ops.ScatterStore: _scatter_store, ops.BulkStore: _bulk_store,
    ops.TmaPrefetch: _tma_prefetch, ops.Im2colPrefetch: _im2col_prefetch, ops.GatherPrefetch: _gather_prefetch,
    ops.BulkPrefetch: _bulk_prefetch, ops.StagedStore: _staged_store,
    ops.TensorMapPrefetch: _tensormap_prefetch, ops.BulkCommit: statement, ops.BulkWait: pending,
    ops.BulkPush: _bulk_push,
}
