"""Statements inside roles: scoping, operand kinds and shapes, and where each may appear."""

from __future__ import annotations

from dataclasses import replace

from ..diagnostics import error
from ..syntax import ast
from . import bulk, dsmem, dynamic, gather, im2col, im2col_wide, mma, multicast, offsets, own_pipelines, prefetch, reduce, rows, split
from . import staged, stream, turns, warpgroups
from .declarations import (
    MAX_TX_BYTES,
    Box,
    KernelInfo,
    Mbarrier,
    Pipeline,
    Role,
    Scalar,
    Tensor,
)
from ..targets.dtypes import TILE_MATH_DTYPES
from .scope import (
    Scope,
    mentions,
    check_local,
    check_operation,
    int_expr,
    tile_ref,
)

FENCE_KINDS = ("proxy_async", "mbarrier_init")
def check_role_body(info: KernelInfo, role: Role) -> None:
    _block(info, role.decl.body, Scope(role))
    own_pipelines.check_role(info, role)   # a pipeline this role both produces and consumes


def _block(info: KernelInfo, body: list, scope: Scope) -> None:
    for stmt in body:
        handler = _HANDLERS[type(stmt)]
        handler(info, stmt, scope)


def _for_tiles(info: KernelInfo, s: ast.ForTiles, scope: Scope) -> None:
    if scope.in_loop:
        raise error("E054", "tile loops cannot nest (v0)", s.span)
    if scope.pipeline:   # a block holds one slot: a tile loop in it would walk every tile per slot
        raise error("E054", "a tile loop cannot sit inside a produce or consume block", s.span)
    tensor = info.lookup(s.tensor, Tensor, what="tensor")
    box = info.lookup(s.box, Box, what="box")
    im2col.refuse(box, "be walked by a tile loop", s.box.span)
    if box.tensor is not tensor:
        raise error("E051", f"box '{box.name}' cuts tensor '{box.tensor.name}', not '{s.tensor.name}'", s.box.span)
    streamed = stream.check_tile_loop(info, s)
    warpgroups.check_tile_loop(info, s, scope.role)
    parts = split.check_tile_split(info, s, len(box.shape))
    if parts is None and len(s.vars) != len(box.shape):
        raise error("E052", f"tiles of rank-{len(box.shape)} box '{box.name}' bind {len(box.shape)} "
                    f"indices, not {len(s.vars)}", s.span)
    if s.group is not None and (s.group < 1 or len(box.shape) < 2):
        raise error("E052", "grouped tile order needs a tile space of two or more dims and a group of at least "
                    "1 row", s.span)
    rows = info.cluster // info.cluster_cols
    if s.group and s.group % rows:
        size = (f"cluster size ({rows})" if info.cluster_cols == 1 else
                f"{rows} tile rows that a {rows}x{info.cluster_cols} cluster takes")
        raise error("E052", f"the group ({s.group} rows) must be a multiple of the {size}",
                    s.span, "the CTAs of a cluster take adjacent rows of one band")
    if info.cluster_cols > 1 and len(box.shape) < 2:
        raise error("E464", f"a {rows}x{info.cluster_cols} cluster takes a 2-D block of tiles, but this tile "
                    f"space is 1-D", s.span, "use `cluster N` (N x 1) for a 1-D tile space")
    space = (tuple(tensor.shape), tuple(box.shape), s.group or 0, parts, streamed, s.reverse)
    dynamic.check_loop(info, s, scope.role.name)
    if info.tile_space is None:
        info.tile_space = space + (s,)
    elif info.tile_space[:6] != space:
        first = info.tile_space[-1]
        raise error("E053", f"this loop walks tiles {_space(space)} but an earlier loop walks tiles "
                    f"{_space(info.tile_space)}", s.span,
                    f"the loops must agree so that producers and consumers run the same trip count "
                    f"(first loop at {first.span.location()})")
    names = [*s.vars, *([s.index] if s.index else [])]
    for i, name in enumerate(names):
        check_local(info, scope, name, s.span)
        if name in names[:i]:
            raise error("E017", f"'{name}' is bound twice by this loop", s.span)
    loop = ("tiles", space)
    split_var = s.vars[0] if parts is not None else None
    _block(info, s.body, replace(scope, ints=scope.ints | set(names), in_loop=True, nest=scope.nest + (loop,),
                                 tile_vars=tuple(s.vars[1:] if split_var else s.vars), split_var=split_var,
                                 stream=streamed, by_warpgroup=s.by_warpgroup is not None))


