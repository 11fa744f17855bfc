"""Syntax highlighting for `.tma` sources: a Pygments lexer, and the TextMate grammar VS Code reads.

Pygments is not a dependency of tmalang. This module is the only one that imports it, and no other
tmalang module imports this one, so the compiler runs without it. The module imports nothing from
tmalang either, so `pygmentize -x -l tmalang/tools/highlight.py:TmalangLexer` works from a checkout.

The word lists and the rule table below are the one place both highlighters learn the language
from. tests/tools/test_editors.py checks the lists against grammar/tmalang.lark and the compiler's own
tables (so a keyword added to the grammar fails there until it is added here), and checks that
editors/vscode/syntaxes/tmalang.tmLanguage.json is exactly what `python -m tmalang.tools.highlight`
prints. The TextMate rules are single-line `match` rules only, in syntax that Python's `re` and
Oniguruma read alike (no begin/end, no possessive or Oniguruma-only constructs).
"""

from __future__ import annotations

import json
import sys

from pygments.lexer import RegexLexer, bygroups
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, Whitespace

# The quoted keyword literals of grammar/tmalang.lark, by role. A keyword is reserved only where
# the grammar expects it (docs/language.md §1), but highlighting it everywhere is what a reader
# expects of a keyword.
KEYWORDS = {
    "declaration": ("kernel", "grid", "occupancy", "cluster", "cta_group", "box", "bulk", "im2col", "pipeline",
                    "smem", "mbarrier", "tmem", "role", "accumulator", "row", "assume"),
    "control": ("for", "in", "as", "if", "else", "produce", "consume", "elect", "turn"),
    "statement": ("mma", "load", "store", "reduce", "prefetch", "expect_tx", "arrive", "wait",
                  "fence", "sync", "commit_group", "wait_group"),
    "modifier": ("swizzle", "oob", "strides", "l2", "pair", "cache", "interleave", "lower", "upper",
                 "wide", "halo", "peer", "regs", "warp", "warps", "tile", "tiles", "steps", "split",
                 "part", "grouped", "reversed", "dynamic", "stream", "kn", "km", "multicast", "offsets", "through", "by", "warpgroup", "columns"),
    "constant": ("inf", "none"),
}

# Element types (tmalang/targets/dtypes.py): the type of a parameter, and a cast when called.
DTYPES = ("f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2",
          "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8")

# Functions of tile math, row math and integer expressions (docs/language.md §14, §15c, §18),
# highlighted only where called: `max` is an ordinary name elsewhere.
FUNCTIONS = ("exp2", "log2", "max", "min", "rowmax", "rowsum", "mask_cols", "mask_above", "mask_below", "mask_left")

# Words that are names to the grammar (`oob NAME`) but a fixed set to the compiler, highlighted
# only right after the keyword that takes them. Grammar keywords among them (`grid tiles`,
# `cache none`) keep their keyword colour.
OPTION_VALUES = {
    "grid": ("tiles", "persistent"),
    "oob": ("zero", "nan"),
    "cache": ("none", "evict_first", "evict_normal", "evict_last"),
    "fence": ("proxy_async", "mbarrier_init"),
    "reduce": ("add", "min", "max", "inc", "dec", "and", "or", "xor"),
    "wide": ("w", "w128"),
    "prefetch": ("tensormaps",),
    "wait_group": ("read",),
}

# Keywords whose next word is a name being declared, and what it names; a role may be called
# `load` (keywords are reserved only where the grammar expects them).
DECLARES = {
    "kernel": "entity.name.function",
    "role": "entity.name.section",
    **{kw: "entity.name.variable" for kw in ("box", "bulk", "im2col", "pipeline", "smem", "mbarrier",
                                             "tmem", "accumulator", "row")},
}
# What must follow the declared name where the keyword also stands elsewhere: `tmem t[2]: f32[...]`
# declares t, a tmem pipeline field `s: tmem f32[128, 64]` does not.
DECLARES_BEFORE = {"tmem": r"(?=\s*(?:\[[^\]]*\])?\s*:)"}

