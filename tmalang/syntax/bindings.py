"""The values of a kernel's compile-time constants (docs/language.md §2a): each constant's default
or binding, checked, with its kind.

A value has one of three kinds, read from the value itself: an integer (`64`), a size (`"128B"`,
`"none"`) or a dtype (`"bf16"`, a name of targets/dtypes.py's table; no size is spelt like one). A
constant whose default is a dtype holds a dtype, and one whose default is an integer or a size
holds no dtype: a binding of the other kind is E563 (at the declaration, since a binding has no
line of its own). A constant without default takes the kind of its binding. Integer against size
stays a question of each use (E545, syntax/constants.py), as it was before dtypes.

Requires: a parsed Kernel (its ConstantDecls' defaults are literals: the parser checked them).
Guarantees: every ConstantDecl has `value` (an int, or a str naming a size or a dtype) and
`origin`; the values are what Kernel.constants exposes, so JSON-serialisable.
"""

from __future__ import annotations

import operator
import re
import sys

from ..diagnostics import TmalangError, error
from ..targets.dtypes import DTYPES, SUPPORTED, TORCH, from_numpy
from . import ast

INT32 = (-(2**31), 2**31 - 1)
SIZE = re.compile(r"[0-9]+B|none")     # the grammar's SIZE: `swizzle 128B`, `l2 none`
NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
DEFAULT = "default"

INTEGER, SIZE_KIND, DTYPE = "integer", "size", "dtype"
WANTED = {INTEGER: "an integer", SIZE_KIND: "a size like 128B", DTYPE: "a dtype like bf16"}
HOLDS = {INTEGER: "an integer", SIZE_KIND: "a size", DTYPE: "a dtype"}


def kind(value: int | str) -> str:
    """The kind of a checked value."""
    if isinstance(value, int):
        return INTEGER
    return DTYPE if value in DTYPES else SIZE_KIND


def describe(value: int | str) -> str:
    """`the integer 64`, `the size 128B`, `the dtype bf16`."""
    return f"the {kind(value)} {value}"


def values(k: ast.Kernel, bindings: dict, binder: str) -> dict[str, tuple[int | str, str]]:
    """name -> (value, origin) for the kernel's constants: E537 twice declared, E566 named like a
    dtype, E541 a binding the kernel does not declare, E542/E563/E564 a value that is none of the
    constant's kind, E543 no value at all."""
    declared: dict[str, ast.ConstantDecl] = {}
    for c in k.constants:
        if c.name in declared:
            raise error("E537", f"compile-time constant '{c.name}' is already declared in kernel '{k.name}'",
                        c.name_span, f"first declared at {declared[c.name].name_span.location()}")
        if c.name in DTYPES:
            raise error("E566", f"compile-time constant '{c.name}' of kernel '{k.name}' has the name of a dtype",
                        c.name_span, f"every dtype position ('x: {c.name}[M, N]', '{c.name}(acc[0, 0])') would "
                        "read the constant; give it a name of its own, e.g. T or OUT")
        declared[c.name] = c
    for name in bindings:
        if name not in declared:
            listed = ", ".join(declared) if declared else "none"
            raise error("E541", f"kernel '{k.name}' has no compile-time constant '{name}'", None,
                        f"its constants: {listed}")
    out = {}
    for c in k.constants:
        if c.name in bindings:
            c.origin = _origin(c.name, bindings[c.name], binder)
            c.value = _bound(k, c, bindings[c.name])
        elif c.default is not None:
            c.value, c.origin = _checked(k, c.name, c.default), DEFAULT
        else:
            how = (f"tmalangc -D {c.name}=..." if binder == "-D"
                   else f"{binder.split('(')[0]}(..., constants={{'{c.name}': ...}})")
            raise error("E543", f"compile-time constant '{c.name}' of kernel '{k.name}' has no default and is "
                        "not bound", c.name_span, f"give it a default (<{c.name} = 128>) or "
                        f"bind it: {how}")
        out[c.name] = (c.value, c.origin)
    return out


def _origin(name: str, raw, binder: str) -> str:
    return f"bound by -D {name}={raw}" if binder == "-D" else f"bound by {binder}"