def _for_steps(info: KernelInfo, s: ast.ForSteps, scope: Scope) -> None:
    if scope.elected:
        raise error("E054", "a loop cannot sit inside elect", s.span)
    check_local(info, scope, s.var, s.span)
    int_expr(info, s.extent, scope)
    if s.chunk < 1:
        raise error("E077", "steps(..., 0) divides by zero", s.span)
    split.check_part(s, scope.split_var)
    stream.check_steps(info, s, scope.stream)
    warpgroups.check_steps(s, scope)
    loop = ("steps", ast.expr_text(s.extent, grouped=True), s.chunk, s.part is not None, s.stream is not None)
    _block(info, s.body, replace(scope, ints=scope.ints | {s.var}, nest=scope.nest + (loop,),
                                 steps_vars=scope.steps_vars + (s.var,)))


def _space(space) -> str:
    shape, box, group, parts, streamed, reverse = space[:6]
    order = ((f" split {parts}" if parts is not None else "") + (" stream" if streamed else "")
             + (f" grouped {group}" if group else "") + (" reversed" if reverse else ""))
    return f"of [{', '.join(map(str, shape))}] by [{', '.join(map(str, box))}]{order}"


def _pipeline_block(info: KernelInfo, s, scope: Scope, producing: bool) -> None:
    pipe = info.lookup(s.pipeline, Pipeline, what="pipeline")
    if scope.elected:
        raise error("E076", "produce/consume blocks cannot sit inside elect", s.span)
    if producing and scope.turn:
        turns.refuse_inside(s, "a produce block")
    if scope.by_warpgroup:
        warpgroups.check_block(s, scope, producing)
    if any(open_pipe is pipe for _, open_pipe, _ in scope.slots):
        raise error("E076", f"a block of pipeline '{pipe.name}' inside another of the same pipeline", s.span,
                    "the inner block would wait for a slot the outer one holds: a hang")
    prefetch.check_block(s.body)
    users = pipe.producers if producing else pipe.consumers
    if users and users[-1] != scope.role.name:
        raise error("E068", f"pipeline '{pipe.name}' is already {'produced' if producing else 'consumed'} "
                    f"by role '{users[-1]}'", s.span, "v0 pipelines have one producer role and one consumer role "
                    "(which may be the same role: it then loads ahead of itself, §11)")
    users.append(scope.role.name)
    (pipe.produce_nests if producing else pipe.consume_nests).append((scope.nest, s.span))
    check_local(info, scope, s.slot, s.span)
    dsmem.check_block(info, s, pipe, scope, producing)
    loads = producing and any(isinstance(x, ast.Load) for x in s.body)
    if loads and pipe.tmem_fields:
        raise error("E069", "a tmem pipeline's produce block holds the MMA work only",
                    next(x for x in s.body if isinstance(x, ast.Load)).span,
                    "load operands in the produce block of an smem ring, and consume it here")
    if loads:
        stray = next((x for x in s.body if not isinstance(x, ast.Load)), None)
        if stray is not None:
            raise error("E069", "a produce block that loads may only hold loads", stray.span,
                        "the compiler issues them from one elected thread and arms the barrier for their bytes")
    elif producing:
        stray = next((x for x in s.body if not isinstance(x, _FILLING)), None)
        if stray is not None:
            raise error("E069", "a produce block fills its slot: loads, mma, assignments to its fields, loops and "
                        "nested produce/consume blocks", stray.span)
        looped = _load_in_loop(s.body)
        if looped is not None:
            raise error("E069", "a produce block's loads sit directly in it, not in a loop", looped.span,
                        "the block arms its slot's barrier for one load of each field; put the loop around "
                        "the produce block")
    inner = replace(scope, pipeline=pipe, slot=s.slot, producing=producing, loaded=set(),
                    slots=scope.slots + ((s.slot, pipe, producing),))
    _block(info, s.body, inner)
    if producing and not pipe.tmem_fields:
        missing = [f for f in pipe.fields if f not in inner.loaded]
        if missing:
            raise error("E070", f"produce block does not {'load' if loads else 'write'} field '{missing[0]}' of "
                        f"pipeline '{pipe.name}'", s.span, "consumers would read a slot nobody filled")


