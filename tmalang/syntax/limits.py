"""The compiler's own limits on source text, checked before any stage walks the tree.

Every stage after the parser (the AST builder, sema, lowering, the passes, the backend and the
interpreter) walks blocks and expressions recursively. A tree nested deeper than the Python
stack allows would end in a RecursionError, so the parse tree's depth is bounded here, with a
located diagnostic (E008), by an iterative walk that itself cannot overflow. Integer literals are
bounded too: no tmalang type holds 2**64 or more, and Python refuses to convert decimal strings
of more than 4,300 digits, so a longer literal is refused before anything converts it.

`decode` turns source bytes into text, with E007 at the first byte that is not UTF-8, so that
no reader of source files (the CLI, `compile_file`, `compile(bytes)`) raises UnicodeDecodeError.

Requires: a lark parse tree with positions. Guarantees: tree depth <= MAX_DEPTH and every
integer literal < 2**64 when it returns.
"""

from __future__ import annotations

import lark

from ..diagnostics import Source, Span, error

# Parse-tree levels. A nested block costs two levels (about 95 blocks), a binary operator or a
# unary minus one (a sum of about 190 terms); the examples need fewer than 20. The stages after
# the parser use at most four Python frames per level, far below the default limit of 1,000.
MAX_DEPTH = 200
MAX_INT = 2**64
INT_TERMINALS = {"INT", "NUMBER"}


def check_limits(tree: lark.Tree, source: Source) -> None:
    """E008 for the first node nested deeper than MAX_DEPTH or an integer literal >= 2**64."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, lark.Token):
            _check_literal(node, source)
            continue
        if depth > MAX_DEPTH:
            raise error("E008", f"blocks and expressions nest too deeply (more than {MAX_DEPTH} levels of the "
                        "syntax tree)", _span(node, source),
                        "split the expression with intermediate assignments, or flatten the blocks")
        stack.extend((child, depth + 1) for child in node.children if child is not None)


def _check_literal(token: lark.Token, source: Source) -> None:
    text = str(token)
    if token.type not in INT_TERMINALS or not text.isdigit():
        return
    digits = text.lstrip("0")
    if len(digits) > 20 or int(digits or "0") >= MAX_INT:
        shown = text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text)} digits)"
        span = Span(source, token.line, token.column, token.end_line, token.end_column)
        raise error("E008", f"integer literal {shown} is too large: tmalang integers are below 2**64", span)


def _span(node: lark.Tree, source: Source) -> Span:
    meta = node.meta
    if getattr(meta, "empty", True):
        return Span(source, 1, 1, 1, 2)
    return Span(source, meta.line, meta.column, meta.end_line, meta.end_column)


def decode(data: bytes, name: str) -> str:
    """Source bytes as text: UTF-8 (a byte-order mark is dropped), or E007 at the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start
        head = data[:start].decode("utf-8-sig", "replace")
        line = head.count("\n") + 1
        col = len(head) - (head.rfind("\n") + 1) + 1
        source = Source(data.decode("utf-8-sig", "replace"), name)
        raise error("E007", f"source is not valid UTF-8: byte {data[start]:#04x} at offset {start}",
                    Span(source, line, col, line, col + 1), "save the file as UTF-8") from None
