"""Text → AST. The grammar lives in grammar/tmalang.lark; this file only builds nodes."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import lark
from lark import Token, Transformer, v_args
from lark.lexer import BasicLexer, ContextualLexer, PatternRE, PatternStr, TerminalDef, UnlessCallback
from lark.parse_tree_builder import ParseTreeBuilder
from lark.parsers.lalr_analysis import Shift

from ..caches.disk import default_root, read_own_file, write_own_file
from ..diagnostics import Source, Span, error
from . import ast
from .bindings import check_default
from .constants import resolve
from .limits import check_tokens


def grammar_path(name: str) -> Path:
    """The grammar ships inside the wheel (tmalang/grammar); a source checkout keeps it in grammar/."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "grammar" / name
    return packaged if packaged.is_file() else package.parent / "grammar" / name


_LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


@functools.cache
def _parser() -> lark.Lark:
    """lark's parser, made at most once per process and only when needed: for a syntax error's
    message, and to make the parse tables. It is kept in tmalang's cache folder beside the tables
    (a fresh build takes 0.1-0.5 s, a load 15 ms) and loaded only when the file is the user's own.
    Not lark's `cache=True`: that unpickles whatever file has a predictable name in the shared temp
    folder, so another user could plant one and run code as whoever makes a typo."""
    text = grammar_path("tmalang.lark").read_text()
    path = _lark_file(text)
    parser = _load_lark(path) if path is not None else None
    if parser is None:
        parser = lark.Lark(text, **_LARK_OPTIONS)
        if path is not None:
            saved = io.BytesIO()
            parser.save(saved)
            write_own_file(path, saved.getvalue())
    _scan_terminal_by_terminal(parser)
    return parser


def _lark_file(grammar: str) -> Path | None:
    return _cache_file("parser-lark", grammar, repr(sorted(_LARK_OPTIONS.items())))


def _load_lark(path: Path) -> lark.Lark | None:
    data = read_own_file(path)
    if data is None:
        return None
    try:
        return lark.Lark.load(io.BytesIO(data))
    except Exception:   # damaged (whatever unpickling says): built anew
        return None


# ---- lexing without a regex per parser state
#
# lark's contextual lexer gives each parser state a scanner for the terminals that state accepts:
# one regex, the union of their patterns, compiled when the state is first met. A file meets ~60
# states, and compiling their unions made the first parse in a process cost ~30-50 ms, more than
# the parse. The scanner below gives the same answers from the same ordered terminal list, trying
# the terminals one after another (a union regex takes its first alternative that matches, so
# this is the same match), each pattern compiled once for all states. It and the parse below
# follow lark 1.3's lexer and parser (pyproject asks for lark>=1.3; lark 1.2's lexer differs), and
# tests/test_cold_compile.py compares them with lark's own on every source in the repository.


def _scan_terminal_by_terminal(parser: lark.Lark) -> None:
    """Make every state's lexer of `parser` build a _TerminalScanner. A lark whose lexers are laid
    out otherwise, or which uses lexer callbacks, global regex flags or bytes, keeps its own."""
    lexer = getattr(parser.parser, "lexer", None)
    conf = parser.lexer_conf
    if (not isinstance(lexer, ContextualLexer) or conf.callbacks or conf.g_regex_flags or conf.use_bytes
            or conf.re_module is not re):
        return
    for basic in [*lexer.lexers.values(), lexer.root_lexer]:
        if type(basic) is BasicLexer:
            basic.__class__ = _TerminalByTerminalLexer


class _TerminalByTerminalLexer(BasicLexer):
    """lark's BasicLexer (it is one; only the scanner differs)."""

    def _build_scanner(self):
        terminals, self.callback = _create_unless(self.terminals)
        return _TerminalScanner(terminals)


class _TerminalScanner:
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