_FILLING = (ast.Assign, ast.ForSteps, ast.Consume, ast.Produce, ast.Mma)


def _load_in_loop(body: list):
    """The first load in a `steps` loop of this block (through loops only: a nested produce or
    consume block is checked on its own), else None. Such a load would be issued once per step
    into the same slot, on a barrier armed for one."""
    for stmt in body:
        if isinstance(stmt, ast.ForSteps):
            found = next((x for x in stmt.body if isinstance(x, ast.Load)), None) or _load_in_loop(stmt.body)
            if found is not None:
                return found
    return None


def _produce(info, s, scope):
    _pipeline_block(info, s, scope, producing=True)


def _consume(info, s, scope):
    _pipeline_block(info, s, scope, producing=False)


def _coords(info: KernelInfo, box: Box, coords: list, span, scope: Scope) -> None:
    if box.im2col is None and len(coords) != len(box.shape):
        raise error("E065", f"box '{box.name}' has rank {len(box.shape)}, got {len(coords)} coordinates", span)
    for c in coords:
        int_expr(info, c, scope)


def _same_tile(box: Box, tile: Box, span) -> None:
    if box.tile_shape != tile.tile_shape or box.dtype != tile.dtype or box.swizzle != tile.swizzle:
        raise error("E064", f"box '{box.name}' ({_desc(box)}) does not match the smem tile ({_desc(tile)})", span)


def _desc(box: Box) -> str:
    swz = f", swizzle {box.swizzle}" if box.swizzle != "none" else ""
    return f"{box.dtype.name}[{', '.join(map(str, box.tile_shape))}]{swz}"


def _load(info: KernelInfo, s: ast.Load, scope: Scope) -> None:
    box = info.box_for(s.source)
    tile = tile_ref(info, s.dest, scope, pair_ok=scope.pipeline is not None, strided_ok=True)
    _same_tile(box, tile, s.span)
    (im2col_wide.check_load if box.im2col and box.im2col.wide else im2col.check_load)(info, s, box)
    coords = gather.check_copy(info, s, box, s.coords, scope)
    _coords(info, box, [*coords, *(s.offsets or [])], s.span, scope)
    offsets.check_load(box, s)
    box.tensor.read = True
    bulk.check_load(s, box)
    multicast.check_load(info, s, box, scope)
    if scope.pipeline is not None:
        if not scope.producing:
            raise error("E061", "a consume block cannot issue loads", s.span,
                        "loads belong in the produce block; the pipeline delivers them here")
        if s.barrier is not None:
            raise error("E062", "loads in a produce block complete on the pipeline's own barrier",
                        s.barrier.span, "remove the barrier operand")
        if s.dest.field in scope.loaded:
            raise error("E070", f"field '{s.dest.field}' is loaded twice in this produce block", s.span,
                        "both copies would write the slot unordered; load each field once")
        scope.loaded.add(s.dest.field)
        return
    if s.barrier is None:
        raise error("E063", "a TMA load outside a produce block needs a completion barrier", s.span,
                    "write `load BOX[...] -> buffer, BARRIER`")
    info.lookup(s.barrier, Mbarrier, what="mbarrier")
    _require_elected(s, scope, "TMA load")


def _store(info: KernelInfo, s: ast.Store, scope: Scope) -> None:
    if s.through is not None:
        staged.check(info, s, scope, _store_rules)
        return
    if not isinstance(s.source, ast.Ref) or s.source.block is not None:
        raise error("E592", "a store copies a shared tile; this source is a value", s.source.span,
                    "store a value in blocks through staging tiles: `smem cs[2]: C` and "
                    "`store T[m, n] <- bf16(acc) through cs` (§13h)")
    box = info.box_for(s.target)
    tile = tile_ref(info, s.source, scope, strided_ok=True)
    _same_tile(box, tile, s.span)
    _store_rules(info, s, box, scope)   # outside pipelines and elect: the compiler elects it (stage_stores)


