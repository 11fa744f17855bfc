"""The default pass order, one line each with the reason for its place."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir import ops
from ..ir.printer import print_ir
from ..ir.verifier import verify
from . import (
    confine_idle_waits,
    defer_mma_release,
    dispatch_roles,
    expand_pipelines,
    fence_proxy_writes,
    fence_tensor_memory,
    order_slot_release,
    order_wgmma,
    pair_ctas,
    plan_smem,
    plan_tmem,
    prefetch_own_pipelines,
    schedule_barriers,
)

PIPELINE = [
    ("prefetch_own_pipelines", prefetch_own_pipelines),  # moves whole produce blocks, before they expand
    ("expand_pipelines", expand_pipelines),      # makes every stage, phase and barrier explicit for all below
    ("order_wgmma", order_wgmma),                # MMAs complete before anything after them in the slot
    ("fence_proxy_writes", fence_proxy_writes),  # needs explicit stores; before releases are ordered
    ("order_slot_release", order_slot_release),  # needs fences/syncs in place to know what is ordered
    ("confine_idle_waits", confine_idle_waits),  # after releases are ordered: a sync there ties every warp
    ("fence_tensor_memory", fence_tensor_memory),  # every sync and arrive exists; tcgen05 ops fenced around them
    ("pair_ctas", pair_ctas),                    # every arrive exists and is fenced; before counting them
    ("schedule_barriers", schedule_barriers),    # counts arrivals once every arrive site exists
    ("defer_mma_release", defer_mma_release),    # after counting: its tail release is an alternative site
    ("plan_tmem", plan_tmem),                    # after the init sync exists: allocation joins it
    ("plan_smem", plan_smem),                    # lays out the buffers and barriers the passes above made
    ("dispatch_roles", dispatch_roles),          # last: sizes the block and budgets registers
]
PASS_NAMES = [name for name, _ in PIPELINE]


@dataclass
class PassLog:
    """What ran: IR snapshots for --print-ir-after, timings for --time-passes."""

    print_after: set[str] = field(default_factory=set)
    snapshots: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)


def run_passes(kernel: ops.KernelOp, log: PassLog | None = None) -> ops.KernelOp:
    verify(kernel, "lower", ["lower"])
    return run_named(kernel, PASS_NAMES, log, done=["lower"])


def run_named(kernel: ops.KernelOp, names: list[str], log: PassLog | None = None,
              done: list[str] | None = None) -> ops.KernelOp:
    """Run the passes `names` (from PIPELINE) in that order, verifying the IR after each.

    `done` lists the stages that have already run on `kernel`, whose rules the verifier holds it
    to; by default lowering and every pass before the first of `names` in PIPELINE (`tmalangc
    opt` runs a few passes on IR printed just before them)."""
    modules = dict(PIPELINE)
    log = log or PassLog()
    done = list(done) if done is not None else stages_before(names[0]) if names else ["lower"]
    for name in names:
        start = time.perf_counter()
        modules[name].run(kernel)
        done.append(name)
        verify(kernel, name, done)
        log.timings.append((name, time.perf_counter() - start))
        if name in log.print_after or "all" in log.print_after:
            log.snapshots.append((name, print_ir(kernel)))
    return kernel


def stages_before(name: str) -> list[str]:
    """The stages that run before pass `name` in a compilation."""
    return ["lower", *PASS_NAMES[: PASS_NAMES.index(name)]]


def summary(name: str) -> str:
    """The first line of a pass's docstring: what it does."""
    return (dict(PIPELINE)[name].__doc__ or name).strip().splitlines()[0]
