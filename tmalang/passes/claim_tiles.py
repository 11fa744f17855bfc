"""claim_tiles: a dynamic tile loop takes its tiles one claim at a time, each claim shared by every
role of the CTA through a shared-memory queue. On a persistent grid a claim is a step of a global
counter; on a grid of tiles (sm_100a) a CTA starts with its own tile and then claims the tile of
a CTA it cancels before that CTA starts (cluster launch control, at the end of this docstring).

Requires: the smem plan is made (plan_smem) and the block sized; the tile loops are still
`for_tiles` (it runs just before lower_tile_walk); sema allowed `dynamic` only in one-CTA
clusters of a persistent grid, or of a grid of tiles on sm_100a, one such loop per role, all
loops agreeing.
Guarantees: no dynamic `for_tiles` remains. In the kernel: `@claims.queue` (2 u32 words) and
mbarriers `@claims.full` (count 1) and `@claims.empty` (one arrival per role that walks the
tiles), 2 stages each, placed after the plan and initialised with the others. In each role, with
I the loop's index and the vals of the static walk before the loop (lower_tile_walk.tile_space):

    loop count=I {
      val %I.slot = I mod 2,  val %I.round = (I / 2) & 1
      elect role {                                   the claimer only: the first role that walks
        mbar_wait @claims.empty[slot] parity=1 - round   the slot's previous claim was read by all
        tile_claim slot=@claims.queue[slot] tiles=%I.tiles      atom.global.add, st.shared
        mbar_arrive @claims.full[slot]               release: the claim is in the slot
      }
      mbar_wait @claims.full[slot] parity=round
      tile_take var=I.tile slot=@claims.queue[slot]  every thread reads the claim
      sync role                                      every thread of the role has read it ..
      elect role { mbar_arrive @claims.empty[slot] } .. before the slot may be claimed into again
      leave_if cond=(%I.tile + 1 > %I.tiles)         a claim past the end: no more tiles
      the coordinates of %I.tile (as the static walk binds them), body
    }

Tiles go out in linear order (the static walk's order: bands and split parts included) to the
CTA that asks next, so a CTA that finishes early takes more. Every CTA leaves after exactly one
claim past the end, which its claimer publishes like any other: the roles leave together.

Reset without a memset: tiles t < `tiles` are claimed once each, and each of the nctaid CTAs
claims exactly once past the end, so a launch makes exactly tiles + nctaid claims, which return
0 .. tiles + nctaid - 1 in the counter's order. The claim that returns tiles + nctaid - 1 is the
last one of the launch: no claim follows it, so its thread stores 0 back (tile_claim does), and
the next launch on the stream, which starts after this one ends, finds the counter at 0. The
runtime gives each (context, stream) its own counter, so launches that may overlap never share.

On a grid of tiles (one CTA per tile, sm_100a) there is no counter: the claimer's elected thread
replaces tile_claim with

        if (1 > I) { tile_publish slot value=ctaid.x }            the first claim: its own tile
        if (I > 0) {
          mbar_arrive_expect_tx @claims.cancel[0] bytes=16      the response's 16 bytes
          clc_try_cancel response=@claims.response[0] barrier=@claims.cancel[0]
          mbar_wait @claims.cancel[0] parity=(I + 1) & 1        = (I - 1) & 1: one cancel per claim
          clc_query slot response tiles=%I.tiles                canceled ? its ctaid.x : tiles
        }

and declares `@claims.response` (a 16-byte tile_queue, words=4) and `@claims.cancel` (count 1).
A canceled CTA never runs, so its tile is taken exactly once, by the CTA that canceled it; a
CTA that is not canceled runs its own. A failed cancel publishes `tiles`, a claim past the end,
and the walk leaves, so no CTA cancels again after one failed (the PTX ISA leaves that undefined).
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target
from . import plan_smem
from .lower_tile_walk import tile_space
from .rewrite import rewrite

SLOTS = 2
QUEUE, FULL, EMPTY = "claims.queue", "claims.full", "claims.empty"
RESPONSE, CANCEL = "claims.response", "claims.cancel"   # a grid of tiles: cluster launch control
RESPONSE_BYTES = 16


def run(kernel: ops.KernelOp, target: Target) -> None:
    walkers = [r for r in ops.roles(kernel) if any(_dynamic(o) for o in ops.walk(r.body))]
    if not walkers:
        return
    _declare(kernel, target, len(walkers))
    for role in walkers:
        claimer = role is walkers[0]
        role.body = rewrite(role.body, lambda o: _lower(kernel, o, claimer) if _dynamic(o) else [o])


def _cancels(kernel: ops.KernelOp) -> bool:
    """A grid of tiles claims by cancelling CTAs not yet started; a persistent grid, by its counter."""
    return kernel.grid == "tiles"


def _dynamic(o: ops.Op) -> bool:
    return isinstance(o, ops.ForTiles) and o.dynamic


def _declare(kernel: ops.KernelOp, target: Target, roles: int) -> None:
    """The queue and its barriers, after the smem plan, initialised with the kernel's barriers."""
    span = kernel.span
    full = ops.MbarrierDecl(FULL, SLOTS, 1, 0, plan_smem.extend(kernel, target, 8 * SLOTS, 8), span=span)
    kernel.body.insert(_after_decls(kernel), full)
    empty = ops.MbarrierDecl(EMPTY, SLOTS, roles, 0, plan_smem.extend(kernel, target, 8 * SLOTS, 8), span=span)
    kernel.body.insert(_after_decls(kernel), empty)
    queue = ops.TileQueueDecl(QUEUE, SLOTS, plan_smem.extend(kernel, target, 4 * SLOTS, 4), span=span)
    kernel.body.insert(_after_decls(kernel), queue)
    bars = [full, empty]
    if _cancels(kernel):
        cancel = ops.MbarrierDecl(CANCEL, 1, 1, 0, plan_smem.extend(kernel, target, 8, 8), span=span)
        kernel.body.insert(_after_decls(kernel), cancel)
        bars.append(cancel)
        offset = plan_smem.extend(kernel, target, RESPONSE_BYTES, RESPONSE_BYTES)   # naturally aligned
        kernel.body.insert(_after_decls(kernel), ops.TileQueueDecl(RESPONSE, 1, offset, RESPONSE_BYTES // 4,
                                                                   span=span))
    inits = [ops.MbarInit(ex.BufferRef(d.symbol, ex.Const(s)), d.count, span=span)
             for d in bars for s in range(d.stages)]
    init = next((o for o in kernel.body if isinstance(o, ops.Elect) and o.scope == "block"
                 and o.body and isinstance(o.body[-1], ops.Fence) and o.body[-1].kind == "mbarrier_init"), None)
    if init is not None:   # schedule_barriers' initialisation: before its fence
        init.body[-1:-1] = inits
        return
    first_role = next(i for i, o in enumerate(kernel.body) if isinstance(o, (ops.RoleOp, ops.WarpgroupBlock)))
    kernel.body[first_role:first_role] = [ops.Elect("block", [*inits, ops.Fence("mbarrier_init", span=span)],
                                                    span=span), ops.Sync("block", span=span)]


