"""The watchdog of every mbarrier wait loop: a hang on the GPU names its barrier, and stops.

A wait tries the phase once; only if it is not done yet does the warp enter the slow loop, which
also reads %globaltimer and the module's `stop` flag. Past the timeout, or once `stop` is raised,
the warp reports its wait, raises `stop` and exits. So the first warp to time out stops every
other waiting warp of the launch, and each of them reports too.

A report is one entry of the record the runtime gave the module (host-mapped memory): the wait
site, CTA, cluster rank, warp, lane, the barrier's offset, the parity waited for, the parity of
the phase in progress, the raw barrier word and the timeout, written by the lowest active lane
and fenced to the system.

The kernel stops by exiting, not by trapping: a trap is a sticky launch failure that takes the
CUDA context of the whole process with it, and no reset brings it back (driver 580, H100). Exits
release the barriers that wait for all threads (bar.sync 0, barrier.cluster), not a named
barrier with a count: so a leaving warp first arrives on its role's barrier (bar.arrive), which
frees the role's warps that wait there for it. Warps that still end up blocked at a named
barrier keep the kernel from ending; the runtime then reports after a drain time that the GPU
stays busy (runtime/watchdog.py).

The fast path (the phase is already done) is the code without the watchdog; the cost is the
slow loop's checks, paid by a warp that has to wait anyway. The module global and the record's
layout are contract/watchdog.py's.
"""

from __future__ import annotations

from llvmlite import ir

from ..contract.watchdog import DEFAULT_TIMEOUT_NS, ENTRIES, ENTRY_WORDS, FIELDS, GLOBAL, GLOBAL_BYTES
from ..ir import ops
from . import emit, ptx_asm
from .emit import I32, I64, VOID
TICK_SHIFT = 20                   # the slow loop's clock counts 2**20 ns (~1 ms) ticks
SUSPEND_NS = 1_000_000            # the slow loop's try_wait suspends up to 1 ms per turn
REPORT = "tmalang$watchdog_report"        # + "_wgmma" for the variant of roles that issue wgmma


def _field(name: str) -> str:
    return emit.global_operand(GLOBAL, FIELDS[name])


ASM: dict[str, str] = {
    "globaltimer": emit.GLOBALTIMER,
    # try_wait that may stay suspended up to SUSPEND_NS (it wakes as soon as the phase completes):
    # the warp spends its wait asleep in the instruction, not in the loop's checks, which would
    # otherwise delay its wake-up when the phase completes during them
    "try_wait_long": "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2, %d; selp.b32 $0, 1, 0, p; }",
    # elect one lane of those here; every lane learns which ($0: its lane id, $1: 1 in it)
    "elect_active": "{ .reg .b32 m; .reg .pred p; activemask.b32 m; elect.sync $0|p, m; selp.b32 $1, 1, 0, p; }",
    "phase_parity": "{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [$1], 0; selp.b32 $0, 1, 0, p; }",
    "barrier_word": "ld.volatile.shared.b64 $0, [$1];",
    "store_v4": "st.volatile.global.v4.u32 [$0], {$1, $2, $3, $4};",
    "store_u32": "st.volatile.global.u32 [$0], $1;",
    "fence_sys": "fence.sc.sys;",
    # a whole warp only (bar.arrive is .aligned); a warp that waited inside `elect` cannot arrive
    "arrive_named": "{ .reg .b32 m; .reg .pred p; activemask.b32 m; setp.eq.b32 p, m, -1; @p bar.arrive $0, $1; }",
    "exit": "exit;",
    # before a wgmma role's warp leaves: without it ptxas inserts its own wait on the exit path
    # and serializes every wgmma of the kernel (C7518; attention_sm90 lost 40%)
    "drain_wgmma": "wgmma.wait_group.sync.aligned 0;",
    # the module global's fields, by symbol (emit.global_operand says why)
    "record": f"ld.global.u64 $0, {_field('record')};",
    "timeout": f"ld.global.u64 $0, {_field('timeout_ns')};",
    "tag": f"ld.global.u32 $0, {_field('tag')};",
    "claim": f"atom.global.add.u32 $0, {_field('claimed')}, 1;",
    "stopped": f"ld.volatile.global.u32 $0, {_field('stop')};",
    "raise_stop": f"st.volatile.global.u32 {_field('stop')}, 1;",
}