def _create_unless(terminals):
    """lark.lexer._create_unless: a string terminal that a regex terminal of equal priority matches
    whole (a keyword that reads as a NAME) leaves the scanner; the regex terminal's token takes its
    type when its text is the string. Which string each regex matches is asked once per pair."""
    strings = [t for t in terminals if isinstance(t.pattern, PatternStr)]
    embedded, callback = set(), {}
    for retok in (t for t in terminals if isinstance(t.pattern, PatternRE)):
        unless = [s for s in strings if s.priority == retok.priority and _reads_as(retok, s)]
        embedded.update(s for s in unless if s.pattern.flags <= retok.pattern.flags)
        if unless:
            callback[retok.name] = UnlessCallback(_TerminalScanner(unless))
    return [t for t in terminals if t not in embedded], callback


@functools.cache
def _reads_as(retok, strtok) -> bool:
    """Whether regex terminal `retok` matches string terminal `strtok`'s text whole."""
    text = strtok.pattern.value
    return _matcher(retok)(text, 0, len(text)) == text


# ---- the parse, without building lark
#
# Building the lark parser, even from lark's cache, takes ~30 ms: it deserializes every rule,
# terminal and parse-table entry into its objects and makes a lexer for each parser state. A
# valid program needs less: the parse table as plain ints, lark's rules and tree callbacks, and
# a scanner for each state met. `_Tables` holds that, taken from the lark parser once and kept in
# a pickle in the user's cache; `_fast_tree` runs lark's LALR loop and contextual lexer over it
# (the same steps as lark.parsers.lalr_parser_state.ParserState.feed_token and
# lark.lexer.BasicLexer.next_token) and builds lark's tree with lark's callbacks. Where lark would
# raise, it gives up, and the parse goes to lark itself, for lark's error.

_TABLES_FORMAT = 2


@dataclass
class _Tables:
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
    def of(cls, parser: lark.Lark) -> _Tables:
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

    def prepare(self) -> _Tables:
        """Make lark's tree callbacks, one per rule (what lark.Lark._prepare_callbacks makes)."""
        positions, placeholders = self.tree_options
        made = ParseTreeBuilder(self.rules, lark.Tree, positions, False, placeholders).create_callback(None)
        self.callbacks = [made[rule] for rule in self.rules]
        return self

    def scanner(self, state: int):
        """(scanner, unless callbacks) of a state's lexer, as _TerminalByTerminalLexer builds them."""
        which = self.lexer_of[state]
        found = self.scanners.get(which)
        if found is None:
            terminals, unless = _create_unless([self.terminals[n] for n in self.orders[which]])
            found = self.scanners[which] = (_TerminalScanner(terminals), unless)
        return found


def _tables_file(grammar: str) -> Path | None:
    return _cache_file("parser", grammar, str(_TABLES_FORMAT))


def _cache_file(kind: str, grammar: str, form: str) -> Path | None:
    """A parser pickle's place, in tmalang's cache folder as tmalang/caches/disk.py finds it
    (TMALANG_CACHE_DIR, else $XDG_CACHE_HOME/tmalang, else ~/.cache/tmalang; beside its entries,
    which are two-letter folders), named by everything the pickle depends on; None under
    TMALANG_CACHE=0."""
    if os.environ.get("TMALANG_CACHE", "1") == "0":
        return None
    key = hashlib.sha256("\0".join([grammar, lark.__version__, sys.version, form]).encode())
    return default_root() / f"{kind}-{key.hexdigest()[:24]}.pickle"


@functools.cache
def _tables() -> _Tables:
    """The tables, from the cache when it holds them (and is the user's own), else from lark (then
    written there for the next process; a cache that cannot be written is no error)."""
    path = _tables_file(grammar_path("tmalang.lark").read_text())
    if path is None:
        return _Tables.of(_parser()).prepare()
    data = read_own_file(path)   # another user's file, or one others may write, is never unpickled
    try:
        tables = pickle.loads(data) if data is not None else None
        if isinstance(tables, _Tables):
            return tables.prepare()
    except Exception:   # damaged (whatever unpickling says): built anew below
        pass
    tables = _Tables.of(_parser())
    write_own_file(path, pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))
    return tables.prepare()


