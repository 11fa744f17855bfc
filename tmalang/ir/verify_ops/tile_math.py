"""Verify hooks of tile and row math (ops/tile_math.py): elementwise tile assignment, row
registers, and row_assign's destination (a row register, an accumulator, or a tile).
"""

from __future__ import annotations

from .. import exprs as ex
from .. import ops
from .scope import Hook, Scope, role_decl, writes_smem


def _row_assign(v: Scope, o: ops.RowAssign) -> None:
    v.in_role(o)
    if isinstance(o.dest, ex.BufferRef):
        v.tile(o, "dest", "tmem" if v.tile_kind(o.dest.name) == "tmem" else "smem")
    elif not isinstance(o.dest, (ex.RowVar, ex.AccRef)):
        v.fail(f"row_assign dest={o.dest} is neither a row register, an accumulator nor a tile", o)


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TileAssign: writes_smem, ops.RowDecl: role_decl, ops.RowAssign: _row_assign,
}