# ---- the wait loop ----------------------------------------------------------------------------

def emit_wait(g, o: ops.MbarWait, site: int) -> None:
    """`o`'s wait loop with the watchdog: try once as without it, once more asleep; then loop on
    a sleeping try_wait and the clock, and once the warp has waited a tick or two (~1-2 ms, far
    longer than any wait of a healthy pipeline) on `stop` too: reading it on every turn of the
    loop (an L2 load) delayed the wake-up of healthy waits, and cost attention_sm90 40%."""
    emit.define_global(g.module, GLOBAL, GLOBAL_BYTES)
    addr, parity = g.address(o.barrier), g.expr(o.parity)
    blocks = ("wait.slow", "wait.timed", "wait.loop", "wait.check", "wait.early", "wait.long", "wait.report", "waited")
    slow, timed, loop, check, early, long, report, done = (g.fn.append_basic_block(n) for n in blocks)
    g.b.cbranch(_ready(g, addr, parity), done, slow).set_weights([1 << 10, 1])    # the slow path out of line
    g.b.position_at_end(slow)                  # a second, sleeping try before any clock is read
    g.b.cbranch(_ready(g, addr, parity, sleep=True), done, timed)
    g.b.position_at_end(timed)
    start = _ticks(g)
    deadline = g.b.add(start, _timeout_ticks(g))
    g.b.branch(loop)
    g.b.position_at_end(loop)
    g.b.cbranch(_ready(g, addr, parity, sleep=True), done, check)
    g.b.position_at_end(check)
    now = _ticks(g)
    late = g.b.icmp_signed(">", g.b.sub(now, deadline), I32(0))            # wrap-safe
    waited_long = g.b.icmp_unsigned(">=", g.b.sub(now, start), I32(2))
    g.b.cbranch(late, report, early).set_weights([1, 1 << 20])                     # reports: out of line
    g.b.position_at_end(early)
    g.b.cbranch(waited_long, long, loop)
    g.b.position_at_end(long)
    g.b.cbranch(g.b.icmp_unsigned("!=", g.asm(ASM["stopped"], "=r", [], ret=I32), I32(0)), report, loop).set_weights(
        [1, 1 << 20])
    g.b.position_at_end(report)
    barrier, threads = _role_barrier(g)
    report_fn = _report_function(g, _issues_wgmma(g.role))
    g.b.call(report_fn, [I32(site), addr, parity, I32(barrier), I32(threads)])
    g.b.unreachable()
    g.b.position_at_end(done)


def _issues_wgmma(role: ops.RoleOp | None) -> bool:
    return role is not None and any(isinstance(o, ops.Wgmma) for o in ops.walk(role.body))


def _role_barrier(g) -> tuple[int, int]:
    """(id, threads) of the named barrier the role's `sync` uses (codegen's _sync); (0, 0) for a
    role of one warp (bar.warp.sync) or a wait outside any role."""
    if g.role is None or g.role_threads() == 32:
        return 0, 0
    return 1 + g.roles.index(g.role), g.role_threads()


def _ready(g, addr, parity, sleep: bool = False) -> ir.Value:
    template = ASM["try_wait_long"] % SUSPEND_NS if sleep else ptx_asm.PTX["mbar_try_wait"]
    return g.b.icmp_unsigned("!=", g.asm(template, "=r,r,r", [addr, parity], ret=I32), I32(0))


def _ticks(g) -> ir.Value:
    return g.b.trunc(g.b.lshr(g.asm(ASM["globaltimer"], "=l", [], ret=I64), I64(TICK_SHIFT)), I32)


def _timeout_ticks(g) -> ir.Value:
    configured = g.asm(ASM["timeout"], "=l", [], ret=I64)
    ns = g.b.select(g.b.icmp_unsigned("==", configured, I64(0)), I64(DEFAULT_TIMEOUT_NS), configured)
    return g.b.trunc(g.b.lshr(ns, I64(TICK_SHIFT)), I32)