def _fast_tree(text: str) -> lark.Tree | None:
    """lark's parse tree of `text` (the same Tree and Token values, positions included), or None
    where lark raises."""
    tables = _tables()
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
            raise _syntax_error(source, exc) from None
    check_tokens(source, tree)
    try:
        program = _Builder(source).transform(tree)
    except lark.exceptions.VisitError as exc:
        raise exc.orig_exc from None
    program.uses = resolve(program, constants or {}, binder, kernel)
    return program


def _syntax_error(source: Source, exc: lark.UnexpectedInput):
    line, col = max(exc.line, 1), max(exc.column, 1)
    if isinstance(exc, lark.UnexpectedCharacters):
        char = source.line(line)[col - 1 : col] or "end of line"
        return error("E001", f"unexpected character '{char}'", Span(source, line, col, line, col + 1))
    token = getattr(exc, "token", None)
    if token is None or token.type == "$END":
        last = len(source.text.splitlines()) or 1
        end_col = len(source.line(last)) + 1
        return error("E002", "unexpected end of input", Span(source, last, end_col, last, end_col + 1))
    expected = sorted(_describe(t) for t in _expected(exc))
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
}   # lark names the other literals __ANON_n, in an order a grammar edit changes: _literal_terminals


_CLASSES = {"NAME": "a name", "INT": "an integer", "NUMBER": "a number", "SIZE": "a size like 128B",
            "CLUSTER_SHAPE": "a cluster shape like 2x2"}


def _describe(terminal: str) -> str:
    if terminal in _PUNCT:
        return f"'{_PUNCT[terminal]}'"
    literal = _literal_terminals().get(terminal)
    if literal is not None:
        return f"'{literal}'"
    if terminal in _CLASSES:
        return _CLASSES[terminal]
    return f"'{terminal.lower()}'"


@functools.cache
def _literal_terminals() -> dict[str, str]:
    """Terminal name → its text, for keywords and operators lark names __ANON_n."""
    return {t.name: t.pattern.value for t in _parser().terminals if t.pattern.type == "str"}


def _written(source: Source, span: Span, keyword: str) -> tuple[str, Span]:
    """A declaration's text after its keyword, as written (comments dropped, each run of whitespace
    one blank), and its span. lark ends a rule's span at its last token that is kept, so a closing
    parenthesis at the end (`assume C > (M)`) is taken back here, to quote and underline it."""
    text = source.text
    lines = text.split("\n")   # lark counts lines by \n
    def offset(line: int, col: int) -> int:
        return sum(len(x) + 1 for x in lines[:line - 1]) + col - 1
    start, end = offset(span.line, span.col) + len(keyword), offset(span.end_line, span.end_col)
    while text.count("(", start, end) > text.count(")", start, end) and ")" in text[end:]:
        end = text.index(")", end) + 1
    line = text.count("\n", 0, end) + 1
    col = end - text.rfind("\n", 0, end)
    return " ".join(re.sub(r"//[^\n]*", " ", text[start:end]).split()), Span(source, span.line, span.col, line, col)


