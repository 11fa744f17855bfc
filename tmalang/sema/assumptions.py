"""Kernel assumptions (`assume C % 64 == 0`, docs/language.md §2b): what a kernel takes for granted
of its dims and integer scalars, stated where the kernel is written and checked at every launch.

Requires: the kernel's parameters declared (KernelInfo.symbols, KernelInfo.dims); compile-time
constants already replaced by their values (syntax/constants.py).
Guarantees: an accepted assumption compares two integer expressions over literals, symbolic
dims and i32/u32/i64 scalar parameters, with + - * / % &, unary minus, min and max: E012 an
unknown name, E033 anything else, E077 a division by the literal 0. One that cannot hold for any
launch (its values known at compile time, or value ranges that never meet) is E034.
KernelInfo.assumptions holds the accepted ones in source order, for lowering and for
`implies_multiple`; E035 (`check_im2col_slices`) asks it for the one assumption the compiler can
see a kernel needs: that an im2col box read by an mma cuts C into whole K slices.

Arithmetic is exact, `/` and `%` truncating toward zero as the kernel's index math does (§18);
at launch it is 64-bit, and a value that leaves 64 bits fails the assumption (contract/assumptions.py).
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .declarations import Box, KernelInfo, Pipeline, Scalar, SmemBuffer, _kind_name, a_or_an

INT64 = (-(1 << 63), (1 << 63) - 1)
DIM_RANGE = (1, (1 << 31) - 1)        # a dim bound at launch (E206 refuses the rest)
# u64 is not among them: the launch computes in signed 64-bit integers, which it may not fit
SCALAR_RANGES = {"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1), "i64": INT64}


def check_decl(info: KernelInfo, d: ast.AssumeDecl) -> None:
    reader = _Ranges(info)
    lhs, rhs = reader.range(d.lhs), reader.range(d.rhs)
    if not _can_hold(d.op, lhs, rhs):
        raise _never(info, d, lhs, rhs, reader.names)
    info.assumptions.append(d)


def implies_multiple(info: KernelInfo, dim: str, k: int) -> bool:
    """Whether an assumption of the kernel makes `dim` a multiple of `k`: `dim % m == 0` with `m`
    a multiple of `k`, or `dim == m` with `m` one."""
    for d in info.assumptions:
        if d.op != "==":
            continue
        for one, other in ((d.lhs, d.rhs), (d.rhs, d.lhs)):
            if _literal(other) == 0 and isinstance(one, ast.BinOp) and one.op == "%" and _names(one.lhs, dim):
                m = _literal(one.rhs)
                if m is not None and m > 0 and m % k == 0:
                    return True
            m = _literal(other)
            if _names(one, dim) and m is not None and m % k == 0:
                return True
    return False


def _literal(e) -> int | None:
    return e.value if isinstance(e, ast.Number) and type(e.value) is int else None


def _names(e, dim: str) -> bool:
    return isinstance(e, ast.Ref) and e.field is None and e.block is None and e.name == dim


# ---- value ranges -----------------------------------------------------------------------------


class _Ranges:
    """The range [low, high] of each subexpression over every launch; exact for one without
    launch-bound names (a range of one value). Refuses what an assumption may not compute."""

    def __init__(self, info: KernelInfo):
        self.info = info
        self.names: list[str] = []

    def range(self, e) -> tuple[int, int]:
        if isinstance(e, ast.Number):
            if type(e.value) is not int:
                raise error("E033", f"an assumption compares integers; '{ast.expr_text(e)}' is not one", e.span)
            return e.value, e.value
        if isinstance(e, ast.Ref):
            return self._name(e)
        if isinstance(e, ast.Neg):
            low, high = self.range(e.operand)
            return -high, -low
        if isinstance(e, ast.BinOp):
            return _BINARY[e.op](self, e)
        if isinstance(e, ast.Call) and e.func in ("min", "max"):
            if len(e.args) != 2:
                raise error("E082", f"{e.func} takes 2 arguments, got {len(e.args)}", e.span)
            (a, b), (c, d) = self.range(e.args[0]), self.range(e.args[1])
            return (min(a, c), min(b, d)) if e.func == "min" else (max(a, c), max(b, d))
        raise error("E033", f"an assumption may not use '{ast.expr_text(e)}'", e.span,
                    "it computes with literals, dims and integer scalars, + - * / % &, min and max")

    def _name(self, ref: ast.Ref) -> tuple[int, int]:
        if ref.field is not None or ref.block is not None:
            raise error("E033", f"an assumption may not use '{ref.text()}'", ref.span,
                        "it reads the kernel's dims and integer scalar parameters")
        symbol = self.info.symbols.get(ref.name)
        if ref.name in self.info.dims:
            found = DIM_RANGE
        elif isinstance(symbol, Scalar) and symbol.dtype.name in SCALAR_RANGES:
            found = SCALAR_RANGES[symbol.dtype.name]
        elif isinstance(symbol, Scalar) and symbol.dtype.name == "u64":
            raise error("E033", f"'{ref.name}' is a u64 scalar, which may not fit the 64-bit signed integers an "
                        "assumption computes in", ref.span, "pass it as an i64")
        elif symbol is not None:
            what = f"a scalar of type {symbol.dtype.name}" if isinstance(symbol, Scalar) else a_or_an(_kind_name(symbol))
            raise error("E033", f"'{ref.name}' is {what}; an assumption reads dims and integer scalars", ref.span)
        else:
            raise error("E012", f"no dim or integer scalar named '{ref.name}'", ref.span, self._known())
        if ref.name not in self.names:
            self.names.append(ref.name)
        return found

    def _known(self) -> str:
        scalars = [s.name for s in self.info.symbols.values()
                   if isinstance(s, Scalar) and s.dtype.name in SCALAR_RANGES]
        known = [*self.info.dims, *scalars]
        return f"kernel '{self.info.node.name}' has: {', '.join(known)}" if known else \
            f"kernel '{self.info.node.name}' has no symbolic dim or integer scalar"


def _add(r: _Ranges, e) -> tuple[int, int]:
    (a, b), (c, d) = r.range(e.lhs), r.range(e.rhs)
    return (a + c, b + d) if e.op == "+" else (a - d, b - c)


def _mul(r: _Ranges, e) -> tuple[int, int]:
    (a, b), (c, d) = r.range(e.lhs), r.range(e.rhs)
    products = (a * c, a * d, b * c, b * d)
    return min(products), max(products)


def _divide(r: _Ranges, e) -> tuple[int, int]:
    """Truncating `/` and `%`. A divisor that may be 0 at launch makes the assumption fail there;
    the literal 0 is refused now."""
    (a, b), (c, d) = r.range(e.lhs), r.range(e.rhs)
    if (c, d) == (0, 0):
        raise error("E077", "division by zero", e.rhs.span)
    if a == b and c == d:
        q = truncated(a, c)
        return (q, q) if e.op == "/" else (a - q * c, a - q * c)
    top = max(abs(a), abs(b))
    if e.op == "/":
        if a >= 0 and c > 0:
            return a // d, b // c
        return -top, top
    bound = min(top, max(abs(c), abs(d)) - 1)   # |a % c| < |c|, and no more than |a|
    return (0 if a >= 0 else -bound), (0 if b <= 0 else bound)


def _bitand(r: _Ranges, e) -> tuple[int, int]:
    (a, b), (c, d) = r.range(e.lhs), r.range(e.rhs)
    if a == b and c == d:
        return a & c, a & c
    if a >= 0 or c >= 0:   # x & y with y >= 0 lies in 0..y
        return 0, min(x for x, low in ((b, a), (d, c)) if low >= 0)
    floor = -(1 << max(-a, -c).bit_length())   # both may be negative: no lower than the larger's power of two
    return floor, max(b, d)


_BINARY = {"+": _add, "-": _add, "*": _mul, "/": _divide, "%": _divide, "&": _bitand}


def truncated(a: int, b: int) -> int:
    """a / b rounded toward zero (C's and PTX's division), exactly."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _can_hold(op: str, lhs: tuple[int, int], rhs: tuple[int, int]) -> bool:
    """Whether some values in the two ranges satisfy `op` (exact when both are single values)."""
    (a, b), (c, d) = lhs, rhs
    return {"==": a <= d and c <= b, "!=": not (a == b == c == d), "<": a < d, "<=": a <= d,
            ">": b > c, ">=": b >= c}[op]


