"""Data movement between global and shared memory: TMA loads, stores and reduces (by box, by
element, gathered), the high-level staged store that stage_stores expands, L2 and tensor-map
prefetches, the bulk async-group commit and wait, and the distributed shared memory push to a
peer CTA (`bulk_push`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exprs import BufferRef, Expr
from .base import Op, op


@op("tma_load")
@dataclass
class TmaLoad(Op):
    box: str
    coords: list[Expr]            # tile indices, outermost first
    dest: BufferRef
    barrier: BufferRef | None
    multicast: bool               # this CTA's slice of the box, written into every CTA of its set `ctas`
    pair: bool                    # completes its bytes on the barrier of the CTA pair's leader (cta_group 2)
    elements: bool = False        # coords are element indices (innermost last), not tile indices
    # an index tensor: coords[0] is then a tile position p in it, and tile row j comes from tensor
    # row gather[p * rows + j] (tile::gather4, four rows per copy); "": a box at tile coordinates
    gather: str = ""
    ctas: str = "cluster"         # a multicast's CTA set: cluster, row or column (targets/cluster.py)
    # through an im2col box: coords are element coordinates (N, spatial..., C) and these the
    # filter position added to each pixel, one per spatial dim, outermost first
    offsets: list[Expr] = field(default_factory=list)


@op("tma_store")
@dataclass
class TmaStore(Op):
    box: str
    coords: list[Expr]
    source: BufferRef
    reduce: str = ""              # a TMA reduce (cp.reduce.async.bulk.tensor) with this operation; "": a store
    elements: bool = False        # coords are element indices, not tile indices
    gather: str = ""              # an index tensor, as for tma_load: tile row j goes to row gather[p * rows + j]


@op("staged_store")
@dataclass
class StagedStore(Op):
    """A staged store (§13h): `value`, an epilogue reading an accumulator, written to global memory in
    `blocks` column blocks of box `box`, block j converted into staging tile j mod (the buffer's
    stages) and stored (or reduced, `reduce`) at `coords` with the last coordinate moved on j blocks
    (j × the box's columns at element coordinates). High level: stage_stores expands it into the
    epilogues, TMA stores, waits, syncs and bulk groups it derives."""

    box: str
    coords: list[Expr]            # block 0's, in units of `box` (element indices with `elements`)
    value: Expr                   # the accumulator read from column 0 (!acc, or tmem[...] at column 0)
    staging: str                  # the staging buffer
    blocks: int
    reduce: str = ""
    elements: bool = False


@op("tma_prefetch")
@dataclass
class TmaPrefetch(Op):
    """Box `box` at tile coordinates `coords` into L2 (cp.async.bulk.prefetch.tensor), issued by
    one thread: no shared memory, no barrier, no effect on any value; what lies outside the
    tensor is skipped. Through a bulk box, cp.async.bulk.prefetch.L2 of its chunk, which must
    lie inside the tensor (as a bulk copy's)."""

    box: str
    coords: list[Expr]            # tile indices, outermost first
    elements: bool = False        # coords are element indices, not tile indices
    gather: str = ""              # an index tensor, as for tma_load: the rows gather[p * rows + j] into L2
    # through an im2col box: coords are element coordinates (N, spatial..., C) and these the filter
    # position added to each pixel, one per spatial dim, outermost first (as tma_load's)
    offsets: list[Expr] = field(default_factory=list)


@op("tensormap_prefetch")
@dataclass
class TensorMapPrefetch(Op):
    """The tensor-map descriptor of `box` into the cache (prefetch.tensormap), issued by one thread."""

    box: str


@op("bulk_commit")
@dataclass
class BulkCommit(Op):
    pass


@op("bulk_wait")
@dataclass
class BulkWait(Op):
    """cp.async.bulk.wait_group[.read] pending."""

    pending: int
    read: bool


@op("bulk_push")
@dataclass
class BulkPush(Op):
    """Distributed shared memory: `bytes` of this CTA's tile `source` into tile `dest` of the CTA
    of rank (rank + peer) % cluster, completing the bytes on that CTA's `barrier`
    (cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes), issued by one thread.
    The source is read asynchronously: nothing but the peer's release of `dest` says it has been."""

    source: BufferRef
    dest: BufferRef
    barrier: BufferRef
    bytes: int
    peer: int
