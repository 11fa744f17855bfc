"""Editor support: the Pygments lexer (tmalang/tools/highlight.py) and the VS Code extension (editors/vscode/).

Both highlighters are built from the word lists and rule table in tmalang/tools/highlight.py. These tests
hold those lists to the real language: the keywords to the quoted literals of grammar/*.lark (a
keyword added to the grammar fails here until the highlighters know it), the dtypes, functions and
option values to the compiler's tables. The TextMate grammar is checked as an editor would read
it: a small engine below applies its single-line rules to every example and test program, line
by line.
"""

from __future__ import annotations

import ast
import json
import re

import lark
import pytest
from pygments.lexers import load_lexer_from_file
from pygments.token import Comment, Error, Keyword

from conftest import EXAMPLES, ROOT
from tmalang.tools import highlight
from tmalang.diagnostics import TmalangError
from tmalang.ir.exprs import ROW_FUNCTIONS
from tmalang.sema.declarations import GRID_KINDS
from tmalang.sema.prefetch import PREFETCH_DECLS
from tmalang.sema.rows import ELEMENTWISE, MASKS, REDUCTIONS
from tmalang.sema.scope import TILE_FUNCTIONS
from tmalang.sema.statements import FENCE_KINDS
from tmalang.syntax.parser import parse
from tmalang.targets.dtypes import DTYPES
from tmalang.targets.reduce import REDUCE_OPS
from tmalang.targets.tma import CACHE_POLICIES, OOB_FILLS
from tmalang.targets.tma_modes import WIDE_QUALIFIERS

GRAMMARS = sorted((ROOT / "grammar").glob("*.lark"))
VSCODE = ROOT / "editors" / "vscode"
TEXTMATE = VSCODE / "syntaxes" / "tmalang.tmLanguage.json"
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
# a lark grammar's comments, string literals and regexps, so that quotes in comments and regexps
# are not taken for literals
LARK_TOKEN = re.compile(r'//[^\n]*|"((?:[^"\\\n]|\\.)*)"|/(?:[^/\\\n]|\\.)+/[imslux]*')


def grammar_keywords() -> set[str]:
    """Every quoted literal of grammar/*.lark that is a word: the language's keywords."""
    found = set()
    for path in GRAMMARS:
        for m in LARK_TOKEN.finditer(path.read_text()):
            if m.group(1) is not None and IDENTIFIER.fullmatch(m.group(1)):
                found.add(m.group(1))
    return found


KEYWORDS = sorted(grammar_keywords())
LEXER_KEYWORDS = {w for words in highlight.KEYWORDS.values() for w in words}


def _parses(text: str) -> bool:
    try:
        parse(text)
    except TmalangError:
        return False
    return True


def _programs() -> list:
    """(id, text): every example, and every piece of a .tma file under tests/ or the library that
    parses (diagnostic group files are cut at their `// -----` lines)."""
    found = [pytest.param(p.read_text(), id=p.name) for p in EXAMPLES]
    others = sorted((ROOT / "tests").rglob("*.tma")) + sorted((ROOT / "tmalang").rglob("*.tma"))
    for path in others:
        for i, piece in enumerate(re.split(r"^// -----$", path.read_text(), flags=re.M)):
            if _parses(piece):
                found.append(pytest.param(piece, id=f"{path.relative_to(ROOT)}#{i}"))
    return found


PROGRAMS = _programs()
KEYWORD_PARSER = lark.Lark("\n".join(p.read_text() for p in GRAMMARS), parser="lalr", keep_all_tokens=True)


def keyword_tokens(text: str) -> list[tuple[int, str]]:
    """(offset, keyword) of every token lark's parser reads as a keyword (not as a NAME that
    happens to be spelt like one, as in `role load: warp 0`): where highlighters must say keyword."""
    tree = KEYWORD_PARSER.parse(text)
    return sorted((t.start_pos, t.value) for t in tree.scan_values(lambda v: isinstance(v, lark.Token))
                  if t.type != "NAME" and t.value in LEXER_KEYWORDS | set(KEYWORDS))


# ---- the word lists ---------------------------------------------------------------------------

def test_the_grammar_scan_finds_what_lark_reads():
    """The literal scan above agrees with lark's own terminals (lark folds `"none"` into SIZE's
    regexp, so the scan may find more, never less)."""
    parser = lark.Lark("\n".join(p.read_text() for p in GRAMMARS), parser="lalr")
    literals = {t.pattern.value for t in parser.terminals
                if isinstance(t.pattern, lark.lexer.PatternStr) and IDENTIFIER.fullmatch(t.pattern.value)}
    assert literals and literals <= set(KEYWORDS)
    assert {"kernel", "none", "dynamic", "wait_group"} <= set(KEYWORDS)


