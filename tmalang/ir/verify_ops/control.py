"""Verify hooks of control flow (ops/control.py): the tile loop's walk (split, dynamic, stream-K),
the plain statements a role holds, elect, turns, in_warpgroup, in_pair_leader, produce/consume
blocks, and `leave_if` standing directly in its loop.
"""

from __future__ import annotations

from .. import exprs as ex
from .. import ops
from .scope import SCOPES, Hook, Scope, pair_kernel, statement


def _for_tiles(v: Scope, o: ops.ForTiles) -> None:
    v.in_role(o)
    v.decl(o, "tensor", ops.TensorDecl)
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", box.tensor == o.tensor, f"cuts tensor @{box.tensor}, not @{o.tensor}")
    v.check(o, "vars", len(o.vars) == len(box.shape), "not one variable per box dimension")
    v.check(o, "group", o.group >= 0, "negative")
    v.check(o, "split", not isinstance(o.split, ex.Const) or o.split.value >= 1, "not a positive count")
    v.check(o, "part", bool(o.part) or o.split == ex.Const(1), "a split binds no part variable")
    v.check(o, "dynamic", not o.dynamic or v.kernel.cluster == 1, "claims are shared by CTAs of one-CTA clusters only")
    v.check(o, "stream", len(o.stream) in (0, 2), "not [first step, step count]")
    v.check(o, "stream", not o.stream or (o.split == ex.Const(1) and not o.part), "a walk both split and streamed")
    v.check(o, "stream", not o.stream or v.kernel.grid == "persistent", "a stream walk on a grid of tiles")
    v.check(o, "stream", not o.stream or v.kernel.cluster == 1, "a stream walk in clusters")
    v.check(o, "chunk", o.chunk >= 1 if o.stream else o.chunk == 0, "not a stream walk's positive chunk")
    v.check(o, "extent", isinstance(o.extent, ex.Param) or isinstance(o.extent, ex.Const) and type(o.extent.value) is int
            if o.stream else o.extent == ex.Const(0), "not a stream walk's launch-bound extent")


def _elect(v: Scope, o: ops.Elect) -> None:
    v.check(o, "scope", o.scope in SCOPES[ops.Elect], "unknown")
    v.check(o, "scope", (o.scope == "block") == (v.role is None), "block scope outside roles only")
    if v.inside(ops.Elect):
        v.fail("elect inside elect", o)


def _pipeline_block(v: Scope, o: ops.Produce | ops.Consume) -> None:
    v.in_role(o)
    v.decl(o, "pipeline", ops.PipelineDecl)
    if v.inside(ops.Elect):
        v.fail(f"{o.name} inside elect", o)


def _warpgroups_of(role: ops.RoleOp) -> int:
    """How many whole warpgroups the role is (0 when it is not aligned whole warpgroups)."""
    warps = role.last_warp - role.first_warp + 1
    return warps // 4 if role.first_warp % 4 == 0 and warps % 4 == 0 else 0


def _turn(v: Scope, o: ops.Turn) -> None:
    v.in_role(o)
    if _warpgroups_of(v.role) < 2 and not v.role.group:   # a group's roles take turns with each other
        v.fail("turn in a role of fewer than 2 whole warpgroups: nobody to take turns with", o)
    if v.inside(ops.Elect) or v.inside(ops.Turn) or v.inside(ops.Produce):
        v.fail("turn inside elect, produce or another turn", o)


def _in_warpgroup(v: Scope, o: ops.InWarpgroup) -> None:
    v.in_role(o)
    v.check(o, "group", 0 <= o.group < _warpgroups_of(v.role), "not a warpgroup of the role")
    if v.inside(ops.Elect) or v.inside(ops.InWarpgroup):
        v.fail("in_warpgroup inside elect or in_warpgroup", o)


def _in_pair_leader(v: Scope, o: ops.InPairLeader) -> None:
    v.in_role(o)
    pair_kernel(v, o)


def _leave_if(v: Scope, o: ops.LeaveIf) -> None:
    v.within(o, ops.Loop)   # directly in its loop: the backend branches to the loop's exit from there


HOOKS: dict[type[ops.Op], Hook] = {
    ops.ForTiles: _for_tiles, ops.ForRange: statement, ops.ForStep: statement, ops.If: statement, ops.Let: statement,
    ops.Val: statement, ops.Loop: statement, ops.LeaveIf: _leave_if, ops.Elect: _elect,
    ops.InPairLeader: _in_pair_leader, ops.Turn: _turn, ops.InWarpgroup: _in_warpgroup, ops.Produce: _pipeline_block,
    ops.Consume: _pipeline_block,
}
