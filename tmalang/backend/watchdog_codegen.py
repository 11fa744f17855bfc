"""The watchdog of every mbarrier wait loop: a hang on the GPU names its barrier.

A wait tries the phase once; only if it is not done yet does the warp enter the slow loop, which
also reads %globaltimer. When a warp has waited longer than the timeout, it *fires*: the lowest
active lane claims an entry of the report (a small host-mapped record the runtime gave the module)
and writes what it waited on — the wait site, CTA, cluster rank, warp, lane, the barrier's offset,
the parity it waited for, the parity of the phase in progress, the raw barrier word and the
timeout it ran out of — then fences it to the system. The first warp to fire waits a short grace period, so
that the other warps stuck in the same hang (they usually block within microseconds of each
other) report too, and traps; the others park until the trap ends the grid. The runtime turns
the launch failure into an E218 diagnostic that names each site as the interpreter's E401 does
(runtime/watchdog.py).

The fast path (the phase is already done) is the same code as without the watchdog; its cost is
paid only by a warp that has to wait anyway. Named barriers (bar.sync) cannot time out; the
compiler's own ones wait only for warps of the same role or turn, and a warp that never reaches
one is itself stuck in an mbarrier wait whose watchdog traps the whole grid.

The module global and the report's layout are contract/watchdog.py's.
"""

from __future__ import annotations

from llvmlite import ir

from ..contract.manifest import WaitSite
from ..contract.watchdog import DEFAULT_TIMEOUT_NS, ENTRIES, ENTRY_WORDS, GLOBAL
from ..ir import ops
from . import ptx_asm

I32, I64 = ir.IntType(32), ir.IntType(64)
TICK_SHIFT = 20                   # the slow loop's clock counts 2**20 ns (~1 ms) ticks
GRACE_NS = 50_000_000             # the first warp to fire waits this long for the others' entries
FIRE = "tmalang$watchdog_fire"
_SYMBOL = GLOBAL.replace("$", "$$")   # as an inline-asm template spells a literal `$`

ASM = {
    "globaltimer": "mov.u64 $0, %globaltimer;",
    "elect_active": "{ .reg .b32 m; .reg .pred p; activemask.b32 m; elect.sync _|p, m; selp.b32 $0, 1, 0, p; }",
    "phase_parity": "{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [$1], 0; selp.b32 $0, 1, 0, p; }",
    "barrier_word": "ld.volatile.shared.b64 $0, [$1];",
    "store_v4": "st.volatile.global.v4.u32 [$0], {$1, $2, $3, $4};",
    "store_u32": "st.volatile.global.u32 [$0], $1;",
    "fence_sys": "fence.sc.sys;",
    "nanosleep": "nanosleep.u32 100000;",
    "trap": "trap;",
    # the module global's fields, addressed by symbol in the instruction itself: through an LLVM
    # pointer, ptxas materialised the address before the wait's first try and kept it live there
    "record": f"ld.global.u64 $0, [{_SYMBOL}];",
    "timeout": f"ld.global.u64 $0, [{_SYMBOL}+8];",
    "tag": f"ld.global.u32 $0, [{_SYMBOL}+16];",
    "claim": f"atom.global.add.u32 $0, [{_SYMBOL}+20], 1;",
}


def wait_sites(kernel: ops.KernelOp, source: str) -> list[tuple[ops.MbarWait, WaitSite]]:
    """Every mbarrier wait of the final IR in emission order, with the facts the runtime reports;
    a wait a pass made without a span gets the span of the statement around it."""
    barriers = ops.decls(kernel, ops.MbarrierDecl)
    found: list[tuple[ops.MbarWait, WaitSite]] = []

    def visit(region, role: str, span) -> None:
        for o in region:
            here = o.span or span
            if isinstance(o, ops.RoleOp):
                role = o.symbol
            if isinstance(o, ops.MbarWait):
                decl = barriers[o.barrier.name]
                found.append((o, _site(role, decl, here, source)))
            for r in o.regions():
                visit(r, o.symbol if isinstance(o, ops.RoleOp) else role, here)

    visit(kernel.body, "-", kernel.span)
    return found