def _bound(k: ast.Kernel, c: ast.ConstantDecl, raw) -> int | str:
    """A binding's value, of the kind the constant's default has (E563), a known dtype where a
    dtype goes (E564). Errors point at the declaration, with the binding as a note."""
    note = f"{c.name} = {raw if isinstance(raw, (int, str)) else repr(raw)} ({c.origin})"
    expected = None if c.default is None else kind(c.default)
    dtype = _dtype_name(raw)
    if dtype is not None and expected in (None, DTYPE):
        return dtype
    unknown = isinstance(raw, str) and NAME.fullmatch(raw) and not SIZE.fullmatch(raw)
    if unknown and expected in (None, DTYPE):
        raise error("E564", f"unknown dtype '{raw}' for compile-time constant '{c.name}' of kernel '{k.name}'",
                    c.name_span, note, f"known dtypes: {SUPPORTED}")
    if expected == DTYPE:
        raise error("E563", f"compile-time constant '{c.name}' of kernel '{k.name}' holds a dtype (its default "
                    f"is {c.default}); it is bound to {_got(raw)}", c.name_span, note, f"known dtypes: {SUPPORTED}")
    if dtype is not None:
        raise error("E563", f"compile-time constant '{c.name}' of kernel '{k.name}' holds {HOLDS[expected]} (its "
                    f"default is {c.default}); it is bound to the dtype {dtype}", c.name_span, note,
                    "a constant holds values of its default's kind; a dtype default (<T = bf16>) makes a dtype "
                    "constant")
    return _checked(k, c.name, raw)


def _got(raw) -> str:
    if _integer(raw) is not None:
        return f"the integer {_integer(raw)}"
    if isinstance(raw, str) and SIZE.fullmatch(raw):
        return f"the size {raw}"
    return repr(raw)


def _checked(k: ast.Kernel, name: str, value) -> int | str:
    """A default's or a non-dtype binding's value: a 32-bit integer (a bool is none, though Python
    counts it as one), a size like "128B", or a dtype (E542)."""
    if isinstance(value, str) and (SIZE.fullmatch(value) or value in DTYPES):
        return str(value)
    integer = _integer(value)
    if integer is None:
        raise error("E542", f"compile-time constant '{name}' of kernel '{k.name}' must be an integer, "
                    f"a size like '128B' or a dtype like 'bf16', got {value!r}")
    if not INT32[0] <= integer <= INT32[1]:
        raise error("E542", f"compile-time constant '{name}' of kernel '{k.name}' is {integer}, which does not "
                    f"fit in 32 bits", None, "integers compute in 32 bits in the kernel's index math")
    return integer


def _integer(value) -> int | None:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _dtype_name(value) -> str | None:
    """The tmalang dtype a binding names: "f16", or a NumPy / ml_dtypes / torch dtype object
    (what a caller holds at hand: `a.dtype`); None if it names none."""
    if isinstance(value, str):
        return str(value) if value in DTYPES else None
    np = sys.modules.get("numpy")   # a NumPy dtype can only come from a caller that imported NumPy
    if np is not None and (isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic))):
        return from_numpy(np.dtype(value))
    return TORCH.get(str(value)) if type(value).__module__.startswith("torch") else None


def check_default(c: ast.ConstantDecl, default, declared: set[str]) -> TmalangError | None:
    """The error for a header default that names a name: another constant (E539) or no dtype (E564);
    None for a dtype name."""
    if isinstance(default, ast.ConstUse) and default.expr is None and not default.negative:
        if default.name in DTYPES:
            return None
        if default.name not in declared:
            return error("E564", f"unknown dtype '{default.name}' in the default of compile-time constant "
                         f"'{c.name}'", default.span, f"known dtypes: {SUPPORTED}",
                         "a default is an integer literal, a size like 128B or a dtype")
    what = f"names '{default.name}'" if default.name else "is an expression"
    return error("E539", f"the default of compile-time constant '{c.name}' {what}; a default is an integer "
                 "literal, a size like 128B or a dtype", default.span)
