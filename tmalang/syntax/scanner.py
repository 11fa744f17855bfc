"""Lexing without a regex per parser state. lark's contextual lexer gives each parser state a
scanner for the terminals that state accepts: one regex, the union of their patterns, compiled
when the state is first met. A file meets ~60 states, and compiling their unions made the first
parse in a process cost ~30-50 ms, more than the parse. The scanner here gives the same answers
from the same ordered terminal list, trying the terminals one after another (a union regex takes
its first alternative that matches, so this is the same match), each pattern compiled once for
all states. It follows lark 1.3's lexer (pyproject asks for lark>=1.3; lark 1.2's lexer differs),
and tests/syntax/test_cold_compile.py compares it with lark's own on every source in the repository; it
serves both lark's parser (`scan_terminal_by_terminal`) and the table-driven parse (syntax/tables.py)."""

from __future__ import annotations

import functools
import re

import lark
from lark.lexer import BasicLexer, ContextualLexer, PatternRE, PatternStr, UnlessCallback


def scan_terminal_by_terminal(parser: lark.Lark) -> None:
    """Make every state's lexer of `parser` build a TerminalScanner. A lark whose lexers are laid
    out otherwise, or which uses lexer callbacks, global regex flags or bytes, keeps its own."""
    lexer = getattr(parser.parser, "lexer", None)
    conf = parser.lexer_conf
    if (not isinstance(lexer, ContextualLexer) or conf.callbacks or conf.g_regex_flags or conf.use_bytes
            or conf.re_module is not re):
        return
    for basic in [*lexer.lexers.values(), lexer.root_lexer]:
        if type(basic) is BasicLexer:
            basic.__class__ = TerminalByTerminalLexer


class TerminalByTerminalLexer(BasicLexer):
    """lark's BasicLexer (it is one; only the scanner differs)."""

    def _build_scanner(self):
        terminals, self.callback = create_unless(self.terminals)
        return TerminalScanner(terminals)


class TerminalScanner:
    """lark's Scanner over `terminals` (in lark's order): match gives (text, terminal name) of the
    first terminal that matches at `pos`; fullmatch the name of the first that matches all of a text."""

    def __init__(self, terminals):
        self.terminals = terminals
        self.allowed_types = {t.name for t in terminals}
        self._matchers = [(t.name, _matcher(t)) for t in terminals]

    def match(self, text, pos):
        return self.match_at(text.text, pos, text.end)

    def match_at(self, text: str, pos: int, end: int):
        for name, matcher in self._matchers:
            value = matcher(text, pos, end)
            if value is not None:
                return value, name
        return None

    def fullmatch(self, text: str):
        for name, matcher in self._matchers:
            if matcher(text, 0, len(text)) == text:
                return name
        return None


@functools.cache
def _matcher(terminal):
    """(text, pos, end) -> the text `terminal` matches at pos, or None; one per terminal."""
    pattern = terminal.pattern
    if pattern.type == "str" and not pattern.flags:
        value = pattern.value
        return lambda text, pos, end: value if text.startswith(value, pos, end) else None
    compiled = re.compile(pattern.to_regexp())

    def match(text, pos, end):
        m = compiled.match(text, pos, end)
        return m.group(0) if m else None
    return match


def create_unless(terminals):
    """lark.lexer._create_unless: a string terminal that a regex terminal of equal priority matches
    whole (a keyword that reads as a NAME) leaves the scanner; the regex terminal's token takes its
    type when its text is the string. Which string each regex matches is asked once per pair."""
    strings = [t for t in terminals if isinstance(t.pattern, PatternStr)]
    embedded, callback = set(), {}
    for retok in (t for t in terminals if isinstance(t.pattern, PatternRE)):
        unless = [s for s in strings if s.priority == retok.priority and _reads_as(retok, s)]
        embedded.update(s for s in unless if s.pattern.flags <= retok.pattern.flags)
        if unless:
            callback[retok.name] = UnlessCallback(TerminalScanner(unless))
    return [t for t in terminals if t not in embedded], callback


@functools.cache
def _reads_as(retok, strtok) -> bool:
    """Whether regex terminal `retok` matches string terminal `strtok`'s text whole."""
    text = strtok.pattern.value
    return _matcher(retok)(text, 0, len(text)) == text
