"""dispatch_roles: the block size, and each role's register budget as setmaxnreg.

Requires: roles with disjoint warp ranges (sema), all other passes done.
Guarantees:
  - `kernel.threads` covers the highest warp any role uses, rounded up to whole warpgroups when
    a role sets a register budget (setmaxnreg acts on a whole warpgroup);
  - each run of warpgroups with one budget becomes a `warpgroups` block that starts with one
    `setmaxnreg inc|dec` (relative to the entry budget `entry_registers(threads)`, which the
    backend passes to ptxas as .maxnreg, so the CTA owns that many registers at launch) and
    then holds the roles of those warps: one instruction for all their warps, as `.sync.aligned`
    requires (the same budget issued from different roles' code is not one instruction, and
    hung on the H100 once warps waited at a cluster barrier), and it dominates the roles' code,
    so ptxas allocates that code within the new budget;
  - the budgets fit the registers the CTA owns at launch, otherwise setmaxnreg.inc would wait
    forever for registers that are never freed;
  - whatever the budgets, every role's wgmma fits the registers a thread of the role may use
    (`register_limit`: its `regs`, or what the block size leaves each thread), otherwise ptxas
    stops with C7602 ("insufficient registers to compile instruction"): an accumulator's
    fragment cannot be spilled while the instruction runs.
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import ops
from ..targets.arch import Target

REGISTER_FILE = 65536
PTXAS_MAX_REGISTERS = 255
# Registers ptxas needs for one wgmma beside its accumulator fragment (descriptors, addresses,
# predicates): measured with ptxas 13.5, whose C7602 asks for exactly fragment + 26 on sm_90a.
WGMMA_EXTRA_REGISTERS = 26


def entry_registers(threads: int, occupancy: int = 1) -> int:
    """Launch registers a thread of a kernel with budgets: the file shared by `occupancy` CTAs."""
    return min(248, REGISTER_FILE // (threads * occupancy) // 8 * 8)


def launch_registers(kernel: ops.KernelOp) -> int:
    """Registers per thread ptxas may allocate for the kernel: the .maxnreg the backend passes when a
    role sets a budget, otherwise what `.maxntid threads, .minnctapersm 1` leave each thread. The
    register file is four quarters, one per SM sub-partition, and a CTA's warps are spread over
    them, so the busiest quarter holds ceil(warps / 4) warps (ptxas allocates in steps of 8: 17
    warps leave 96 registers, not 65536 / 544)."""
    if any(r.regs for r in ops.roles(kernel)):
        return entry_registers(kernel.threads, kernel.occupancy)
    warps_per_quarter = -(-kernel.threads // 32 // 4) * kernel.occupancy
    return min(PTXAS_MAX_REGISTERS, REGISTER_FILE // 4 // warps_per_quarter // 32 // 8 * 8)


def register_limit(kernel: ops.KernelOp, role: ops.RoleOp | None) -> int:
    """Registers per thread the role's code may use: its budget after setmaxnreg, or the launch one
    (also for kernel-level code, outside every role)."""
    return (role.regs if role is not None else 0) or launch_registers(kernel)


def run(kernel: ops.KernelOp, target: Target) -> None:
    roles = ops.roles(kernel)
    warps = max(r.last_warp for r in roles) + 1
    budgeted = any(r.regs for r in roles)
    if budgeted:
        warps = -(-warps // 4) * 4
    kernel.threads = 32 * warps
    for role in roles:
        _check_wgmma_registers(kernel, role)
    if not budgeted:
        return
    entry = entry_registers(kernel.threads, kernel.occupancy)
    budgets = _warpgroup_budgets(roles, warps)
    demand = sum(128 * (budgets.get(wg) or entry) for wg in range(warps // 4))
    for first, last, regs in reversed(_runs(budgets, entry)):
        inside = [r for r in roles if first <= r.first_warp // 4 and r.last_warp // 4 <= last]
        action = "inc" if regs > entry else "dec"
        block = ops.WarpgroupBlock(first, last, [ops.SetMaxNReg(action, regs, span=kernel.span), *inside],
                                   span=kernel.span)
        at = kernel.body.index(inside[0]) if inside else len(kernel.body)
        kernel.body = [o for o in kernel.body if o not in inside]
        kernel.body.insert(min(at, len(kernel.body)), block)
    if demand > entry * kernel.threads:
        loudest = max(roles, key=lambda r: r.regs)
        shared = f", the file shared by `occupancy {kernel.occupancy}` CTAs" if kernel.occupancy > 1 else ""
        raise error("E045", f"register budgets need {demand} registers but the CTA owns "
                    f"{entry * kernel.threads} ({kernel.threads} threads x {entry} at launch{shared})", loudest.span,
                    "setmaxnreg.inc would wait forever; lower a budget or use fewer warps")


def _check_wgmma_registers(kernel: ops.KernelOp, role: ops.RoleOp) -> None:
    """Each warpgroup of the role holds 64 rows of every accumulator: cols / 2 f32 per thread."""
    limit = register_limit(kernel, role)
    for acc in (o for o in ops.walk(role.body) if isinstance(o, ops.AccDecl)):
        fragment = 64 * acc.shape[1] // 128
        need = fragment + WGMMA_EXTRA_REGISTERS
        if need <= limit:
            continue
        if role.regs:
            why = f"role '{role.symbol}' has a budget of {role.regs}"
            fix = f"raise its `regs` to at least {-(-need // 8) * 8}"
        else:
            why = f"with {kernel.threads} threads in the block, a thread may use {limit}"
            fix = "use fewer warps (the highest warp sets the block size)"
        raise error("E045", f"accumulator '{acc.symbol}' needs {fragment} registers per thread and its wgmma "
                    f"{need}, but {why}", acc.span, fix + ", or use fewer accumulator columns",
                    "ptxas cannot spill an accumulator while its wgmma runs")


def _runs(budgets: dict[int, int], entry: int) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive warpgroups sharing a budget other than the entry one."""
    runs: list[tuple[int, int, int]] = []
    for wg, regs in sorted(budgets.items()):
        if regs == entry:
            continue
        if runs and runs[-1][1] == wg - 1 and runs[-1][2] == regs:
            runs[-1] = (runs[-1][0], wg, regs)
        else:
            runs.append((wg, wg, regs))
    return runs


def _warpgroup_budgets(roles: list[ops.RoleOp], warps: int) -> dict[int, int]:
    """Warpgroup -> register budget, from the roles that own its warps (sema made them agree)."""
    budgets = {}
    for role in roles:
        if role.regs:
            for w in range(role.first_warp, role.last_warp + 1):
                budgets[w // 4] = role.regs
    return budgets
