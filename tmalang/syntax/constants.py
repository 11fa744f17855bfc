"""Compile-time constants (docs/language.md §2a): every use replaced by its value, before sema.

    kernel gemm<T = bf16, BM = 128, STAGES = 4>(a: T[M, K], ...) {
        box A = a[BM, 64]                  the grammar's integer positions: ast.ConstUse
        load A[m, k + STAGES] -> s.a       integer expressions: ast.Ref
        cs = T(acc[0, 0])                  dtype positions: a name (Param.dtype, Call.func, ...)

Requires: a parsed Program, and the bindings of the chosen kernel (the one compile's `kernel=`
names, else the first; the file's other kernels take their defaults).
Guarantees: no ast.ConstUse remains; a Ref naming a constant in an expression is an ast.Number
carrying the Ref's span (an operation of numbers one of which was a constant is folded into one
Number with the operation's span, as if the user had written the value); a tensor dim named by
a constant is a literal dim; a dtype position named by a dtype constant holds the dtype's name
(kept at the use's span); every ConstantDecl holds its value and where it came from
(syntax/bindings.py). So sema, the IR, the backend and the interpreter never see a constant, and
every error still points at the use in the user's text. `Uses.annotate` adds to such an error which binding gave the value.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass

from ..diagnostics import Span, TmalangError, error
from . import ast
from .bindings import DEFAULT, DTYPE, HOLDS, INT32, INTEGER, SIZE_KIND, WANTED, describe, kind, values


# The fields that hold integer expressions, by statement; a Ref elsewhere is a name (a box, a
# pipeline, a slot), where a constant cannot stand (E540).
EXPR_FIELDS = {
    ast.ForTiles: ("split",), ast.ForSteps: ("extent",), ast.Load: ("coords", "offsets"),
    ast.Store: ("coords",), ast.Prefetch: ("coords",), ast.Assign: ("value",),
    ast.ExpectTx: ("bytes",), ast.Wait: ("parity",), ast.AssumeDecl: ("lhs", "rhs"),
}


@dataclass(frozen=True)
class Use:
    """One use of a constant: where, and the value it stood for."""

    span: Span
    name: str
    value: int | str
    origin: str

    def note(self) -> str:
        return f"{self.name} = {self.value} ({self.origin})"


class Uses(list):
    """Every use of every constant, in source order of resolution; `bound`: the notes of the
    chosen kernel's bound constants (`BK = 128 (bound by ...)`)."""

    def __init__(self):
        super().__init__()
        self.bound: list[str] = []

    def annotate(self, exc: TmalangError) -> TmalangError:
        """Add to a later error at a constant's use (on the line its caret points at) the value
        and where it came from, `BM = 96 (bound by compile(constants=...))`, then every other
        bound constant's: a value bound elsewhere may be the cause (a deep ring overflows smem)."""
        span = exc.span
        if span is None:
            return exc
        exc.notes += self._at(span)
        exc.notes += [n for n in self.bound if n not in exc.notes]
        return exc

    def _at(self, span: Span) -> list[str]:
        notes = []
        end = span.end_col if span.end_line == span.line else 1 << 30
        for use in self:
            u = use.span
            if u.source == span.source and u.line == span.line and u.col < end and span.col < u.end_col:
                if use.note() not in notes:
                    notes.append(use.note())
        return notes


def resolve(program: ast.Program, bindings: dict, binder: str = "compile(constants=...)",
            kernel: str | None = None) -> Uses:
    """Substitute every constant of every kernel in place; returns the uses for `annotate`.
    `binder` says where bindings come from ("-D" on the command line)."""
    uses = Uses()
    chosen = _chosen(program, kernel)
    for k in program.kernels:
        bound = values(k, bindings if k is chosen else {}, binder)
        _check_names(k, bound)
        _Substitute(k, bound, uses).kernel()
        if k is chosen:
            uses.bound = [f"{n} = {v} ({o})" for n, (v, o) in bound.items() if o != DEFAULT]
    return uses


def _chosen(program: ast.Program, kernel: str | None) -> ast.Kernel | None:
    if kernel is None:
        return program.kernels[0] if program.kernels else None
    return next((k for k in program.kernels if k.name == kernel), None)


def _check_names(k: ast.Kernel, values: dict) -> None:
    """E538: a constant's name is nothing else of the kernel: one name, one meaning."""
    if not values:
        return
    for name, span, what in _declared_names(k):
        if name in values:
            raise error("E538", f"'{name}' is a compile-time constant of kernel '{k.name}'; it cannot also name "
                        f"{what}", span, f"the constant is declared at {_decl(k, name).name_span.location()}")


def _decl(k: ast.Kernel, name: str) -> ast.ConstantDecl:
    return next(c for c in k.constants if c.name == name)


