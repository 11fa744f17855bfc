"""The compiler's own limits on source text, checked on the parse tree before any stage walks it.

Every stage after the parser (the AST builder, sema, lowering, the passes, the backend and the
interpreter) walks blocks and expressions recursively, and computes in 32 bits. So, by an
iterative walk that itself cannot overflow the Python stack:
  - the tree is at most MAX_DEPTH levels deep (E008): deeper nesting would end in a RecursionError;
  - a name is at most MAX_NAME characters (E019): LLVM truncates longer local names, and two
    truncated names then collide in the generated module;
  - every integer literal fits a signed 32-bit integer (E015 for a tensor dimension, E028
    elsewhere): the kernel's index math, loop counts and tile math compute in 32 bits, and a
    larger literal would wrap silently in the PTX (compared by length first: Python refuses to
    convert decimal strings of more than 4,300 digits);
  - every float literal is finite in f32 (E029): all float math computes in f32, where a larger
    literal would silently become infinity (`inf` says so explicitly).
"""

from __future__ import annotations

import lark

from ..diagnostics import Source, Span, error

# Parse-tree levels. A nested block costs two levels (about 95 blocks), a binary operator or a
# unary minus one (a sum of about 190 terms); the examples need fewer than 20. The stages after
# the parser use at most four Python frames per level, far below the default limit of 1,000.
MAX_DEPTH = 200
MAX_NAME = 255
INT32_MAX = 2**31 - 1
F32_OVERFLOW = (2 - 2**-24) * 2.0**127   # the least double that rounds to infinity in f32


def check_tokens(source: Source, tree: lark.Tree) -> None:
    _check_depth(source, tree)
    dims = {id(t.children[0]) for t in tree.find_data("dim_literal")}
    for token in tree.scan_values(lambda v: isinstance(v, lark.Token)):
        if token.type == "NAME":
            _check_name(source, token)
        elif token.type == "INT":
            _check_int(source, token, id(token) in dims)
        elif token.type == "NUMBER":
            _check_number(source, token)


def _check_depth(source: Source, tree: lark.Tree) -> None:
    """E008 at the first node nested deeper than MAX_DEPTH."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, lark.Token):
            continue
        if depth > MAX_DEPTH:
            raise error("E008", f"blocks and expressions nest too deeply (more than {MAX_DEPTH} levels of the "
                        "syntax tree)", _node_span(source, node),
                        "split the expression with intermediate assignments, or flatten the blocks")
        stack.extend((child, depth + 1) for child in node.children if child is not None)


def _node_span(source: Source, node: lark.Tree) -> Span:
    meta = node.meta
    if getattr(meta, "empty", True):
        return Span(source, 1, 1, 1, 2)
    return Span(source, meta.line, meta.column, meta.end_line, meta.end_column)


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