def _after_decls(kernel: ops.KernelOp) -> int:
    """Where a new declaration goes: after the last one (decls come before the roles)."""
    kinds = (ops.TensorDecl, ops.ScalarDecl, ops.BoxDecl, ops.BufferDecl, ops.MbarrierDecl, ops.TmemDecl,
             ops.TileQueueDecl)
    return max(i for i, o in enumerate(kernel.body) if isinstance(o, kinds)) + 1


def _lower(kernel: ops.KernelOp, o: ops.ForTiles, claimer: bool) -> list[ops.Op]:
    prologue, coords, _ = tile_space(kernel, o)
    var = lambda suffix: ex.Var(f"{o.index}.{suffix}")   # noqa: E731
    at = lambda name: ex.BufferRef(name, var("slot"))     # noqa: E731
    span = o.span
    head: list[ops.Op] = [
        ops.Val(f"{o.index}.slot", ex.Bin("urem", ex.Var(o.index), ex.Const(SLOTS)), span=span),
        ops.Val(f"{o.index}.round", ex.Bin("&", ex.Bin("udiv", ex.Var(o.index), ex.Const(SLOTS)), ex.Const(1)),
                span=span),
    ]
    if claimer:
        claim = _cancel_claim(o, at(QUEUE)) if _cancels(kernel) else [ops.TileClaim(at(QUEUE), var("tiles"), span=span)]
        head.append(ops.Elect("role", [
            ops.MbarWait(at(EMPTY), ex.other_parity(var("round")), span=span),
            *claim,
            ops.MbarArrive(at(FULL), span=span),
        ], span=span))
    head += [
        ops.MbarWait(at(FULL), var("round"), span=span),
        ops.TileTake(f"{o.index}.tile", at(QUEUE), span=span),
        ops.Sync("role", span=span),
        ops.Elect("role", [ops.MbarArrive(at(EMPTY), span=span)], span=span),
        ops.LeaveIf(ex.Bin(">", ex.add(var("tile"), ex.Const(1)), var("tiles")), span=span),
    ]
    return prologue + [ops.Loop(o.index, head + coords + o.body, span=span)]


def _cancel_claim(o: ops.ForTiles, slot: ex.BufferRef) -> list[ops.Op]:
    """A grid of tiles' claim into `slot`: its own tile first, then the tile of each CTA it cancels."""
    span, count = o.span, ex.Var(o.index)
    response, cancel = ex.BufferRef(RESPONSE, ex.Const(0)), ex.BufferRef(CANCEL, ex.Const(0))
    return [
        ops.If(ex.Bin(">", ex.Const(1), count), [ops.TilePublish(slot, ex.Sreg("ctaid.x"), span=span)], span=span),
        ops.If(ex.Bin(">", count, ex.Const(0)), [
            ops.MbarArriveExpectTx(cancel, ex.Const(RESPONSE_BYTES), span=span),
            ops.ClcTryCancel(response, cancel, span=span),
            ops.MbarWait(cancel, ex.Bin("&", ex.add(count, ex.Const(1)), ex.Const(1)), span=span),
            ops.ClcQuery(slot, response, ex.Var(f"{o.index}.tiles"), span=span),
        ], span=span),
    ]
