"""Text → IR, the inverse of printer.py (tests check print(parse(print(x))) == print(x)).

A small hand-written reader: the text is machine-written and line-oriented, so a tokenizer and
a recursive-descent reader for values are all it needs.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from typing import get_args

from ..diagnostics import Source, Span, error
from . import exprs as ex
from .ops import OPS, Op
from .printer import RECORDS

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<sym>@[A-Za-z_][\w.]*)
    | (?P<var>%[A-Za-z_][\w.]*)
    | (?P<param>\$[A-Za-z_]\w*)
    | (?P<acc>![A-Za-z_]\w*)
    | (?P<row>\^[A-Za-z_]\w*)
    | (?P<size>\d+B\b)
    | (?P<num>-?\d+\.\d*(?:[eE][-+]?\d+)?|-?\d+(?:[eE][-+]?\d+)?)
    | (?P<str>"(?:[^"\\]|\\.)*")
    | (?P<word>[A-Za-z_][\w.:\-]*)
    | (?P<punct>[\[\](){},=+\-*/%&^>])
    )""",
    re.VERBOSE,
)


def _tokens(line: str, source: Source, lineno: int) -> list[tuple[str, str, int]]:
    out, pos, line = [], 0, line.rstrip()
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if not m or m.end() == pos:
            col = len(line) - len(line[pos:].lstrip()) + 1   # at the character, not the blank before it
            raise error("E090", "cannot read IR text here", Span(source, lineno, col, lineno, col + 1))
        kind = m.lastgroup
        text = m.group(kind)
        out.append(("word" if kind == "size" else kind, text, m.start(kind) + 1))
        pos = m.end()
    return out


class _Line:
    """Cursor over one line's tokens."""

    def __init__(self, tokens, source: Source, lineno: int):
        self.tokens, self.pos, self.source, self.lineno = tokens, 0, source, lineno

    def peek(self, offset=0):
        i = self.pos + offset
        return self.tokens[i] if i < len(self.tokens) else ("end", "", 0)

    def take(self, text: str | None = None):
        tok = self.peek()
        if text is not None and tok[1] != text:
            self.fail(f"expected '{text}', found '{tok[1] or 'end of line'}'")
        self.pos += 1
        return tok

    def fail(self, message: str):
        col = self.peek()[2] or 1
        raise error("E090", message, Span(self.source, self.lineno, col, self.lineno, col + 1))

    # values -----------------------------------------------------------------------------
    def value(self):
        kind, text, _ = self.peek()
        if text == "[":
            self.take("[")
            items = []
            while self.peek()[1] != "]":
                items.append(self.value())
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("]")
            return items
        if kind == "word" and self.peek(1)[1] != "(" and not text.startswith("cvt."):
            self.take()
            return {"true": True, "false": False, "none": None}.get(text, text)
        if kind == "str":
            self.take()
            return text[1:-1].replace('\\"', '"')
        if text == "{":   # a record: `{name=value ...}`
            self.take("{")
            record = {}
            while self.peek()[1] != "}":
                key = self.take()[1]
                self.take("=")
                record[key] = self.value()
            self.take("}")
            return record
        return self.expr()

    def expr(self) -> ex.Expr:
        kind, text, _ = self.take()
        if kind == "num":
            return ex.Const(float(text) if any(c in text for c in ".eE") else int(text))
        if kind == "var":
            return ex.Var(text[1:])
        if kind == "param":
            if self.peek()[1] != "[":
                return ex.Param(text[1:])
            self.take("[")
            index = self.expr()
            self.take("]")
            return ex.Elem(text[1:], index)
        if kind == "acc":
            if self.peek()[1] != "[":
                return ex.AccRef(text[1:])
            self.take("[")
            kind, col, _ = self.take()
            if kind != "num" or not col.isdigit():
                self.fail(f"expected a column offset, found '{col}'")
            self.take("]")
            return ex.AccRef(text[1:], int(col))
        if kind == "row":
            return ex.RowVar(text[1:])
        if kind == "word" and text in ex.ROW_FUNCTIONS:
            self.take("(")
            args = [self.expr()]
            while self.peek()[1] == ",":
                self.take(",")
                args.append(self.expr())
            self.take(")")
            return ex.Call(text, tuple(args))
        if kind == "sym":
            self.take("[")
            index = self.expr()
            self.take("]")
            return ex.BufferRef(text[1:], index)
        if kind == "word" and text == "tmem":
            self.take("(")
            tile = self.expr()
            self.take(",")
            col = self.take()[1]
            self.take(")")
            if not isinstance(tile, ex.BufferRef) or not col.isdigit():
                self.fail("expected tmem(@tile[stage], column)")
            return ex.TmemRef(tile, int(col))
        if kind == "word" and text == "sreg":
            self.take("(")
            name = self.take()[1]
            if name not in ex.SREGS:
                self.pos -= 1
                self.fail(f"unknown special register '{name}' (known: {', '.join(ex.SREGS)})")
            self.take(")")
            return ex.Sreg(name)
        if kind == "word" and text in ex.CALL_FORM:
            self.take("(")
            lhs = self.expr()
            self.take(",")
            rhs = self.expr()
            self.take(")")
            return ex.Bin(text, lhs, rhs)
        if kind == "word" and text.startswith("cvt."):
            self.take("(")
            operand = self.expr()
            self.take(")")
            return ex.Cast(text[4:], operand)
        if text == "(":
            if self.peek()[1] == "-":
                self.take("-")
                operand = self.expr()
                self.take(")")
                return ex.Neg(operand)
            lhs = self.expr()
            op = self.take()[1]
            rhs = self.expr()
            self.take(")")
            return ex.Bin(op, lhs, rhs)
        self.pos -= 1
        self.fail(f"expected an expression, found '{text or 'end of line'}'")


