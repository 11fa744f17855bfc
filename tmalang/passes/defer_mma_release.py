"""defer_mma_release: keep one wgmma group in flight across k-steps.

Requires: counted barriers (schedule_barriers), so the arrive sites this pass duplicates are
already accounted for: each phase of an `empty` barrier still receives exactly one arrival,
from either the loop's release or the tail's.
Guarantees, for every steps loop whose body consumes a pipeline slot with wgmma and releases it
(`wgmma_wait pending=0`, then the release of `@P.empty[%s]`):
  - the loop waits `pending=1` instead: step k's MMAs run while step k+1's are issued;
  - step k releases the slot of step k - 1 (whose MMAs the wait just retired), not its own;
  - after the loop, `wgmma_wait pending=0` and the release of the last step's slot.
The slot is still released only after every MMA reading it completed (the interpreter's race
detector checks exactly this), but the tensor cores no longer idle between k-steps.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from .rewrite import rewrite_roles


def run(kernel: ops.KernelOp) -> None:
    rewrite_roles(kernel, _deferred)


def _deferred(o: ops.Op) -> list[ops.Op]:
    plan = _match(o) if isinstance(o, ops.ForRange) else None
    return _rewrite(o, *plan) if plan else [o]


def _match(loop: ops.ForRange):
    """(wait index, release ops, slot var) when the loop body has the wgmma-then-release shape."""
    body = loop.body
    waits = [i for i, o in enumerate(body) if isinstance(o, ops.WgmmaWait) and o.pending == 0]
    if len(waits) != 1:
        return None
    start = waits[0] + 1
    end = start + 1 if start < len(body) and isinstance(body[start], ops.Sync) else start
    if end >= len(body) or not isinstance(body[end], ops.Elect):
        return None
    arrives = [s for s in body[end].body
               if isinstance(s, (ops.MbarArrive, ops.MbarArriveCluster)) and s.barrier.name.endswith(".empty")]
    if len(arrives) != 1 or not isinstance(arrives[0].barrier.index, ex.Var):
        return None
    return waits[0], body[start:end + 1], arrives[0].barrier.index.name


def _rewrite(loop: ops.ForRange, wait: int, release: list[ops.Op], slot: str) -> list[ops.Op]:
    arrive = next(s for s in release[-1].body if isinstance(s, (ops.MbarArrive, ops.MbarArriveCluster)))
    pipeline = arrive.barrier.name[: -len(".empty")]
    previous = f"{pipeline}.prev"
    loop.body[wait] = ops.WgmmaWait(1, span=loop.body[wait].span)
    at = loop.body.index(release[0])
    del loop.body[at:at + len(release)]
    delayed = _retarget(release, previous)
    loop.body[at:at] = [ops.If(ex.Bin(">", ex.Var(loop.var), ex.Const(0)), delayed, span=loop.span),
                        ops.Let(previous, ex.Var(slot), span=loop.span)]
    tail = [ops.WgmmaWait(0, span=loop.span),
            ops.If(ex.Bin(">", loop.count, ex.Const(0)), _retarget(release, previous), span=loop.span)]
    return [ops.Let(previous, ex.Const(0), span=loop.span), loop, *tail]


def _retarget(release: list[ops.Op], previous: str) -> list[ops.Op]:
    """A copy of the release ops arriving on the previous step's slot."""
    copies = []
    for o in release:
        if isinstance(o, ops.Elect):
            body = [type(s)(ex.BufferRef(s.barrier.name, ex.Var(previous)), span=s.span)
                    if isinstance(s, (ops.MbarArrive, ops.MbarArriveCluster)) else s for s in o.body]
            copies.append(ops.Elect(o.scope, body, span=o.span))
        else:
            copies.append(ops.Sync(o.scope, span=o.span))
    return copies
