"""Split tile loops: `for tile (p, m, n) in tiles(c, T) split S` runs every tile S times, once per
part p of its K steps, and `for k in steps(K, 64) part p` walks only part p of those steps.

The rules keep a split kernel sound: the count is a positive literal or an integer scalar
parameter (E500); `part` names the split index of the enclosing tile loop (E501), so producer and
consumer cut the same steps; a plain store must use the split index (E105: the S parts of a tile
run in different CTAs, so a store that ignores p writes the same elements S times, unordered),
while a reduce may ignore it (atomic per element: the parts add up); and a kernel whose split
index is used nowhere would do the same work S times (E502)."""

from __future__ import annotations

import dataclasses

from ..diagnostics import error
from ..syntax import ast
from .declarations import KernelInfo, Scalar

MAX_SPLIT = 2**31 - 1    # the tile walk's index arithmetic is 32-bit


def check_tile_split(info: KernelInfo, s: ast.ForTiles, rank: int) -> int | str | None:
    """The split count as the tile space compares it (an int, or a scalar's name), or None."""
    if s.split is None:
        return None
    count = s.split
    if isinstance(count, ast.Number) and not 1 <= count.value <= MAX_SPLIT:
        raise error("E500", f"a tile loop splits each tile into 1..{MAX_SPLIT} parts, not {count.value}",
                    count.span)
    if isinstance(count, ast.Ref):
        scalar = info.symbols.get(count.name)
        if not isinstance(scalar, Scalar) or scalar.dtype.kind not in ("int", "uint"):
            what = "a dimension" if count.name in info.dims else ("not a scalar parameter" if scalar is None
                                                                  else "not an integer scalar")
            raise error("E500", f"the split count '{count.name}' is {what}", count.span,
                        "split by an integer literal or an integer scalar parameter (checked >= 1 at launch)")
    if len(s.vars) != rank + 1:
        raise error("E052", f"a split tile loop over rank-{rank} tiles binds the split index and {rank} tile "
                    f"indices, {rank + 1} in all, not {len(s.vars)}", s.span,
                    "the split index comes first: `for tile (p, m, n) in tiles(c, T) split S`")
    return count.value if isinstance(count, ast.Number) else count.name


def check_part(s: ast.ForSteps, split_var: str | None) -> None:
    """`part p` walks the p-th of S parts of the steps: p must be the enclosing tile loop's split index."""
    if s.part is None:
        return
    if split_var is None:
        raise error("E501", f"`part {s.part.name}` needs an enclosing tile loop with `split`", s.part.span,
                    "write `for tile (p, m, n) in tiles(c, T) split S { ... steps(K, 64) part p ... }`")
    if s.part.name != split_var:
        raise error("E501", f"'{s.part.name}' is not the split index of the enclosing tile loop ('{split_var}')",
                    s.part.span, "a steps loop walks the part of its tile loop's split index")


def splits(space) -> bool:
    """Whether the tile space may run a tile more than once (a split of literal 1 never does)."""
    return space is not None and space[3] not in (None, 1)


def check_store(info: KernelInfo, s: ast.Store, split_var: str | None) -> None:
    """E105 for the split index: every part of a tile would store the same elements."""
    if split_var is None or not splits(info.tile_space) or any(_mentions(c, split_var) for c in s.coords):
        return
    raise error("E105", f"this store does not use split index '{split_var}', so every part of the tile "
                "stores to the same elements", s.span,
                "the parts run in different CTAs, which nothing orders: a race; `reduce add` sums the parts "
                "(atomic per element)")


def check_used(info: KernelInfo) -> None:
    """E502: with no `part` and no coordinate using the split index, every part does the same work."""
    if not splits(info.tile_space):
        return
    loops = [x for role in info.roles for x in _nodes(role.decl.body) if isinstance(x, ast.ForTiles)]
    if any(_mentions(x.body, x.vars[0]) for x in loops):
        return
    first = info.tile_space[-1]
    raise error("E502", f"no tile loop uses its split index '{first.vars[0]}', so each of the parts of a tile "
                "would do the same work", first.span,
                "walk the part's steps with `for k in steps(K, 64) part " + first.vars[0] + "`")


def _nodes(body: list):
    for x in body:
        yield x
        for child in getattr(x, "body", None) or []:
            yield from _nodes([child])


def _mentions(node, name: str) -> bool:
    """Whether any expression (or `part`) under `node` reads the integer variable `name`."""
    if isinstance(node, ast.Ref):
        return (node.field is None and node.name == name) or _mentions(node.block, name)
    if isinstance(node, list):
        return any(_mentions(x, name) for x in node)
    if isinstance(node, ast.Node):
        return any(_mentions(getattr(node, f.name), name) for f in dataclasses.fields(node) if f.name != "span")
    return False