def _coerce(value, annotation: str, line: _Line):
    """Turn a generic parsed value into what the op field's annotation asks for, or fail: an op
    never holds a value of another type (the verifier and the passes rely on that)."""
    if annotation == "int" and isinstance(value, ex.Const) and type(value.value) is int:
        return value.value
    if annotation == "bool" and type(value) is bool:
        return value
    if annotation == "str" and (isinstance(value, str) or value is None or type(value) is bool):
        return value if isinstance(value, str) else {None: "none", True: "true", False: "false"}[value]
    if annotation == "Expr" and isinstance(value, _EXPRS):
        return value
    if annotation.startswith("BufferRef") and (isinstance(value, ex.BufferRef) or value is None and "None" in annotation):
        return value
    if annotation.startswith("list[") and isinstance(value, list):
        inner = annotation[5:-1]
        if inner == "str | int":   # a tensor dimension: a literal or a symbol
            return [_coerce(v, "int" if isinstance(v, ex.Const) else "str", line) for v in value]
        return [_coerce(v, inner, line) for v in value]
    record = next((r for r in RECORDS if annotation.startswith(r.__name__)), None)
    if record is not None and isinstance(value, dict):
        return _record(record, value, line)
    if record is not None and value is None and "None" in annotation:
        return None
    line.fail(f"value {_shown(value)} does not fit a field of type {annotation}")


def _record(cls, given: dict, line: _Line):
    """A mode's record from its `{name=value ...}` text: every field by its annotation (a tuple of
    ints as a list), the fields left out taking their defaults."""
    kinds = {f.name: f.type for f in fields(cls)}
    for key in given:
        if key not in kinds:
            line.fail(f"the record {cls.__name__} has no field '{key}'")
    values = {key: _coerce(v, "list[int]" if kinds[key].startswith("tuple[int") else kinds[key], line)
              for key, v in given.items()}
    try:
        return cls(**{key: tuple(v) if isinstance(v, list) else v for key, v in values.items()})
    except TypeError:
        line.fail(f"the record {cls.__name__} needs {', '.join(f.name for f in fields(cls) if f.default is MISSING)}")


def _shown(value) -> str:
    return f"[{', '.join(map(_shown, value))}]" if isinstance(value, list) else repr(value) if isinstance(value, str) else str(value)


_EXPRS = get_args(ex.Expr)


def parse_ir(text: str, name: str = "<ir>") -> list[Op]:
    """The ops of an IR text; each op's span is its line, so the verifier can point at it."""
    source = Source(text, name)
    stack: list[tuple[Op | None, list[Op]]] = [(None, [])]
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.strip().startswith("//"):
            continue
        line = _Line(_tokens(raw, source, lineno), source, lineno)
        if line.peek()[1] == "}":
            if len(stack) == 1:
                line.fail("unbalanced '}'")
            stack.pop()
            continue
        try:
            op, opens = _parse_op(line)
        except RecursionError:   # a machine-written expression never nests this deep
            line.fail("expression nested too deeply")
        op.span = Span(source, lineno, line.tokens[0][2], lineno, len(raw.rstrip()) + 1)
        stack[-1][1].append(op)
        if opens:
            stack.append((op, op.regions()[0]))
    if len(stack) != 1:
        raise error("E090", f"'{stack[-1][0].name}' opens a region that is never closed", stack[-1][0].span)
    return stack[0][1]


def _parse_op(line: _Line) -> tuple[Op, bool]:
    kind, opname, _ = line.take()
    cls = OPS.get(opname)
    if cls is None:
        line.pos -= 1
        line.fail(f"unknown op '{opname}'")
    values = {}
    annotations = {f.name: f.type for f in cls.operand_fields()}
    defaulted = {f.name for f in cls.operand_fields() if f.default is not MISSING or f.default_factory is not MISSING}
    if line.peek()[0] == "sym" and "symbol" in annotations:
        values["symbol"] = line.take()[1][1:]
    while line.peek()[0] == "word" and line.peek(1)[1] == "=":
        key = line.take()[1]
        line.take("=")
        if key not in annotations:
            line.fail(f"op '{opname}' has no field '{key}'")
        values[key] = _coerce(line.value(), annotations[key], line)
    opens = line.peek()[1] == "{"
    if opens:
        line.take("{")
    if line.peek()[0] != "end":
        line.fail(f"unexpected '{line.peek()[1]}'")
    for fname, annotation in annotations.items():
        if annotation == "list[Op]":
            values[fname] = []
        elif fname not in values and fname not in defaulted:   # the printer leaves defaults out
            line.fail(f"op '{opname}' needs field '{fname}'")
    return cls(**values), opens
