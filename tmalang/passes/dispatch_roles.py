"""dispatch_roles: the block size, and each role's register budget as setmaxnreg.

Requires: roles with disjoint warp ranges (sema), all other passes done.
Guarantees:
  - `kernel.threads` covers the highest warp any role uses, rounded up to whole warpgroups when
    a role sets a register budget (setmaxnreg acts on a whole warpgroup);
  - each warpgroup with a budget runs one `setmaxnreg inc|dec warpgroup=g` (relative to the
    entry budget `entry_registers(threads)`, which the backend passes to ptxas as .maxnreg, so the
    CTA really owns that many registers at launch) before the roles are dispatched: one
    instruction for all four warps, as `.sync.aligned` requires — the same budget issued from
    different roles' code is not the same instruction, and hangs once warps wait at a barrier;
  - the budgets fit the registers the CTA owns at launch, otherwise setmaxnreg.inc would wait
    forever for registers that are never freed.
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import ops

REGISTER_FILE = 65536


def entry_registers(threads: int) -> int:
    return min(248, REGISTER_FILE // threads // 8 * 8)


def run(kernel: ops.KernelOp) -> None:
    roles = ops.roles(kernel)
    warps = max(r.last_warp for r in roles) + 1
    budgeted = any(r.regs for r in roles)
    if budgeted:
        warps = -(-warps // 4) * 4
    kernel.threads = 32 * warps
    if not budgeted:
        return
    entry = entry_registers(kernel.threads)
    budgets = _warpgroup_budgets(roles, warps)
    demand = sum(128 * (budgets.get(wg) or entry) for wg in range(warps // 4))
    first_role = next(i for i, o in enumerate(kernel.body) if isinstance(o, ops.RoleOp))
    for wg, regs in sorted(budgets.items(), reverse=True):
        if regs != entry:
            action = "inc" if regs > entry else "dec"
            kernel.body.insert(first_role, ops.SetMaxNReg(action, regs, wg, span=kernel.span))
    if demand > entry * kernel.threads:
        loudest = max(roles, key=lambda r: r.regs)
        raise error("E045", f"register budgets need {demand} registers but the CTA owns "
                    f"{entry * kernel.threads} ({kernel.threads} threads x {entry} at launch)", loudest.span,
                    "setmaxnreg.inc would wait forever; lower a budget or use fewer warps")


def _warpgroup_budgets(roles: list[ops.RoleOp], warps: int) -> dict[int, int]:
    """Warpgroup -> register budget, from the roles that own its warps (sema made them agree)."""
    budgets = {}
    for role in roles:
        if role.regs:
            for w in range(role.first_warp, role.last_warp + 1):
                budgets[w // 4] = role.regs
    return budgets
