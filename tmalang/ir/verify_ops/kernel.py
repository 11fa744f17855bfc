"""Verify hooks of the kernel's frame (ops/kernel.py): the kernel's launch shape, roles and their
warps and registers, warpgroup blocks and their `setmaxnreg`.
"""

from __future__ import annotations

from .. import ops
from .scope import Hook, Scope


def _kernel(v: Scope, o: ops.KernelOp) -> None:
    v.within(o)
    v.check(o, "grid", o.grid in ("tiles", "persistent"), "not tiles or persistent")
    v.check(o, "cluster", o.cluster in (1, 2, 4, 8), "not 1, 2, 4 or 8 CTAs")
    v.check(o, "cluster_cols", o.cluster_cols in (1, 2, 4, 8) and o.cluster % o.cluster_cols == 0,
            "not 1, 2, 4 or 8 CTAs dividing the cluster")
    v.check(o, "cta_group", o.cta_group in (1, 2) and o.cluster % o.cta_group == 0, "not 1, or 2 in an even cluster")
    v.check(o, "threads", o.threads >= 0 and o.threads % 32 == 0, "not whole warps")
    v.check(o, "smem_bytes", o.smem_bytes >= 0, "negative")


def _role(v: Scope, o: ops.RoleOp) -> None:
    v.within(o, ops.KernelOp, ops.WarpgroupBlock)
    v.check(o, "first_warp", 0 <= o.first_warp <= o.last_warp < 32, "not a warp range within 0..31")
    v.check(o, "regs", o.regs == 0 or 24 <= o.regs <= 256 and o.regs % 8 == 0, "not 0 or a multiple of 8 in 24..256")
    group = v.parents[-1]
    if isinstance(group, ops.WarpgroupBlock) and not group.first <= o.first_warp // 4 <= o.last_warp // 4 <= group.last:
        v.fail(f"role @{o.symbol} has warps outside warpgroups {group.first}..{group.last}", o)


def _warpgroups(v: Scope, o: ops.WarpgroupBlock) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "first", 0 <= o.first <= o.last < 8, "not a warpgroup range within 0..7")
    if not (o.body and isinstance(o.body[0], ops.SetMaxNReg) and all(isinstance(r, ops.RoleOp) for r in o.body[1:])):
        v.fail("a warpgroups block holds one setmaxnreg, then roles", o)


def _setmaxnreg(v: Scope, o: ops.SetMaxNReg) -> None:
    v.within(o, ops.WarpgroupBlock)
    v.check(o, "action", o.action in ("inc", "dec"), "not inc or dec")
    v.check(o, "regs", 24 <= o.regs <= 256 and o.regs % 8 == 0, "not a multiple of 8 in 24..256")


HOOKS: dict[type[ops.Op], Hook] = {
    ops.KernelOp: _kernel, ops.RoleOp: _role, ops.WarpgroupBlock: _warpgroups, ops.SetMaxNReg: _setmaxnreg,
}