@v_args(meta=True)
class _Builder(Transformer):
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

    # ---- program structure
    def start(self, meta, kernels):
        return ast.Program(self._span(meta), kernels)

    def kernel(self, meta, children):
        name, constants, *rest = children
        params = [c for c in rest if isinstance(c, ast.Param)]
        items = [c for c in rest if c is not None and not isinstance(c, ast.Param)]
        return ast.Kernel(self._span(meta), str(name), params, items, name_span=self._tok(name),
                          constants=constants or [])

    def constants(self, meta, children):
        """A default that reads as a name is a dtype (`T = bf16`); any other name is E539 or E564."""
        declared = {c.name for c in children}
        for c in children:
            if isinstance(c.default, ast.ConstUse):
                problem = check_default(c, c.default, declared)
                if problem is not None:
                    raise problem
                c.default = c.default.name
        return children

    def constant(self, meta, children):
        name, default = children
        if isinstance(default, Token) and default.type == "SIZE":
            return ast.ConstantDecl(self._span(meta), str(name), str(default), name_span=self._tok(name))
        if not isinstance(default, ast.ConstUse) and default is not None:
            default = int(default)
        return ast.ConstantDecl(self._span(meta), str(name), default, name_span=self._tok(name))

    def _int(self, value):
        """An integer position: a literal, or a constant's use (syntax/constants.py resolves it)."""
        return value if isinstance(value, ast.ConstUse) else int(value)

    def constant_use(self, meta, children):
        return ast.ConstUse(self._span(meta), str(children[0]))

    def size_constant(self, meta, children):
        if str(children[0]) == "none":   # the lexer may take `none` for a name
            return "none"
        return ast.ConstUse(self._span(meta), str(children[0]), size=True)

    def _size(self, value):
        return value if isinstance(value, ast.ConstUse) else str(value)

    def constant_expr(self, meta, children):
        return ast.ConstUse(self._span(meta), "", expr=children[0])

    def param(self, meta, children):
        name, dtype, shape = children
        return ast.Param(self._span(meta), str(name), self._ref(dtype), shape)

    def shape(self, meta, dims):
        return dims

    def dim_symbol(self, meta, children):
        return ast.Dim(self._span(meta), str(children[0]))

    def dim_literal(self, meta, children):
        return ast.Dim(self._span(meta), int(children[0]))

    def int_list(self, meta, children):
        return [self._int(c) for c in children]

    # ---- declarations
    def grid_decl(self, meta, children):
        return ast.GridDecl(self._span(meta), self._ref(children[0]))

    def cluster_decl(self, meta, children):
        if not isinstance(children[0], Token) or children[0].type != "CLUSTER_SHAPE":
            return ast.ClusterDecl(self._span(meta), self._int(children[0]))
        rows, _, cols = str(children[0]).partition("x")
        return ast.ClusterDecl(self._span(meta), int(rows), int(cols))

    def cta_group_decl(self, meta, children):
        return ast.CtaGroupDecl(self._span(meta), self._int(children[0]))

    def box_decl(self, meta, children):
        name, tensor, shape, *options = children
        box = ast.BoxDecl(self._span(meta), str(name), self._ref(tensor), shape)
        for key, value, span in options:
            setattr(box, key, value)
            box.option_spans[key] = span
        return box

    def bulk_decl(self, meta, children):
        name, tensor, chunk = children
        return ast.BoxDecl(self._span(meta), str(name), self._ref(tensor), [self._int(chunk)], bulk=True)

    def im2col_decl(self, meta, children):
        box = self.box_decl(meta, children)
        box.im2col = True
        return box

    def lower_option(self, meta, children):
        return ("lower", children[0], self._span(meta))

    def upper_option(self, meta, children):
        return ("upper", children[0], self._span(meta))

    def wide_option(self, meta, children):
        return ("wide", str(children[0]), self._span(meta))

    def halo_option(self, meta, children):
        return ("halo", self._int(children[0]), self._span(meta))

    def signed_list(self, meta, children):
        return [self._int(c) for c in children]

    def negative_int(self, meta, children):
        value = self._int(children[0])
        if isinstance(value, ast.ConstUse):
            return ast.ConstUse(self._span(meta), value.name, negative=True)
        return -value

    def swizzle_option(self, meta, children):
        return ("swizzle", self._size(children[0]), self._span(meta))

    def oob_option(self, meta, children):
        return ("oob", str(children[0]), self._span(meta))

    def strides_option(self, meta, children):
        return ("strides", children[0], self._span(meta))

    def l2_option(self, meta, children):
        return ("l2", self._size(children[0]), self._span(meta))

    def pair_option(self, meta, children):
        return ("pair", True, self._span(meta))

    def cache_option(self, meta, children):
        return ("cache", str(children[0]), self._span(meta))

    def interleave_option(self, meta, children):
        return ("interleave", self._size(children[0]), self._span(meta))

    def prefetch_decl(self, meta, children):
        return ast.PrefetchDecl(self._span(meta), self._ref(children[0]))

    def assume_decl(self, meta, children):
        lhs, op, rhs = children
        text, span = _written(self.source, self._span(meta), "assume")
        return ast.AssumeDecl(span, lhs, op, rhs, text)

    def comparison(self, meta, children):
        return str(children[0])

    def pipeline_decl(self, meta, children):
        name, stages, *fields = children
        peer = fields.pop() if fields and isinstance(fields[-1], tuple) else None
        decl = ast.PipelineDecl(self._span(meta), str(name), self._int(stages), fields)
        if peer is not None:
            decl.peer, decl.peer_span = peer
        return decl

    def peer(self, meta, children):
        return self._int(children[0]), self._span(meta)

    def field(self, meta, children):
        name, box = children
        return ast.FieldDecl(self._span(meta), str(name), self._ref(box))

    def tmem_field(self, meta, children):
        name, dtype, shape = children
        return ast.FieldDecl(self._span(meta), str(name), None, (str(dtype), shape), dtype_span=self._tok(dtype))

    def smem_decl(self, meta, children):
        name, stages, box = children
        return ast.SmemDecl(self._span(meta), str(name), self._ref(box), None if stages is None else self._int(stages))

    def mbarrier_decl(self, meta, children):
        name, count = children
        return ast.MbarrierDecl(self._span(meta), str(name), self._int(count))

    def tmem_decl(self, meta, children):
        name, stages, dtype, shape = children
        return ast.TmemDecl(self._span(meta), str(name), 1 if stages is None else self._int(stages), str(dtype), shape,
                            dtype_span=self._tok(dtype))

    def one_warp(self, meta, children):
        warp = self._int(children[0])
        return warp, warp, self._span(meta)

    def warp_range(self, meta, children):
        return self._int(children[0]), self._int(children[1]), self._span(meta)

    def role_decl(self, meta, children):
        name, (first, last, warps_span), regs, body = children
        regs_span = None if regs is None else regs.span if isinstance(regs, ast.ConstUse) else self._tok(regs)
        return ast.RoleDecl(
            self._span(meta), str(name), first, last, self._int(regs) if regs is not None else None,
            body, warps_span=warps_span, regs_span=regs_span,
        )

    def block(self, meta, stmts):
        return stmts

    # ---- statements
    def for_tiles(self, meta, children):
        *names, tensor, box, split, stream, group, dynamic, by_warpgroup, index, body = children
        index = str(index) if index is not None else None
        vars_ = [str(n) for n in names]
        group = self._int(group) if group is not None else None
        stream = self._tok(stream) if stream is not None else None
        return ast.ForTiles(self._span(meta), vars_, self._ref(tensor), self._ref(box), index, body, group, split,
                            dynamic=dynamic is not None, stream=stream, by_warpgroup=by_warpgroup)

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
        name, dtype, shape = children
        return ast.AccumulatorDecl(self._span(meta), str(name), self._ref(dtype), shape)

    def row_decl(self, meta, children):
        name, dtype, cols = children
        return ast.RowDecl(self._span(meta), str(name), self._ref(dtype), None if cols is None else self._int(cols))

    def mma(self, meta, children):
        acc, a, b, kn = children
        return ast.Mma(self._span(meta), acc, a, b, kn is not None)

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

    def _through(self, name):
        return None if name is None else self._ref(name)

    def prefetch(self, meta, children):
        box, at, *coords = children
        return ast.Prefetch(self._span(meta), self._ref(box), coords, at is not None)

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

    # ---- expressions
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
