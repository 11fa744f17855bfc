"""The reference interpreter: the executable meaning of every op of the final IR.

One CTA at a time (CTAs of a launch do not interact in v0). Each warp is a generator that runs
its role's ops and yields after every op but a val, so the scheduler can interleave warps and
the TMA engine's completions in any order; a warp that cannot proceed yields a `Blocked` naming
what it waits for. Granularity is the warp: an op outside `elect` is executed by all 32 threads at once
(32 arrivals on a barrier, 32 threads' share of tile math), an op inside `elect` by one thread.

`SEMANTICS` maps each op class to its function — the definition of what the op means.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..ir import exprs as ex
from ..ir import ops
from ..targets import cluster as geometry
from ..targets.tma import matrix_shape
from . import bulk, claims, dsmem, gather, mma, named, pairs, prefetch, rows, tcgen05, tmem_init
from .meet import barrier, expect_tx, settle
from .globalmem import walks_tiles
from .races import RaceDetector
from .shares import rows as row_share
from .state import Blocked, BulkGroup, Mbarrier, ProtocolError, Smem, Transfer
from .tiles import (box_region, box_tile_bytes, check_bulk_inside, check_element_start, math_share, read_box,
                    tile_math_share)
from .im2col import read_im2col
from .im2col_wide import read_im2col_wide


@dataclass
class Warp:
    index: int
    role: ops.RoleOp | None
    cta: int = 0
    env: dict = field(default_factory=dict)
    elected: bool = False
    groups: list[BulkGroup] = field(default_factory=list)   # committed, reads not yet waited
    unwritten: list[BulkGroup] = field(default_factory=list)  # reads waited, global writes not yet
    open_group: BulkGroup | None = None
    current: ops.Op | None = None
    passes: dict = field(default_factory=dict)   # barrier op -> times this warp passed it
    mma_open: list = field(default_factory=list)     # wgmma agents not yet committed
    mma_groups: list = field(default_factory=list)   # committed wgmma groups not yet waited
    mma_targets: dict = field(default_factory=dict)  # wgmma agent -> the accumulators it writes or reads
    mma_written: dict = field(default_factory=dict)  # wgmma agent -> the accumulator it writes
    tc_queue: list = field(default_factory=list)     # (sequence, run) of tcgen05 ops not yet completed
    tc_issued: int = 0                               # tcgen05 ops issued so far
    tc_summary: dict = field(default_factory=dict)   # joined clocks of every tcgen05.mma it issued
    tc_after_sync: bool = False                      # synchronised since tcgen05.fence::after_thread_sync
    tc_reads_unfenced: bool = False                  # tcgen05.ld since tcgen05.fence::before_thread_sync
    rows: dict = field(default_factory=dict)         # row registers (interp/rows.py)
    fragment_rows: bool | None = None                # its role's rows are wgmma fragment rows (interp/rows.py)
    acc_dirty: bool = True          # ordinary instructions touched the accumulator since wgmma.fence
    current_tile: int | None = None  # the tile its tile loop walks (interp/globalmem.py); None outside one
    done: bool = False

    @property
    def agent(self) -> tuple:
        return ("warp", self.cta, self.index)

    @property
    def leads_role(self) -> bool:
        return self.role is not None and self.index == self.role.first_warp


@dataclass
class Cluster:
    """What the CTAs of one cluster share: each other, the happens-before clocks, barriers of warps."""

    ctas: list = field(default_factory=list)
    races: RaceDetector = field(default_factory=RaceDetector)
    sync_arrivals: dict = field(default_factory=dict)


class CTA:
    def __init__(self, kernel: ops.KernelOp, launch, cta: int, ctas: int, cluster: Cluster | None = None):
        self.kernel, self.launch, self.cta, self.ctas = kernel, launch, cta, ctas
        self.cluster = cluster or Cluster()
        self.cluster.ctas.append(self)
        self.rank = len(self.cluster.ctas) - 1          # %cluster_ctarank
        self.smem = Smem.allocate(kernel.smem_bytes)
        self.boxes = ops.decls(kernel, ops.BoxDecl)
        self.buffers = ops.decls(kernel, ops.BufferDecl)
        self.queues = ops.decls(kernel, ops.TileQueueDecl)   # a dynamic tile loop's claims (interp/claims.py)
        self.accumulators: dict[tuple, np.ndarray] = {}   # (role, name, warpgroup) -> [64, C] f32
        self.accumulator_decls: dict[tuple, ops.AccDecl] = {}   # (role, name) -> its declaration
        self.barriers = {
            (d.symbol, s): Mbarrier(d.symbol, s, d.count) for d in ops.decls(kernel, ops.MbarrierDecl).values()
            for s in range(d.stages)
        }
        self.trace = launch.trace
        self.races = self.cluster.races
        self.cluster_id = self.cluster.ctas[0].cta   # global memory orders accesses within a cluster only
        self.races.pinned = lambda cluster=self.cluster_id: launch.memory.agents(cluster)
        self.stored = {self.boxes[o.box].tensor for o in ops.walk(kernel.body) if isinstance(o, ops.TensorStore)}
        self.quota = _arrival_quota(kernel)          # arrive op -> arrivals it makes in one phase
        self.phase_arrivals: dict[tuple, dict] = {}  # barrier -> arrive op -> arrivals this phase
        self.site_phase: dict[tuple, int] = {}       # (arrive op, barrier) -> phase it last arrived in
        self.init_unfenced: set[tuple] = set()       # barriers initialised but not yet fenced for the async proxy
        self.in_flight: list[Transfer] = []
        # per mbarrier: the newest phase a TMA load fed, and how many phases a wait has observed
        self.fed: dict[tuple, tuple[int, ops.Op]] = {}
        self.exited = False                          # every warp has finished
        self.observed: dict[tuple, int] = {}
        self.sync_arrivals = self.cluster.sync_arrivals
        self.named: dict = {}                        # named barrier id -> its state (interp/named.py)
        self.step = 0
        self.tmem_columns = 0          # Tensor Memory this CTA holds (tcgen05.alloc'ed, not freed)
        memory = launch.target.tensor_memory            # None: sema refused every use of tmem
        self.tmem = np.full((memory.lanes, memory.columns) if memory else (0, 0), np.nan, np.float32)
        self.tmem_written = tmem_init.fresh(*self.tmem.shape)   # which cells hold a value (E422)
        self.tmem_tiles = ops.decls(kernel, ops.TmemDecl)
        self.tmem_accumulating: set = set()   # tiles whose next tcgen05.mma adds to their contents
        roles = ops.roles(kernel)
        self.warps = [Warp(w, next((r for r in roles if r.first_warp <= w <= r.last_warp), None), cta)
                      for w in range(kernel.threads // 32)]

    # ---- evaluation
    def value(self, warp: Warp, e: ex.Expr) -> int:
        if isinstance(e, ex.Const):
            return e.value
        if isinstance(e, ex.Var):
            return warp.env[e.name]
        if isinstance(e, ex.Param):   # a scalar argument is a NumPy scalar: index math is on ints
            value = self.launch.params[e.name]
            return int(value) if isinstance(value, np.integer) else value
        if isinstance(e, ex.Elem):      # guarded, as on the GPU: 0 outside the tensor
            array, at = self.launch.arrays[e.tensor], self.value(warp, e.index)
            return int(array[at]) if 0 <= at < array.shape[0] else 0
        if isinstance(e, ex.Sreg):
            return {"ctaid.x": self.cta, "nctaid.x": self.ctas, "cluster.ctarank": self.rank}[e.name]
        if isinstance(e, ex.Neg):
            return -self.value(warp, e.operand)
        a, b = self.value(warp, e.lhs), self.value(warp, e.rhs)
        return INT_OPS[e.op](a, b)

    def barrier(self, warp: Warp, ref: ex.BufferRef, o: ops.Op) -> Mbarrier:
        stage = self.value(warp, ref.index)
        bar = self.barriers.get((ref.name, stage))
        if bar is None:
            raise ProtocolError("E410", f"mbarrier '{ref.name}' has no stage {stage}", o.span, [])
        if not bar.initialized:
            raise ProtocolError("E409", f"mbarrier '{ref.name}[{stage}]' is used before it is initialised",
                                o.span, [self.who(warp)])
        return bar

    def tile(self, warp: Warp, ref: ex.BufferRef) -> np.ndarray:
        decl = self.buffers[ref.name]
        box = self.boxes[decl.box]
        stage = self.value(warp, ref.index)
        return self.smem.tile(decl.offset + stage * decl.bytes, box_tile_bytes(box)[0],
                              self.launch.np_dtype(box.dtype))

    def matrix(self, warp: Warp, ref: ex.BufferRef) -> np.ndarray:
        """The tile as a matrix (leading extents of 1 dropped), a view: what mma and epilogues see."""
        tile = self.tile(warp, ref)
        return tile.reshape(matrix_shape(tile.shape))

    def tile_key(self, warp: Warp, ref: ex.BufferRef) -> tuple[str, int, int]:
        """(buffer, stage, CTA): one tile of one CTA's shared memory, for the race detector."""
        return ref.name, self.value(warp, ref.index), self.cta

    def phase_key(self, bar: Mbarrier, phase: int) -> tuple:
        return self.cta, bar.name, bar.stage, phase

    def members(self, ctas: str) -> list:
        """The CTAs of this CTA's set `ctas` (targets/cluster.py): what a multicast load writes,
        and what a release of a slot such loads fill arrives at."""
        return [self.cluster.ctas[r] for r in geometry.members(self.kernel.cluster_shape(), ctas, self.rank)]

    def who(self, warp: Warp) -> str:
        role = warp.role.symbol if warp.role else "-"
        return f"role '{role}', warp {warp.index}{' (elected thread)' if warp.elected else ''}"

    def put_in_flight(self, transfer: Transfer) -> None:
        """A TMA operation (or push, MMA commit, cancel) leaves the issuing warp for its engine."""
        self.launch.observer.issued(transfer)
        self.in_flight.append(transfer)

    # ---- running warps
    def program(self, warp: Warp):
        """The ops this warp executes: kernel-level statements, then its role's body."""
        for o in self.kernel.body:
            if isinstance(o, ops.RoleOp):
                if o is warp.role:
                    yield from self.region(warp, o.body)
            elif isinstance(o, ops.WarpgroupBlock):
                for r in o.body:
                    if r is warp.role:
                        yield from self.region(warp, r.body)
            elif isinstance(o, (ops.Elect, ops.Sync, ops.Fence, ops.TmemAlloc, ops.TmemDealloc)):
                yield from self.run(warp, o)
        self.retire(warp)

    def region(self, warp: Warp, body: list[ops.Op]):
        for o in body:
            yield from self.run(warp, o)

    def run(self, warp: Warp, o: ops.Op):
        try:
            if isinstance(o, ops.Val):      # not a step: the scheduler has nothing to interleave at it
                SEMANTICS[ops.Val](self, warp, o)
                return
            warp.current = o
            start = self.step
            result = SEMANTICS[type(o)](self, warp, o)
        except ZeroDivisionError:
            raise ProtocolError("E426", "division by zero in an index expression", o.span, [self.who(warp)]) from None
        if result is not None:          # a generator: the op has a region or may block
            yield from result
        if self.trace is not None:
            self.trace.op(self.cta, warp.index, o.name, start, self.step, o.span.location() if o.span else "")
        yield None

    def retire(self, warp: Warp) -> None:
        """Judged by the protocol, not timing: every committed store group must have been waited,
        and the CTA's Tensor Memory freed (warp 0 allocates and frees it)."""
        if warp.index == 0 and self.tmem_columns:
            raise ProtocolError("E416", f"the CTA exits with {self.tmem_columns} columns of Tensor Memory allocated",
                                warp.current.span if warp.current else None,
                                [self.who(warp), "tcgen05.dealloc every allocation before the kernel ends"])
        if warp.groups or (warp.open_group and warp.open_group.transfers):
            span = warp.current.span if warp.current else None
            raise ProtocolError("E412", "warp exits without waiting for its TMA stores (bulk async-groups)", span,
                                [self.who(warp), "end with `wait_group 0` so no copy is in flight at exit"])
        warp.done = True