SCOPE_NAME = "source.tmalang"
KEYWORD_SCOPES = {
    "declaration": "keyword.other.declaration",
    "control": "keyword.control",
    "statement": "keyword.other.statement",
    "modifier": "keyword.other.modifier",
    "constant": "constant.language",
}

# TextMate scope (before the `.tmalang` suffix) → Pygments token.
TOKENS = {
    "comment.line.double-slash": Comment.Single,
    "keyword.other.declaration": Keyword.Declaration,
    "keyword.control": Keyword,
    "keyword.other.statement": Keyword.Reserved,
    "keyword.other.modifier": Keyword.Pseudo,
    "constant.language": Keyword.Constant,
    "storage.type": Keyword.Type,
    "support.function": Name.Builtin,
    "support.constant": Name.Constant,
    "entity.name.function": Name.Function,
    "entity.name.section": Name.Label,
    "entity.name.variable": Name.Variable,
    "variable.parameter": Name.Variable,
    "constant.numeric.size": Number,
    "constant.numeric.shape": Number,
    "constant.numeric.float": Number.Float,
    "constant.numeric.integer": Number.Integer,
    "keyword.operator": Operator,
    "punctuation.separator.comma": Punctuation,
    "punctuation.separator.colon": Punctuation,
    "punctuation.accessor": Punctuation,
    "punctuation.section.braces": Punctuation,
    "punctuation.section.parens": Punctuation,
    "punctuation.section.brackets": Punctuation,
    "punctuation.definition.constants": Punctuation,
}

NAME = r"[A-Za-z_][A-Za-z_0-9]*"


def _alternation(words) -> str:
    """A whole-word regex for any of `words`: longest first, so no alternative shadows another."""
    return r"\b(?:" + "|".join(sorted(words, key=lambda w: (-len(w), w))) + r")\b"


def _reserved() -> tuple[str, ...]:
    """Every keyword and dtype: option values that are keywords keep their keyword colour."""
    return tuple(w for words in KEYWORDS.values() for w in words) + DTYPES


def _declaration_rules() -> list:
    """`kernel gemm`, `role producer`, `box A`: the keyword, then the name it declares. Keywords
    that declare the same kind of name under the same condition share one rule."""
    groups: dict[tuple, list[str]] = {}
    for kw, scope in DECLARES.items():
        groups.setdefault((scope, DECLARES_BEFORE.get(kw, "")), []).append(kw)
    rules = []
    for (scope, before), kws in groups.items():
        name = f"declares-{scope.rsplit('.', 1)[-1]}" + ("-" + "-".join(kws) if before else "")
        regex = r"(" + _alternation(kws) + r")(\s+)(" + NAME + r")\b" + before
        rules.append((name, regex, ("keyword.other.declaration", None, scope)))
    return rules


def _option_rules() -> list:
    """`oob nan`, `fence proxy_async`: the keyword, then one of the values the compiler knows."""
    reserved = set(_reserved())
    rules = []
    for kw, values in OPTION_VALUES.items():
        values = [v for v in values if v not in reserved]
        if not values:
            continue
        scope = next(KEYWORD_SCOPES[c] for c, words in KEYWORDS.items() if kw in words)
        rules.append((f"option-{kw}", r"\b(" + kw + r")(\s+)(" + _alternation(values) + ")",
                      (scope, None, "support.constant")))
    return rules


def _word_rules() -> list:
    """Parameters, keywords, dtypes and called functions, each a whole word."""
    dtypes = _alternation(DTYPES)
    parameter = (r"\b(" + NAME + r")(\s*)(:)(?=\s*" + dtypes + r"|\s*" + NAME + r"\s*\[)",
                 ("variable.parameter", None, "punctuation.separator.colon"))
    rules = [("parameter", *parameter)]
    rules += [(f"keyword-{category}", _alternation(words), KEYWORD_SCOPES[category])
              for category, words in KEYWORDS.items()]
    rules.append(("dtype", dtypes, "storage.type"))
    rules.append(("function", _alternation(FUNCTIONS) + r"(?=\s*\()", "support.function"))
    return rules


