"""A kernel's assumptions at launch (docs/language.md §2b): `assume C % 64 == 0` holds for the
bound dims and scalars, or the launch is refused with E219 before anything is staged, encoded or
launched, so no argument is touched.

Requires: a Manifest whose Assumptions the compiler accepted (sema/assumptions.py: integer
operations on literals, dims and i32/u32/i64 scalars), and the launch's dims and scalars.
Guarantees: `check` raises E219 for the first assumption that does not hold, pointing at it and
quoting it as written, with the bound values of the names it reads and, as notes, the value of
each side that is an operation. The sides compute in 64-bit signed integers, `/` and `%`
truncating toward zero as C's do: a division by zero (a scalar divisor of 0) or a value outside
64 bits fails the assumption, and the first one, operands taken left to right, is the note. The
C++ launch header makes the same check in the same words (backend/assumptions.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..diagnostics import Source, Span, TmalangError
from .errors import ASSUMPTION, LaunchError
from .manifest import Assumption, Manifest

INT64 = (-(1 << 63), (1 << 63) - 1)
COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
           "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
# binding strength of each operation, for writing a side back as text (§18's precedence)
PRECEDENCE = {"&": 1, "+": 2, "-": 2, "*": 3, "/": 3, "%": 3}


class AssumptionError(LaunchError):
    """E219: an assumption does not hold for a launch's arguments; points at the `assume` line."""

    def __init__(self, message: str, span: Span | None, notes: list[str]) -> None:
        TmalangError.__init__(self, ASSUMPTION, message, span, notes)


def check(manifest: Manifest, symbols: Mapping[str, int], scalars: Mapping) -> None:
    """E219 for the first assumption of `manifest` that the bound dims and scalars break."""
    for a in manifest.assumptions:
        values = {n: int(symbols[n]) if n in symbols else int(scalars[n]) for n in names(a)}
        failure = broken(a, values)
        if failure is not None:
            raise AssumptionError(message(manifest.kernel, a, values), _span(a), failure)


def broken(a: Assumption, values: Mapping[str, int]) -> list[str] | None:
    """None when `a` holds for `values`, else the notes that say why not."""
    trouble: list[str] = []
    lhs, rhs = evaluate(a.lhs, values, trouble), evaluate(a.rhs, values, trouble)
    if trouble:
        return trouble[:1]
    if COMPARE[a.compare](lhs, rhs):
        return None
    return [f"{text(side)} = {value}" for side, value in ((a.lhs, lhs), (a.rhs, rhs)) if isinstance(side, tuple)]


def message(kernel: str, a: Assumption, values: Mapping[str, int]) -> str:
    bound = ", ".join(f"{n} = {v}" for n, v in values.items())
    return f"kernel '{kernel}' assumes {a.written}, but {bound}"


def names(a: Assumption) -> list[str]:
    """The launch-bound names an assumption reads, in the order they are written."""
    found: list[str] = []
    for side in (a.lhs, a.rhs):
        _names(side, found)
    return found


def _names(tree, found: list[str]) -> None:
    if isinstance(tree, str) and tree not in found:
        found.append(tree)
    elif isinstance(tree, tuple):
        for operand in tree[1:]:
            _names(operand, found)


def evaluate(tree, values: Mapping[str, int], trouble: list[str]) -> int:
    """The value of a side, operands left to right. An operation that divides by zero or leaves
    64 bits gives 0 and appends why to `trouble` (the first one is reported)."""
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return values[tree]
    op, *operands = tree
    args = [evaluate(x, values, trouble) for x in operands]
    if op in ("/", "%") and args[1] == 0:
        trouble.append(f"{text(tree)} divides by zero")
        return 0
    value = -args[0] if op == "neg" else _OPS[op](*args)
    if not INT64[0] <= value <= INT64[1]:
        trouble.append(f"{text(tree)} overflows 64 bits")
        return 0
    return value


def truncated(a: int, b: int) -> int:
    """a / b rounded toward zero, exactly."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "&": lambda a, b: a & b,
        "/": truncated, "%": lambda a, b: a - truncated(a, b) * b, "min": min, "max": max}


def text(tree, strength: int = 0) -> str:
    """A side as source-like text, with the parentheses its grouping needs (`9 * C`, `(C + 1) % 64`)."""
    if isinstance(tree, (int, str)):
        return str(tree)
    op, *operands = tree
    if op == "neg":
        return f"-{text(operands[0], 4)}"
    if op in ("min", "max"):
        return f"{op}({text(operands[0])}, {text(operands[1])})"
    own = PRECEDENCE[op]
    written = f"{text(operands[0], own)} {op} {text(operands[1], own + 1)}"   # left-associative
    return f"({written})" if own < strength else written


def _span(a: Assumption) -> Span | None:
    if not a.line:
        return None
    source = Source("\n" * (a.line - 1) + a.text, a.file)
    return Span(source, a.line, a.col, a.line, a.end_col)
