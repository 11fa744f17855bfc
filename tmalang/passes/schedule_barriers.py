"""schedule_barriers: arrival counts, transaction bytes and initialisation of every mbarrier.

Requires: explicit barrier operations (pipelines expanded, releases ordered).
Guarantees:
  - every mbarrier's `count` is the number of arrivals one phase receives: per arrive site, 1
    inside `elect` (one per warpgroup for warpgroup scope), else the role's thread count; times
    the size of its CTA set for a cluster arrive or tcgen05 commit (each CTA's site arrives on the
    barriers of its set, and the sets are symmetric, so each barrier hears that many sites),
    times 2 for an arrive on a CTA pair's leader (both CTAs' sites arrive on the leader's barrier).
    The sites of a user's barrier add up across roles. Within one role, a `wait` on the barrier
    separates its sites into phases: sites between two waits arrive in the same phase and add
    up, sites on either side of a wait arrive in different phases (one barrier carrying two
    transfers per tile, waited with parity 0 then 1), so the role contributes its largest such
    segment. A pipeline's barrier is signalled by one produce or consume block per phase, so its
    sites (a block inside a loop and one after it) alternate. A count the user declared
    must equal it, and an mbarrier that is waited on must have an arrive site — otherwise the
    phase never completes (a hang) or completes early (a race), so both are errors here;
  - `tx_bytes` is the bytes one phase expects; where expect_tx bytes are constants they must
    equal the bytes of the TMA loads completing on that barrier in the same role (for a
    pipeline's `full` barrier: in the same elected block, since its arming sites alternate; a
    peer pipeline's pushes count like loads, armed and completed on the same peer's barrier);
  - the kernel body starts with one thread initialising every stage of every barrier, then
    `fence.mbarrier_init` (barrier state visible to the async proxy), then a block-wide sync,
    before any role runs; in a cluster the sync is cluster-wide (other CTAs multicast into this
    CTA's smem and arrive on its barriers), and the kernel ends with a cluster-wide sync too, so
    no CTA exits while another may still reach its shared memory.
"""

from __future__ import annotations

from collections import defaultdict

from ..diagnostics import error
from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target
from ..targets.dtypes import DTYPES


def run(kernel: ops.KernelOp, target: Target) -> None:
    barriers = ops.decls(kernel, ops.MbarrierDecl)
    boxes = ops.decls(kernel, ops.BoxDecl)
    arrivals: dict[str, int] = defaultdict(int)
    first_site: dict[str, tuple] = {}
    for role in ops.roles(kernel):
        for o, elected in _sites(role.body, 0, role):
            if _arrives(o):
                first_site.setdefault(o.barrier.name, (o, role, elected))
        for name in {o.barrier.name for o, _ in _sites(role.body, 0, role) if _arrives(o)}:
            if _pipelined(name):   # each of a pipeline's blocks arrives once per phase: its sites alternate
                counts = [c for c in _events(kernel, role, role.body, 0, name) if c is not _WAIT]
                arrivals[name] = max(arrivals[name], *counts)
            else:
                arrivals[name] += _per_phase(_events(kernel, role, role.body, 0, name))
    _check_tx(ops.roles(kernel), barriers, boxes)
    for name, decl in barriers.items():
        _settle_count(decl, arrivals.get(name, 0), first_site.get(name))
    _insert_init(kernel, barriers)


_WAIT = object()   # an event of _events: a wait on the barrier, which ends the phase its sites arrived in


def _arrives(o: ops.Op) -> bool:
    return isinstance(o, (ops.MbarArrive, ops.MbarArriveExpectTx, ops.MbarArriveCluster, ops.Tcgen05Commit))


def _events(kernel, role: ops.RoleOp, region, elected: int, name: str):
    """The role's arrivals on barrier `name` (a count per arrive site) and its waits on it, in
    program order. A loop whose body waits on the barrier runs twice, so that the body's last
    sites meet its first ones again, as they do when the loop repeats."""
    threads = 32 * (role.last_warp - role.first_warp + 1)
    for o in region:
        if _arrives(o) and o.barrier.name == name:
            senders = o.senders(kernel) if isinstance(o, (ops.MbarArriveCluster, ops.Tcgen05CommitCluster)) else 1
            yield (elected or threads) * senders
        elif isinstance(o, ops.MbarWait) and o.barrier.name == name:
            yield _WAIT
        inner = elected
        if isinstance(o, ops.Elect):
            inner = (role.last_warp - role.first_warp + 1) // 4 if o.scope == "warpgroup" else 1
        loop = isinstance(o, (ops.ForTiles, ops.ForRange))
        waits = any(isinstance(w, ops.MbarWait) and w.barrier.name == name for w in ops.walk([o]))
        for r in o.regions():
            for _ in range(2 if loop and waits else 1):
                yield from _events(kernel, role, r, inner, name)


def _per_phase(events) -> int:
    """Arrivals of one role in one phase: the largest run of sites between two of its waits."""
    best = segment = 0
    for e in events:
        segment = 0 if e is _WAIT else segment + e
        best = max(best, segment)
    return best


