"""The default pass order, one line each with the reason for its place."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..ir import ops
from ..ir.verifier import verify
from . import (
    confine_idle_waits,
    defer_mma_release,
    dispatch_roles,
    expand_pipelines,
    fence_proxy_writes,
    fence_tensor_memory,
    lower_tile_walk,
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
    ("dispatch_roles", dispatch_roles),          # sizes the block and budgets registers
    ("lower_tile_walk", lower_tile_walk),        # last: the passes above find the tile loop as for_tiles
]
PASS_NAMES = [name for name, _ in PIPELINE]


@dataclass
class PassLog:
    """What ran: IR snapshots for --print-ir-after, timings for --time-passes."""

    print_after: set[str] = field(default_factory=set)
    snapshots: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)


def run_passes(kernel: ops.KernelOp, log: PassLog | None = None) -> ops.KernelOp:
    from ..ir.printer import print_ir

    log = log or PassLog()
    done = ["lower"]
    verify(kernel, "lower", done)
    for name, module in PIPELINE:
        start = time.perf_counter()
        module.run(kernel)
        done.append(name)
        verify(kernel, name, done)
        log.timings.append((name, time.perf_counter() - start))
        if name in log.print_after or "all" in log.print_after:
            log.snapshots.append((name, print_ir(kernel)))
    return kernel
