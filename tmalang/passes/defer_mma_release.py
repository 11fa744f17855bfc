"""defer_mma_release: keep one wgmma group in flight across k-steps, where that cannot hang.

Requires: counted barriers (schedule_barriers), so the arrive sites this pass duplicates are
already accounted for: each phase of an `empty` barrier still receives exactly one arrival,
from either the loop's release or the tail's.
Guarantees, for every loop whose body is exactly one consume of a pipeline P by wgmma (the
slot's `full` wait, the wgmma with its fence and commit, `wgmma_wait pending=0`, the release
of `@P.empty[%s]`, counter updates, nothing else), where P has at least 2 stages and the role
does not also produce P (or whose body is exactly one `turn` holding such a consume: the
rewrite happens inside the turn, and order_turns then puts the wait and the delayed release
after the turn's exit, where they wait for nothing but this warpgroup's own MMAs):
  - the loop waits `pending=1` instead: step k's MMAs run while step k+1's are issued;
  - step k releases the slot of step k - 1 (whose MMAs the wait just retired), not its own;
  - after the loop, `wgmma_wait pending=0` and the release of the last step's slot.
Why these conditions: step k + 1 waits for slot (k + 1) mod S, which the producer refills only
after the release of use k + 1 - S. Deferred, that release happens in step k + 2 - S, so with
one stage (or a role that waits on P's `empty` itself, or anything else in the body that may
block or touch the accumulator) the consumer would wait for a slot it has not yet released.
The slot is still released only after every MMA reading it completed (the interpreter's race
detector checks exactly this), but the tensor cores no longer idle between k-steps.
Whatever the rewrite did, every access to an accumulator that an in-flight wgmma group may
read or write (an epilogue, `acc_zero`, a register-A wgmma reading it, a wgmma writing an
accumulator an in-flight one reads) is preceded by `wgmma_wait pending=0` (see
`settle_accumulators`).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target
from .rewrite import rewrite

_RELEASES = (ops.MbarArrive, ops.MbarArriveCluster)


def run(kernel: ops.KernelOp, target: Target) -> None:
    stages = {d.symbol[: -len(".empty")]: d.stages for d in ops.decls(kernel, ops.MbarrierDecl).values()
              if d.symbol.endswith(".empty")}
    for role in ops.roles(kernel):
        produced = {o.barrier.name[: -len(".empty")] for o in ops.walk(role.body)
                    if isinstance(o, ops.MbarWait) and o.barrier.name.endswith(".empty")}
        safe = {p for p, s in stages.items() if s >= 2 and p not in produced}
        role.body = rewrite(role.body, lambda o: _deferred(o, safe))
        role.body = settle_accumulators(role.body)


def _deferred(o: ops.Op, safe: set[str]) -> list[ops.Op]:
    if not isinstance(o, ops.ForRange):
        return [o]
    body = _step(o)
    plan = _match(body, safe)
    return _rewrite(o, body, *plan) if plan else [o]


def _step(loop: ops.ForRange) -> list[ops.Op]:
    """The ops of one k-step: the loop body, or the body of the turn that is all of it. In a
    turn the rewrite is the same and as safe: order_turns (later) moves the `pending=1` wait and
    the delayed release behind the turn's exit, and neither waits for another warpgroup."""
    only = loop.body[0] if len(loop.body) == 1 else None
    return only.body if isinstance(only, ops.Turn) else loop.body


def _match(body: list[ops.Op], safe: set[str]):
    """(wait index, release ops, slot var) when the step is one consume by wgmma, released
    right after its wait, of a pipeline whose release may safely lag one step."""
    waits = [i for i, o in enumerate(body) if isinstance(o, ops.WgmmaWait) and o.pending == 0]
    if len(waits) != 1:
        return None
    start = waits[0] + 1
    end = start + 1 if start < len(body) and isinstance(body[start], ops.Sync) else start
    if end >= len(body) or not isinstance(body[end], ops.Elect):
        return None
    arrives = [s for s in body[end].body if isinstance(s, _RELEASES) and s.barrier.name.endswith(".empty")]
    if len(body[end].body) != 1 or len(arrives) != 1 or not isinstance(arrives[0].barrier.index, ex.Var):
        return None
    pipeline = arrives[0].barrier.name[: -len(".empty")]
    if pipeline not in safe or not _only_the_consume(body, pipeline, body[end]):
        return None
    return waits[0], body[start:end + 1], arrives[0].barrier.index.name


def _only_the_consume(body: list[ops.Op], pipeline: str, release: ops.Elect) -> bool:
    """The body waits for nothing but the slot's `full` barrier, once, and does nothing but the
    wgmma and its bookkeeping: no other wait that could depend on the held slot, no epilogue or
    reset that would read the accumulator under the in-flight group."""
    plain = (ops.Let, ops.WgmmaFence, ops.Wgmma, ops.WgmmaCommit, ops.WgmmaWait, ops.Sync)
    full_waits = 0
    for o in body:
        if isinstance(o, ops.MbarWait) and o.barrier.name == f"{pipeline}.full":
            full_waits += 1
        elif not (isinstance(o, plain) or o is release):
            return False
    return full_waits == 1