def _site(role: str, decl: ops.MbarrierDecl, span, source: str) -> WaitSite:
    if span is None:
        return WaitSite(role, decl.symbol, decl.offset, decl.stages, source, 0, 0, 0, "")
    end = span.end_col if span.end_line == span.line else len(span.source.line(span.line)) + 1
    return WaitSite(role, decl.symbol, decl.offset, decl.stages, span.source.name, span.line, span.col, end,
                    span.source.line(span.line))


def emit_wait(g, o: ops.MbarWait, site: int) -> None:
    """`o`'s wait loop with the watchdog: try once; then loop on try_wait and the clock.

    The slow loop holds no more registers than the plain one: its deadline, in TICK_NS units of
    %globaltimer, shares one with the parity (deadline << 1 | parity; 31 bits of ~1 ms ticks wrap
    after 24 days, and the comparison is wrap-safe). Kernels at their register budget
    (attention_sm90) spilled for one more."""
    addr, parity = g.address(o.barrier), g.expr(o.parity)
    slow, loop, check, done = (g.fn.append_basic_block(n) for n in ("wait.slow", "wait.loop", "wait.check", "waited"))
    g.b.cbranch(_ready(g, addr, parity), done, slow)
    g.b.position_at_end(slow)
    deadline = g.b.add(_ticks(g), _timeout_ticks(g))
    # opaque to LLVM, which would otherwise see that `packed & 1` is `parity & 1` and keep both live
    packed = g.asm("mov.b32 $0, $1;", "=r,r", [g.b.or_(g.b.shl(deadline, I32(1)), g.b.and_(parity, I32(1)))], ret=I32)
    g.b.branch(loop)
    g.b.position_at_end(loop)
    g.b.cbranch(_ready(g, addr, g.b.and_(packed, I32(1))), done, check)
    g.b.position_at_end(check)
    late = g.b.icmp_signed(">", g.b.sub(g.b.shl(_ticks(g), I32(1)), g.b.and_(packed, I32(-2 & 0xFFFFFFFF))), I32(0))
    with g.b.if_then(late, likely=False):
        g.b.call(_fire_function(g), [I32(site), addr, g.b.and_(packed, I32(1))])
        g.b.unreachable()
    g.b.branch(loop)
    g.b.position_at_end(done)


def _ready(g, addr, parity) -> ir.Value:
    return g.b.icmp_unsigned("!=", g.asm(ptx_asm.PTX["mbar_try_wait"], "=r,r,r", [addr, parity], ret=I32), I32(0))


def _ticks(g) -> ir.Value:
    return g.b.trunc(g.b.lshr(g.asm(ASM["globaltimer"], "=l", [], ret=I64), I64(TICK_SHIFT)), I32)


def _state(module: ir.Module) -> ir.GlobalVariable:
    """The module's `tmalang$watchdog` (defined once, zero until the runtime writes it)."""
    existing = module.globals.get(GLOBAL)
    if existing is not None:
        return existing
    state = ir.GlobalVariable(module, ir.LiteralStructType([I64, I64, I32, I32]), GLOBAL, addrspace=1)
    state.initializer = ir.Constant(state.value_type, None)
    state.align = 8
    return state


def _timeout_ticks(g) -> ir.Value:
    _state(g.module)
    configured = g.asm(ASM["timeout"], "=l", [], ret=I64)
    ns = g.b.select(g.b.icmp_unsigned("==", configured, I64(0)), I64(DEFAULT_TIMEOUT_NS), configured)
    return g.b.trunc(g.b.lshr(ns, I64(TICK_SHIFT)), I32)


def _fire_function(g) -> ir.Function:
    """`fire(site, addr, parity)`: report and trap; never returns. Defined once and
    inlined at each site: as a call, ptxas saved the caller's registers around it (attention_sm90
    spilled 52 bytes), though it never returns."""
    existing = g.module.globals.get(FIRE)
    if existing is not None:
        return existing
    fn = ir.Function(g.module, ir.FunctionType(ir.VoidType(), [I32, I32, I32]), FIRE)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("noreturn")
    _FireBody(g, fn).emit()
    return fn