def _declared_names(k: ast.Kernel):
    """(name, span, what) of every name the kernel declares: parameters, declarations, and the
    locals of role bodies (loop indices, slots, accumulators, row registers)."""
    for p in k.params:
        yield p.name, p.span, "a parameter"
    for item in ast.items(k.items):
        if hasattr(item, "name"):
            yield item.name, item.span, "a declaration"
        for stmt in ast.statements(getattr(item, "body", None) or []):
            for name in _locals(stmt):
                yield name, stmt.span, "a local name"


def _locals(stmt) -> list[str]:
    if isinstance(stmt, ast.ForTiles):
        return stmt.vars + ([stmt.index] if stmt.index else [])
    if isinstance(stmt, ast.ForSteps):
        return [stmt.var]
    if isinstance(stmt, (ast.Produce, ast.Consume)):
        return [stmt.slot]
    if isinstance(stmt, (ast.AccumulatorDecl, ast.RowDecl)):
        return [stmt.name]
    return []


class _Substitute:
    """Replaces the uses of one kernel's constants in place."""

    def __init__(self, k: ast.Kernel, values: dict, uses: Uses):
        self.k, self.values, self.uses = k, values, uses
        self.made: list[ast.Number] = []     # the Numbers that stand for constants (see _fold)

    def kernel(self) -> None:
        for p in self.k.params:
            p.dtype = self.dtype_ref(p.dtype)
            p.shape = None if p.shape is None else [self.dim(d) for d in p.shape]
        self.k.items = self.node(self.k.items)

    def use(self, span: Span, name: str, want: str = INTEGER) -> int | str:
        """The value of constant `name` at a use that takes `want` (an integer, a size, a dtype):
        E545 an integer for a size or the reverse, E565 a dtype for either or the reverse."""
        value, origin = self.values[name]
        self.uses.append(Use(span, name, value, origin))
        if kind(value) != want:
            code = "E565" if DTYPE in (kind(value), want) else "E545"
            raise error(code, f"compile-time constant '{name}' is {describe(value)}; {WANTED[want]} goes here",
                        span, f"{name} = {value} ({origin})")
        return value

    def dim(self, d: ast.Dim) -> ast.Dim:
        if isinstance(d.value, str) and d.value in self.values:
            return ast.Dim(d.span, self.use(d.span, d.value))
        return d

    def dtype_ref(self, ref: ast.Ref) -> ast.Ref:
        """A dtype position holding a Ref (`a: T[M, K]`, `accumulator acc: T[..]`, `row m: T`):
        a dtype constant's value, at the use's span."""
        if ref.name in self.values and ref.field is None and ref.block is None:
            return ast.Ref(ref.span, self.use(ref.span, ref.name, DTYPE))
        return ref

    def dtype_text(self, name: str, span: Span) -> str:
        """A dtype position holding text (`tmem t: T[..]`, a tmem field, a call's function)."""
        return self.use(span, name, DTYPE) if name in self.values else name

    def call(self, c: ast.Call) -> ast.Call:
        """`OUT(acc[0, 0])`: a conversion named by a dtype constant. The function's name is the
        first text of the call's span."""
        s = c.span
        c.func = self.dtype_text(c.func, Span(s.source, s.line, s.col, s.line, s.col + len(c.func)))
        return c

    def node(self, value):
        """Any AST value: integer positions resolved, expression fields substituted, dtype
        positions named by constants resolved, recursively."""
        if isinstance(value, ast.ConstUse):
            return self.const_use(value)
        if isinstance(value, list):
            out = []
            for v in value:      # a compile-time `if` gives way to its chosen branch's contents
                out += self.node(self.chosen(v)) if isinstance(v, ast.StaticIf) else [self.node(v)]
            return out
        if isinstance(value, tuple):
            return tuple(self.node(v) for v in value)
        if isinstance(value, ast.Ref):
            return self.name(value)
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            return value
        self.dtypes(value)
        exprs = EXPR_FIELDS.get(type(value), ())
        for f in dataclasses.fields(value):
            child = getattr(value, f.name)
            if f.name in exprs:
                setattr(value, f.name, self.exprs(child))
            elif f.name != "span" and f.compare:
                setattr(value, f.name, self.node(child))
        return value

    def chosen(self, choice: ast.StaticIf) -> list:
        """The branch a compile-time `if` takes: both sides literals and constants (E544)."""
        sides = [self.exprs(x) for x in (choice.lhs, choice.rhs)]
        for ref in (r for side in sides for r in ast.refs(side)):
            raise error("E544", f"'{ref.text()}' is not a compile-time constant of kernel '{self.k.name}': `if` "
                        "chooses at compile time", ref.span, "compare literals and the kernel's constants (§2a); "
                        "what depends on a dim or a scalar is a loop extent, an index or a mask instead")
        lhs, rhs = (self.evaluate(side) for side in sides)
        return choice.body if _COMPARE[choice.op](lhs, rhs) else choice.orelse

    def dtypes(self, node) -> None:
        """The dtype positions of one declaration or statement that hold a name; the params' are
        done in `kernel`, the expressions' calls in `exprs`."""
        if isinstance(node, (ast.AccumulatorDecl, ast.RowDecl)):
            node.dtype = self.dtype_ref(node.dtype)
        elif isinstance(node, ast.TmemDecl):
            node.dtype = self.dtype_text(node.dtype, node.dtype_span)
        elif isinstance(node, ast.FieldDecl) and node.tmem is not None:
            node.tmem = (self.dtype_text(node.tmem[0], node.dtype_span), node.tmem[1])
        elif isinstance(node, ast.Call):
            self.call(node)

    def const_use(self, c: ast.ConstUse) -> int:
        if c.expr is not None:
            value = self.evaluate(self.exprs(c.expr))
            return -value if c.negative else value
        if c.name not in self.values:
            declared = ", ".join(self.values) or "none"
            what = "a size goes here: 128B or the like" if c.size else "an integer goes here: a literal"
            raise error("E539", f"'{c.name}' is not a compile-time constant of kernel '{self.k.name}'", c.span,
                        f"{what}, or a constant declared in the kernel's header, "
                        f"kernel {self.k.name}<{c.name} = ...>(...) (its constants: {declared})")
        value = self.use(c.span, c.name, SIZE_KIND if c.size else INTEGER)
        return -value if c.negative else value

    def evaluate(self, e) -> int:
        """`(BN / 4)` in an integer position: literals and constants only, computed exactly (E544)."""
        if isinstance(e, ast.Number) and type(e.value) is int:
            return e.value
        if isinstance(e, ast.Neg):
            return -self.evaluate(e.operand)
        if isinstance(e, ast.BinOp) and e.op in _OPS:
            a, b = self.evaluate(e.lhs), self.evaluate(e.rhs)
            if e.op in "/%" and (a < 0 or b <= 0):
                raise error("E544", f"'{ast.expr_text(e)}' divides {a} by {b}: a compile-time integer "
                            "divides a value >= 0 by one > 0", e.span)
            value = _OPS[e.op](a, b)
            if not INT32[0] <= value <= INT32[1]:
                raise error("E544", f"'{ast.expr_text(e)}' is {value}, which does not fit in 32 bits", e.span)
            return value
        what = f"'{e.text()}' is not a compile-time constant" if isinstance(e, ast.Ref) else \
            f"'{ast.expr_text(e)}' is not a compile-time integer"
        raise error("E544", f"{what} of kernel '{self.k.name}'", e.span,
                    "an integer position takes literals and compile-time constants, with + - * / % &")

    def name(self, ref: ast.Ref) -> ast.Ref:
        """A Ref outside an expression names something; a constant cannot (E540)."""
        if ref.name in self.values:
            value = self.values[ref.name][0]
            where = ("a dtype name does" if kind(value) == DTYPE
                     else "a size does" if kind(value) == SIZE_KIND else "an integer literal or an integer expression does")
            raise error("E540", f"'{ref.name}' is a compile-time constant of kernel '{self.k.name}', "
                        f"{HOLDS[kind(value)]}; it cannot stand here", ref.span,
                        f"a constant stands where {where} (§2a)")
        if ref.block is not None:
            ref.block = self.exprs(ref.block)
        return ref

    def exprs(self, e):
        """An integer or tile-math expression (or a list of them, or None) with constants as Numbers."""
        if e is None:
            return None
        if isinstance(e, list):
            return [self.exprs(x) for x in e]
        if isinstance(e, ast.Ref):
            if e.name in self.values and e.field is None and e.block is None:
                self.made.append(ast.Number(e.span, self.use(e.span, e.name)))
                return self.made[-1]
            return self.name(e)
        if isinstance(e, ast.BinOp):
            e.lhs, e.rhs = self.exprs(e.lhs), self.exprs(e.rhs)
            return _fold(e, self.made)
        if isinstance(e, ast.Neg):
            e.operand = self.exprs(e.operand)
            return _fold(e, self.made)
        if isinstance(e, ast.Call):
            self.call(e)
            e.args = [self.exprs(a) for a in e.args]
        return e


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "&": operator.and_,
        "/": operator.floordiv, "%": operator.mod}


def _fold(e, made: list):
    """An operation on integers one of which came from a constant (a Number in `made`), as the
    integer it computes, as the user would have written it by hand; anything else as it is.
    Division and remainder fold only on non-negative operands and a non-zero divisor, where they
    cannot differ from the kernel's 32-bit arithmetic; a result outside 32 bits stays unfolded."""
    operands = [e.operand] if isinstance(e, ast.Neg) else [e.lhs, e.rhs]
    if not all(isinstance(o, ast.Number) and type(o.value) is int for o in operands):
        return e
    if not any(o is m for o in operands for m in made):
        return e
    if isinstance(e, ast.Neg):
        value = -operands[0].value
    else:
        a, b = operands[0].value, operands[1].value
        if e.op in "/%" and (a < 0 or b <= 0):
            return e
        value = _OPS[e.op](a, b)
    if not INT32[0] <= value <= INT32[1]:
        return e
    made.append(ast.Number(e.span, value))
    return made[-1]
