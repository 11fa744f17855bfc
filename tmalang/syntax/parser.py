"""Text → AST. The grammar lives in grammar/tmalang.lark; this file is the entry (`parse`) and
holds the per-process parser state, over the modules that do the work:

    lark_parser.py         lark's own parser for the grammar (kept in tmalang's cache folder) and
                           where parser pickles live, named by what they depend on
    scanner.py             the contextual lexer's scanners, terminal by terminal (no regex per state)
    tables.py              the parse tables in plain data (a pickle in the cache) and the LALR loop
                           that builds lark's tree from them without building lark
    syntax_errors.py       lark's syntax errors as E001 / E002 / E003
    build_base.py          the tree → AST builder's shared helpers (spans, refs, constant positions)
    build_declarations.py  its kernel, header and declaration nodes
    build_statements.py    its statement nodes
    build_expressions.py   its expression nodes

`_parser`, `_tables` and `_literal_terminals` are made at most once per process, here, and looked
up here at each use (the tests reset them by replacing these names).
"""

from __future__ import annotations

import functools

import lark

from ..diagnostics import Source
from . import ast
from .build_declarations import DeclarationBuilder
from .build_expressions import ExpressionBuilder
from .build_statements import StatementBuilder
from .constants import resolve
from .lark_parser import grammar_path, lark_file, load_or_build_lark
from .limits import check_tokens
from .scanner import TerminalByTerminalLexer, scan_terminal_by_terminal
from .syntax_errors import syntax_error
from .tables import Tables, fast_tree, load_tables, tables_file

# The names the tests reach for, under the names they had when all of this was one file.
_lark_file = lark_file
_tables_file = tables_file
_TerminalByTerminalLexer = TerminalByTerminalLexer


@functools.cache
def _parser() -> lark.Lark:
    """lark's parser, made at most once per process and only when needed: for a syntax error's
    message, and to make the parse tables (syntax/lark_parser.py: kept in tmalang's cache folder,
    loaded only when the file is the user's own), its lexers scanning terminal by terminal."""
    parser = load_or_build_lark()
    scan_terminal_by_terminal(parser)
    return parser


@functools.cache
def _tables() -> Tables:
    """The tables, from the cache when it holds them (and is the user's own), else from lark (then
    written there for the next process; a cache that cannot be written is no error)."""
    return load_tables(grammar_path("tmalang.lark").read_text(), _parser)


def _fast_tree(text: str) -> lark.Tree | None:
    """lark's parse tree of `text` (the same Tree and Token values, positions included), or None
    where lark raises."""
    return fast_tree(_tables(), text)


def parse(text: str, name: str = "<string>", constants: dict | None = None,
          binder: str = "compile(constants=...)", kernel: str | None = None) -> ast.Program:
    """The AST with every compile-time constant replaced by its value (syntax/constants.py):
    `constants` binds those of kernel `kernel` (default: the first), the rest take defaults."""
    source = Source(text, name)
    tree = _fast_tree(text)
    if tree is None:   # no program: lark says why
        try:
            tree = _parser().parse(text)
        except lark.UnexpectedInput as exc:
            raise syntax_error(source, exc, _literal_terminals) from None
    check_tokens(source, tree)
    try:
        program = _Builder(source).transform(tree)
    except lark.exceptions.VisitError as exc:
        raise exc.orig_exc from None
    program.uses = resolve(program, constants or {}, binder, kernel)
    return program


@functools.cache
def _literal_terminals() -> dict[str, str]:
    """Terminal name → its text, for keywords and operators lark names __ANON_n."""
    return {t.name: t.pattern.value for t in _parser().terminals if t.pattern.type == "str"}


class _Builder(DeclarationBuilder, StatementBuilder, ExpressionBuilder):
    """Builds AST nodes; each carries the span lark recorded for its rule (one method per grammar
    rule, in the three parts it joins)."""
