"""The default pass order, one line each with the reason for its place.

Each entry may name a target feature it needs: a pass that only rewrites wgmma or tcgen05 code
does not run for a target without that instruction family (sema has refused such code there).
Every pass is `run(kernel, target)`; the IR is verified after each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir import ops
from ..ir.printer import print_ir
from ..ir.verifier import verify
from ..targets.arch import Target
from . import (
    claim_tiles,
    confine_idle_waits,
    defer_mma_release,
    dispatch_roles,
    expand_pipelines,
    fence_proxy_writes,
    fence_tensor_memory,
    lower_tile_walk,
    order_slot_release,
    order_turns,
    order_wgmma,
    pair_ctas,
    plan_smem,
    plan_tmem,
    prefetch_own_pipelines,
    schedule_barriers,
    stage_stores,
    wait_wgmma_late,
)


@dataclass(frozen=True)
class Pass:
    name: str
    module: object                 # has run(kernel, target)
    needs: str | None = None       # a Target feature (e.g. "has_tcgen05") without which it is skipped

    def applies_to(self, target: Target) -> bool:
        return self.needs is None or getattr(target, self.needs)


PIPELINE = [
    Pass("stage_stores", stage_stores),              # first: every pass below sees ordinary epilogues,
                                                     # stores and bulk groups
    Pass("prefetch_own_pipelines", prefetch_own_pipelines),  # moves whole produce blocks, before they expand
    Pass("expand_pipelines", expand_pipelines),      # makes every stage, phase and barrier explicit for all below
    Pass("order_wgmma", order_wgmma, "has_wgmma"),   # MMAs complete before anything after them in the slot
    Pass("wait_wgmma_late", wait_wgmma_late, "has_wgmma"),  # before releases are ordered: it places the
                                                     # waits they rely on
    Pass("fence_proxy_writes", fence_proxy_writes),  # needs explicit stores; before releases are ordered
    Pass("order_slot_release", order_slot_release),  # needs fences/syncs in place to know what is ordered
    Pass("confine_idle_waits", confine_idle_waits),  # after releases are ordered: a sync there ties every warp
    Pass("fence_tensor_memory", fence_tensor_memory, "has_tcgen05"),  # every sync and arrive exists; tcgen05 ops
                                                     # fenced around them
    Pass("pair_ctas", pair_ctas, "has_tcgen05"),     # every arrive exists and is fenced; before counting them
    Pass("schedule_barriers", schedule_barriers),    # counts arrivals once every arrive site exists
    Pass("defer_mma_release", defer_mma_release, "has_wgmma"),  # after counting: its tail release is an
                                                     # alternative site
    Pass("order_turns", order_turns),                # last to change what runs inside a turn: it sees
                                                     # every sync and wait the passes above inserted
    Pass("plan_tmem", plan_tmem, "has_tcgen05"),     # after the init sync exists: allocation joins it
    Pass("plan_smem", plan_smem),                    # lays out the buffers and barriers the passes above made
    Pass("dispatch_roles", dispatch_roles),          # sizes the block and budgets registers
    Pass("claim_tiles", claim_tiles),                # after the plan: its queue is placed after the rest; a
                                                     # dynamic tile loop is for_tiles to every pass above
    Pass("lower_tile_walk", lower_tile_walk),        # last: the passes above find the tile loop as for_tiles
]
PASS_NAMES = [p.name for p in PIPELINE]
PASSES = {p.name: p for p in PIPELINE}


@dataclass
class PassLog:
    """What ran: IR snapshots for --print-ir-after, timings for --time-passes."""

    print_after: set[str] = field(default_factory=set)
    snapshots: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)


def run_passes(kernel: ops.KernelOp, target: Target, log: PassLog | None = None) -> ops.KernelOp:
    """Run every pass that applies to `target`, in PIPELINE order, verifying after each."""
    verify(kernel, "lower", ["lower"])
    return run_named(kernel, target, applicable(target), log, done=["lower"])


def run_named(kernel: ops.KernelOp, target: Target, names: list[str], log: PassLog | None = None,
              done: list[str] | None = None) -> ops.KernelOp:
    """Run the passes `names` (from PIPELINE) in that order, verifying the IR after each.

    `done` lists the stages that have already run on `kernel`, whose rules the verifier holds it
    to; by default lowering and every pass for `target` before the first of `names` in PIPELINE
    (`tmalangc opt` runs a few passes on IR printed just before them)."""
    log = log or PassLog()
    done = list(done) if done is not None else stages_before(names[0], target) if names else ["lower"]
    for name in names:
        start = time.perf_counter()
        PASSES[name].module.run(kernel, target)
        done.append(name)
        verify(kernel, name, done)
        log.timings.append((name, time.perf_counter() - start))
        if name in log.print_after or "all" in log.print_after:
            log.snapshots.append((name, print_ir(kernel)))
    return kernel


def applicable(target: Target) -> list[str]:
    """The passes a compilation for `target` runs, in order."""
    return [p.name for p in PIPELINE if p.applies_to(target)]


def stages_before(name: str, target: Target) -> list[str]:
    """The stages that run before pass `name` in a compilation for `target`."""
    return ["lower", *(n for n in PASS_NAMES[: PASS_NAMES.index(name)] if n in applicable(target))]


def summary(name: str) -> str:
    """The first line of a pass's docstring: what it does."""
    return (PASSES[name].module.__doc__ or name).strip().splitlines()[0]
