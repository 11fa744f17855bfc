"""What is in scope inside a role, and how a statement's names resolve: loop indices, open
produce/consume slots, accumulators and row registers; shared-memory tiles by slot field or smem
buffer; integer index expressions; the operators and functions tile math knows. The statement
checkers (statements, mma, rows, tcgen05) all stand on this module, and it on none of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnostics import error
from ..syntax import ast
from ..targets.dtypes import DTYPES, TILE_MATH_DTYPES
from . import pairs
from .declarations import Box, KernelInfo, Pipeline, Role, Scalar, SmemBuffer, Tensor

TILE_FUNCTIONS = {"max": 2, "min": 2, **{name: 1 for name in DTYPES}}


@dataclass(frozen=True)
class Scope:
    role: Role
    ints: frozenset[str] = frozenset()         # integer variables in scope
    pipeline: Pipeline | None = None            # inside produce/consume
    slot: str | None = None
    producing: bool = False
    elected: bool = False
    turn: bool = False                          # inside a `turn` block (§15e)
    in_loop: bool = False                       # inside a tile loop
    nest: tuple = ()                            # the loops around here, for trip-count agreement
    tile_vars: tuple = ()                       # the enclosing tile loop's indices (not its split index)
    split_var: str | None = None                # the enclosing tile loop's split index (`split S`)
    stream: bool = False                        # inside a stream tile loop (`stream`, stream-K)
    by_warpgroup: bool = False                  # inside a `by warpgroup` tile loop (§15f)
    steps_vars: tuple = ()                      # the enclosing steps loops' indices, outermost first
    loaded: set = field(default_factory=set, compare=False)  # fields a produce block fills
    accs: dict = field(default_factory=dict, compare=False)  # the role's accumulators (sema/mma.py)
    slots: tuple = ()                           # every open produce/consume block, outermost first
    rows: dict = field(default_factory=dict, compare=False)  # the role's row registers (sema/rows.py)


def check_local(info: KernelInfo, scope: Scope, name: str, span) -> None:
    """Loop indices and slots may not shadow anything: one name, one meaning, in sema and codegen."""
    if name in info.symbols or name in info.dims or name in scope.ints:
        what = "a loop index" if name in scope.ints else ("a dimension" if name in info.dims else "declared")
        raise error("E017", f"'{name}' is already {what}; pick another name", span)


def open_slot(scope: Scope, name: str):
    """(pipeline, producing) of the innermost open block whose slot is `name`, else None."""
    for slot, pipe, producing in reversed(scope.slots):
        if slot == name:
            return pipe, producing
    return None


def tile_ref(info: KernelInfo, ref: ast.Ref, scope: Scope, pair_ok: bool = False,
              strided_ok: bool = False) -> Box:
    """The box shape of a shared-memory tile: `slot.field` or an smem buffer. A pair box's tile is
    only loaded or read by the pair's MMA (`pair_ok`); a strided box's tile only by loads, stores
    and tile math (`strided_ok`), which see it as its dense `tile_shape`."""
    box = tile_box(info, ref, scope)
    if not pair_ok:
        pairs.check_pair_tile(box, ref.span)
    if box.strided and not strided_ok:
        raise error("E025", f"'{ref.text()}' holds box '{box.name}', which has element strides "
                    f"{box.strides}: only loads, stores and tile math use a strided tile", ref.span,
                    "the tensor cores, row math and epilogues read a tile of the box's full shape")
    return box


def tile_box(info: KernelInfo, ref: ast.Ref, scope: Scope) -> Box:
    if ref.block is not None:
        raise error("E093", f"'{ref.text()}': only an accumulator read in an epilogue takes a block index",
                    ref.span, "tiles are read whole; e.g. cs = bf16(acc[0, 1]) reads block (0, 1) of acc")
    if ref.field is not None:
        found = open_slot(scope, ref.name)
        if found is None:
            raise error("E012", f"no pipeline slot named '{ref.name}' here", ref.span)
        pipe = found[0]
        box = pipe.fields.get(ref.field)
        if box is None:
            raise error("E031", f"pipeline '{pipe.name}' has no field '{ref.field}'", ref.span,
                        f"fields: {', '.join(pipe.fields)}")
        return box
    buffer = info.lookup(ref, SmemBuffer, what="smem buffer")
    if buffer.stages and not getattr(ref, "staging", False):
        raise error("E591", f"'{buffer.name}' holds the staging tiles of a staged store, which only its "
                    "`store ... through` uses", ref.span, "the compiler owns them: it writes, stores and reuses "
                    "them in an order it derives (§13h); declare a plain `smem` buffer for other uses")
    buffer.users.setdefault(scope.role.name, ref.span)
    return buffer.box


def check_operation(e) -> None:
    """The operator or function of one tile-math node is one tile math knows."""
    if isinstance(e, ast.BinOp) and e.op in "&%":
        raise error("E081", f"'{e.op}' is not a tile operation", e.span,
                    "tile math knows + - * /, unary -, max, min and casts")
    if isinstance(e, ast.Call):
        arity = TILE_FUNCTIONS.get(e.func)
        if arity is None:
            raise error("E081", f"unknown function '{e.func}'", e.span,
                        "tile math knows max, min and casts named by dtype, e.g. f16(x)")
        if len(e.args) != arity:
            raise error("E082", f"'{e.func}' takes {arity} argument(s), got {len(e.args)}", e.span)
        if arity == 1 and e.func not in TILE_MATH_DTYPES:
            raise error("E080", f"cast to {e.func} is not supported in tile math", e.span)


def tile_expr_functions(e) -> None:
    """Check every operator and call of an expression (shapes are checked by the caller)."""
    check_operation(e)
    for child in {ast.BinOp: lambda: [e.lhs, e.rhs], ast.Neg: lambda: [e.operand],
                  ast.Call: lambda: e.args}.get(type(e), list)():
        tile_expr_functions(child)


def int_expr(info: KernelInfo, e, scope: Scope) -> None:
    if isinstance(e, ast.Number):
        if not isinstance(e.value, int):
            raise error("E066", "an index must be an integer", e.span)
    elif isinstance(e, ast.Ref):
        if e.block is not None:
            element_read(info, e, scope)
        elif e.name == CLUSTER and e.field is not None:
            check_cluster_coordinate(e)
        elif e.field is not None or (e.name not in scope.ints and not is_int_param(info, e.name)):
            raise error("E066", f"unknown integer variable '{e.text()}'", e.span,
                        f"in scope: {', '.join(sorted(scope.ints)) or 'none'}")
    elif isinstance(e, ast.BinOp):
        int_expr(info, e.lhs, scope)
        int_expr(info, e.rhs, scope)
        if e.op in "/%" and isinstance(e.rhs, ast.Number) and e.rhs.value == 0:
            raise error("E077", "division by zero", e.rhs.span)
    elif isinstance(e, ast.Neg):
        int_expr(info, e.operand, scope)
    elif isinstance(e, ast.Call) and e.func in ("min", "max"):
        if len(e.args) != 2:
            raise error("E082", f"'{e.func}' takes 2 arguments, got {len(e.args)}", e.span)
        for arg in e.args:
            int_expr(info, arg, scope)
    else:
        raise error("E066", f"'{e.func}' is not an index function; index expressions call min and max",
                    e.span)


READ_DTYPE = "i32"   # an element read is a signed 32-bit index, as every index expression is


def element_read(info: KernelInfo, e: ast.Ref, scope: Scope) -> None:
    """`t[i]`: element i of a 1-D i32 tensor parameter, read from global memory where the
    expression is evaluated (§18). The kernel must not write t (E496): every read of t[i] then
    sees one value, so two roles that compute a loop's extent from it agree on its trips."""
    tensor = info.symbols.get(e.name)
    if not isinstance(tensor, Tensor) or e.field is not None:
        raise error("E066", f"'{e.text()}' is not an integer variable", e.span,
                    "an index expression reads `t[i]` of a 1-D i32 tensor parameter t")
    if len(tensor.shape) != 1 or tensor.dtype.name != READ_DTYPE or len(e.block) != 1:
        shape = ", ".join(map(str, tensor.shape))
        raise error("E600", f"'{e.text()}' reads {tensor.dtype.name}[{shape}] at {len(e.block)} position(s); "
                    f"an index expression reads one element of a 1-D {READ_DTYPE} tensor", e.span,
                    f"declare it `{e.name}: {READ_DTYPE}[N]` and read `{e.name}[i]`")
    int_expr(info, e.block[0], scope)
    tensor.read = True
    info.index_tensors.setdefault(e.name, e.span)


CLUSTER = "cluster"                               # `cluster.rank`, `cluster.x`, `cluster.y` (§18)
CLUSTER_COORDINATES = ("rank", "x", "y")


def check_cluster_coordinate(e: ast.Ref) -> None:
    if e.field not in CLUSTER_COORDINATES:
        raise error("E465", f"'{e.text()}' is not a cluster coordinate", e.span,
                    "the CTA's place in its cluster is cluster.rank, cluster.x (along the first tile index) "
                    "or cluster.y (along the second)")


def is_int_param(info: KernelInfo, name: str) -> bool:
    found = info.symbols.get(name)
    if isinstance(found, Scalar):
        return found.dtype.kind in ("int", "uint")
    return name in info.dims


def mentions(e, name: str) -> bool:
    """Whether index expression `e` uses the name (or `cluster.x` and the like) `name`."""
    if isinstance(e, ast.Ref):   # a name, or `cluster.x`; `idx[p]` (gathered rows) mentions what p does
        return any(mentions(c, name) for c in e.block) if e.block else e.text() == name
    return any(mentions(c, name) for c in {ast.BinOp: lambda: [e.lhs, e.rhs], ast.Neg: lambda: [e.operand],
                                           ast.Call: lambda: e.args}.get(type(e), list)())
