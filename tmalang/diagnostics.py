"""One diagnostic renderer for the whole compiler.

Every user-facing error is a `TmalangError`. Errors about source text carry a `Span` and render
as::

    file:line:col: error[E0xx]: message
        <the source line>
        ^^^^^
    note: ...

Launch-time errors (no source position) render as `error[E0xx]: message`.

For tools (editors, CI annotators) a diagnostic is also a JSON object (`to_json`): the command
line prints one per line with `--diagnostics-format=json` or `TMALANG_DIAGNOSTICS=json`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

FORMATS = ("text", "json")


@dataclass(frozen=True)
class Source:
    """A named source text; spans point into it."""

    text: str
    name: str = "<string>"

    def line(self, lineno: int) -> str:
        lines = self.text.splitlines()
        return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    """A region of source text: 1-based line/column of its start and end (end exclusive)."""

    source: Source
    line: int
    col: int
    end_line: int
    end_col: int

    def __repr__(self) -> str:  # keeps dataclass reprs of AST nodes short
        return f"<{self.line}:{self.col}>"

    def location(self) -> str:
        return f"{self.source.name}:{self.line}:{self.col}"


@dataclass
class TmalangError(Exception):
    """A located (or launch-time) error with a stable code."""

    code: str
    message: str
    span: Span | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.render())

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        head = f"error[{self.code}]: {self.message}"
        if self.span is None:
            return "\n".join([head, *(f"note: {n}" for n in self.notes)])
        text = self.span.source.line(self.span.line)
        width = (
            self.span.end_col - self.span.col
            if self.span.end_line == self.span.line
            else len(text) - self.span.col + 1
        )
        caret = " " * (self.span.col - 1) + "^" * max(1, width)
        lines = [f"{self.span.location()}: {head}", f"    {text}", f"    {caret}"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


    def to_json(self) -> dict:
        """The diagnostic as data: code, severity, message, notes, and where (file, 1-based line and
        column of start and end, end exclusive, and the source line) when it has a position."""
        data = {"code": self.code, "severity": "error", "message": self.message, "notes": list(self.notes)}
        if self.span is not None:
            s = self.span
            data["location"] = {"file": s.source.name, "line": s.line, "col": s.col, "end_line": s.end_line,
                                "end_col": s.end_col, "source_line": s.source.line(s.line)}
        return data

    def report(self, fmt: str | None = None) -> str:
        """The text a command line prints: rendered, or one JSON line (fmt None: as the environment's
        TMALANG_DIAGNOSTICS says, text by default)."""
        fmt = fmt or os.environ.get("TMALANG_DIAGNOSTICS", "text")
        return json.dumps(self.to_json(), ensure_ascii=False) if fmt == "json" else self.render()


def error(code: str, message: str, span: Span | None = None, *notes: str) -> TmalangError:
    return TmalangError(code, message, span, list(notes))