def _quotient(a: int, b: int) -> int:
    """a / b truncated toward zero (PTX div.s32), exactly: no float in between. ZeroDivisionError
    for b = 0, which run() reports as E426 (the GPU's quotient is undefined)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INT_OPS = {
    ">": lambda a, b: int(a > b),
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: _quotient(a, b), "%": lambda a, b: a - b * _quotient(a, b), "&": lambda a, b: a & b,
    "^": lambda a, b: a ^ b, "max": max, "min": min,
    # unsigned 32-bit: the operands' bit patterns read as u32
    "udiv": lambda a, b: _u32(a) // _u32(b), "urem": lambda a, b: _u32(a) % _u32(b),
    "umin": lambda a, b: min(_u32(a), _u32(b)),
}


def _u32(value: int) -> int:
    return value & 0xFFFFFFFF


# ---- semantics: one function per op -----------------------------------------------------------


def _let(m: CTA, w: Warp, o: ops.Let | ops.Val):   # a val is a let that is never updated
    w.env[o.var] = m.value(w, o.value)


def _for_range(m: CTA, w: Warp, o: ops.ForRange):
    for k in range(m.value(w, o.count)):
        w.env[o.var] = k
        yield from m.region(w, o.body)


def _for_step(m: CTA, w: Warp, o: ops.ForStep):
    outer = w.current_tile
    w.env[o.count] = 0
    w.env[o.var] = m.value(w, o.start)
    while _u32(w.env[o.var]) < _u32(m.value(w, o.stop)):
        if walks_tiles(o.var):
            w.current_tile = w.env[o.var]
        yield from m.region(w, o.body)
        w.env[o.var] += m.value(w, o.step)
        w.env[o.count] += 1
    w.current_tile = outer


def _if(m: CTA, w: Warp, o: ops.If):
    if m.value(w, o.cond):
        yield from m.region(w, o.body)


def _elect(m: CTA, w: Warp, o: ops.Elect):
    if o.scope == "warpgroup":
        chosen = (w.index - w.role.first_warp) % 4 == 0
    else:
        chosen = w.index == 0 if o.scope == "block" else w.leads_role
    if chosen:
        w.elected = True
        yield from m.region(w, o.body)
        w.elected = False


def _sync(m: CTA, w: Warp, o: ops.Sync):
    tcgen05.check_signal(m, w, o)
    yield from _sync_barrier(m, w, o)
    tcgen05.synchronised(w)


def _sync_barrier(m: CTA, w: Warp, o: ops.Sync):
    if o.scope == "cluster":
        members = [(c.cta, x.index) for c in m.cluster.ctas for x in c.warps]
        what = f"barrier.cluster with {len(members)} warps in {len(m.cluster.ctas)} CTAs"
    else:
        members = [(m.cta, x.index) for x in m.warps if o.scope == "block" or x.role is w.role]
        what = f"bar.sync with {len(members)} warps"
    yield from barrier(m, w, o, members, what)


def _mbar_init(m: CTA, w: Warp, o: ops.MbarInit):
    stage = m.value(w, o.barrier.index)
    m.barriers[(o.barrier.name, stage)].init(o.count)
    m.launch.observer.init((m.cta, o.barrier.name, stage), o.count)
    m.init_unfenced.add((o.barrier.name, stage))


def _fence(m: CTA, w: Warp, o: ops.Fence):
    tcgen05.fence(m, w, o.kind)
    if o.kind == "mbarrier_init":
        m.init_unfenced.clear()
    if o.kind == "proxy_async":
        m.init_unfenced.clear()   # the full proxy fence also publishes barrier initialisation
        if not w.elected:         # one thread's fence publishes only its own writes, and tile math
            m.races.fence_proxy(w.agent)   # and epilogues write from every thread of the warp


def _tmem_alloc(m: CTA, w: Warp, o: ops.TmemAlloc):
    """Warp 0 takes `columns` of the CTA's (sema bounds the plan; explicit IR is checked here)."""
    if w.index != 0:
        return
    columns = m.tmem.shape[1]
    if m.tmem_columns + o.columns > columns:
        raise ProtocolError("E415", f"tcgen05.alloc of {o.columns} columns exceeds the {columns} columns of Tensor "
                            f"Memory ({m.tmem_columns} already allocated)", o.span, [m.who(w)])
    m.tmem_columns += o.columns


