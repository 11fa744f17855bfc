"""Verify hooks of the sm_100a tensor cores (ops/tcgen05.py): Tensor Memory tiles and their
allocation, tcgen05_mma and tcgen05_cp operands, tmem_zero, the tcgen05 commits (checked as
mbarrier arrives) and the Tensor Memory epilogue.
"""

from __future__ import annotations

from .. import ops
from .barriers import barrier_op, cluster_arrive
from .scope import Hook, Scope, power_of_two, writes_smem


def _tmem(v: Scope, o: ops.TmemDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "shape", len(o.shape) == 2 and o.shape[0] in (64, 128) and 1 <= o.shape[1] <= 256,
            "not [64 or 128 lanes, 1..256 columns]")
    v.check(o, "column", o.column == -1 or o.column >= 0 and o.column % ops.TMEM_GRANULE == 0,
            f"not a multiple of {ops.TMEM_GRANULE}")


def _tmem_alloc(v: Scope, o: ops.TmemAlloc) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "columns", power_of_two(o.columns) and o.columns >= 32, "not a power of two from 32")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % 8 == 0, "not 8-byte aligned")


def _tmem_dealloc(v: Scope, o: ops.TmemDealloc) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "columns", power_of_two(o.columns) and o.columns >= 32, "not a power of two from 32")


def _tcgen05_mma(v: Scope, o: ops.Tcgen05Mma) -> None:
    v.in_role(o)
    v.tile(o, "d", "tmem")
    v.tile(o, "a", "smem")
    v.tile(o, "b", "smem")


def _tcgen05_cp(v: Scope, o: ops.Tcgen05Cp) -> None:
    v.in_role(o)
    v.tile(o, "d", "tmem")
    v.check(o, "col", o.col >= 0, "negative")
    v.tile(o, "source", "smem")


def _tmem_zero(v: Scope, o: ops.TmemZero) -> None:
    v.in_role(o)
    v.tile(o, "tile", "tmem")


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TmemDecl: _tmem, ops.TmemAlloc: _tmem_alloc, ops.TmemDealloc: _tmem_dealloc, ops.Tcgen05Mma: _tcgen05_mma,
    ops.Tcgen05Cp: _tcgen05_cp, ops.TmemZero: _tmem_zero, ops.Tcgen05Commit: barrier_op,
    ops.Tcgen05CommitCluster: cluster_arrive, ops.TmemEpilogue: writes_smem,
}
