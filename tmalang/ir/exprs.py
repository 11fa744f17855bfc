"""IR expressions: integer index math and elementwise tile math share one small tree.

Text form (fully parenthesised, so printing and parsing are trivially inverse):
    %i            a local integer variable (loop index, stage counter)
    $M            a value bound at launch (a symbolic dim or a scalar parameter)
    $t[i]         element i of the 1-D i32 tensor t, read from global memory (0 outside t)
    sreg(ctaid.x) a special register: this CTA's index in the grid, or nctaid.x, the grid's size
    @ring.xs[%s]  an element of a shared-memory buffer stage (tile math only)
    !acc          an element of a register accumulator (epilogues only)
    ^m            a row register of a one-warpgroup role: this thread's row (row math only)
    exp2(a)       a row-math function: exp2, log2, rowmax, rowsum, mask_cols(a, n), mask_left(a, n),
                  mask_above(a, d), mask_below(a, d)
    7, 2.5        constants
    (a + b)       binary: + - * / % & ^ > (signed 32-bit, as the kernel's indices are)
    max(a, b)     binary in call form: max min, and the unsigned 32-bit udiv urem umin
    (-a)          negation
    cvt.f16(a)    conversion to a dtype
"""

from __future__ import annotations

from dataclasses import dataclass

BINARY_OPS = ("+", "-", "*", "/", "%", "&", "^", ">", "max", "min", "udiv", "urem", "umin")
CALL_FORM = ("max", "min", "udiv", "urem", "umin")   # printed op(a, b)
SREGS = ("ctaid.x", "nctaid.x", "cluster.ctarank")


@dataclass(frozen=True)
class Const:
    value: int | float

    def __str__(self) -> str:
        if isinstance(self.value, float) and abs(self.value) == float("inf"):
            return "-1e999" if self.value < 0 else "1e999"   # reads back as ±inf
        return repr(self.value) if isinstance(self.value, float) else str(self.value)


@dataclass(frozen=True)
class Var:
    name: str

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class Param:
    """A launch-bound value: symbolic dim or scalar kernel parameter."""

    name: str

    def __str__(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True)
class Elem:
    """Element `index` of the 1-D i32 tensor parameter `tensor` (an index expression's `t[i]`,
    §18), read from global memory where the expression is evaluated. A position outside the
    tensor reads 0: the read is guarded, so no index moves it outside the tensor."""

    tensor: str
    index: Expr

    def __str__(self) -> str:
        return f"${self.tensor}[{self.index}]"


@dataclass(frozen=True)
class Sreg:
    """A special register read: `ctaid.x` (this CTA's index in the grid), `nctaid.x` (the grid's
    size in CTAs) or `cluster.ctarank` (this CTA's rank in its cluster: `cluster.rank` in the
    source). The tile walk reads the first two; each read is one instruction, in evaluation order."""

    name: str

    def __str__(self) -> str:
        return f"sreg({self.name})"


@dataclass(frozen=True)
class BufferRef:
    """Stage `index` of smem buffer (or mbarrier array) `name`."""

    name: str
    index: Expr

    def __str__(self) -> str:
        return f"@{self.name}[{self.index}]"


@dataclass(frozen=True)
class AccRef:
    """The element of register accumulator `name` at the position being computed (epilogues),
    `col` columns to the right: an epilogue into a block of the accumulator's columns."""

    name: str
    col: int = 0

    def __str__(self) -> str:
        return f"!{self.name}" + (f"[{self.col}]" if self.col else "")


@dataclass(frozen=True)
class Bin:
    op: str
    lhs: Expr
    rhs: Expr

    def __str__(self) -> str:
        if self.op in CALL_FORM:
            return f"{self.op}({self.lhs}, {self.rhs})"
        return f"({self.lhs} {self.op} {self.rhs})"


@dataclass(frozen=True)
class Neg:
    operand: Expr

    def __str__(self) -> str:
        return f"(-{self.operand})"


@dataclass(frozen=True)
class Cast:
    dtype: str
    operand: Expr

    def __str__(self) -> str:
        return f"cvt.{self.dtype}({self.operand})"


