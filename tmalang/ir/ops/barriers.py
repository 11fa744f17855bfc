"""Synchronisation: mbarrier init, expect-tx, arrive (local, to a peer CTA, to a CTA set of the
cluster, to the pair's leader) and wait; fences; role, block and cluster syncs; and CTA named
barriers (`bar.sync` / `bar.arrive`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...targets import cluster
from ..exprs import BufferRef, Expr
from .base import Op, op
from .kernel import KernelOp


@op("mbar_init")
@dataclass
class MbarInit(Op):
    barrier: BufferRef
    count: int


@op("mbar_expect_tx")
@dataclass
class MbarExpectTx(Op):
    barrier: BufferRef
    bytes: Expr


@op("mbar_arrive")
@dataclass
class MbarArrive(Op):
    """With `peer` K > 0: on the barrier at the same offset in the CTA of rank (rank + K) % cluster
    (mapa; .release.cluster), the release of a peer pipeline's slot to the CTA that pushed it."""

    barrier: BufferRef
    peer: int = 0


@op("mbar_arrive_cluster")
@dataclass
class MbarArriveCluster(Op):
    """Arrive on this barrier (same offset) in every CTA of this CTA's set `ctas`: the whole
    cluster, or its row, column or cross (targets/cluster.py)."""

    barrier: BufferRef
    ctas: str = "cluster"

    def senders(self, kernel: KernelOp) -> int:
        """How many CTAs' arrive sites reach one CTA's barrier (the sets are symmetric)."""
        return cluster.size(kernel.cluster_shape(), self.ctas)


@op("mbar_arrive_leader")
@dataclass
class MbarArriveLeader(MbarArriveCluster):
    """Arrive on this barrier (same offset) in the leader CTA of this CTA's pair (cta_group 2):
    both CTAs of a pair release a slot where the pair's MMA role waits."""

    def senders(self, kernel: KernelOp) -> int:
        return 2


@op("mbar_arrive_expect_tx")
@dataclass
class MbarArriveExpectTx(Op):
    """With `peer` K > 0: on the barrier at the same offset in the CTA K ranks on, as MbarArrive."""

    barrier: BufferRef
    bytes: Expr
    peer: int = 0


@op("mbar_wait")
@dataclass
class MbarWait(Op):
    barrier: BufferRef
    parity: Expr


@op("fence")
@dataclass
class Fence(Op):
    kind: str                       # "proxy_async" | "mbarrier_init" | "tcgen05_{before,after}_thread_sync"


@op("sync")
@dataclass
class Sync(Op):
    """A barrier across the role's threads (scope role), the whole block, or the whole cluster."""

    scope: str


@op("named_bar_sync")
@dataclass
class NamedBarSync(Op):
    """`bar.sync id, count`: the executing warp arrives on CTA named barrier `id` (0..15) and
    waits until `count` threads (a multiple of 32) have arrived in the barrier's current phase."""

    id: int
    count: int


@op("named_bar_arrive")
@dataclass
class NamedBarArrive(Op):
    """`bar.arrive id, count`: the executing warp arrives on named barrier `id` without waiting."""

    id: int
    count: int


NAMED_BARRIERS = 16        # bar.sync / bar.arrive ids 0..15 per CTA (PTX ISA, barrier{.cta})