def _tmem_dealloc(m: CTA, w: Warp, o: ops.TmemDealloc):
    if w.index != 0:
        return
    if m.tmem_columns < o.columns:
        raise ProtocolError("E415", f"tcgen05.dealloc of {o.columns} columns, but {m.tmem_columns} are allocated",
                            o.span, [m.who(w)])
    m.tmem_columns -= o.columns
    tmem_init.freed(m, m.tmem_columns)


def _arrivals(w: Warp) -> int:
    return 1 if w.elected else 32


def _arrival_quota(kernel: ops.KernelOp) -> dict[int, int]:
    """Arrivals each arrive site makes per phase: the basis of the barrier's derived count."""
    quota = {}

    def visit(region, role, elected):
        for o in region:
            if isinstance(o, (ops.MbarArrive, ops.MbarArriveExpectTx)):
                quota[id(o)] = elected or 32 * (role.last_warp - role.first_warp + 1)
            if isinstance(o, ops.MbarArriveCluster):   # per sending CTA, and phase_arrivals counts per sender
                quota[id(o)] = elected or 32 * (role.last_warp - role.first_warp + 1)
            for r in o.regions():
                visit(r, role, elected_threads(o, role) if isinstance(o, ops.Elect) else elected)

    for role in ops.roles(kernel):
        visit(role.body, role, False)
    return quota