def test_the_highlighters_know_exactly_the_grammars_keywords():
    assert LEXER_KEYWORDS == set(KEYWORDS), (
        f"add to tmalang/tools/highlight.py KEYWORDS: {sorted(set(KEYWORDS) - LEXER_KEYWORDS)}; "
        f"not in the grammar: {sorted(LEXER_KEYWORDS - set(KEYWORDS))}")
    assert sum(map(len, highlight.KEYWORDS.values())) == len(LEXER_KEYWORDS), "a keyword listed twice"


def test_the_dtypes_functions_and_option_values_are_the_compilers():
    assert set(highlight.DTYPES) == set(DTYPES)
    functions = {*ELEMENTWISE, *REDUCTIONS, *MASKS, *TILE_FUNCTIONS, *ROW_FUNCTIONS} - set(DTYPES)
    assert set(highlight.FUNCTIONS) == functions
    compiler = {"grid": GRID_KINDS, "oob": OOB_FILLS, "cache": CACHE_POLICIES, "fence": FENCE_KINDS,
                "reduce": REDUCE_OPS, "wide": WIDE_QUALIFIERS, "prefetch": PREFETCH_DECLS,
                "wait_group": ("read",)}    # docs/language.md §17: `read` is the only qualifier
    assert {k: set(v) for k, v in highlight.OPTION_VALUES.items()} == {k: set(v) for k, v in compiler.items()}


def test_no_other_tmalang_module_imports_pygments_or_the_lexer():
    """Pygments is not a tmalang dependency: only tmalang/tools/highlight.py may need it."""
    wrong = []
    for path in sorted((ROOT / "tmalang").rglob("*.py")):
        if path.name == "highlight.py" and path.parent.name == "tools":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            if any("pygments" in n or "highlight" in n for n in [module, *names]):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not wrong


# ---- the Pygments lexer -----------------------------------------------------------------------

def _lex(text: str) -> list:
    lexer = highlight.TmalangLexer(stripnl=False, ensurenl=False)
    return list(lexer.get_tokens(text))


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("keyword", KEYWORDS)
def test_every_grammar_keyword_lexes_as_a_keyword(keyword):
    assert keyword in LEXER_KEYWORDS, f"add '{keyword}' to tmalang/tools/highlight.py KEYWORDS"
    assert _lex(keyword) == [(highlight.TOKENS[_category_scope(keyword)], keyword)]
    assert _lex(keyword)[0][0] in Keyword


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_every_dtype_lexes_as_a_type(dtype):
    assert _lex(dtype) == [(Keyword.Type, dtype)]


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("text", PROGRAMS)
def test_programs_lex_without_errors_and_round_trip(text):
    tokens = _lex(text)
    errors = [value for token, value in tokens if token in Error]
    assert not errors
    assert "".join(value for _, value in tokens) == text


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("text", PROGRAMS)
def test_keywords_where_the_parser_reads_them_lex_as_keywords(text):
    """Every keyword token lark's parser reads is a Keyword token of the lexer, at the same place."""
    starts, offset = {}, 0
    for token, value in _lex(text):
        starts[offset] = (token, value)
        offset += len(value)
    wrong = [(at, word, starts.get(at)) for at, word in keyword_tokens(text)
             if at not in starts or starts[at][1] != word or starts[at][0] not in Keyword]
    assert not wrong


def test_the_lexer_can_fail():
    """A character tmalang has no use for is an Error token, so the tests above can fail."""
    assert any(token in Error for token, _ in _lex("sync;"))
    assert _lex("max(a, b)")[0] == (highlight.TOKENS["support.function"], "max")
    assert _lex("wait_group read 0")[2] == (highlight.TOKENS["support.constant"], "read")


def test_pygments_finds_the_lexer_by_file():
    """What `pygmentize -x -l tmalang/tools/highlight.py:TmalangLexer` does, and the lexer's names."""
    lexer = load_lexer_from_file(str(ROOT / "tmalang" / "tools" / "highlight.py"), "TmalangLexer")
    assert lexer.name == "tmalang" and lexer.aliases == ["tmalang", "tma"] and lexer.filenames == ["*.tma"]


# ---- the TextMate grammar ---------------------------------------------------------------------

def _category_scope(word: str) -> str:
    return next(highlight.KEYWORD_SCOPES[c] for c, ws in highlight.KEYWORDS.items() if word in ws)