def _literal_rules() -> list:
    """Numbers as lark's SIZE, CLUSTER_SHAPE, NUMBER and INT read them; `0..3` is two integers."""
    return [
        ("size", r"\b[0-9]+B\b", "constant.numeric.size"),
        ("cluster-shape", r"\b[0-9]+x[0-9]+\b", "constant.numeric.shape"),
        ("float", r"\b[0-9]+(?:\.(?!\.)[0-9]*(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)", "constant.numeric.float"),
        ("integer", r"\b[0-9]+\b", "constant.numeric.integer"),
    ]


def _punctuation_rules() -> list:
    """Operators before punctuation, so `<-` is one arrow and not a `<`."""
    return [
        ("operator", r"->|<-|==|!=|<=|>=|\.\.|[-+*/%&=@]", "keyword.operator"),
        ("comma", r",", "punctuation.separator.comma"),
        ("colon", r":", "punctuation.separator.colon"),
        ("accessor", r"\.", "punctuation.accessor"),
        ("braces", r"[{}]", "punctuation.section.braces"),
        ("parens", r"[()]", "punctuation.section.parens"),
        ("brackets", r"[\[\]]", "punctuation.section.brackets"),
        ("constants", r"[<>]", "punctuation.definition.constants"),
    ]


def rules() -> list[tuple[str, str, str | tuple]]:
    """(name, regex, scope) in priority order; a tuple of scopes names the regex's groups in turn,
    None for a group left unscoped (whitespace)."""
    comment = ("comment", r"//.*$", "comment.line.double-slash")
    return ([comment] + _declaration_rules() + _option_rules() + _word_rules() + _literal_rules()
            + _punctuation_rules())


def _pygments_rule(regex: str, scope) -> tuple:
    """One row of the table as Pygments wants it: whitespace between groups is Whitespace, not
    left untyped, so that the token texts still add up to the source."""
    if isinstance(scope, str):
        return regex, TOKENS[scope]
    return regex, bygroups(*(Whitespace if s is None else TOKENS[s] for s in scope))


class TmalangLexer(RegexLexer):
    """Pygments lexer for tmalang kernels, built from the same rule table as the TextMate grammar."""

    name = "tmalang"
    aliases = ["tmalang", "tma"]
    filenames = ["*.tma"]
    tokens = {
        "root": [(r"\s+", Whitespace)]
        + [_pygments_rule(regex, scope) for _, regex, scope in rules()]
        + [(NAME, Name)],   # anything else is an Error token: a character tmalang does not have
    }


def _textmate_rule(regex: str, scope) -> dict:
    """One row of the table as a TextMate `match` rule; unscoped groups get no capture, so the
    theme's default colour shows through."""
    if isinstance(scope, str):
        return {"match": regex, "name": f"{scope}.tmalang"}
    captures = {str(i): {"name": f"{s}.tmalang"} for i, s in enumerate(scope, 1) if s is not None}
    return {"match": regex, "captures": captures}


def textmate_grammar() -> dict:
    """The TextMate grammar of editors/vscode/syntaxes/tmalang.tmLanguage.json."""
    table = rules()
    return {
        "$schema": "https://raw.githubusercontent.com/martinring/tmlanguage/master/tmlanguage.json",
        "comment": "Generated by `python -m tmalang.tools.highlight` from tmalang/tools/highlight.py; do not edit.",
        "name": "tmalang",
        "scopeName": SCOPE_NAME,
        "fileTypes": ["tma"],
        "patterns": [{"include": f"#{name}"} for name, _, _ in table],
        "repository": {name: _textmate_rule(regex, scope) for name, regex, scope in table},
    }


def textmate_json() -> str:
    """The grammar as the file holds it: stable key order, two-space indent, final newline."""
    return json.dumps(textmate_grammar(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(textmate_json())
