"""The tree → AST builder's part for statements: blocks, the tile and step loops, accumulators
and row vectors, mma, produce/consume, TMA loads, stores, reductions and prefetches, assignments,
elect/turn, and the mbarrier, fence, sync and wgmma-group steps. Each method is named after its
grammar rule (grammar/tmalang.lark) and gets lark's children; syntax/parser.py's builder puts it
together with the declarations' (syntax/build_declarations.py) and expressions'
(syntax/build_expressions.py)."""

from __future__ import annotations

from lark import v_args

from ..diagnostics import error
from . import ast
from .build_base import NodeBuilder


@v_args(meta=True)
class StatementBuilder(NodeBuilder):
    """Builds statements and the blocks that hold them."""

    def block(self, meta, stmts):
        return stmts

    def if_stmt(self, meta, children):
        """A compile-time `if` of statements or (`if_items`) of kernel items: the same node."""
        lhs, op, rhs, body, orelse = children
        return ast.StaticIf(self._span(meta), lhs, op, rhs, body, orelse or [])

    if_items = if_stmt

    def items(self, meta, children):
        return [c for c in children if c is not None]

    def for_tiles(self, meta, children):
        *names, tensor, box, split, stream, group, reverse, dynamic, by_warpgroup, index, body = children
        index = str(index) if index is not None else None
        vars_ = [str(n) for n in names]
        group = self._int(group) if group is not None else None
        stream = self._tok(stream) if stream is not None else None
        return ast.ForTiles(self._span(meta), vars_, self._ref(tensor), self._ref(box), index, body, group, split,
                            dynamic=dynamic is not None, stream=stream, by_warpgroup=by_warpgroup,
                            reverse=reverse is not None)

    def by_warpgroup(self, meta, children):
        return self._span(meta)

    def tile_split(self, meta, children):
        (count,) = children
        if count.type == "INT":
            return ast.Number(self._tok(count), int(count))
        return self._ref(count)

    def for_steps(self, meta, children):
        var, extent, chunk, part, stream, body = children
        part = self._ref(part) if part is not None else None
        stream = self._tok(stream) if stream is not None else None
        return ast.ForSteps(self._span(meta), str(var), extent, self._int(chunk), body, part, stream)

    def accumulator_decl(self, meta, children):
        name, dtype, shape, by_columns = children
        return ast.AccumulatorDecl(self._span(meta), str(name), self._ref(dtype), shape, by_columns)

    def by_columns(self, meta, children):
        return self._span(meta)

    def row_decl(self, meta, children):
        name, dtype, cols = children
        return ast.RowDecl(self._span(meta), str(name), self._ref(dtype), None if cols is None else self._int(cols))

    def mma(self, meta, children):
        acc, a, km, b, kn = children
        return ast.Mma(self._span(meta), acc, a, b, kn is not None, km is not None)

    def produce(self, meta, children):
        pipeline, slot, body = children
        return ast.Produce(self._span(meta), self._ref(pipeline), str(slot), body)

    def consume(self, meta, children):
        pipeline, slot, body = children
        return ast.Consume(self._span(meta), self._ref(pipeline), str(slot), body)

    def coords(self, meta, children):
        at, *exprs = children
        return at is not None, exprs          # (element coordinates?, the coordinates)

    def load(self, meta, children):
        source, (elements, coords), offsets, dest, barrier, multicast = children
        barrier = self._ref(barrier) if barrier is not None else None
        load = ast.Load(self._span(meta), self._ref(source), coords, dest, barrier, multicast is not None, elements,
                        multicast_over=multicast or [])
        if offsets is not None:
            load.offsets, load.offsets_span = offsets
        return load

    def multicast(self, meta, children):
        """The tile indices named in `multicast(...)`, as refs; empty for a bare `multicast`."""
        return [self._ref(t) for t in children[1:] if t is not None]

    def im2col_offsets(self, meta, exprs):
        return exprs, self._span(meta)

    def store(self, meta, children):
        target, (elements, coords), source, _, through = children
        return ast.Store(self._span(meta), self._ref(target), coords, source, elements=elements,
                         through=self._through(through))

    def reduce(self, meta, children):
        op, target, (elements, coords), source, _, through = children
        return ast.Store(self._span(meta), self._ref(target), coords, source, str(op), self._tok(op), elements,
                         through=self._through(through))

    def prefetch(self, meta, children):
        box, at, *coords, offsets = children
        prefetch = ast.Prefetch(self._span(meta), self._ref(box), coords, at is not None)
        if offsets is not None:
            prefetch.offsets, prefetch.offsets_span = offsets
        return prefetch

    def assign(self, meta, children):
        target, value = children
        return ast.Assign(self._span(meta), target, value)

    def elect(self, meta, children):
        return ast.Elect(self._span(meta), children[0])

    def turn(self, meta, children):
        return ast.Turn(self._span(meta), children[0])

    def expect_tx(self, meta, children):
        return ast.ExpectTx(self._span(meta), self._ref(children[0]), children[1])

    def arrive(self, meta, children):
        return ast.Arrive(self._span(meta), self._ref(children[0]))

    def wait(self, meta, children):
        return ast.Wait(self._span(meta), self._ref(children[0]), children[1])

    def fence(self, meta, children):
        return ast.Fence(self._span(meta), self._ref(children[0]))

    def sync(self, meta, children):
        return ast.Sync(self._span(meta))

    def commit_group(self, meta, children):
        return ast.CommitGroup(self._span(meta))

    def wait_group(self, meta, children):
        kind, pending = children
        if kind is None:
            return ast.WaitGroup(self._span(meta), False, int(pending))
        if str(kind) != "read":
            raise error("E004", f"unknown wait_group kind '{kind}'", self._tok(kind), "only 'read' may qualify wait_group")
        return ast.WaitGroup(self._span(meta), True, int(pending))
