"""The tree → AST builder's part for expressions: references (with a field, or a block's
coordinates), numbers and infinity, the binary operators, negation and calls. Each method is named
after its grammar rule (grammar/tmalang.lark) and gets lark's children; syntax/parser.py's builder
puts it together with the declarations' (syntax/build_declarations.py) and statements'
(syntax/build_statements.py)."""

from __future__ import annotations

from lark import v_args

from . import ast
from .build_base import NodeBuilder


@v_args(meta=True)
class ExpressionBuilder(NodeBuilder):
    """Builds expressions."""

    def ref(self, meta, children):
        name, *rest = children
        return ast.Ref(self._span(meta), str(name), str(rest[0]) if rest and rest[0] is not None else None)

    def block_index(self, meta, exprs):
        return exprs

    def block_ref(self, meta, children):
        name, field, coords = children
        return ast.Ref(self._span(meta), str(name), None if field is None else str(field), coords)

    def number(self, meta, children):
        text = str(children[0])
        value = float(text) if any(c in text for c in ".eE") else int(text)
        return ast.Number(self._span(meta), value)

    def infinity(self, meta, children):
        return ast.Number(self._span(meta), float("inf"))

    def _binary(self, op, meta, children):
        return ast.BinOp(self._span(meta), op, children[0], children[1])

    def add(self, meta, children):
        return self._binary("+", meta, children)

    def sub(self, meta, children):
        return self._binary("-", meta, children)

    def mul(self, meta, children):
        return self._binary("*", meta, children)

    def div(self, meta, children):
        return self._binary("/", meta, children)

    def mod(self, meta, children):
        return self._binary("%", meta, children)

    def bitand(self, meta, children):
        return self._binary("&", meta, children)

    def neg(self, meta, children):
        return ast.Neg(self._span(meta), children[0])

    def call(self, meta, children):
        name, *args = children
        return ast.Call(self._span(meta), str(name), args)
