"""The kernel's frame: the `kernel` op itself, its roles (`role`), the warpgroup blocks that
dispatch_roles places them in (`warpgroups`, with their `setmaxnreg`), and the look-ups over a
kernel that the passes share (`decls`, `roles`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Op, op


@op("kernel")
@dataclass
class KernelOp(Op):
    symbol: str
    grid: str                       # "tiles" | "persistent"
    cluster: int                    # CTAs per cluster (1: no cluster)
    cta_group: int                  # 2: CTA pairs, one tcgen05.mma for both CTAs of a pair
    threads: int                    # 0 until dispatch_roles sizes the block
    smem_bytes: int                 # 0 until plan_smem
    body: list[Op]
    cluster_cols: int = 1           # of the cluster's CTAs, how many along the second tile index
    occupancy: int = 1              # CTAs a multiprocessor holds at once: launch registers, smem (§3)

    def cluster_shape(self) -> tuple[int, int]:
        """(R, C): the cluster takes R x C tiles, R along the first tile index (targets/cluster.py)."""
        return self.cluster // self.cluster_cols, self.cluster_cols


@op("role")
@dataclass
class RoleOp(Op):
    symbol: str
    first_warp: int
    last_warp: int                  # inclusive
    regs: int                       # 0: keep the launch budget
    body: list[Op]
    # `by warpgroup` (§15f): the source role this one-warpgroup role is a part of, "" otherwise;
    # the roles of a group take tiles in turn (their for_tiles' offset) and chain their turns
    group: str = ""


@op("warpgroups")
@dataclass
class WarpgroupBlock(Op):
    """Warpgroups first..last (inclusive): runs `body` (setmaxnreg, then their roles) on their warps."""

    first: int
    last: int
    body: list[Op]


@op("setmaxnreg")
@dataclass
class SetMaxNReg(Op):
    """Set the register budget of the warpgroups running it (one instruction for all their warps)."""

    action: str                     # "inc" | "dec"
    regs: int


def decls(kernel: KernelOp, cls: type[Op]) -> dict[str, Op]:
    return {d.symbol: d for d in kernel.body if isinstance(d, cls)}


def roles(kernel: KernelOp) -> list[RoleOp]:
    """The kernel's roles, also those dispatch_roles placed inside warpgroup blocks."""
    found = []
    for o in kernel.body:
        if isinstance(o, RoleOp):
            found.append(o)
        elif isinstance(o, WarpgroupBlock):
            found += [r for r in o.body if isinstance(r, RoleOp)]
    return found