class _FireBody:
    def __init__(self, g, fn: ir.Function):
        self.g, self.fn = g, fn
        self.b = ir.IRBuilder(fn.append_basic_block("fire"))
        _state(g.module)

    def asm(self, key: str, constraints: str, args: list, ret: ir.Type = ir.VoidType()) -> ir.Value:
        constraints = f"{constraints},~{{memory}}" if constraints else "~{memory}"
        asm = ir.InlineAsm(ir.FunctionType(ret, [a.type for a in args]), ASM[key], constraints, side_effect=True)
        return self.b.call(asm, args)

    def sreg(self, name: str) -> ir.Value:
        module = self.g.module
        fn = module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(I32, []), f"llvm.nvvm.read.ptx.sreg.{name}")
        return self.b.call(fn, [])

    def emit(self) -> None:
        site, addr, parity = self.fn.args
        b = self.b
        # the barrier's offset from the aligned base, recomputed here from the window's symbol:
        # passing it (or the base) from the wait site cost attention_sm90 a spill
        offset = b.sub(addr, self.g.aligned_smem_base(b))
        park = self.fn.append_basic_block("park")
        leader = b.icmp_unsigned("!=", self.asm("elect_active", "=r", [], I32), I32(0))
        with b.if_then(leader):
            index = self.asm("claim", "=r", [], I32)
            record = self.asm("record", "=l", [], I64)
            writable = b.and_(b.icmp_unsigned("!=", record, I64(0)), b.icmp_unsigned("<", index, I32(ENTRIES)))
            with b.if_then(writable):
                entry = b.add(record, b.mul(b.zext(index, I64), I64(4 * ENTRY_WORDS)))
                self.write_entry(entry, [site, self.asm("tag", "=r", [], I32), self.sreg("ctaid.x"),
                                         self.sreg("ctaid.y"), self.sreg("ctaid.z"), self.sreg("cluster.ctarank"),
                                         b.lshr(self.sreg("tid.x"), I32(5)), self.sreg("laneid"), offset, parity,
                                         self.asm("phase_parity", "=r,r", [addr], I32)],
                                 self.asm("barrier_word", "=l,r", [addr], I64), self.asm("timeout", "=l", [], I64))
            with b.if_then(b.icmp_unsigned("==", index, I32(0))):
                self.trap_after_grace()
        b.branch(park)
        b.position_at_end(park)   # until the first warp's trap ends the grid
        self.asm("nanosleep", "", [])
        b.branch(park)

    def write_entry(self, entry: ir.Value, words: list[ir.Value], barrier_word: ir.Value, timeout: ir.Value) -> None:
        b = self.b

        def halves(v):
            return [b.trunc(v, I32), b.trunc(b.lshr(v, I64(32)), I32)]

        body = [*words, *halves(barrier_word), *halves(timeout)]   # words 1..15
        assert len(body) == ENTRY_WORDS - 1
        self.asm("store_u32", "l,r", [b.add(entry, I64(4)), body[0]])
        self.asm("store_u32", "l,r", [b.add(entry, I64(8)), body[1]])
        self.asm("store_u32", "l,r", [b.add(entry, I64(12)), body[2]])
        for at in range(3, 15, 4):
            self.asm("store_v4", "l,r,r,r,r", [b.add(entry, I64(4 * (at + 1))), *body[at:at + 4]])
        self.asm("fence_sys", "", [])
        self.asm("store_u32", "l,r", [entry, I32(1)])
        self.asm("fence_sys", "", [])

    def trap_after_grace(self) -> None:
        b = self.b
        start = self.asm("globaltimer", "=l", [], I64)
        wait = self.fn.append_basic_block("grace")
        b.branch(wait)
        b.position_at_end(wait)
        self.asm("nanosleep", "", [])
        elapsed = b.sub(self.asm("globaltimer", "=l", [], I64), start)
        over = b.icmp_unsigned(">", elapsed, I64(GRACE_NS))
        trap = self.fn.append_basic_block("trap")
        b.cbranch(over, trap, wait)
        b.position_at_end(trap)
        self.asm("trap", "", [])
        b.unreachable()
