"""lark's syntax errors as tmalang diagnostics: E001 (a character no terminal starts with), E002
(the input ends too early) and E003 (a token the grammar does not accept here, with the tokens it
would accept, in the words a user reads: `'('`, `a name`, `'box'`). Only a program that does not
parse comes here; the terminals lark names __ANON_n are spelt from lark's parser, which the caller
passes as `literals` (syntax/parser.py's `_literal_terminals`) so that it is built only when needed."""

from __future__ import annotations

from collections.abc import Callable

import lark

from ..diagnostics import Source, Span, TmalangError, error


def syntax_error(source: Source, exc: lark.UnexpectedInput, literals: Callable[[], dict[str, str]]) -> TmalangError:
    """The diagnostic for lark's `exc`; `literals()` maps a keyword's or operator's terminal name
    to its text."""
    line, col = max(exc.line, 1), max(exc.column, 1)
    if isinstance(exc, lark.UnexpectedCharacters):
        char = source.line(line)[col - 1 : col] or "end of line"
        return error("E001", f"unexpected character '{char}'", Span(source, line, col, line, col + 1))
    token = getattr(exc, "token", None)
    if token is None or token.type == "$END":
        last = len(source.text.splitlines()) or 1
        end_col = len(source.line(last)) + 1
        return error("E002", "unexpected end of input", Span(source, last, end_col, last, end_col + 1))
    expected = sorted(_describe(t, literals) for t in _expected(exc))
    notes = [f"expected one of: {', '.join(expected)}"] if expected else []
    span = Span(source, line, col, line, col + max(1, len(str(token))))
    return error("E003", f"unexpected '{token}'", span, *notes)


def _expected(exc: lark.UnexpectedInput) -> set[str]:
    """The terminals the parser would accept here. LALR merges the lookaheads of states with one
    core (an integer reduces alike in a warp range and a box shape), so the error's own set can
    name tokens that fit elsewhere; the interactive parser tries each, through the reductions."""
    expected = set(getattr(exc, "expected", ()) or ())
    interactive = getattr(exc, "interactive_parser", None)
    if interactive is not None:
        try:
            return interactive.accepts() or expected
        except lark.exceptions.LarkError:
            return expected
    return expected


_PUNCT = {
    "LPAR": "(", "RPAR": ")", "LBRACE": "{", "RBRACE": "}", "LSQB": "[", "RSQB": "]",
    "COMMA": ",", "COLON": ":", "EQUAL": "=", "DOT": ".", "PLUS": "+", "MINUS": "-",
    "STAR": "*", "SLASH": "/", "PERCENT": "%", "AMPERSAND": "&",
}   # lark names the other literals __ANON_n, in an order a grammar edit changes: `literals`


_CLASSES = {"NAME": "a name", "INT": "an integer", "NUMBER": "a number", "SIZE": "a size like 128B",
            "CLUSTER_SHAPE": "a cluster shape like 2x2"}


def _describe(terminal: str, literals: Callable[[], dict[str, str]]) -> str:
    if terminal in _PUNCT:
        return f"'{_PUNCT[terminal]}'"
    literal = literals().get(terminal)
    if literal is not None:
        return f"'{literal}'"
    if terminal in _CLASSES:
        return _CLASSES[terminal]
    return f"'{terminal.lower()}'"
