"""Source bytes as text, with E007 at the first byte that is not UTF-8, so that no reader of
source files (the CLI, `compile_file`, `compile(bytes)`) raises UnicodeDecodeError. Apart from the
parser (no lark here): the CLI reads its source before it knows whether the cache answers."""

from __future__ import annotations

from ..diagnostics import Source, Span, error


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