def _pipelined(barrier: str) -> bool:
    return "." in barrier   # made by expand_pipelines (PIPELINE.full / .empty); user names have no dot


def _sites(region, elected: int, role: ops.RoleOp):
    """(op, threads running it if inside elect else 0) for every op of a role."""
    for o in region:
        yield o, elected
        inner = elected
        if isinstance(o, ops.Elect):
            inner = (role.last_warp - role.first_warp + 1) // 4 if o.scope == "warpgroup" else 1
        for r in o.regions():
            yield from _sites(r, inner, role)


def _settle_count(decl: ops.MbarrierDecl, derived: int, site) -> None:
    if derived == 0:
        raise error("E101", f"nothing arrives on mbarrier '{decl.symbol}': its phases never complete",
                    decl.span, "a wait on it would hang; add an `arrive` (or remove the barrier)")
    if decl.count == -1:
        decl.count = derived
    elif decl.count != derived:
        o, role, elected = site
        who = {0: f"all {32 * (role.last_warp - role.first_warp + 1)} threads", 1: "one elected thread"}.get(
            elected, f"{elected} elected threads (one per warpgroup)")
        raise error("E100", f"mbarrier '{decl.symbol}' is declared with {decl.count} arrival(s) per phase, "
                    f"but {derived} arrive", o.span,
                    f"role '{role.symbol}' arrives here with {who}",
                    "a smaller count completes the phase early (a race); a larger one never completes it (a hang)")


def _check_tx(roles: list[ops.RoleOp], barriers, boxes) -> None:
    """Armed bytes against loaded bytes per barrier, over all roles (arming and loading may split).
    A pipeline's `full` barrier is armed by one produce block per phase, whose copies (a
    prologue's and a loop's, prefetch_own_pipelines) are alternative sites: each elected block
    that arms it is checked against its own loads."""
    expected: dict[str, list] = defaultdict(list)
    loaded: dict[str, int] = defaultdict(int)
    for o in (o for role in roles for o in ops.walk(role.body)):
        if isinstance(o, ops.Elect) and any(_pipelined(x.barrier.name) for x in ops.walk(o.body)
                                            if isinstance(x, ops.MbarArriveExpectTx)):
            _check_site(o, barriers, boxes)
        elif isinstance(o, (ops.MbarExpectTx, ops.MbarArriveExpectTx)) and not _pipelined(o.barrier.name):
            expected[o.barrier.name].append(o)
        elif isinstance(o, ops.TensorLoad) and o.barrier is not None and not _pipelined(o.barrier.name):
            loaded[o.barrier.name] += _load_bytes(o, boxes)
    for name, sites in expected.items():
        if not all(isinstance(s.bytes, ex.Const) for s in sites):
            continue
        armed = sum(s.bytes.value for s in sites)
        barriers[name].tx_bytes = armed
        if armed != loaded[name]:
            raise error("E102", f"expect_tx arms mbarrier '{name}' for {armed} bytes per phase, but the TMA "
                        f"loads completing on it bring {loaded[name]}", sites[0].span,
                        "a phase completes only when the bytes match exactly: fewer hang, more race")


def _load_bytes(o: ops.TensorLoad, boxes) -> int:
    box = boxes[o.box]   # a pair load: both CTAs of the pair bring their bytes to the leader's barrier
    return box.bytes(DTYPES[box.dtype].itemsize) * (2 if isinstance(o, ops.TmaLoad) and o.pair else 1)


def _check_site(o: ops.Elect, barriers, boxes) -> None:
    for arm in (x for x in ops.walk(o.body) if isinstance(x, ops.MbarArriveExpectTx)):
        name = arm.barrier.name
        brought = sum(_load_bytes(x, boxes) for x in ops.walk(o.body) if isinstance(x, ops.TensorLoad)
                      and x.barrier is not None and x.barrier.name == name)
        brought += sum(x.bytes for x in ops.walk(o.body) if isinstance(x, ops.BulkPush) and x.barrier.name == name)
        if not isinstance(arm.bytes, ex.Const) or arm.bytes.value != brought:
            raise error("E102", f"expect_tx arms mbarrier '{name}' for {arm.bytes} bytes per phase, but the TMA "
                        f"loads completing on it bring {brought}", arm.span,
                        "a phase completes only when the bytes match exactly: fewer hang, more race")
        barriers[name].tx_bytes = brought


def _insert_init(kernel: ops.KernelOp, barriers) -> None:
    if not barriers:
        return
    inits = [
        ops.MbarInit(ex.BufferRef(name, ex.Const(stage)), decl.count, span=decl.span)
        for name, decl in barriers.items()
        for stage in range(decl.stages)
    ]
    init = ops.Elect("block", [*inits, ops.Fence("mbarrier_init", span=kernel.span)], span=kernel.span)
    first_role = next(i for i, o in enumerate(kernel.body) if isinstance(o, ops.RoleOp))
    scope = "cluster" if kernel.cluster > 1 else "block"
    kernel.body[first_role:first_role] = [init, ops.Sync(scope, span=kernel.span)]
    if kernel.cluster > 1:
        kernel.body.append(ops.Sync("cluster", span=kernel.span))
