"""wait_wgmma_late: a wgmma group is waited for where something needs it, not where it was issued.

Requires: order_wgmma (each wgmma is `wgmma_fence`, `wgmma`, `wgmma_commit`, `wgmma_wait
pending=0`); slot releases not yet ordered (order_slot_release runs after this pass).
Guarantees, within each region (a role body, a loop body, a block):
  - the `pending=0` wait after a commit moves down to the first op that needs one of the groups
    in flight, and becomes `wgmma_wait pending=k`, k the number of groups committed after the
    newest group that op needs. So S = Q·Kᵀ of the next key block and P·V of this one can both be
    in flight while the softmax of the next block runs on S: FlashAttention-3's overlap within
    a warpgroup, written as plain statements.
  - an op needs a group when it reads or writes the group's accumulator (row math, an epilogue,
    `acc_zero`), when it is a wgmma reading that accumulator as its register A or writing the
    accumulator the group reads as its A (chained wgmmas into one accumulator need no wait), when
    it writes a shared tile the group reads, or when it releases a slot of a pipeline the group
    reads (an elected arrive on `P.empty`, or the threads' arrive on a barrier of a pipeline the
    group reads). A proxy fence needs none: it orders the thread's own earlier stores, and a
    store into a tile a group reads has already waited for it. Syncs, other fences, loops, blocks
    other than elected arrives, and anything else this pass does not know retire every group first (pending=0), and
    so does the end of the region: no group is in flight across a loop boundary or out of a block.
  - every wait names the accumulators the groups it retires wrote, and every fence those its
    wgmmas write or read as A (`pins`): the backend ties only those registers to it
    (backend/mma_codegen.py), so an accumulator that is dead or not yet written (P after its P·V
    was issued, O before its first P·V) is not kept alive across the wgmmas of others.
Why it cannot race or hang: waits only move later within straight-line code, and the first op
that touches anything a group uses is preceded by a wait retiring that group (wgmma groups
complete in commit order, so pending=k retires all but the k newest). The interpreter checks
both facts: E413 for an accumulator touched under an in-flight wgmma, the race detector for a
slot released before the wgmma reading it completed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target

_RELEASES = (ops.MbarArrive, ops.MbarArriveCluster)
_FREE = (ops.Let, ops.MbarWait, ops.WgmmaCommit, ops.AccDecl, ops.RowDecl)


@dataclass
class _Group:
    """What one committed wgmma group uses: the accumulators it writes, the accumulators it
    reads as register A, the shared tiles it reads."""
    written: set
    read: set
    tiles: set

    def accumulators(self) -> set:
        return self.written | self.read

    def pipelines(self) -> set:
        return {t.split(".", 1)[0] for t in self.tiles if "." in t}


def run(kernel: ops.KernelOp, target: Target) -> None:
    for role in ops.roles(kernel):
        if any(isinstance(o, ops.Wgmma) for o in ops.walk(role.body)):
            role.body = _region(role.body)


def _region(region: list[ops.Op]) -> list[ops.Op]:
    out: list[ops.Op] = []
    in_flight: list[_Group] = []
    open_group = _Group(set(), set(), set())
    for i, o in enumerate(region):
        if isinstance(o, ops.WgmmaWait) and o.pending == 0 and i and isinstance(region[i - 1], ops.WgmmaCommit):
            continue          # order_wgmma's wait: placed below, where a group is needed
        for r in o.regions():
            r[:] = _region(r)
        needed = _newest_needed(o, in_flight)
        if needed is not None:
            keep = in_flight[needed + 1:]
            out.append(ops.WgmmaWait(len(keep), _written(in_flight[:needed + 1]), span=o.span))
            in_flight = keep
        if isinstance(o, ops.WgmmaFence):
            o.pins = _fenced(region[i + 1:])
        elif isinstance(o, ops.Wgmma):
            open_group.written.add(o.acc)
            open_group.read |= o.register_a()
            open_group.tiles |= {o.b.name} | ({o.a.name} if isinstance(o.a, ex.BufferRef) else set())
        elif isinstance(o, ops.WgmmaCommit):
            in_flight.append(open_group)
            open_group = _Group(set(), set(), set())
        out.append(o)
    if in_flight:
        out.append(ops.WgmmaWait(0, _written(in_flight), span=region[-1].span))
    return out


def _fenced(after: list[ops.Op]) -> list[str]:
    """The accumulators the wgmmas after a fence (up to their commit) write or read as A: the
    registers whose ordinary writes must stay before the fence."""
    used = set()
    for o in after:
        if isinstance(o, ops.WgmmaCommit):
            break
        if isinstance(o, ops.Wgmma):
            used |= {o.acc} | o.register_a()
    return sorted(used)


def _written(groups: list[_Group]) -> list[str]:
    return sorted(set().union(*(g.written for g in groups)))


def _newest_needed(o: ops.Op, in_flight: list[_Group]) -> int | None:
    """The index of the newest in-flight group `o` must wait for, or None."""
    needs = [i for i, g in enumerate(in_flight) if _needs(o, g)]
    return needs[-1] if needs else None


def _needs(o: ops.Op, g: _Group) -> bool:
    if isinstance(o, (*_FREE, ops.WgmmaFence)):
        return False
    if isinstance(o, ops.Wgmma):
        return bool(o.register_a() & g.written) or o.acc in g.read
    if isinstance(o, (ops.RowAssign, ops.AccStore, ops.AccZero, ops.TileAssign)):
        return bool(ops.accumulators_touched(o) & g.accumulators()) or _written_tile(o) in g.tiles
    if isinstance(o, ops.Elect):
        return not all(isinstance(s, _RELEASES) and ops.pipeline_of(s.barrier.name, (".empty",)) is not None
                       and ops.pipeline_of(s.barrier.name, (".empty",)) not in g.pipelines() for s in o.body)
    if isinstance(o, ops.Fence) and o.kind == "proxy_async":
        return False     # orders this thread's earlier stores for the async proxy; a group's reads are its own
    if isinstance(o, ops.MbarArrive) and not o.peer:    # a slot filled by the threads, handed on
        pipeline = ops.pipeline_of(o.barrier.name)
        return pipeline is None or pipeline in g.pipelines()
    return True


def _written_tile(o: ops.Op) -> str | None:
    dest = getattr(o, "dest", None)
    return dest.name if isinstance(dest, ex.BufferRef) else None