def _rewrite(loop: ops.ForRange, body: list[ops.Op], wait: int, release: list[ops.Op], slot: str) -> list[ops.Op]:
    arrive = next(s for s in release[-1].body if isinstance(s, _RELEASES))
    pipeline = arrive.barrier.name[: -len(".empty")]
    previous = f"{pipeline}.prev"
    body[wait] = ops.WgmmaWait(1, span=body[wait].span)
    at = body.index(release[0])
    del body[at:at + len(release)]
    delayed = _retarget(release, previous)
    body[at:at] = [ops.If(ex.Bin(">", ex.Var(loop.var), ex.Const(0)), delayed, span=loop.span),
                        ops.Let(previous, ex.Var(slot), span=loop.span)]
    tail = [ops.WgmmaWait(0, span=loop.span),
            ops.If(ex.Bin(">", loop.count, ex.Const(0)), _retarget(release, previous), span=loop.span)]
    return [ops.Let(previous, ex.Const(0), span=loop.span), loop, *tail]


def _retarget(release: list[ops.Op], previous: str) -> list[ops.Op]:
    """A copy of the release ops arriving on the previous step's slot."""
    copies = []
    for o in release:
        if isinstance(o, ops.Elect):
            body = [replace(s, barrier=ex.BufferRef(s.barrier.name, ex.Var(previous)))   # same CTA set, span
                    if isinstance(s, _RELEASES) else s for s in o.body]
            copies.append(ops.Elect(o.scope, body, span=o.span))
        else:
            copies.append(ops.Sync(o.scope, span=o.span))
    return copies


# ---- accumulators are never touched under an in-flight wgmma -------------------------------------


def settle_accumulators(region: list[ops.Op]) -> list[ops.Op]:
    """Insert `wgmma_wait pending=0` before every op that touches an accumulator which a wgmma
    group still possibly in flight reads or writes. The state is the groups not yet retired,
    oldest first, each (written, read) accumulators, then the open (uncommitted) one: a wait
    with pending=k retires all but the k newest (groups complete in commit order). Loops are
    walked to a fixpoint, states joined group by group from the newest."""
    out, _ = _settle(region, _EMPTY)
    return out


_NONE = (frozenset(), frozenset())
_EMPTY = ((), _NONE)      # (committed groups, the open group)


def _settle(region: list[ops.Op], state):
    out: list[ops.Op] = []
    for o in region:
        if isinstance(o, ops.WgmmaWait):
            committed, current = state
            state = (committed[len(committed) - o.pending:] if o.pending else (), current)
        elif _conflicts(o, _union(state)):
            out.append(ops.WgmmaWait(0, span=o.span))
            state = _EMPTY
        if isinstance(o, ops.Wgmma):
            committed, current = state
            state = (committed, (current[0] | {o.acc}, current[1] | o.register_a()))
        elif isinstance(o, ops.WgmmaCommit):
            committed, current = state
            state = ((*committed, current), _NONE)
        elif isinstance(o, (ops.ForRange, ops.ForTiles)):
            state = _settle_loop(o, state)
        elif isinstance(o, (ops.If, ops.InPairLeader, ops.Turn)):
            o.body, after = _settle(o.body, state)
            state = _join(state, after)
        out.append(o)
    return out, state


def _union(state):
    groups = [*state[0], state[1]]
    return frozenset().union(*(g[0] for g in groups)), frozenset().union(*(g[1] for g in groups))


def _join(a, b):
    """Either state may hold: group k from the newest is the union of both states' group k."""
    longer, shorter = (a[0], b[0]) if len(a[0]) >= len(b[0]) else (b[0], a[0])
    offset = len(longer) - len(shorter)
    committed = tuple(g if k < offset else (g[0] | shorter[k - offset][0], g[1] | shorter[k - offset][1])
                      for k, g in enumerate(longer))
    if len(committed) > _KEPT:   # a loop committing without waiting: the oldest merge into one, which
        oldest = committed[:-_KEPT + 1]      # retires exactly when its newest member would
        committed = ((frozenset().union(*(g[0] for g in oldest)), frozenset().union(*(g[1] for g in oldest))),
                     *committed[-_KEPT + 1:])
    return committed, (a[1][0] | b[1][0], a[1][1] | b[1][1])


_KEPT = 8


def _settle_loop(loop: ops.Op, entry):
    """The state at the loop head joins the entry state with the state the body ends in."""
    head = entry
    while True:
        loop.body, end = _settle(loop.body, head)
        joined = _join(head, end)
        if joined == head:
            return head
        head = joined


def _conflicts(o: ops.Op, state) -> bool:
    written, read = state
    if not (written or read):
        return False
    if isinstance(o, ops.Wgmma):   # chained wgmmas into one accumulator need no wait
        return bool(o.register_a() & written) or o.acc in read
    return bool(ops.accumulators_touched(o) & (written | read))