def _store_rules(info: KernelInfo, s: ast.Store, box: Box, scope: Scope) -> None:
    """What every store through `box` at the statement's coordinates obeys, staged or not."""
    im2col.refuse(box, "reduce into its tensor" if s.reduce else "store", s.span)
    _coords(info, box, gather.check_copy(info, s, box, s.coords, scope), s.span, scope)
    offsets.check_store(info, box, s, scope)    # element coordinates: each tile's box in its own tile
    stream.check_store(s, scope.stream)
    if s.reduce:   # atomic per element: many tiles may reduce into one (a bulk reduce names its type)
        (bulk.check_reduce if box.bulk else reduce.check)(s, box)
    else:
        split.check_store(info, s, scope.split_var)
        if not s.elements:
            _check_store_follows_tiles(info, s, scope)
    box.tensor.written = True
    if scope.pipeline is not None and scope.producing:
        raise error("E061", "a produce block cannot store from its slot", s.span)


def _check_store_follows_tiles(info: KernelInfo, s: ast.Store, scope: Scope) -> None:
    """Tiles run in different CTAs (and iterations), which nothing orders: a store whose coordinates
    ignore a tile index that takes more than one value writes the same elements from several of
    them, a race. An index is exempt only when its tile count is 1 by the literal shapes."""
    if scope.pipeline is not None:
        _check_store_follows_steps(s, scope)
    if not scope.tile_vars:
        return
    shape, extents = info.tile_space[0], info.tile_space[1]
    for var, dim, extent in zip(scope.tile_vars, shape, extents):
        single = isinstance(dim, int) and dim <= extent
        if not single and not any(mentions(c, var) for c in s.coords):
            raise error("E105", f"this store does not use tile index '{var}', so every tile along it stores "
                        "to the same elements", s.span,
                        "tiles run in different CTAs, which nothing orders: a race; index the store by the tile")


def _check_store_follows_steps(s: ast.Store, scope: Scope) -> None:
    """A consume block's store runs once per step of the steps loops around it, each from another
    slot and bulk group, which the compiler orders only within one step: a store that ignores a
    steps index writes the same elements every step, unordered (outside pipelines the user's own
    `wait_group` may order them; the interpreter checks, E421)."""
    for var in scope.steps_vars:
        if not any(mentions(c, var) for c in s.coords):
            raise error("E105", f"this store does not use steps index '{var}', so every step stores to the same "
                        "elements", s.span, "the stores of successive steps are not ordered: a race; store once "
                        "after the steps loop (from an accumulator or smem buffer), index the store by the step, "
                        "or reduce (atomic per element)")


def _require_elected(s, scope: Scope, what: str) -> None:
    if not scope.elected:
        raise error("E075", f"{what} issued by every thread of role '{scope.role.name}'", s.span,
                    "wrap it in `elect { ... }` so that one thread issues it")


def _assign(info: KernelInfo, s: ast.Assign, scope: Scope) -> None:
    if rows.is_row_math(info, s, scope):
        rows.check_assign(info, s, scope)
        s.row_math = True
        return
    if mma.check_acc_assign(info, s, scope):
        return
    target = tile_ref(info, s.target, scope, strided_ok=True)
    if scope.elected:
        raise error("E083", "tile math inside elect runs on one thread, which computes only its share",
                    s.span, "every thread of the role computes part of the tile: move it out of elect")
    if scope.pipeline is not None and scope.producing and not dsmem.check_assign(s, scope):
        raise error("E061", "a produce block cannot compute into its slot", s.span)
    if target.dtype.name not in TILE_MATH_DTYPES:
        raise error("E080", f"tile math on {target.dtype.name} is not supported", s.target.span,
                    f"supported: {', '.join(TILE_MATH_DTYPES)}")
    _tile_expr(info, s.value, scope, target)