def _never(info: KernelInfo, d: ast.AssumeDecl, lhs, rhs, names: list[str]):
    if not names:
        return error("E034", f"kernel '{info.node.name}' assumes {d.text}, which is false ({lhs[0]} {d.op} {rhs[0]})",
                     d.span, "fix the constants, or the assumption")
    sides = [f"{ast.expr_text(e)} lies in [{low}, {high}]" for e, (low, high) in ((d.lhs, lhs), (d.rhs, rhs))
             if not isinstance(e, ast.Number)]
    return error("E034", f"kernel '{info.node.name}' assumes {d.text}, which no launch can satisfy", d.span,
                 f"{' and '.join(sides)} (dims lie in 1..2^31-1, scalars in their type's range)")


# ---- an assumption the compiler can see: im2col K slices --------------------------------------


def check_im2col_slices(info: KernelInfo) -> None:
    """E035: an im2col tile read by an mma is a K slice of the GEMM whose K walks (filter tap,
    channel); the other operand holds the same K as taps x C columns. Unless the box's channel
    extent divides C (the tensor's innermost dim), a K slice runs past C into the next tap's
    channels there, and its columns no longer line up with the im2col tile's: the results are
    wrong with no error anywhere. So C must be a literal multiple of it, or an `assume` must say
    so (`assume C % 64 == 0`, or a multiple of 64, or `C == 128`)."""
    for box, mma in _im2col_operands(info):
        channels, dim = box.shape[-1], box.tensor.shape[-1]
        if isinstance(dim, int):
            if dim % channels:
                raise error("E035", f"im2col box '{box.name}' loads {channels} channels per pixel, and an mma reads "
                            f"its tiles as K slices, but '{box.tensor.name}' has {dim} channels, not a multiple of "
                            f"{channels}", box.span, _straddle(mma),
                            f"load a channel count that divides {dim}, or pad the channels to a multiple of {channels}")
        elif not implies_multiple(info, dim, channels):
            raise error("E035", f"im2col box '{box.name}' loads {channels} channels per pixel, and an mma reads its "
                        f"tiles as K slices, but nothing says that {dim}, the channels of '{box.tensor.name}', is "
                        f"a multiple of {channels}", box.span, _straddle(mma),
                        f"if it always is, state it in kernel '{info.node.name}': assume {dim} % {channels} == 0 "
                        "(checked at every launch, §2b)")


