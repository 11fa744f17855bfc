"""The sm_100a tensor cores and Tensor Memory: TMEM tile declarations, allocation and release,
`tcgen05_mma`, `tcgen05_cp`, `tmem_zero`, the tcgen05 commits (to this CTA's barrier or multicast
to a CTA set) and the Tensor Memory epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...targets import cluster
from ..exprs import BufferRef, Expr
from .base import Op, op
from .kernel import KernelOp


@op("tmem")
@dataclass
class TmemDecl(Op):
    """`stages` Tensor Memory tiles of [lanes, columns] 32-bit cells (sm_100a)."""

    symbol: str
    stages: int
    shape: list[int]
    column: int                     # first column; -1 until plan_tmem

    def pitch(self) -> int:
        """Columns from one stage to the next: the width rounded up to TMEM_GRANULE, so that every
        stage of a tile starts on the granule its first stage starts on (plan_tmem)."""
        return -(-self.shape[1] // TMEM_GRANULE) * TMEM_GRANULE

    def stage_column(self, stage: int) -> int:
        return self.column + stage * self.pitch()


TMEM_GRANULE = 4   # every tcgen05 Tensor Memory base (mma D, cp, ld, st) is a multiple of 4 columns


@op("tmem_alloc")
@dataclass
class TmemAlloc(Op):
    """Warp 0 allocates `columns` of Tensor Memory (a power of two, 32..512) and writes the base
    address to shared memory at `offset`, then gives up the right to allocate again."""

    columns: int
    offset: int                     # the smem word holding the TMEM base address; -1 until plan_smem


@op("tmem_dealloc")
@dataclass
class TmemDealloc(Op):
    """Warp 0 frees the allocation, after every warp has finished with Tensor Memory."""

    columns: int


@op("tcgen05_mma")
@dataclass
class Tcgen05Mma(Op):
    """D += A · Bᵀ into Tensor Memory tile `d` (K-major smem a: [M, K], b: [N, K]), issued by one
    thread. Asynchronous: it has read a and b and written d once a later tcgen05_commit of the
    same thread has arrived on its barrier."""

    d: BufferRef
    a: BufferRef
    b: BufferRef


@op("tcgen05_cp")
@dataclass
class Tcgen05Cp(Op):
    """Copy the f32 smem tile `source` ([128, W], K-major rows of one swizzle span) into columns
    `col` .. `col` + W − 1 of Tensor Memory tile `d`, lane i from row i (tcgen05.cp.128x256b, 8
    columns per instruction), issued by one thread. Asynchronous like tcgen05_mma and ordered
    before that thread's later MMAs, which add onto the copy; a later tcgen05_commit of the same
    thread arrives once it has completed."""

    d: BufferRef
    col: int
    source: BufferRef


@op("tmem_zero")
@dataclass
class TmemZero(Op):
    """The next tcgen05_mma into `tile` overwrites it (enable-input-d false) instead of adding."""

    tile: BufferRef


@op("tcgen05_commit")
@dataclass
class Tcgen05Commit(Op):
    """One arrival on `barrier` once every earlier tcgen05 op of this thread has completed."""

    barrier: BufferRef


@op("tcgen05_commit_cluster")
@dataclass
class Tcgen05CommitCluster(Tcgen05Commit):
    """A tcgen05_commit that arrives on this barrier (same offset) in every CTA of this CTA's set
    `ctas` (`.multicast::cluster` with its mask): the release of a slot that other CTAs multicast into."""

    ctas: str = "cluster"

    def senders(self, kernel: KernelOp) -> int:
        """How many CTAs' commit sites reach one CTA's barrier (the sets are symmetric)."""
        return cluster.size(kernel.cluster_shape(), self.ctas)


@op("tmem_epilogue")
@dataclass
class TmemEpilogue(Op):
    """`dest` = value over a Tensor Memory tile: each warp of a warpgroup loads its 32 lanes
    (rows 32·(warp % 4) ..) with tcgen05.ld, waits for them, and writes those rows of dest."""

    dest: BufferRef
    value: Expr


TENSOR_CORE_OPS = (Tcgen05Mma, Tcgen05Cp)   # read smem asynchronously; tcgen05_commit tracks them