def elected_threads(o: ops.Elect, role: ops.RoleOp) -> int:
    """How many threads an elect block runs on."""
    return (role.last_warp - role.first_warp + 1) // 4 if o.scope == "warpgroup" else 1


def _arrive(m: CTA, w: Warp, bar: Mbarrier, o: ops.Op, count: int) -> None:
    """`count` arrivals by warp `w` (of any CTA of the cluster) on barrier `bar` of CTA `m`."""
    key = (bar.name, bar.stage, w.cta)
    made = m.phase_arrivals.setdefault(key, {})
    if count > bar.pending or made.get(id(o), 0) + count > m.quota.get(id(o), count):
        raise _surplus(m, w, bar, o, "this arrive site already arrived in the phase in progress")
    previous = m.site_phase.get((id(o), key))
    if previous is not None and previous == bar.completed - 1 and \
            not m.races.knows_phase(w.agent, m.phase_key(bar, previous)):
        raise _surplus(m, w, bar, o, f"it arrives for phase {bar.completed} without having observed the "
                       f"completion of phase {previous}, to which it also arrived: its arrivals outrun the phases")
    m.site_phase[(id(o), key)] = bar.completed
    made[id(o)] = made.get(id(o), 0) + count
    m.launch.observer.arrive((m.cta, bar.name, bar.stage), count, bar.completed)
    bar.pending -= count
    m.races.release_to_phase(w.agent, m.phase_key(bar, bar.completed))
    settle(m, bar, o)