def _grammar() -> dict:
    return json.loads(TEXTMATE.read_text())


def _compiled(grammar: dict) -> list:
    """The grammar's top-level patterns with includes resolved: (compiled regex, rule)."""
    rules = []
    for pattern in grammar["patterns"]:
        rule = grammar["repository"][pattern["include"][1:]] if "include" in pattern else pattern
        rules.append((re.compile(rule["match"]), rule))
    return rules


def _spans(m: re.Match, rule: dict) -> list:
    found = [(m.start(), m.end(), rule["name"])] if "name" in rule else []
    for group, capture in rule.get("captures", {}).items():
        if m.group(int(group)):
            found.append((m.start(int(group)), m.end(int(group)), capture["name"]))
    return found


def tokenize(line: str, rules: list) -> list:
    """(start, end, scope) of every scoped span of one line, as a TextMate engine finds them for
    single-line `match` rules: from the current position, the rule whose match starts first wins,
    ties going to the earlier rule; scanning resumes after the match. A rule's next match is
    cached while it still lies ahead (searching again from later would find the same one)."""
    pos, spans, ahead = 0, [], {}
    while pos < len(line):
        best = None
        for i, (regex, rule) in enumerate(rules):
            if i not in ahead or (ahead[i] is not None and ahead[i].start() < pos):
                ahead[i] = regex.search(line, pos)
            m = ahead[i]
            if m is not None and (best is None or m.start() < best[0].start()):
                best = (m, rule)
        if best is None:
            break
        spans += _spans(*best)
        pos = best[0].end() if best[0].end() > pos else pos + 1
    return spans


def _unscoped_keywords(text: str, rules: list) -> list:
    """(line number, keyword) for each whole-word keyword that no span covers."""
    words = re.compile(highlight._alternation(KEYWORDS))
    missing = []
    for number, line in enumerate(text.splitlines(), 1):
        spans = tokenize(line, rules)
        for m in words.finditer(line):
            if not any(s <= m.start() and m.end() <= e for s, e, _ in spans):
                missing.append((number, m.group()))
    return missing


def test_the_textmate_file_is_generated_from_the_lexers_table():
    assert TEXTMATE.read_text() == highlight.textmate_json(), (
        "regenerate: python -m tmalang.tools.highlight > editors/vscode/syntaxes/tmalang.tmLanguage.json")


def test_the_textmate_grammar_is_valid_and_compiles():
    grammar = _grammar()
    assert grammar["scopeName"] == "source.tmalang"
    rules = [grammar["repository"][p["include"][1:]] for p in grammar["patterns"]]
    assert rules and all(set(rule) <= {"match", "name", "captures"} for rule in rules)
    for rule in rules:
        regex = re.compile(rule["match"])
        # no Oniguruma-only syntax: possessive quantifiers, atomic groups, \h, \A-less anchors
        assert not re.search(r"[*+?}][+]|\(\?>|\\[hHGKzZ]", rule["match"]), rule["match"]
        assert all(1 <= int(g) <= regex.groups for g in rule.get("captures", {}))
        scopes = [rule.get("name")] + [c["name"] for c in rule.get("captures", {}).values()]
        assert all(s is None or s.endswith(".tmalang") for s in scopes)


def _json_words(grammar: dict) -> dict:
    """Scope → the words of the grammar's whole-word keyword rules (`\\b(?:a|b)\\b`)."""
    found: dict[str, set] = {}
    for rule in grammar["repository"].values():
        m = re.fullmatch(r"\\b\(\?:([\w|]+)\)\\b", rule.get("match", ""))
        if m and "name" in rule:
            found.setdefault(rule["name"].removesuffix(".tmalang"), set()).update(m.group(1).split("|"))
    return found


def test_the_textmate_keywords_are_the_lexers():
    words = _json_words(_grammar())
    lexer = {highlight.KEYWORD_SCOPES[c]: set(ws) for c, ws in highlight.KEYWORDS.items()}
    assert {s: w for s, w in words.items() if s in lexer} == lexer
    assert words["storage.type"] == set(highlight.DTYPES)


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("keyword", KEYWORDS)
def test_textmate_scopes_each_keyword_by_its_category(keyword):
    assert keyword in LEXER_KEYWORDS, f"add '{keyword}' to tmalang/tools/highlight.py KEYWORDS"
    assert tokenize(keyword, _compiled(_grammar())) == [(0, len(keyword), f"{_category_scope(keyword)}.tmalang")]


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("text", PROGRAMS)
def test_textmate_leaves_no_keyword_unscoped(text):
    assert not _unscoped_keywords(text, _compiled(_grammar()))


