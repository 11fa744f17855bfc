"""Verify hooks of the sm_90a tensor cores (ops/wgmma.py): accumulators of the role, wgmma's
operands (smem tiles, or a converted accumulator as register A), its fences, commits and waits,
and the accumulator epilogue.
"""

from __future__ import annotations

from .. import exprs as ex
from .. import ops
from .scope import Hook, Scope, pending, role_decl, statement, writes_smem


def _acc_zero(v: Scope, o: ops.AccZero) -> None:
    v.in_role(o)
    v.check(o, "acc", o.acc in v.accs, "not an accumulator of the role")


def _wgmma(v: Scope, o: ops.Wgmma) -> None:
    _acc_zero(v, o)
    v.tile(o, "b", "smem")
    if isinstance(o.a, ex.BufferRef):
        v.tile(o, "a", "smem")
    elif isinstance(o.a, ex.AccRef):
        v.check(o, "a", o.a.name in v.accs, "not an accumulator of the role")
    elif not (isinstance(o.a, ex.Cast) and isinstance(o.a.operand, ex.AccRef)):
        v.fail(f"wgmma a={o.a} is neither an smem tile nor an accumulator, converted or 16-bit", o)


HOOKS: dict[type[ops.Op], Hook] = {
    ops.AccDecl: role_decl, ops.AccZero: _acc_zero, ops.Wgmma: _wgmma, ops.WgmmaFence: statement,
    ops.WgmmaCommit: statement, ops.WgmmaWait: pending, ops.AccStore: writes_smem,
}