def _surplus(m: CTA, w: Warp, bar: Mbarrier, o: ops.Op, why: str) -> ProtocolError:
    return ProtocolError("E402", f"mbarrier '{bar.name}[{bar.stage}]' receives more arrivals than its count "
                         f"allows in one phase", o.span, [m.who(w), why, bar.describe()])


def _mbar_arrive(m: CTA, w: Warp, o: ops.MbarArrive):
    """With a peer offset, on the barrier of the CTA that many ranks on (a peer pipeline's release)."""
    tcgen05.check_signal(m, w, o)
    target = dsmem.peer(m, o.peer)
    _arrive(target, w, target.barrier(w, o.barrier, o), o, _arrivals(w))


def _mbar_arrive_cluster(m: CTA, w: Warp, o: ops.MbarArriveCluster):
    tcgen05.check_signal(m, w, o)
    for c in m.members(o.ctas):
        _arrive(c, w, c.barrier(w, o.barrier, o), o, _arrivals(w))


def _mbar_arrive_leader(m: CTA, w: Warp, o: ops.MbarArriveLeader):
    tcgen05.check_signal(m, w, o)
    leader = pairs.leader(m)
    _arrive(leader, w, leader.barrier(w, o.barrier, o), o, _arrivals(w))


def _mbar_expect_tx(m: CTA, w: Warp, o: ops.MbarExpectTx):
    bar = m.barrier(w, o.barrier, o)
    expect_tx(m, bar, m.value(w, o.bytes) * _arrivals(w))


