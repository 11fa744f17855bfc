"""dispatch_roles: the block size, and each role's register budget as setmaxnreg.

Requires: roles with disjoint warp ranges (sema), all other passes done.
Guarantees:
  - `kernel.threads` covers the highest warp any role uses, rounded up to whole warpgroups when
    a role sets a register budget (setmaxnreg acts on a whole warpgroup);
  - each role with `regs` begins with `setmaxnreg inc|dec` relative to the entry budget
    `entry_registers(threads)` (the backend passes it to ptxas as .maxnreg, so the CTA really
    owns that many registers at launch), and warps of such a warpgroup that no role owns get an
    empty role that only gives its registers back;
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
    _pad_warpgroups(kernel, roles, warps)
    entry = entry_registers(kernel.threads)
    demand = 0
    for role in ops.roles(kernel):
        count = 32 * (role.last_warp - role.first_warp + 1)
        demand += count * (role.regs or entry)
        if role.regs and role.regs != entry:
            action = "inc" if role.regs > entry else "dec"
            role.body.insert(0, ops.SetMaxNReg(action, role.regs, span=role.span))
    if demand > entry * kernel.threads:
        loudest = max(roles, key=lambda r: r.regs)
        raise error("E045", f"register budgets need {demand} registers but the CTA owns "
                    f"{entry * kernel.threads} ({kernel.threads} threads x {entry} at launch)", loudest.span,
                    "setmaxnreg.inc would wait forever; lower a budget or use fewer warps")


def _pad_warpgroups(kernel: ops.KernelOp, roles: list[ops.RoleOp], warps: int) -> None:
    owned = {w: r for r in roles for w in range(r.first_warp, r.last_warp + 1)}
    for wg in range(warps // 4):
        members = [owned.get(w) for w in range(4 * wg, 4 * wg + 4)]
        budget = next((r.regs for r in members if r is not None and r.regs), 0)
        idle = [w for w, r in zip(range(4 * wg, 4 * wg + 4), members) if r is None]
        if budget and idle:
            for first, last in _runs(idle):
                kernel.body.append(ops.RoleOp(f"idle.w{first}", first, last, budget, [], span=kernel.span))


def _runs(warps: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for w in warps:
        if runs and runs[-1][1] == w - 1:
            runs[-1] = (runs[-1][0], w)
        else:
            runs.append((w, w))
    return runs
