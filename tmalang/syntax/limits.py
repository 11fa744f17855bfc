"""Lexical limits: names and literals the generated code can represent.

Runs on the parse tree, before the AST is built, so that every later stage may assume:
  - a name is at most MAX_NAME characters (E019): LLVM truncates longer local names, and two
    truncated names then collide in the generated module;
  - every integer literal fits a signed 32-bit integer (E015 for a tensor dimension, E028
    elsewhere): the kernel's index math, loop counts and tile math compute in 32 bits, and a
    larger literal would wrap silently in the PTX;
  - every float literal is finite in f32 (E029): all float math computes in f32, where a larger
    literal would silently become infinity (`inf` says so explicitly).
"""

from __future__ import annotations

import lark

from ..diagnostics import Source, Span, error

MAX_NAME = 255
INT32_MAX = 2**31 - 1
F32_OVERFLOW = (2 - 2**-24) * 2.0**127   # the least double that rounds to infinity in f32


def check_tokens(source: Source, tree: lark.Tree) -> None:
    dims = {id(t.children[0]) for t in tree.find_data("dim_literal")}
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        if token.type == "NAME":
            _check_name(source, token)
        elif token.type == "INT":
            _check_int(source, token, id(token) in dims)
        elif token.type == "NUMBER":
            _check_number(source, token)


def _span(source: Source, token: lark.Token) -> Span:
    return Span(source, token.line, token.column, token.end_line, token.end_column)


def _check_name(source: Source, token: lark.Token) -> None:
    if len(token) > MAX_NAME:
        raise error("E019", f"a name of {len(token)} characters is too long (at most {MAX_NAME})",
                    _span(source, token), "LLVM truncates longer names, so two of them could collide")


def _too_big(text: str) -> bool:
    """Compares without int() on the whole text: Python refuses to convert over 4,300 digits."""
    digits = text.lstrip("0")
    return len(digits) > 10 or (len(digits) == 10 and int(digits) > INT32_MAX)


def _check_int(source: Source, token: lark.Token, is_dim: bool) -> None:
    if not _too_big(str(token)):
        return
    shown = _shorten(str(token))
    if is_dim:
        raise error("E015", f"tensor dim {shown} is too large: dims are at most {INT32_MAX}",
                    _span(source, token), "the kernel's index math and TMA coordinates are signed 32-bit")
    raise error("E028", f"integer {shown} does not fit in 32 bits (at most {INT32_MAX})", _span(source, token))


def _check_number(source: Source, token: lark.Token) -> None:
    text = str(token)
    if any(c in text for c in ".eE"):
        if float(text) >= F32_OVERFLOW:
            raise error("E029", f"float {_shorten(text)} overflows f32 (at most about 3.4e38)",
                        _span(source, token), "float math computes in f32; write `inf` for infinity")
    elif _too_big(text):
        raise error("E028", f"integer {_shorten(text)} does not fit in 32 bits (at most {INT32_MAX})",
                    _span(source, token), "integers compute in 32 bits; for a large float constant write "
                    "it as a float, e.g. 3e9 or 3000000000.0")


def _shorten(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} digits)"
