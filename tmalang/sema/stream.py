"""Stream-K tile loops: `for tile (m, n) in tiles(c, T) stream` cuts the work of all tiles, tiles x n
K steps, into gridDim equal contiguous ranges of (tile, step) units, and `for k in steps(K, 64)
stream` inside it walks only this CTA's steps of the tile. A tile whose steps fall into the
ranges of several CTAs is finished by all of them, each adding its partial sum with `reduce add`.

The rules keep a stream kernel sound: the walk sizes the grid by the machine, not the tiles, so
it needs `grid persistent` (E556); the tile loop's walk is defined by n, so it must hold a
`stream` steps loop (E557), which in turn needs a stream tile loop around it (E558); every stream
steps loop of the kernel cuts the same n steps per tile, an extent the launch can evaluate
(E559); the CTAs sharing a tile run unordered, so only `reduce add` may write (E560); and the
walk is neither combined with `split` (E561) nor spread over a cluster (E562), whose CTAs take
adjacent tiles, not adjacent ranges of steps."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .declarations import KernelInfo, Scalar


def check_tile_loop(info: KernelInfo, s: ast.ForTiles) -> bool:
    """Whether `s` is a stream tile loop (E556, E557, E561, E562 when it is one that cannot be)."""
    if s.stream is None:
        return False
    if s.split is not None:
        raise error("E561", "a tile loop is either split (split-K) or streamed (stream-K), not both", s.split.span,
                    "stream-K already cuts every tile's steps among the CTAs: drop `split S` and the split index")
    if info.grid != "persistent":
        raise error("E556", "a stream tile loop needs `grid persistent`", s.stream,
                    "stream-K cuts the work into one equal range per CTA of a grid sized to the machine")
    if info.cluster > 1:
        raise error("E562", f"a stream tile loop cannot run in clusters of {info.cluster} CTAs", s.stream,
                    f"the CTAs of a cluster take adjacent tiles, stream-K's take adjacent ranges of steps "
                    f"(cluster declared at {info.cluster_decl.span.location()})")
    if not any(isinstance(x, ast.ForSteps) and x.stream for x in ast.statements(s.body)):
        raise error("E557", "a stream tile loop holds no `steps(..) stream` loop", s.stream,
                    "the walk cuts every tile into the steps of its stream loop: write "
                    "`for k in steps(K, 64) stream { ... }` inside it")
    return True


def check_steps(info: KernelInfo, s: ast.ForSteps, in_stream: bool) -> None:
    """A `stream` steps loop: inside a stream tile loop (E558), cutting the kernel's one n (E559)."""
    if s.stream is None:
        return
    if not in_stream:
        raise error("E558", "a `stream` steps loop needs an enclosing tile loop with `stream`", s.stream,
                    "write `for tile (m, n) in tiles(c, T) stream { ... for k in steps(K, 64) stream ... }`")
    _check_extent(info, s.extent)
    cut = (ast.expr_text(s.extent, grouped=True), s.chunk)
    if info.stream_steps is None:
        info.stream_steps = cut + (s,)
    elif info.stream_steps[:2] != cut:
        first = info.stream_steps[2]
        raise error("E559", f"this stream loop cuts steps({cut[0]}, {cut[1]}) but an earlier one cuts "
                    f"steps({info.stream_steps[0]}, {info.stream_steps[1]})", s.span,
                    f"every stream loop walks the same steps per tile, which fix the CTAs' ranges "
                    f"(first loop at {first.span.location()})")


def _check_extent(info: KernelInfo, extent) -> None:
    """The launch sizes the grid from tiles x steps per tile, so the extent is what it can read."""
    if isinstance(extent, ast.Number) and isinstance(extent.value, int):
        return
    if isinstance(extent, ast.Ref) and extent.field is None and extent.block is None:
        scalar = info.symbols.get(extent.name)
        if extent.name in info.dims or isinstance(scalar, Scalar) and scalar.dtype.kind in ("int", "uint"):
            return
    raise error("E559", "a stream loop's extent is a dimension, an integer scalar parameter or a literal",
                extent.span, "the launch sizes the grid from the tiles times the steps per tile, which it must "
                "compute from the arguments")


def check_store(s: ast.Store, in_stream: bool) -> None:
    """E560: several CTAs finish a tile of a stream walk, unordered; only sums of partials commute."""
    if not in_stream or s.reduce == "add":
        return
    if s.reduce:
        raise error("E560", f"`reduce {s.reduce}` inside a stream tile loop: the CTAs that share a tile each "
                    "hold a partial sum of it, which only `reduce add` combines", s.reduce_span or s.span)
    raise error("E560", "a store inside a stream tile loop: the CTAs that share a tile would store its elements "
                "in no order", s.span, "each CTA holds a partial sum of the tile: add it into the output with "
                "`reduce add` (which the caller zeroes)")
