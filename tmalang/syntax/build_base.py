"""What every part of the tree → AST builder shares: a lark Transformer over one source text, and
the helpers that make spans (a rule's, from lark's meta; a token's), references from name tokens,
and the integer, size and optional-name positions that may hold a compile-time constant's use
(syntax/constants.py resolves those). The parts that build nodes (syntax/build_declarations.py,
build_statements.py, build_expressions.py) are its subclasses; syntax/parser.py joins them."""

from __future__ import annotations

from lark import Token, Transformer

from ..diagnostics import Source, Span
from . import ast


class NodeBuilder(Transformer):
    """Builds AST nodes; each carries the span lark recorded for its rule."""

    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    def _span(self, meta) -> Span:
        return Span(self.source, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok(self, token: Token) -> Span:
        return Span(self.source, token.line, token.column, token.end_line, token.end_column)

    def _ref(self, token: Token) -> ast.Ref:
        return ast.Ref(self._tok(token), str(token))

    def _int(self, value):
        """An integer position: a literal, or a constant's use (syntax/constants.py resolves it)."""
        return value if isinstance(value, ast.ConstUse) else int(value)

    def _size(self, value):
        return value if isinstance(value, ast.ConstUse) else str(value)

    def _through(self, name):
        return None if name is None else self._ref(name)
