"""`turn` blocks (§15e): where one may stand and what it may hold, as far as sema can see.

Inside a turn one warpgroup runs at a time, so anything that waits for the whole role there
never completes: a `sync`, a produce block (its slot wait and release), an elect block (one
thread of warpgroup 0 runs it, in warpgroup 0's turn only), another turn. What only the passes
insert (a role sync before a slot release, before a write into a tile a wgmma read) is refused
by order_turns at the turn.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .scope import Scope

_DECLARATIONS = (ast.AccumulatorDecl, ast.RowDecl)


def check_turn(s: ast.Turn, scope: Scope) -> None:
    role = scope.role
    if role.first_warp % 4 or role.warps % 4 or role.warps < 8:
        raise error("E525", f"a turn needs a role of at least 2 whole warpgroups; role '{role.name}' is "
                    f"warps {role.first_warp}..{role.last_warp}", s.span,
                    "warpgroups take turns: give the role warps 4k..4k+7 (or more whole warpgroups)")
    if scope.turn:
        raise error("E527", "turns cannot nest: the inner turn would wait for warpgroups that wait "
                    "for the outer one", s.span)
    if scope.elected or (scope.pipeline is not None and scope.producing):
        where = "elect" if scope.elected else "a produce block"
        raise error("E526", f"a turn cannot sit inside {where}", s.span,
                    "every thread of the role passes a turn; put the turn around the consume block instead")
    declared = next((x for x in s.body if isinstance(x, _DECLARATIONS)), None)
    if declared is not None:
        raise error("E530", "declare accumulators and row registers at the top of the role, not in a turn",
                    declared.span)


def refuse_inside(s, what: str) -> None:
    raise error("E528", f"{what} inside a turn waits for warpgroups that wait for this turn to end (a hang)",
                s.span, "one warpgroup runs a turn at a time: move it before or after the turn")
