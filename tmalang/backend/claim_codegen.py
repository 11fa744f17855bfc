"""Dynamic tile loops (passes/claim_tiles.py) → LLVM IR: the loop that leaves from its body, the
claim on the global tile counter, and the shared-memory queue words; on a grid of tiles (sm_100a)
the cancel of a CTA not yet started (clusterlaunchcontrol.try_cancel) and the decoding of its answer.

The counter is the kernel's hidden `.u64` parameter `tile_counter` (contract CounterParam), the
global address of a zeroed u32 the runtime keeps per (context, stream). The claim is relaxed: it
needs only its atomicity; the claim's value reaches the other roles through the queue word and
the mbarrier's release/acquire, not through the counter.
"""

from __future__ import annotations

from llvmlite import ir

from ..contract.launch import COUNTER
from ..ir import ops
from . import ptx_asm

I32 = ir.IntType(32)


def _loop(g, o: ops.Loop) -> None:
    """count = 0; body: ... leave_if -> exit ...; count += 1; back to the body."""
    g.b.store(I32(0), _slot(g, o.count))
    body_bb, exit_bb = g.fn.append_basic_block(f"{o.count}.loop"), g.fn.append_basic_block(f"{o.count}.exit")
    g.b.branch(body_bb)
    g.b.position_at_end(body_bb)
    for inner in o.body:
        if isinstance(inner, ops.LeaveIf):
            stay = g.fn.append_basic_block(f"{o.count}.stay")
            g.b.cbranch(g.b.icmp_signed("!=", g.expr(inner.cond), I32(0)), exit_bb, stay)
            g.b.position_at_end(stay)
        else:
            g.op(inner)
    g.b.store(g.b.add(g.b.load(g.vars[o.count]), I32(1)), g.vars[o.count])
    g.b.branch(body_bb)
    g.b.position_at_end(exit_bb)


def _tile_claim(g, o: ops.TileClaim) -> None:
    """One thread: t = atom.add(counter, 1); the launch's last claim (t = tiles + nctaid - 1) puts
    the counter back to 0; t goes into the queue word."""
    counter = g.args[COUNTER]
    claimed = g.asm(ptx_asm.PTX["tile_claim"], "=r,l", [counter], ret=I32)
    last = g.b.add(g.expr(o.tiles), g.b.sub(g._sreg("nctaid.x"), I32(1)))
    g.if_then(g.b.icmp_unsigned("==", claimed, last),
              lambda: g.asm(ptx_asm.PTX["tile_counter_reset"], "l,r", [counter, I32(0)]))
    g.asm(ptx_asm.PTX["st_shared_u32"], "r,r", [g.address(o.slot), claimed])


def _tile_take(g, o: ops.TileTake) -> None:
    g.b.store(g.asm(ptx_asm.PTX["ld_shared_u32"], "=r,r", [g.address(o.slot)], ret=I32), _slot(g, o.var))


def _tile_publish(g, o: ops.TilePublish) -> None:
    g.asm(ptx_asm.PTX["st_shared_u32"], "r,r", [g.address(o.slot), g.expr(o.value)])


def _clc_try_cancel(g, o: ops.ClcTryCancel) -> None:
    g.asm(ptx_asm.PTX["clc_try_cancel"], "r,r", [g.address(o.response), g.address(o.barrier)])


def _clc_query(g, o: ops.ClcQuery) -> None:
    """The canceled CTA's ctaid.x, or `tiles` (a claim past the end) when the cancel failed."""
    tile = g.asm(ptx_asm.PTX["clc_query"], "=r,r,r", [g.address(o.response), g.expr(o.tiles)], ret=I32)
    g.asm(ptx_asm.PTX["st_shared_u32"], "r,r", [g.address(o.slot), tile])


def _slot(g, name: str) -> ir.AllocaInstr:
    if name not in g.vars:
        g.vars[name] = g.alloca(name)
    return g.vars[name]


CLAIM_EMITTERS = {ops.Loop: _loop, ops.TileClaim: _tile_claim, ops.TileTake: _tile_take,
                  ops.TilePublish: _tile_publish, ops.ClcTryCancel: _clc_try_cancel, ops.ClcQuery: _clc_query}