def _mbar_arrive_expect_tx(m: CTA, w: Warp, o: ops.MbarArriveExpectTx):
    target = dsmem.peer(m, o.peer)
    bar = target.barrier(w, o.barrier, o)
    expect_tx(target, bar, m.value(w, o.bytes) * _arrivals(w))
    _arrive(target, w, bar, o, _arrivals(w))


def _mbar_wait(m: CTA, w: Warp, o: ops.MbarWait):
    bar = m.barrier(w, o.barrier, o)
    parity = m.value(w, o.parity) & 1
    while not bar.phase_done(parity):
        yield Blocked(o, f"mbarrier {bar.name}[{bar.stage}] parity {parity} ({bar.describe()})",
                      lambda: bar.phase_done(parity))
    key = (bar.name, bar.stage)
    m.observed[key] = max(m.observed.get(key, 0), bar.completed)
    seen = bar.completed - 1 if (bar.completed - 1) & 1 == parity else bar.completed - 2
    m.launch.observer.wait((m.cta, bar.name, bar.stage), parity, max(seen, -1))
    if seen >= 0:   # a wait for parity 1 before any phase completed is the free first pass
        m.races.acquire_phase(w.agent, m.phase_key(bar, seen))
    tcgen05.synchronised(w)


def _tma_load(m: CTA, w: Warp, o: ops.TensorLoad):
    """A box lands in smem and completes its bytes on the barrier at the same offset; what it
    reads is its mode's (READS). With multicast (a tiled load), this CTA loads its slice of the box
    into every CTA of its set (the cluster, or its row or column: slice = its place there), each
    completing on its own barrier. Each CTA of a pair loads its half of a pair box; a pair load
    completes on the barrier of the pair's leader, where the pair's MMA waits for both CTAs' bytes."""
    box = m.boxes[o.box]
    coords = [m.value(w, c) for c in o.coords]
    tiled = isinstance(o, ops.TmaLoad)
    multicast, pair, ctas = (o.multicast, o.pair, o.ctas) if tiled else (False, False, "cluster")
    parts = box.slices() if multicast or box.pair else 1
    part = geometry.position(m.kernel.cluster_shape(), ctas, m.rank) if multicast else m.rank % parts
    if parts > 1:   # rows [part, part + 1) * extent / parts of the box, as a box of its own
        box = replace(box, shape=[box.shape[0] // parts, *box.shape[1:]], pair=False)
        coords = [coords[0] * parts + part, *coords[1:]]
    data, regions, steps = READS[type(o)](m, w, o, box, coords)
    agent, who = m.races.issue(w.agent), f"the TMA load issued by {m.who(w)}"
    tile = w.current_tile
    share = row_share(part * box.shape[0], (part + 1) * box.shape[0]) if multicast else None
    deliveries = []
    for c in m.members(ctas) if multicast else [m]:
        signalled = pairs.leader(m) if pair else c
        bar = signalled.barrier(w, o.barrier, o)
        if (bar.name, bar.stage) in signalled.init_unfenced:
            raise ProtocolError("E407", f"TMA load completes on mbarrier '{bar.name}[{bar.stage}]' whose "
                                "initialisation no fence.mbarrier_init made visible to the async proxy", o.span,
                                [m.who(w), ("after mbarrier.init, fence (mbarrier_init or proxy_async) and sync "
                                            "before any TMA operation uses the barrier")])
        rows = slice(part * box.shape[0], (part + 1) * box.shape[0]) if multicast else slice(None)
        deliveries.append((c, signalled, bar, c.tile(w, o.dest)[rows], c.tile_key(w, o.dest)))
        signalled.fed[(bar.name, bar.stage)] = (bar.completed, o)

    def apply():
        for region in regions if box.tensor in m.stored else []:   # it reads what a store may write
            if region is not None:
                m.launch.memory.access(m.races, m.cluster_id, box.tensor, region, agent, False, o.span,
                                       f"{who} in CTA {m.cta}", steps=steps, tile=tile)
        for c, signalled, bar, dest, key in deliveries:
            c.races.access(key, agent, True, share, o.span, who)
            dest[...] = data
            expect_tx(signalled, bar, -dest.nbytes)
            c.races.release_to_phase(agent, signalled.phase_key(bar, bar.completed))
            settle(signalled, bar, o)

    m.put_in_flight(Transfer("load", w.index, o.span, apply, None, data.nbytes,
                                due=m.launch.due(m.step), issued=m.step))


def _read_tiled(m: CTA, w: Warp, o: ops.TmaLoad, box: ops.BoxDecl, coords: list[int]):
    """(the tile, the tensor regions read, their element steps) of a tiled load."""
    tensor = m.launch.arrays[box.tensor]
    if o.elements:
        check_element_start(box, coords, o, m.who(w))
    return read_box(tensor, box, coords, o.elements), [box_region(tensor.shape, box, coords, o.elements)], box.strides


def _read_bulk(m: CTA, w: Warp, o: ops.BulkLoad, box: ops.BoxDecl, coords: list[int]):
    """A bulk chunk, which must lie inside the tensor (E477)."""
    tensor = m.launch.arrays[box.tensor]
    check_bulk_inside(tensor.shape, box, coords, o, m.who(w))
    return read_box(tensor, box, coords, False), [box_region(tensor.shape, box, coords, False)], box.strides


def _read_pixels(m: CTA, w: Warp, o: ops.Im2colLoad, box: ops.BoxDecl, coords: list[int]):
    """An im2col box's pixels (interp/im2col.py, im2col_wide.py): the whole tensor is what the
    load may read."""
    tensor = m.launch.arrays[box.tensor]
    read = read_im2col_wide if box.wide else read_im2col
    data = read(tensor, box, coords, [m.value(w, c) for c in o.offsets], o, m.who(w))
    return data, [tuple((0, n) for n in tensor.shape)], ()


# what each mode's load reads: (tile, tensor regions, their element steps)
READS = {ops.TmaLoad: _read_tiled, ops.BulkLoad: _read_bulk, ops.Im2colLoad: _read_pixels,
         ops.GatherLoad: gather.read_load}


def _tile_assign(m: CTA, w: Warp, o: ops.TileAssign):
    """The warp's share of the tiles: split by its position in the role (as the backend splits
    it), so warps of two roles at the same position touch the same elements."""
    who = f"tile math in {m.who(w)}"
    for ref in {r.name: r for r in ex.buffer_refs(o.value)}.values():
        m.races.access(m.tile_key(w, ref), w.agent, False, math_share(m, w, o, ref), o.span, who)
    m.races.access(m.tile_key(w, o.dest), w.agent, True, math_share(m, w, o, o.dest), o.span, who)
    tile_math_share(m, w, o)


SEMANTICS = {
    ops.Let: _let, ops.Val: _let, ops.ForRange: _for_range, ops.ForStep: _for_step, ops.If: _if,
    ops.Elect: _elect, ops.Sync: _sync,
    ops.MbarInit: _mbar_init, ops.MbarArrive: _mbar_arrive, ops.MbarArriveCluster: _mbar_arrive_cluster,
    ops.MbarArriveLeader: _mbar_arrive_leader, ops.MbarExpectTx: _mbar_expect_tx,
    ops.MbarArriveExpectTx: _mbar_arrive_expect_tx, ops.MbarWait: _mbar_wait,
    **dict.fromkeys(READS, _tma_load), **dict.fromkeys((ops.TmaStore, ops.ScatterStore, ops.BulkStore), bulk.tma_store),
    ops.BulkCommit: bulk.bulk_commit,
    ops.BulkWait: bulk.bulk_wait, ops.TileAssign: _tile_assign,
    ops.Fence: _fence, ops.SetMaxNReg: lambda m, w, o: None,
    ops.TmemAlloc: _tmem_alloc, ops.TmemDealloc: _tmem_dealloc,
    **mma.SEMANTICS,
    **tcgen05.SEMANTICS,
    **pairs.SEMANTICS,
    **rows.SEMANTICS,
    **prefetch.SEMANTICS,
    **dsmem.SEMANTICS,
    **claims.SEMANTICS,
    **named.SEMANTICS,
}
