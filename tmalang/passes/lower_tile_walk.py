"""lower_tile_walk: a tile loop becomes index arithmetic around a strided loop.

Requires: every pass that looks for the tile loop (`for_tiles`) has run; it is the last pass.
Guarantees: no `for_tiles` remains. In its place, with I the loop's `index`, S the cluster size
and R x C its shape (R along dim 0, C along dim 1; the lines marked R > 1, C > 1 or S > 1 only
in such a cluster):

    val %I.n<d>          = udiv(dim_d + box_d - 1, box_d)     tiles along each dim d
    val %I.cluster_rows  = udiv(%I.n0 + R - 1, R)              R > 1: dim 0 counted in clusters
    val %I.cluster_cols  = udiv(%I.n1 + C - 1, C)              C > 1: dim 1 counted in clusters
    val %I.tiles         = %I.n0 * %I.n1 * ..                  (the cluster counts in their place)
    val %I.cta           = sreg(ctaid.x)                       S > 1: read once, for all uses
    for_step var=I.tile count=I start=udiv(ctaid, S) stop=%I.tiles step=udiv(sreg(nctaid.x), S) {
      val %vars          = the coordinates of tile %I.tile     row-major, or banded (`group`)
      val %v0            = %I.cluster_row * R + urem(%I.cta, R)               R > 1: this CTA's row
      val %v1            = %I.cluster_col * C + urem(udiv(%I.cta, R), C)      C > 1: and column
      body
    }

The CTA of rank r = ctaid mod S takes the tile at (r mod R, r / R) of its cluster's R x C block
(targets/cluster.py); a 1-D `cluster N` is N x 1.

With a split of P parts per tile (`split`, binding `part`), the walk has P times the tiles and
the part is the slowest index: `%I.per_part` is the product above, `%I.tiles` = per_part * P, and
in the loop `%part` = udiv(%I.tile, per_part) and `%I.in_part` = urem(%I.tile, per_part) stands
for %I.tile in the coordinates. The CTAs of a cluster share one part (their tiles are adjacent
in dims 0 and 1 of one part), so a multicast box is the same K slice for all of them.

A stream walk (`stream`, stream-K) gives each CTA one contiguous range of the tiles' K steps
instead, and visits the tiles that range touches one after another (passes/stream_walk.py).

A loop `by warpgroup` (every = n, offset = g: warpgroup g of n, each its own role) starts g
strides later and strides n times as far, so the n roles take the CTA's tiles in turn.

A persistent grid strides over the tiles by the grid size; a `tiles` grid runs one iteration per
CTA. `%I` counts the iterations, as the loop's index did. Division and comparison are unsigned
32-bit. A banded walk (`group` G; G' = G / R rows of clusters per band) takes tile t to band
t / (G' n1), whose first row is %I.band_row0 and which has %I.band_rows = min(n0 - band_row0, G')
rows, walked column by column (%I.in_band = t mod G' n1), so that CTAs running together share
operand tiles in L2. In 3 or more dims, n1 stands for n1 * n2 * .. and the column splits
row-major into the dims after the first.

A reversed walk (`reverse`) binds `%I.forward` = %I.tiles - 1 - %I.tile first and decodes that
in %I.tile's place (before the split: the parts run last to first too), so the CTAs, or the
claims of a dynamic walk, take the forward order's last tiles first.

The interpreter and the backend run these ops as they run any other. The arithmetic, and the
order of the special-register reads, is what the backend emitted for `for_tiles` before this
pass existed, so the PTX is unchanged; the vals are no steps of the interpreter's scheduler, so
its interleavings are unchanged too.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target
from . import stream_walk
from .rewrite import rewrite_roles


def run(kernel: ops.KernelOp, target: Target) -> None:
    rewrite_roles(kernel, lambda o: _lower(kernel, o) if isinstance(o, ops.ForTiles) else [o])


def _lower(kernel: ops.KernelOp, o: ops.ForTiles) -> list[ops.Op]:
    if o.stream:
        return _lower_stream(kernel, o)
    prologue, coords, ctaid = tile_space(kernel, o)
    cluster = kernel.cluster
    step = _udiv(ex.Sreg("nctaid.x"), cluster)
    start = _udiv(ctaid, cluster)
    if o.every > 1:   # `by warpgroup`: this warpgroup's share, every n-th of the CTA's tiles
        start = ex.add(start, step if o.offset == 1 else ex.Bin("*", ex.Const(o.offset), step)) if o.offset else start
        step = ex.Bin("*", ex.Const(o.every), step)
    loop = ops.ForStep(f"{o.index}.tile", o.index, start, ex.Var(f"{o.index}.tiles"), step, coords + o.body,
                       span=o.span)
    return prologue + [loop]


def tile_space(kernel: ops.KernelOp, o: ops.ForTiles) -> tuple[list[ops.Op], list[ops.Op], ex.Expr]:
    """The walk's parts, shared with claim_tiles (a dynamic walk): the vals before the loop (the
    tile counts, ending with `%I.tiles`), the vals at the top of its body that bind the loop's
    variables from the linear tile `%I.tile`, and the CTA id as the loop start reads it."""
    cluster = kernel.cluster
    rows, _ = kernel.cluster_shape()
    name, var, val = _namers(o)
    prologue, counts, blocked, total = _tile_counts(kernel, o)
    tile, parts = var("tile"), []
    if o.reverse:   # before the split: the parts run last to first too
        parts, tile = [_forward(o, tile, val)], var("forward")
    if o.part:   # the part is the slowest index: tiles t of one part are t = part * per_part + ..
        prologue.append(val(name("per_part"), total))
        total = ex.Bin("*", var("per_part"), o.split)
        parts = [val(o.part, ex.Bin("udiv", tile, var("per_part"))),
                 val(name("in_part"), ex.Bin("urem", tile, var("per_part")))]
        tile = var("in_part")
    prologue.append(val(name("tiles"), total))
    ctaid = ex.Sreg("ctaid.x")
    if cluster > 1:   # read once: the first tile and the rank in the cluster both come from it
        prologue.append(val(name("cta"), ctaid))
        ctaid = var("cta")
    names = list(o.vars)
    for d, _, suffix in blocked:
        names[d] = name(suffix[:-1])   # cluster_row / cluster_col
    coords = parts + [val(n, v) for n, v in _coords(o.index, names, tile, counts, o.group // rows)]
    for d, side, suffix in blocked:   # this CTA's tile of its cluster's block: rank = ctaid mod cluster size
        coords.append(val(o.vars[d], ex.add(ex.Bin("*", var(suffix[:-1]), ex.Const(side)), _place(ctaid, d, rows, cluster))))
    return prologue, coords, ctaid


def _lower_stream(kernel: ops.KernelOp, o: ops.ForTiles) -> list[ops.Op]:
    """Stream-K (no cluster, no split: sema): a range of (tile, step) units per CTA."""
    name, var, val = _namers(o)
    prologue, counts, _, total = _tile_counts(kernel, o)
    prologue.append(val(name("tiles"), total))
    head, start, stop = stream_walk.bounds(o, var("tiles"), val)
    forward = [_forward(o, var("tile"), val)] if o.reverse else []
    tile = var("forward") if o.reverse else var("tile")
    coords = forward + [val(n, v) for n, v in _coords(o.index, list(o.vars), tile, counts, o.group)]
    body = stream_walk.steps_of(o, var("tile"), val) + coords + o.body
    return prologue + head + [ops.ForStep(name("tile"), o.index, start, stop, ex.Const(1), body, span=o.span)]


def _forward(o: ops.ForTiles, t: ex.Expr, val) -> ops.Val:
    """`%I.forward`: linear tile t of a reversed walk as an index of the forward order, tiles - 1 - t."""
    return val(f"{o.index}.forward", ex.Bin("-", ex.Bin("-", ex.Var(f"{o.index}.tiles"), ex.Const(1)), t))


def _namers(o: ops.ForTiles):
    """`%I.suffix` names, their vars, and vals located at the loop."""
    name = lambda suffix: f"{o.index}.{suffix}"   # noqa: E731
    return (name, lambda suffix: ex.Var(name(suffix)),
            lambda target, value: ops.Val(target, value, span=o.span))


def _tile_counts(kernel: ops.KernelOp, o: ops.ForTiles) -> tuple[list[ops.Op], list[ex.Expr], list, ex.Expr]:
    """The vals counting tiles along each dim (clusters counted in blocks), the counts, the
    blocked dims (d, side, suffix), and the product of the counts."""
    tensors = ops.decls(kernel, ops.TensorDecl)
    boxes = ops.decls(kernel, ops.BoxDecl)
    rows, cols = kernel.cluster_shape()
    name, var, val = _namers(o)
    shape = list(zip(tensors[o.tensor].shape, boxes[o.box].shape))
    prologue = [val(name(f"n{d}"), ex.Bin("udiv", ex.add(_dim(dim), ex.Const(extent - 1)), ex.Const(extent)))
                for d, (dim, extent) in enumerate(shape)]
    counts = [var(f"n{d}") for d in range(len(shape))]
    # a cluster takes a block of `rows` x `cols` adjacent tiles of dims 0 and 1, one per CTA
    blocked = [(d, side, suffix) for d, side, suffix in ((0, rows, "cluster_rows"), (1, cols, "cluster_cols"))
               if side > 1]
    for d, side, suffix in blocked:
        prologue.append(val(name(suffix), _udiv(ex.add(counts[d], ex.Const(side - 1)), side)))
        counts[d] = var(suffix)
    total = counts[0]
    for count in counts[1:]:
        total = ex.Bin("*", total, count)
    return prologue, counts, blocked, total


def _place(ctaid: ex.Expr, d: int, rows: int, cluster: int) -> ex.Expr:
    """This CTA's cluster coordinate along dim d (targets/cluster.py): x = rank mod R, y = rank / R,
    with rank = ctaid mod R·C (clusters are consecutive CTAs of the 1-D grid)."""
    if d == 0:
        return ex.Bin("urem", ctaid, ex.Const(rows))
    return ex.Bin("urem", _udiv(ctaid, rows), ex.Const(cluster // rows))


def _coords(index: str, names: list[str], t: ex.Expr, counts: list[ex.Var], group: int) -> list[tuple]:
    """(name, value) pairs that bind `names` to the coordinates of linear tile t, in order:
    row-major, or in bands of `group` rows walked column by column (the dims after the first
    make one column index, row-major)."""
    if group:
        first, rows, within = (ex.Var(f"{index}.{n}") for n in ("band_row0", "band_rows", "in_band"))
        columns = counts[1]
        for count in counts[2:]:
            columns = ex.Bin("*", columns, count)
        band = ex.Bin("*", ex.Const(group), columns)
        return [(first.name, ex.Bin("*", ex.Bin("udiv", t, band), ex.Const(group))),
                (rows.name, ex.Bin("umin", ex.Bin("-", counts[0], first), ex.Const(group))),
                (within.name, ex.Bin("urem", t, band)),
                (names[0], ex.add(first, ex.Bin("urem", within, rows))),
                *_columns(names[1:], ex.Bin("udiv", within, rows), counts[1:])]
    return _row_major(names, t, counts)


def _columns(names: list[str], column: ex.Expr, counts: list[ex.Expr]) -> list[tuple]:
    """A band's column index as the coordinates of the dims after the first (2-D: itself)."""
    return _row_major(names, column, counts) if len(names) > 1 else [(names[0], column)]


def _row_major(names: list[str], t: ex.Expr, counts: list[ex.Expr]) -> list[tuple]:
    """Bind `names` to linear index t of a row-major grid of `counts`."""
    pairs = []
    for d in reversed(range(len(counts))):   # innermost first: t mod n_last, then t / n_last mod ..
        pairs.append((names[d], ex.Bin("urem", t, counts[d])))
        t = ex.Bin("udiv", t, counts[d])
    return pairs


def _udiv(value: ex.Expr, divisor: int) -> ex.Expr:
    return ex.Bin("udiv", value, ex.Const(divisor)) if divisor > 1 else value


def _dim(dim: str | int) -> ex.Expr:
    return ex.Const(dim) if isinstance(dim, int) else ex.Param(dim)
