"""The hardware timeline: %globaltimer stamps at each role's waits, arrivals, TMA issues and MMA
commits, written to a device buffer (layout: contract/timeline.py), read back into the same
Chrome/Perfetto trace the interpreter writes (runtime/timeline.py).

Each stamp is taken by one elected lane of the warp, and only in the CTAs the runtime asked for
(`ctas`); the other CTAs test their index against it and go on. A warp appends to its own region,
so no atomics: read the count, write the event, write the count. A wait gets two stamps (before
its first try and after it is satisfied), the others one, after the op is issued.
"""

from __future__ import annotations

from llvmlite import ir

from ..contract.manifest import EventSite
from ..contract.timeline import BEGIN, END, EVENT_BYTES, FIELDS, GLOBAL, GLOBAL_BYTES, HEADER_BYTES, INSTANT
from ..ir import ops

I32, I64 = ir.IntType(32), ir.IntType(64)
_SYMBOL = GLOBAL.replace("$", "$$")   # as an inline-asm template spells a literal `$`

ASM = {
    "globaltimer": "mov.u64 $0, %globaltimer;",
    "elect_active": "{ .reg .b32 m; .reg .pred p; activemask.b32 m; elect.sync _|p, m; selp.b32 $0, 1, 0, p; }",
    "buffer": f"ld.global.u64 $0, [{_SYMBOL}+{FIELDS['buffer']}];",
    "ctas": f"ld.global.u32 $0, [{_SYMBOL}+{FIELDS['ctas']}];",
    "capacity": f"ld.global.u32 $0, [{_SYMBOL}+{FIELDS['capacity']}];",
    "count": "ld.volatile.global.u32 $0, [$1];",
    "store_count": "st.volatile.global.u32 [$0], $1;",
    "store_event": "st.global.v4.u32 [$0], {$1, $2, $3, $4};",
}

# op class -> the kind of event; a wait or sync spans its blocking, the rest are instants
TRACED = {
    ops.MbarWait: "wait",
    ops.Sync: "sync",
    ops.MbarArrive: "arrive",
    ops.MbarArriveCluster: "arrive",
    ops.MbarArriveExpectTx: "arrive",
    ops.TmaLoad: "tma load",
    ops.TmaStore: "tma store",
    ops.WgmmaCommit: "mma commit",
}
SPANS = {"wait", "sync"}


def event_sites(kernel: ops.KernelOp) -> list[tuple[ops.Op, EventSite]]:
    """Every op the timeline stamps, in emission order, with its name and place."""
    found: list[tuple[ops.Op, EventSite]] = []

    def visit(region, role: str, span) -> None:
        for o in region:
            here = o.span or span
            kind = TRACED.get(type(o))
            if kind is not None and role != "-" and not (kind == "sync" and o.scope != "role"):
                where = here.location() if here else "?"
                found.append((o, EventSite(kind, role, _name(o, kind), where)))
            for r in o.regions():
                visit(r, o.symbol if isinstance(o, ops.RoleOp) else role, here)

    visit(kernel.body, "-", kernel.span)
    return found


def _name(o: ops.Op, kind: str) -> str:
    if kind in ("tma load", "tma store"):
        return f"{kind} {o.box}"
    if kind in ("wait", "arrive"):
        return f"{kind} {o.barrier.name}"
    return kind


def stamp(g, o: ops.Op, site: int, phase: int) -> None:
    """Record event `site` (BEGIN, END or INSTANT) for this warp, if its CTA is traced."""
    _state(g.module)
    b = g.b
    barrier = getattr(o, "barrier", None)
    value = g.expr(barrier.index) if barrier is not None else I32(0)
    traced = b.icmp_unsigned("<", g._sreg("ctaid.x"), g.asm(ASM["ctas"], "=r", [], ret=I32))
    with b.if_then(traced, likely=False):
        leader = b.icmp_unsigned("!=", g.asm(ASM["elect_active"], "=r", [], ret=I32), I32(0))
        with b.if_then(leader):
            _append(g, site, phase, value)


def _append(g, site: int, phase: int, value: ir.Value) -> None:
    b = g.b
    capacity = g.asm(ASM["capacity"], "=r", [], ret=I32)
    warps = b.lshr(g._sreg("ntid.x"), I32(5))
    track = b.add(b.mul(g._sreg("ctaid.x"), warps), b.lshr(g._sreg("tid.x"), I32(5)))
    region = b.add(I64(HEADER_BYTES), b.mul(b.zext(capacity, I64), I64(EVENT_BYTES)))
    base = b.add(g.asm(ASM["buffer"], "=l", [], ret=I64), b.mul(b.zext(track, I64), region))
    count = g.asm(ASM["count"], "=r,l", [base], ret=I32)
    with b.if_then(b.icmp_unsigned("<", count, capacity)):
        now = g.asm(ASM["globaltimer"], "=l", [], ret=I64)
        at = b.add(base, b.add(I64(HEADER_BYTES), b.mul(b.zext(count, I64), I64(EVENT_BYTES))))
        word = b.or_(I32(phase), b.shl(value, I32(2)))
        g.asm(ASM["store_event"], "l,r,r,r,r", [at, b.trunc(now, I32), b.trunc(b.lshr(now, I64(32)), I32),
                                                 I32(site), word])
        g.asm(ASM["store_count"], "l,r", [base, b.add(count, I32(1))])


def around(g, o: ops.Op, site: int, emit) -> None:
    """Emit `o` between its stamps."""
    spans = TRACED[type(o)] in SPANS
    if spans:
        stamp(g, o, site, BEGIN)
    emit()
    stamp(g, o, site, END if spans else INSTANT)


def _state(module: ir.Module) -> None:
    if module.globals.get(GLOBAL) is None:
        state = ir.GlobalVariable(module, ir.ArrayType(I64, GLOBAL_BYTES // 8), GLOBAL, addrspace=1)
        state.initializer = ir.Constant(state.value_type, None)
        state.align = 8
