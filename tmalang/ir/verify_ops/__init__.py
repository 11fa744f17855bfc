"""The verify hooks, one per op class (`VERIFY`): each checks that op's own invariants.

A hook sees the op and its `Scope`: the kernel's declarations, the enclosing ops, the role's
accumulators and row registers. It checks that the symbols the op names resolve to the right
kind of declaration, that its fields are in range, and that it stands where it may. What the
passes establish stage by stage is not an op's own rule: those rules are in verifier.py.

The hooks live in one module per op family, named as in ir/ops/ (kernel, declarations, control,
copies, barriers, wgmma, tcgen05, tile_math, scheduling), each with its `HOOKS` table; scope.py
holds `Scope` and the checks several families share. `VERIFY` is their union.
"""

from __future__ import annotations

from .. import ops
from . import barriers, control, copies, declarations, kernel, scheduling, tcgen05, tile_math, wgmma
from .barriers import FENCES
from .scope import SCOPES, Hook, Scope

VERIFY: dict[type[ops.Op], Hook] = {
    **kernel.HOOKS, **declarations.HOOKS, **control.HOOKS, **copies.HOOKS, **barriers.HOOKS,
    **wgmma.HOOKS, **tcgen05.HOOKS, **tile_math.HOOKS, **scheduling.HOOKS,
}
