"""Tile loops `by warpgroup` (§15f): each warpgroup of a role walks every n-th tile by itself.

A role of n >= 2 whole warpgroups runs its body once per warpgroup, warpgroup g taking tiles
g, g + n, ... of the role's walk, with accumulators, staging tiles and syncs of its own
(lower/kernel.py makes one role per warpgroup). The ring positions of the warpgroups' consume
blocks interleave by whole tiles (passes/expand_pipelines.py skips the other warpgroups' slots),
which is sound only when every tile consumes the same number of slots: the walk takes no `split`,
`stream` or `dynamic`, and a steps loop's extent cannot depend on the tile; and only when the
warpgroups consume in tile order: every consume block stands in a `turn`, so a warpgroup starts
its tile's slots once the previous tile's warpgroup has waited for all of its own, and no wait
runs more than one lap of the ring ahead of the producer (a parity wait cannot tell laps apart). A warpgroup may not
produce into a ring (its slots would interleave by tile with the other warpgroups', which the
consumer cannot tell apart).
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .scope import mentions


def check_tile_loop(info, s: ast.ForTiles, role) -> None:
    if s.by_warpgroup is None:
        return
    if info.grid != "persistent":
        raise error("E595", "`by warpgroup` needs `grid persistent`: with one CTA per tile, a warpgroup would "
                    "have no tile of its own", s.by_warpgroup)
    if role.first_warp % 4 or role.warps % 4 or role.warps < 8:
        raise error("E595", f"`by warpgroup` needs a role of at least 2 whole warpgroups; role '{role.name}' is "
                    f"warps {role.first_warp}..{role.last_warp}", s.by_warpgroup,
                    "a warpgroup is 4 consecutive warps starting at a multiple of 4")
    if s.split is not None or s.stream is not None or s.dynamic:
        kind = "split" if s.split is not None else "stream" if s.stream is not None else "dynamic"
        raise error("E596", f"a `{kind}` walk gives tiles different numbers of steps or an order no warpgroup "
                    "can predict; `by warpgroup` needs every tile alike", s.by_warpgroup,
                    "walk the tiles by warpgroup in a plain or grouped tile loop")


def check_steps(s: ast.ForSteps, scope) -> None:
    """Every tile consumes the same number of slots: the warpgroups skip each other's tiles by it."""
    if not scope.by_warpgroup:
        return
    local = next((name for name in scope.ints if mentions(s.extent, name)), None)
    if local is not None:
        raise error("E597", f"this steps loop's extent depends on '{local}', so tiles would consume different "
                    "numbers of slots, and the warpgroups of a `by warpgroup` walk could not skip each "
                    "other's", s.extent.span, "extents of dims, scalars and constants only")


def check_block(s, scope, producing: bool) -> None:
    if producing:
        raise error("E596", "a produce block in a `by warpgroup` walk: the warpgroups would fill the ring in turns "
                    "the consumer cannot tell apart", s.span, "produce in a role of its own")
    if not scope.turn:
        raise error("E598", "a consume block in a `by warpgroup` walk outside a `turn`: a warpgroup would wait "
                    "for a slot a whole tile ahead of the others, more than one lap of the ring ahead of the "
                    "producer, where its parity wait can pass on an older phase", s.span,
                    "take the tile's consume blocks in turns: `turn { for k in steps(...) { consume ... } }`")