@dataclass(frozen=True)
class TmemRef:
    """The element of Tensor Memory tile `tile` at the position being computed (epilogues),
    `col` columns to the right."""

    tile: BufferRef
    col: int = 0

    def __str__(self) -> str:
        return f"tmem({self.tile}, {self.col})"


@dataclass(frozen=True)
class RowVar:
    """Row register `name`: the calling thread's row of it (one row per thread in a tcgen05 role,
    the two rows of its accumulator fragment in a wgmma role)."""

    name: str

    def __str__(self) -> str:
        return f"^{self.name}"


ROW_FUNCTIONS = {"exp2": 1, "log2": 1, "rowmax": 1, "rowsum": 1, "mask_cols": 2, "mask_above": 2, "mask_below": 2,
                 "mask_left": 2}
MASKS = ("mask_cols", "mask_above", "mask_below", "mask_left")


@dataclass(frozen=True)
class Call:
    """A row-math function: exp2 and log2 elementwise, rowmax/rowsum over a row's columns,
    mask_cols(x, n), which reads columns n and beyond of x as -inf, mask_left(x, n), columns
    before n, mask_above(x, d), which reads element (r, c) as -inf where c > r + d (a causal mask:
    r the row within the tile), and mask_below(x, d), -inf where c < r + d (the causal mask of a
    transposed tile, keys by queries). A mask's limit is an integer expression, or a row register
    plus or minus one (`^hi - n`: each row's own limit, its value converted to an integer)."""

    func: str
    args: tuple

    def __str__(self) -> str:
        return f"{self.func}({', '.join(map(str, self.args))})"


def row_limit(limit) -> tuple[RowVar, str, object] | None:
    """A mask limit that differs per row, as (register, op, rest): `^r` is (r, "+", None), `^r + n`
    and `^r - n` are (r, op, n); None for an integer limit (the same for every row)."""
    if isinstance(limit, RowVar):
        return limit, "+", None
    if isinstance(limit, Bin) and limit.op in "+-" and isinstance(limit.lhs, RowVar):
        return limit.lhs, limit.op, limit.rhs
    return None


Expr = Const | Var | Param | Elem | Sreg | BufferRef | AccRef | TmemRef | RowVar | Call | Bin | Neg | Cast


def children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, Bin):
        return (expr.lhs, expr.rhs)
    if isinstance(expr, (Neg, Cast)):
        return (expr.operand,)
    if isinstance(expr, (BufferRef, Elem)):
        return (expr.index,)
    if isinstance(expr, TmemRef):
        return (expr.tile,)
    if isinstance(expr, Call):
        return expr.args
    return ()


def walk(expr: Expr):
    """Every node of an expression, parents first."""
    yield expr
    for child in children(expr):
        yield from walk(child)


def buffer_refs(expr: Expr) -> list[BufferRef]:
    """The shared-memory tiles an expression reads (a TMEM tile is not one of them)."""
    tmem = {id(e.tile) for e in walk(expr) if isinstance(e, TmemRef)}
    return [e for e in walk(expr) if isinstance(e, BufferRef) and id(e) not in tmem]


def add(a: Expr, b: Expr) -> Expr:
    return Bin("+", a, b)


def step_count(extent: Expr, chunk: int) -> Expr:
    """ceil(extent / chunk), the trips of `steps(extent, chunk)`, without `extent + chunk - 1`,
    which wraps in 32 bits for an extent within a chunk of 2^31 and then runs no step at all."""
    whole = Bin("/", extent, Const(chunk))
    return whole if chunk == 1 else add(whole, Bin(">", Bin("%", extent, Const(chunk)), Const(0)))


def parity_of(counter: Expr, stages: int) -> Expr:
    """(counter / stages) & 1: which pass over the ring the counter is on."""
    return Bin("&", Bin("/", counter, Const(stages)), Const(1))


def other_parity(parity: Expr) -> Expr:
    """1 - parity: the other phase parity of a 0/1 value. Written with `-` rather than `^` because
    it is what --explain and the docs show, and the language's integer expressions (§18), in
    which a user writes the explicit layer's waits, have no `^`. LLVM emits the same code."""
    return Bin("-", Const(1), parity)


def stage_of(counter: Expr, stages: int) -> Expr:
    return Bin("%", counter, Const(stages))