# ---- the report -------------------------------------------------------------------------------

def _report_function(g, wgmma: bool) -> ir.Function:
    """`report(site, addr, parity, barrier, threads)`: write this warp's entry, raise `stop`,
    arrive on named barrier `barrier` of `threads` (0: none) and exit, after its wgmma groups
    with `wgmma`; never returns. Defined once per variant and called (inlined at each of
    attention_sm90's 24 sites it made the kernel 40% bigger and 2.5% slower; the call costs no
    spill while no role runs at a register budget below ~40)."""
    name = REPORT + ("_wgmma" if wgmma else "")
    existing = g.module.globals.get(name)
    if existing is not None:
        return existing
    fn = ir.Function(g.module, ir.FunctionType(VOID, [I32, I32, I32, I32, I32]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("noreturn")
    fn.attributes.add("cold")
    _ReportBody(g, fn, wgmma).emit()
    return fn


class _ReportBody:
    def __init__(self, g, fn: ir.Function, wgmma: bool):
        self.g, self.fn, self.wgmma = g, fn, wgmma
        self.b = ir.IRBuilder(fn.append_basic_block("report"))

    def asm(self, key: str, constraints: str, args: list, ret: ir.Type = VOID) -> ir.Value:
        return emit.asm(self.b, ASM[key], constraints, args, ret)

    def sreg(self, name: str) -> ir.Value:
        return emit.sreg(self.b, name)

    def emit(self) -> None:
        site, addr, parity, barrier, threads = self.fn.args
        b = self.b
        elected = self.asm("elect_active", "=r,=r", [], ir.LiteralStructType([I32, I32]))
        with b.if_then(b.icmp_unsigned("!=", b.extract_value(elected, 1), I32(0))):
            index = self.asm("claim", "=r", [], I32)
            record = self.asm("record", "=l", [], I64)
            writable = b.and_(b.icmp_unsigned("!=", record, I64(0)), b.icmp_unsigned("<", index, I32(ENTRIES)))
            with b.if_then(writable):
                self.write_entry(b.add(record, b.mul(b.zext(index, I64), I64(4 * ENTRY_WORDS))), site, addr, parity)
            self.asm("raise_stop", "", [])
        with b.if_then(b.icmp_unsigned("!=", threads, I32(0))):
            self.asm("arrive_named", "r,r", [barrier, threads])
        if self.wgmma:
            self.asm("drain_wgmma", "", [])
        self.asm("exit", "", [])
        b.unreachable()

    def write_entry(self, entry: ir.Value, site, addr, parity) -> None:
        b = self.b
        offset = b.sub(addr, self.g.aligned_smem_base(b))   # recomputed here: passing it spilled
        word = self.asm("barrier_word", "=l,r", [addr], I64)
        timeout = self.asm("timeout", "=l", [], I64)

        def halves(v):
            return [b.trunc(v, I32), b.trunc(b.lshr(v, I64(32)), I32)]

        body = [site, self.asm("tag", "=r", [], I32), self.sreg("ctaid.x"), self.sreg("ctaid.y"), self.sreg("ctaid.z"),
                self.sreg("cluster.ctarank"), b.lshr(self.sreg("tid.x"), I32(5)), self.sreg("laneid"), offset, parity,
                self.asm("phase_parity", "=r,r", [addr], I32), *halves(word), *halves(timeout)]   # words 1..15
        assert len(body) == ENTRY_WORDS - 1
        for at in range(3):
            self.asm("store_u32", "l,r", [b.add(entry, I64(4 * (at + 1))), body[at]])
        for at in range(3, 15, 4):
            self.asm("store_v4", "l,r,r,r,r", [b.add(entry, I64(4 * (at + 1))), *body[at:at + 4]])
        self.asm("fence_sys", "", [])
        self.asm("store_u32", "l,r", [entry, I32(1)])
        self.asm("fence_sys", "", [])
