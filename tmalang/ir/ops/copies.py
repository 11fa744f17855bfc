"""Data movement between global and shared memory: TMA loads, stores, reduces and L2 prefetches,
one op per mode (tiled, im2col, gather4/scatter4, bulk) over a base per kind of copy, the
high-level staged store that stage_stores expands, L2 and tensor-map
prefetches, the bulk async-group commit and wait, and the distributed shared memory push to a
peer CTA (`bulk_push`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..exprs import BufferRef, Expr
from .base import Op, op


# ---- loads, stores and prefetches: one op per TMA mode (targets/tma_modes.py) ------------------
# Each base holds what every mode of its copy has; each mode's op adds its own operands, so an
# op carries no field another mode would read. Passes that treat every load alike test the base.

@dataclass
class TensorLoad(Op):
    """A box into a shared-memory tile, completing its bytes on `barrier` (issued by one thread)."""

    box: str
    coords: list[Expr]            # tile indices, outermost first (by mode, see each op)
    dest: BufferRef
    barrier: BufferRef | None


@op("tma_load")
@dataclass
class TmaLoad(TensorLoad):
    """A tiled load (cp.async.bulk.tensor ... .tile), the one mode with multicast and CTA pairs."""

    multicast: bool               # this CTA's slice of the box, written into every CTA of its set `ctas`
    pair: bool                    # completes its bytes on the barrier of the CTA pair's leader (cta_group 2)
    elements: bool = False        # coords are element indices (innermost last), not tile indices
    ctas: str = "cluster"         # a multicast's CTA set: cluster, row or column (targets/cluster.py)


@op("tma_load_im2col")
@dataclass
class Im2colLoad(TensorLoad):
    """Pixels of an im2col box (plain or wide): coords are element coordinates (N, spatial..., C)."""

    # the filter position added to each pixel, one per spatial dim, outermost first (a wide box:
    # its one wOffset along W)
    offsets: list[Expr]


@op("tma_load_gather4")
@dataclass
class GatherLoad(TensorLoad):
    """Rows an index tensor names (tile::gather4, four rows per copy): coords[0] is a tile position
    p in `gather`, and tile row j comes from tensor row gather[p * rows + j]."""

    gather: str


@op("bulk_load")
@dataclass
class BulkLoad(TensorLoad):
    """One chunk of a bulk box (cp.async.bulk, no tensor map): coords in chunks, inside the tensor."""


@dataclass
class TensorStore(Op):
    """A shared-memory tile into a box of global memory, in the issuing thread's bulk group."""

    box: str
    coords: list[Expr]
    source: BufferRef


@op("tma_store")
@dataclass
class TmaStore(TensorStore):
    reduce: str = ""              # a TMA reduce (cp.reduce.async.bulk.tensor) with this operation; "": a store
    elements: bool = False        # coords are element indices, not tile indices


@op("tma_store_scatter4")
@dataclass
class ScatterStore(TensorStore):
    """Tile row j to tensor row gather[p * rows + j] (tile::scatter4; no reduce form)."""

    gather: str
    reduce: ClassVar[str] = ""    # scatter4 has no reduce form: every store reads as a plain store


@op("bulk_store")
@dataclass
class BulkStore(TensorStore):
    reduce: str = ""              # cp.reduce.async.bulk with this operation on the box's element type


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


@dataclass
class TensorPrefetch(Op):
    """A box into L2 (cp.async.bulk.prefetch...), issued by one thread: no shared memory, no
    barrier, no effect on any value."""

    box: str
    coords: list[Expr]            # tile indices, outermost first (by mode, as its load's)


@op("tma_prefetch")
@dataclass
class TmaPrefetch(TensorPrefetch):
    """A tiled box; what lies outside the tensor is skipped."""

    elements: bool = False        # coords are element indices, not tile indices


@op("tma_prefetch_im2col")
@dataclass
class Im2colPrefetch(TensorPrefetch):
    """The pixels an im2col load at the same coords and offsets would read."""

    offsets: list[Expr]


@op("tma_prefetch_gather4")
@dataclass
class GatherPrefetch(TensorPrefetch):
    """The rows gather[p * rows + j] into L2."""

    gather: str


@op("bulk_prefetch")
@dataclass
class BulkPrefetch(TensorPrefetch):
    """A bulk box's chunk (cp.async.bulk.prefetch.L2), which must lie inside the tensor."""


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