def _tile_expr(info: KernelInfo, e, scope: Scope, target: Box) -> None:
    if isinstance(e, ast.Number):
        return
    if isinstance(e, ast.Ref):
        if e.field is None and e.block is None and isinstance(info.symbols.get(e.name), Scalar):
            return
        if e.field is None and e.block is None and e.name in scope.ints:
            raise error("E066", f"'{e.name}' is an integer index, not a tile or scalar", e.span)
        tile = tile_ref(info, e, scope, strided_ok=True)
        if tile.matrix != target.matrix:   # leading 1s aside: a [1, R, C] tile reads as [R, C]
            raise error("E067", f"tile {e.text()} has shape {tile.tile_shape}, the target has {target.tile_shape}",
                        e.span)
        if tile.dtype.name not in TILE_MATH_DTYPES:
            raise error("E080", f"tile math on {tile.dtype.name} is not supported", e.span)
        swizzled = tile.swizzle != "none" or target.swizzle != "none"
        if tile.swizzle != target.swizzle or (swizzled and tile.dtype.itemsize != target.dtype.itemsize):
            raise error("E067", f"tile {e.text()} is laid out differently from the target", e.span,
                        "with swizzle, elementwise operands need the same swizzle and element size")
        return
    check_operation(e)
    children = {ast.BinOp: lambda: [e.lhs, e.rhs], ast.Neg: lambda: [e.operand], ast.Call: lambda: e.args}
    for child in children.get(type(e), list)():
        _tile_expr(info, child, scope, target)


def _constant(e) -> int | None:
    if isinstance(e, ast.Number):
        return e.value
    if isinstance(e, ast.Neg):
        inner = _constant(e.operand)
        return None if inner is None else -inner
    return None


def _elect(info: KernelInfo, s: ast.Elect, scope: Scope) -> None:
    if scope.elected:
        raise error("E076", "elect blocks cannot nest", s.span)
    if scope.turn:
        turns.refuse_inside(s, "an elect block")
    _block(info, s.body, replace(scope, elected=True))


def _barrier_stmt(info: KernelInfo, s, scope: Scope) -> None:
    if scope.pipeline is not None:
        raise error("E078", "produce/consume blocks manage their barriers; explicit barrier operations "
                    "belong outside them", s.span)
    info.lookup(s.barrier, Mbarrier, what="mbarrier")
    if isinstance(s, ast.ExpectTx):
        _require_elected(s, scope, "expect_tx")
        int_expr(info, s.bytes, scope)
        value = _constant(s.bytes)
        if value is not None and not 0 < value <= MAX_TX_BYTES:
            raise error("E072", f"a phase can expect 1..{MAX_TX_BYTES} bytes, got {value}", s.bytes.span)
    if isinstance(s, ast.Wait):
        int_expr(info, s.parity, scope)


def _fence(info: KernelInfo, s: ast.Fence, scope: Scope) -> None:
    if s.kind.name not in FENCE_KINDS:
        raise error("E074", f"unknown fence '{s.kind.name}'", s.kind.span, f"expected one of: {', '.join(FENCE_KINDS)}")


def _bulk_group(info: KernelInfo, s, scope: Scope) -> None:
    if scope.pipeline is not None:
        raise error("E078", "produce/consume blocks manage bulk groups themselves", s.span)
    _require_elected(s, scope, "bulk-group operation")


def _sync(info: KernelInfo, s, scope: Scope) -> None:
    if scope.elected:
        raise error("E079", "sync inside elect would wait for threads that never arrive (a hang)", s.span)
    if scope.turn:
        turns.refuse_inside(s, "a sync")


def _turn(info: KernelInfo, s: ast.Turn, scope: Scope) -> None:
    turns.check_turn(s, scope)
    _block(info, s.body, replace(scope, turn=True))


_HANDLERS = {
    ast.ForTiles: _for_tiles, ast.ForSteps: _for_steps, ast.Produce: _produce, ast.Consume: _consume, ast.Load: _load,
    ast.Store: _store, ast.Assign: _assign, ast.Elect: _elect, ast.Turn: _turn, ast.ExpectTx: _barrier_stmt,
    ast.Arrive: _barrier_stmt, ast.Wait: _barrier_stmt, ast.Fence: _fence, ast.Sync: _sync,
    ast.CommitGroup: _bulk_group, ast.WaitGroup: _bulk_group,
    ast.Prefetch: prefetch.check_prefetch, ast.AccumulatorDecl: mma.declare, ast.Mma: mma.check_mma, ast.RowDecl: rows.declare,
}
