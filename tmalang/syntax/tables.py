"""The parse, without building lark. Building the lark parser, even from lark's cache, takes
~30 ms: it deserializes every rule, terminal and parse-table entry into its objects and makes a
lexer for each parser state. A valid program needs less: the parse table as plain ints, lark's
rules and tree callbacks, and a scanner for each state met. `Tables` holds that, taken from the
lark parser once and kept in a pickle in the user's cache (`load_tables`); `fast_tree` runs lark's
LALR loop and contextual lexer over it (the same steps as
lark.parsers.lalr_parser_state.ParserState.feed_token and lark.lexer.BasicLexer.next_token) and
builds lark's tree with lark's callbacks. Where lark would raise, it gives up, and the parse goes
to lark itself, for lark's error (syntax/parser.py)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import lark
from lark import Token
from lark.lexer import TerminalDef
from lark.parse_tree_builder import ParseTreeBuilder
from lark.parsers.lalr_analysis import Shift

from ..caches.disk import read_own_file, write_own_file
from .lark_parser import LARK_OPTIONS, cache_file
from .scanner import TerminalScanner, create_unless

# Names the pickle: raise it whenever what `Tables` holds, or how `Tables.of` fills it, changes
# (3: `Tables` moved from syntax/parser.py to this module, and pickles name their class's module).
TABLES_FORMAT = 3


@dataclass
class Tables:
    """What a parse needs of the lark parser, in plain data where lark's is objects."""

    states: dict[int, dict[str, int]]   # state -> terminal or rule name -> next state (shift), or ~rule (reduce)
    start: int
    end: int
    rules: list                         # lark Rules, by the index the reductions name
    terminals: dict[str, TerminalDef]
    orders: list[tuple[str, ...]]       # the terminals a state's lexer tries, in lark's order
    lexer_of: dict[int, int]            # state -> its lexer's index in `orders`
    ignore: frozenset[str]
    newlines: frozenset[str]            # terminals whose text may hold a newline
    tree_options: tuple[bool, bool]     # the parser's propagate_positions and maybe_placeholders
    callbacks: list = field(default_factory=list, repr=False, compare=False)   # by rule, made at load
    scanners: dict = field(default_factory=dict, repr=False, compare=False)    # by `orders` index, made when met

    @classmethod
    def of(cls, parser: lark.Lark) -> Tables:
        frontend = parser.parser
        table = frontend.parser.parser.parse_table
        rules = list(parser.rules)
        index = {rule: i for i, rule in enumerate(rules)}
        states = {state: {name: arg if action is Shift else ~index[arg] for name, (action, arg) in actions.items()}
                  for state, actions in table.states.items()}
        lexers = frontend.lexer.lexers
        orders = list(dict.fromkeys(tuple(t.name for t in lexer.terminals) for lexer in lexers.values()))
        place = {order: i for i, order in enumerate(orders)}
        basic = frontend.lexer.root_lexer
        return cls(states, table.start_states["start"], table.end_states["start"], rules,
                   {t.name: t for t in parser.terminals}, orders,
                   {state: place[tuple(t.name for t in lexer.terminals)] for state, lexer in lexers.items()},
                   frozenset(basic.ignore_types), frozenset(basic.newline_types),
                   (parser.options.propagate_positions, parser.options.maybe_placeholders))

    def prepare(self) -> Tables:
        """Make lark's tree callbacks, one per rule (what lark.Lark._prepare_callbacks makes)."""
        positions, placeholders = self.tree_options
        made = ParseTreeBuilder(self.rules, lark.Tree, positions, False, placeholders).create_callback(None)
        self.callbacks = [made[rule] for rule in self.rules]
        return self

    def scanner(self, state: int):
        """(scanner, unless callbacks) of a state's lexer, as TerminalByTerminalLexer builds them."""
        which = self.lexer_of[state]
        found = self.scanners.get(which)
        if found is None:
            terminals, unless = create_unless([self.terminals[n] for n in self.orders[which]])
            found = self.scanners[which] = (TerminalScanner(terminals), unless)
        return found


def tables_file(grammar: str) -> Path | None:
    """The tables' pickle: named by the grammar, lark's and Python's versions, TABLES_FORMAT and
    lark's options (they decide the tables, and `tree_options` is read from them)."""
    return cache_file("parser", grammar, f"{TABLES_FORMAT} {sorted(LARK_OPTIONS.items())!r}")


def load_tables(grammar: str, build: Callable[[], lark.Lark]) -> Tables:
    """The tables, from the cache when it holds them (and is the user's own), else from the lark
    parser `build()` gives (then written there for the next process; a cache that cannot be
    written is no error)."""
    path = tables_file(grammar)
    if path is None:
        return Tables.of(build()).prepare()
    data = read_own_file(path)   # another user's file, or one others may write, is never unpickled
    try:
        tables = pickle.loads(data) if data is not None else None
        if isinstance(tables, Tables):
            return tables.prepare()
    except Exception:   # damaged (whatever unpickling says): built anew below
        pass
    tables = Tables.of(build())
    write_own_file(path, pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))
    return tables.prepare()


def fast_tree(tables: Tables, text: str) -> lark.Tree | None:
    """lark's parse tree of `text` (the same Tree and Token values, positions included), or None
    where lark raises."""
    states, rules, callbacks, ignore, newlines = (tables.states, tables.rules, tables.callbacks, tables.ignore,
                                                  tables.newlines)
    state_stack, value_stack = [tables.start], []
    pos, line, column, line_start, end = 0, 1, 1, 0, len(text)
    token = None
    while pos < end:                      # lex one token in the state on top of the stack ...
        scanner, unless = tables.scanner(state_stack[-1])
        found = scanner.match_at(text, pos, end)
        if found is None:
            return None
        value, kind = found
        start_pos, start_line, start_column = pos, line, column
        if kind in newlines:
            count = value.count("\n")
            if count:
                line += count
                line_start = pos + value.rindex("\n") + 1
        pos += len(value)
        column = pos - line_start + 1
        if kind in ignore and kind not in unless:
            continue
        token = Token(kind, value, start_pos, start_line, start_column, line, column, pos)
        if kind in unless:
            token = unless[kind](token)
        if kind in ignore:
            continue
        if _feed(token, states, rules, callbacks, state_stack, value_stack, tables.end) is None:
            return None                   # ... and shift it
    last = Token.new_borrow_pos("$END", "", token) if token else Token("$END", "", 0, 1, 1)
    return _feed(last, states, rules, callbacks, state_stack, value_stack, tables.end, at_end=True)


def _feed(token, states, rules, callbacks, state_stack, value_stack, end_state, at_end=False):
    """Reduce as the table says, then shift `token` (True); at the end, the tree; None where lark
    raises UnexpectedToken."""
    while True:
        action = states[state_stack[-1]].get(token.type)
        if action is None:
            return None
        if action >= 0:                   # shift
            if at_end:
                return None
            state_stack.append(action)
            value_stack.append(token)
            return True
        rule = rules[~action]
        size = len(rule.expansion)
        children = value_stack[-size:] if size else []
        if size:
            del state_stack[-size:]
            del value_stack[-size:]
        value = callbacks[~action](children)
        state_stack.append(states[state_stack[-1]][rule.origin.name])
        value_stack.append(value)
        if at_end and state_stack[-1] == end_state:
            return value_stack[-1]