@pytest.mark.slow   # an editor sweep, per keyword or program
@pytest.mark.parametrize("text", PROGRAMS)
def test_textmate_scopes_keywords_where_the_parser_reads_them(text):
    """Each keyword token lark reads gets its keyword category's scope from the TextMate grammar."""
    rules, lines, wrong = _compiled(_grammar()), text.splitlines(keepends=True), []
    spans, start = [], 0
    for line in lines:
        spans += [(start + s, start + e, scope) for s, e, scope in tokenize(line.rstrip("\r\n"), rules)]
        start += len(line)
    scoped = {(s, e): scope for s, e, scope in spans}
    for at, word in keyword_tokens(text):
        if scoped.get((at, at + len(word))) != f"{_category_scope(word)}.tmalang":
            wrong.append((at, word, scoped.get((at, at + len(word)))))
    assert not wrong


def test_textmate_scopes_a_kernel_header():
    line = "kernel gemm<BM = 128>(a: bf16[M, K], s: f32) {  // x"
    scopes = {line[s:e]: scope.removesuffix(".tmalang") for s, e, scope in tokenize(line, _compiled(_grammar()))}
    assert scopes["kernel"] == "keyword.other.declaration"
    assert scopes["gemm"] == "entity.name.function"
    assert scopes["a"] == scopes["s"] == "variable.parameter"
    assert scopes["bf16"] == "storage.type"
    assert scopes["128"] == "constant.numeric.integer"
    assert scopes["// x"] == "comment.line.double-slash"


@pytest.mark.parametrize("line, word, scope", [
    ("role load: warp 0 {", "load", "entity.name.section"),            # a role named like a keyword
    ("tmem acc[2]: f32[128, 256]", "acc", "entity.name.variable"),
    ("pipeline out[1] { o: tmem f32[128, 64] }", "f32", "storage.type"),  # a field's type, not a name
    ("box A = a[64, 64] oob nan cache evict_last", "nan", "support.constant"),
    ("grid tiles", "tiles", "keyword.other.modifier"),
    ("reduce max O[m, n] <- s.t", "max", "support.constant"),
    ("m = max(m, rowmax(s))", "rowmax", "support.function"),
    ("warps 4..7", "7", "constant.numeric.integer"),
    ("cluster 2x2", "2x2", "constant.numeric.shape"),
    ("x = 1.5e-3 * inf", "1.5e-3", "constant.numeric.float"),
])
def test_textmate_scopes_words_by_context(line, word, scope):
    """And the Pygments lexer gives the same word the token that scope maps to."""
    found = {line[s:e]: name.removesuffix(".tmalang") for s, e, name in tokenize(line, _compiled(_grammar()))}
    assert found.get(word) == scope
    assert (highlight.TOKENS[scope], word) in _lex(line)


def test_the_textmate_check_can_fail():
    """Without its keyword rules the grammar leaves keywords unscoped, and the check says so."""
    grammar = _grammar()
    grammar["patterns"] = [p for p in grammar["patterns"] if not p["include"].startswith("#keyword-")]
    assert (1, "sync") in _unscoped_keywords("sync", _compiled(grammar))


# ---- the VS Code extension --------------------------------------------------------------------

def test_the_vscode_extension_points_at_files_that_exist():
    package = json.loads((VSCODE / "package.json").read_text())
    assert package["name"] and package["version"] and package["engines"]["vscode"]
    [language] = package["contributes"]["languages"]
    [grammar] = package["contributes"]["grammars"]
    assert language["id"] == grammar["language"] == "tmalang"
    assert language["extensions"] == [".tma"]
    assert grammar["scopeName"] == _grammar()["scopeName"]
    for path in (language["configuration"], grammar["path"]):
        assert (VSCODE / path).resolve().is_file(), path
    assert (VSCODE / grammar["path"]).resolve() == TEXTMATE.resolve()
    configuration = json.loads((VSCODE / language["configuration"]).read_text())
    assert configuration["comments"] == {"lineComment": "//"}     # lark's COMMENT; no block comments
    assert sorted(map(tuple, configuration["brackets"])) == [("(", ")"), ("[", "]"), ("{", "}")]


def test_the_readme_names_the_commands():
    readme = (ROOT / "editors" / "README.md").read_text()
    assert "pygmentize -l tmalang" in readme and "tmalang/tools/highlight.py:TmalangLexer" in readme
    assert "code --install-extension" in readme and ".vscode/extensions" in readme
