"""The hardware timeline: %globaltimer stamps at each role's waits, arrivals, TMA issues and MMA
commits, written to a device buffer (layout: contract/timeline.py), read back into the same
Chrome/Perfetto trace the interpreter writes (runtime/timeline.py).

Each stamp is taken by lane 0 of the warp (where an `elect` block runs too), and only in the CTAs
the runtime asked for (`ctas`); the other CTAs test a flag and go on. The flag, the warp's region
and its event count live in registers, set up at the kernel's entry (`prologue`): a stamp is a
clock read and one store, with no load to wait for (reading the count from memory at each stamp
made the recording CTA 2.7 times slower). The count is stored into the region's header at the
end (`epilogue`). A wait gets two stamps (before its first try and after it is satisfied), the
others one, after the op is issued.
"""

from __future__ import annotations


from ..contract.launch import SPANS, TRACED
from ..contract.timeline import BEGIN, END, EVENT_BYTES, FIELDS, GLOBAL, GLOBAL_BYTES, HEADER_BYTES, INSTANT
from ..ir import ops
from . import emit
from .emit import I32, I64

ASM = {
    "globaltimer": emit.GLOBALTIMER,
    "buffer": f"ld.global.u64 $0, {emit.global_operand(GLOBAL, FIELDS['buffer'])};",
    "ctas": f"ld.global.u32 $0, {emit.global_operand(GLOBAL, FIELDS['ctas'])};",
    "capacity": f"ld.global.u32 $0, {emit.global_operand(GLOBAL, FIELDS['capacity'])};",
    "store_count": "st.volatile.global.u32 [$0], $1;",
    "store_event": "st.global.v4.u32 [$0], {$1, $2, $3, $4};",
}

def prologue(g) -> None:
    """At the kernel's entry: whether this thread records, its warp's region, its count, the capacity."""
    emit.define_global(g.module, GLOBAL, GLOBAL_BYTES)
    b = g.b
    capacity = g.asm(ASM["capacity"], "=r", [], ret=I32)
    warps = b.lshr(g._sreg("ntid.x"), I32(5))
    track = b.add(b.mul(g._sreg("ctaid.x"), warps), g.warp)
    region = b.add(I64(HEADER_BYTES), b.mul(b.zext(capacity, I64), I64(EVENT_BYTES)))
    records = b.and_(b.icmp_unsigned("<", g._sreg("ctaid.x"), g.asm(ASM["ctas"], "=r", [], ret=I32)),
                     b.icmp_unsigned("==", g._sreg("laneid"), I32(0)))
    values = {"records": records, "base": b.add(g.asm(ASM["buffer"], "=l", [], ret=I64), b.mul(b.zext(track, I64), region)),
              "count": I32(0), "capacity": capacity}
    g.timeline = {}
    for name, value in values.items():
        g.timeline[name] = g.alloca(f"timeline.{name}", value.type)
        b.store(value, g.timeline[name])


def epilogue(g) -> None:
    """At the kernel's end: each recording warp's count into its region's header."""
    b, slots = g.b, g.timeline
    with b.if_then(b.load(slots["records"]), likely=False):
        g.asm(ASM["store_count"], "l,r", [b.load(slots["base"]), b.load(slots["count"])])


def stamp(g, o: ops.Op, site: int, phase: int) -> None:
    """Record event `site` (BEGIN, END or INSTANT) for this warp, if it records."""
    b, slots = g.b, g.timeline
    barrier = getattr(o, "barrier", None)
    value = g.expr(barrier.index) if barrier is not None else I32(0)
    with b.if_then(b.load(slots["records"]), likely=False):
        count = b.load(slots["count"])
        with b.if_then(b.icmp_unsigned("<", count, b.load(slots["capacity"]))):
            now = g.asm(ASM["globaltimer"], "=l", [], ret=I64)
            at = b.add(b.load(slots["base"]), b.add(I64(HEADER_BYTES), b.mul(b.zext(count, I64), I64(EVENT_BYTES))))
            word = b.or_(I32(phase), b.shl(value, I32(2)))
            g.asm(ASM["store_event"], "l,r,r,r,r", [at, b.trunc(now, I32), b.trunc(b.lshr(now, I64(32)), I32),
                                                     I32(site), word])
            b.store(b.add(count, I32(1)), slots["count"])


def around(g, o: ops.Op, site: int, emit) -> None:
    """Emit `o` between its stamps."""
    spans = TRACED[type(o)] in SPANS
    if spans:
        stamp(g, o, site, BEGIN)
    emit()
    stamp(g, o, site, END if spans else INSTANT)