def _straddle(mma: ast.Mma) -> str:
    return (f"otherwise a K slice straddles two filter taps of the other operand, and the results are wrong "
            f"(the mma at {mma.span.location()})")


def _im2col_operands(info: KernelInfo):
    """(im2col box, mma) for every mma operand that is a tile of an im2col box: a slot field of a
    pipeline, or an smem buffer."""
    for role in info.roles:
        yield from _operands(info, role.decl.body, {})


def _operands(info: KernelInfo, body: list, slots: dict):
    for s in body:
        if isinstance(s, (ast.Produce, ast.Consume)):
            yield from _operands(info, s.body, {**slots, s.slot: info.symbols.get(s.pipeline.name)})
        elif isinstance(s, ast.Mma):
            for ref in (s.a, s.b):
                box = _tile_box(info, ref, slots)
                if box is not None and box.im2col is not None:
                    yield box, s
        elif getattr(s, "body", None):
            yield from _operands(info, s.body, slots)


def _tile_box(info: KernelInfo, ref, slots: dict) -> Box | None:
    if not isinstance(ref, ast.Ref):
        return None
    if ref.field is not None:
        pipe = slots.get(ref.name)
        return pipe.fields.get(ref.field) if isinstance(pipe, Pipeline) else None
    buffer = info.symbols.get(ref.name)
    return buffer.box if isinstance(buffer, SmemBuffer) else None
