"""Verify hooks of synchronisation (ops/barriers.py): mbarrier init, expect-tx, arrives (to a peer,
a CTA set, the pair's leader) and waits, fences, syncs and named barriers. `barrier_op`, `peer`
and `cluster_arrive` also check the tcgen05 commits and the bulk push, which arrive on mbarriers.
"""

from __future__ import annotations

from ...targets import cluster
from .. import exprs as ex
from .. import ops
from .scope import SCOPES, Hook, Scope, cta_set, pair_kernel


# The values of the IR's own enumerated fields (ops/barriers.py names them in comments).
FENCES = ("proxy_async", "mbarrier_init", "tcgen05_before_thread_sync", "tcgen05_after_thread_sync")


def barrier_op(v: Scope, o: ops.Op) -> None:
    """mbarrier operations and tcgen05 commits of a role: the barrier is an mbarrier tile."""
    v.in_role(o)
    v.tile(o, "barrier", "mbarrier")
    if isinstance(o, (ops.MbarExpectTx, ops.MbarArriveExpectTx)) and isinstance(o.bytes, ex.Const):
        v.check(o, "bytes", 0 <= o.bytes.value <= 0xFFFFF, "not 0..1048575")


def _arrive(v: Scope, o: ops.MbarArrive | ops.MbarArriveExpectTx) -> None:
    barrier_op(v, o)
    peer(v, o, 0)


def peer(v: Scope, o: ops.Op, least: int) -> None:
    """A peer offset reaches another CTA of the cluster (0: this CTA, where `least` allows it)."""
    v.check(o, "peer", least <= o.peer < max(1, v.kernel.cluster), f"not in {least}..cluster - 1")


def cluster_arrive(v: Scope, o: ops.MbarArriveCluster | ops.Tcgen05CommitCluster) -> None:
    barrier_op(v, o)
    if v.kernel.cluster < 2:
        v.fail(f"{o.name} in a kernel without a cluster", o)
    cta_set(v, o, cluster.SETS)


def _leader_arrive(v: Scope, o: ops.MbarArriveLeader) -> None:
    barrier_op(v, o)
    v.check(o, "ctas", o.ctas == "cluster", "the pair's leader is the only target")
    pair_kernel(v, o)


def _mbar_init(v: Scope, o: ops.MbarInit) -> None:
    v.tile(o, "barrier", "mbarrier")
    v.check(o, "count", 1 <= o.count <= 0xFFFFF, "not 1..1048575")
    if not v.inside(ops.Elect):
        v.fail("mbar_init outside elect: every thread would initialise the barrier", o)


def _sync(v: Scope, o: ops.Sync) -> None:
    v.check(o, "scope", o.scope in SCOPES[ops.Sync], "unknown")
    v.check(o, "scope", (o.scope == "role") == (v.role is not None), "role scope inside roles only")
    v.check(o, "scope", o.scope != "cluster" or v.kernel.cluster > 1, "the kernel has no cluster")
    if v.inside(ops.Elect):
        v.fail("sync inside elect: the other threads never reach it", o)


def _fence(v: Scope, o: ops.Fence) -> None:
    v.check(o, "kind", o.kind in FENCES, "unknown")


def _named_barrier(v: Scope, o: ops.NamedBarSync | ops.NamedBarArrive) -> None:
    v.in_role(o)
    v.check(o, "id", 0 <= o.id < ops.NAMED_BARRIERS, f"not a named barrier (0..{ops.NAMED_BARRIERS - 1})")
    v.check(o, "count", o.count > 0 and o.count % 32 == 0, "not a positive multiple of the warp size")
    if v.inside(ops.Elect):
        v.fail(f"{o.name} inside elect: bar.sync and bar.arrive are executed by whole warps", o)


HOOKS: dict[type[ops.Op], Hook] = {
    ops.MbarInit: _mbar_init, ops.MbarExpectTx: barrier_op, ops.MbarArrive: _arrive,
    ops.MbarArriveCluster: cluster_arrive, ops.MbarArriveLeader: _leader_arrive, ops.MbarArriveExpectTx: _arrive,
    ops.MbarWait: barrier_op, ops.Sync: _sync, ops.Fence: _fence, ops.NamedBarSync: _named_barrier,
    ops.NamedBarArrive: _named_barrier,
}
