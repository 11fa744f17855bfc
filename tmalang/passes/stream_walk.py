"""The stream-K tile walk, for lower_tile_walk: a range of (tile, step) units per CTA.

A stream tile loop (`for_tiles .. extent=E chunk=c stream=[F, C]`) has U = tiles x N units of
work, N = max(ceil(E / c), 0) the K steps per tile (exprs.step_count), unit u being step u mod N
of tile u / N (tiles in the walk's order: row-major or banded). With G CTAs, q = U / G and
r = U mod G, CTA g takes the q + (g < r) units from g q + min(g, r) on: every CTA gets the same
number of MMA steps, give or take one, whatever the tile count. In I's names:

    val %I.ksteps = N                                 K steps per tile
    val %I.units  = %I.tiles * N                      < 2^31: the launch checks it (E206)
    val %I.cta    = sreg(ctaid.x)
    val %I.ctas   = sreg(nctaid.x)
    val %I.share  = udiv(%I.units, %I.ctas)           q
    val %I.extra  = urem(%I.units, %I.ctas)           r
    val %I.begin  = %I.cta * %I.share + umin(%I.cta, %I.extra)
    val %I.end    = %I.begin + %I.share + (%I.extra > %I.cta)
    val %I.per    = max(N, 1)                         a divisor: with no steps there is no unit
    val %I.first  = udiv(%I.begin, %I.per)            the tile of the first unit
    val %I.stop   = (%I.end > %I.begin) * (udiv(%I.end - 1, %I.per) + 1)   past the last unit's tile
    for_step var=I.tile count=I start=%I.first stop=%I.stop step=1 {
      val %I.base = %I.tile * N                       the tile's first unit
      val %F      = max(%I.begin, %I.base) - %I.base  this CTA's first step of the tile
      val %C      = min(%I.end - %I.base, N) - %F     and how many (at least 1)
      ..coordinates of %I.tile, body
    }

The loop visits exactly the tiles whose steps meet [begin, end): tile t does iff t N < end and
begin < (t + 1) N, i.e. first <= t < ceil(end / N); an empty range (G > U) visits none, so no
CTA ever runs an epilogue for a tile it has no step of. Every value lies in 0..U, which the
launch keeps below 2^31, so the signed `max`, `min` and `>` agree with unsigned ones and nothing
wraps. The stream steps loops of the body count %C steps from %F (lower/kernel.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import exprs as ex
from ..ir import ops


def bounds(o: ops.ForTiles, tiles: ex.Expr, val: Callable) -> tuple[list[ops.Op], ex.Expr, ex.Expr]:
    """The vals before the loop, and its start and stop: the tiles this CTA's range touches."""
    var = lambda suffix: ex.Var(f"{o.index}.{suffix}")   # noqa: E731
    named = lambda suffix, value: val(f"{o.index}.{suffix}", value)   # noqa: E731
    cta, ctas, begin, end, per = var("cta"), var("ctas"), var("begin"), var("end"), var("per")
    head = [
        named("ksteps", ex.Bin("max", ex.step_count(o.extent, o.chunk), ex.Const(0))),
        named("units", ex.Bin("*", tiles, var("ksteps"))),
        named("cta", ex.Sreg("ctaid.x")),
        named("ctas", ex.Sreg("nctaid.x")),
        named("share", ex.Bin("udiv", var("units"), ctas)),
        named("extra", ex.Bin("urem", var("units"), ctas)),
        named("begin", ex.add(ex.Bin("*", cta, var("share")), ex.Bin("umin", cta, var("extra")))),
        named("end", ex.add(ex.add(begin, var("share")), ex.Bin(">", var("extra"), cta))),
        named("per", ex.Bin("max", var("ksteps"), ex.Const(1))),
        named("first", ex.Bin("udiv", begin, per)),
        named("stop", ex.Bin("*", ex.Bin(">", end, begin),
                             ex.add(ex.Bin("udiv", ex.Bin("-", end, ex.Const(1)), per), ex.Const(1)))),
    ]
    return head, var("first"), var("stop")


def steps_of(o: ops.ForTiles, tile: ex.Expr, val: Callable) -> list[ops.Op]:
    """The vals that open each iteration: this CTA's first step of the tile and its count."""
    base, n = ex.Var(f"{o.index}.base"), ex.Var(f"{o.index}.ksteps")
    first, count = o.stream
    return [val(base.name, ex.Bin("*", tile, n)),
            val(first, ex.Bin("-", ex.Bin("max", ex.Var(f"{o.index}.begin"), base), base)),
            val(count, ex.Bin("-", ex.Bin("min", ex.Bin("-", ex.Var(f"{o.index}.end"), base), n), ex.Var(first)))]
