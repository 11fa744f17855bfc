"""Row math in sema: one-warpgroup roles computing over Tensor Memory rows in registers.

tcgen05.ld.32x32b gives thread t of a warpgroup lane (row) t of a Tensor Memory tile, so a
softmax needs no shuffles: a row's max and sum are one thread's loop. The language names this
layout directly. `row m: f32` declares one register per row, `row s: f32[64]` sixty-four; an
assignment computes over the thread's row:

    s = mask_cols(u.s, T - 64 * j) * scale     a tmem tile's row, keys at or past T masked
    m = max(m, rowmax(s))                      a row's max: one value per row
    p.p = bf16(exp2(s - m))                    into an smem tile's row (the MMA's A operand)
    t.o = t.o * f.x                            tcgen05.st back into Tensor Memory

Every value has a row shape: UNIFORM (scalars and constants), ROW (one value per row) or a
column count N. Operands broadcast towards the wider shape; two different column counts do not
mix (E067). rowmax/rowsum take N columns to ROW; a one-column tmem tile is ROW.

On sm_90a the rows are those of wgmma accumulators (a *fragment role*: one that declares
register accumulators, whole warpgroups). An accumulator `acc: f32[R, N]` is the N-column row
value, a `row m: f32` register holds one value per accumulator row, an unswizzled [C] smem tile
is a column vector (one value per column, as each query's LSE in attention's backward, whose
queries are the columns of Sᵀ), and row math writes
accumulators (`s = exp2(s - m)`, `o = o * exp2(m - mj)`), row registers, or a row vector in
smem (`ls = m + log2(l)`: one element per row). The four threads that share a row combine
their partial rowmax/rowsum with shuffles (backend/fragment_codegen.py).
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from . import tcgen05
from .declarations import KernelInfo, Scalar, SmemBuffer
from .scope import check_local, int_expr, tile_ref

UNIFORM, ROW = -1, 0
ROW_LANES = 128
ELEMENTWISE = {"exp2": 1, "log2": 1, "max": 2, "min": 2, "f32": 1, "bf16": 1, "f16": 1}
REDUCTIONS = ("rowmax", "rowsum")
MASKS = ("mask_cols", "mask_above", "mask_below", "mask_left")


def fragment_role(role) -> bool:
    """A role whose rows are wgmma accumulator rows (it declares register accumulators)."""
    return any(isinstance(x, ast.AccumulatorDecl) for x in ast.statements(role.decl.body))


def declare(info: KernelInfo, d: ast.RowDecl, scope) -> None:
    if fragment_role(scope.role):
        if d.cols is not None:
            raise error("E535", f"a row register with columns in role '{scope.role.name}', whose rows are "
                        "wgmma accumulator rows", d.span, f"declare an accumulator f32[R, {d.cols}] instead: "
                        "it is the N-column row value of these rows")
    else:
        _check_warpgroup(scope.role, d.span)
    if d.dtype.name != "f32":
        raise error("E080", f"row registers hold f32, not {d.dtype.name}", d.dtype.span,
                    "convert on the way out, e.g. p.p = bf16(s)")
    if d.cols is not None and not 1 <= d.cols <= 256:
        raise error("E095", f"a row of {d.cols} registers: expected 1..256", d.span)
    check_local(info, scope, d.name, d.span)
    if d.name in scope.rows:
        raise error("E017", f"row register '{d.name}' is declared twice", d.span)
    if scope.pipeline is not None or scope.in_loop or scope.elected:
        raise error("E084", "row registers are declared at the top of their role", d.span)
    scope.rows[d.name] = d.cols or ROW


def is_row_math(info: KernelInfo, s: ast.Assign, scope) -> bool:
    """Row math: it writes or reads a row register, or a whole Tensor Memory tile outside an MMA role
    (a block read `t.d[0, j]` is the GEMM epilogue; `t.d = 0` in the MMA role zeroes)."""
    refs = [s.target, *ast.refs(s.value)]
    if fragment_role(scope.role):
        return _is_fragment_math(s, scope, refs)
    if any(r.field is None and r.name in scope.rows for r in refs):
        return True
    if is_tmem_copy(info, s, scope):
        return False
    return not issues_mma(scope.role.decl) and any(
        tcgen05.tmem_field(scope, r) is not None and r.block is None for r in refs)


def _is_fragment_math(s: ast.Assign, scope, refs) -> bool:
    """Row math over accumulator rows: into a row register, into an accumulator (anything but
    `acc = 0`), or a row vector into smem. A tile computed from an accumulator (and row
    registers) is an epilogue (sema/mma.py), as in every wgmma role."""
    target = s.target
    if target.field is None and target.name in scope.rows:
        return True
    if target.field is None and target.name in scope.accs:
        return not (isinstance(s.value, ast.Number) and s.value.value == 0)
    reads = [r for r in refs[1:] if r.field is None]
    if _reduces(s.value):
        return True       # one value per row, into a row vector: `r.d = rowmax(...)`
    return any(r.name in scope.rows for r in reads) and not any(r.name in scope.accs for r in reads)


def _reduces(e) -> bool:
    """Whether an expression reduces rows (rowmax/rowsum): its value is one per row."""
    if isinstance(e, ast.Call):
        return e.func in REDUCTIONS or any(_reduces(a) for a in e.args)
    if isinstance(e, ast.BinOp):
        return _reduces(e.lhs) or _reduces(e.rhs)
    if isinstance(e, ast.Neg):
        return _reduces(e.operand)
    return False


def is_tmem_copy(info: KernelInfo, s: ast.Assign, scope) -> bool:
    """`t.d = tile` or `t.d[0, j] = tile`: a tcgen05.cp of an smem tile (a slot field or an smem
    buffer) into Tensor Memory (§15b), in whatever role it stands. Row math never reads smem
    tiles, so this is not row math even outside an MMA role."""
    value = s.value
    if tcgen05.tmem_field(scope, s.target) is None or not isinstance(value, ast.Ref) or value.block is not None:
        return False
    if value.field is not None:
        return tcgen05.tmem_field(scope, value) is None
    return value.name not in scope.rows and isinstance(info.symbols.get(value.name), SmemBuffer)


def issues_mma(role_decl: ast.RoleDecl) -> bool:
    return any(isinstance(x, ast.Mma) for x in ast.statements(role_decl.body))


def check_assign(info: KernelInfo, s: ast.Assign, scope) -> None:
    if not fragment_role(scope.role):
        _check_warpgroup(scope.role, s.span)
    if scope.elected:
        raise error("E083", "row math inside elect runs on one thread, which holds only its row", s.span)
    width = _target_width(info, s.target, scope)
    # into a row register, an smem [R] tile is a row vector: one value per row (§15d)
    per_row = fragment_role(scope.role) and s.target.field is None and s.target.name in scope.rows
    value = shape_of(info, s.value, scope, per_row)
    if value > ROW and value != width:
        what = "a row register holding one value" if width == ROW else f"{width} columns per row"
        raise error("E067", f"the value has {value} columns per row but the target is {what}", s.value.span,
                    "reduce it with rowmax(...) or rowsum(...)" if width == ROW else None)


def _target_width(info: KernelInfo, target: ast.Ref, scope) -> int:
    if target.block is not None:
        raise error("E093", f"'{target.text()}': row math writes whole rows", target.span)
    if target.field is None and target.name in scope.rows:
        return scope.rows[target.name]
    if target.field is None and target.name in scope.accs:
        return _row_accumulator(scope, target).shape[1]
    if fragment_role(scope.role):
        return _row_vector_width(info, target, scope)
    tmem = tcgen05.tmem_field(scope, target)
    if tmem is not None:
        _check_lanes(target, tmem)
        return _tmem_width(tmem)
    tile = tile_ref(info, target, scope)
    if len(tile.shape) != 2 or tile.shape[0] != ROW_LANES:
        raise error("E099", f"row math writes one row per thread: '{target.text()}' is {tile.shape}, not "
                    f"[{ROW_LANES}, N]", target.span)
    if tile.dtype.name not in ("f32", "f16", "bf16"):
        raise error("E080", f"row math writes f32, f16 or bf16 tiles; '{target.text()}' is {tile.dtype.name}",
                    target.span)
    if scope.producing and target.name == scope.slot:
        scope.loaded.add(target.field)
    return tile.shape[1]


def _row_vector_width(info: KernelInfo, target: ast.Ref, scope) -> int:
    """An smem target of fragment row math holds one value per accumulator row: [R] or [1, R]."""
    _row_vector(info, target, scope, "row math writes one value per accumulator row into smem",
                "a tile from an accumulator is an epilogue: read the accumulator in the value")
    if scope.producing and target.name == scope.slot:
        scope.loaded.add(target.field)
    return ROW


def _row_vector(info: KernelInfo, ref: ast.Ref, scope, what: str, hint: str | None = None) -> None:
    """An unswizzled f32/f16/bf16 [R] or [1, R] smem tile of the role's R accumulator rows: what
    row math writes one value per row into, and what a row register reads one value per row from."""
    tile = tile_ref(info, ref, scope)
    rows = 64 * scope.role.tile_warpgroups
    if [n for n in tile.matrix if n != 1] != [rows] or tile.swizzle != "none":
        raise error("E536", f"{what}: '{ref.text()}' is {tile.matrix} swizzle {tile.swizzle}, not an unswizzled "
                    f"[{rows}] or [1, {rows}]", ref.span, *([hint] if hint else []))
    if tile.dtype.name not in ("f32", "f16", "bf16"):
        raise error("E080", f"row math reads and writes f32, f16 or bf16 tiles; '{ref.text()}' is {tile.dtype.name}",
                    ref.span)


def shape_of(info: KernelInfo, e, scope, per_row: bool = False) -> int:
    """UNIFORM, ROW or a column count; raises on anything row math cannot compute. `per_row`:
    smem [R] tiles are row vectors (the statement writes a row register), not column vectors."""
    if isinstance(e, ast.Number):
        return UNIFORM
    if isinstance(e, ast.Ref):
        return _ref_shape(info, e, scope, per_row)
    if isinstance(e, ast.Neg):
        return shape_of(info, e.operand, scope, per_row)
    if isinstance(e, ast.BinOp):
        if e.op in "&%":
            raise error("E081", f"'{e.op}' is not a row operation", e.span, "row math knows + - * /")
        return _broadcast(e, [shape_of(info, x, scope, per_row) for x in (e.lhs, e.rhs)])
    return _call_shape(info, e, scope, per_row)


def _ref_shape(info: KernelInfo, e: ast.Ref, scope, per_row: bool = False) -> int:
    if e.field is None and e.block is None:
        if e.name in scope.rows:
            return scope.rows[e.name]
        found = info.symbols.get(e.name)
        if isinstance(found, Scalar):
            return UNIFORM
        if e.name in scope.ints or e.name in info.dims:
            raise error("E066", f"'{e.name}' is an integer index; row math takes it only as a mask's limit",
                        e.span)
        if e.name in scope.accs:
            return _read_accumulator(scope, e).shape[1]
    if e.field is None and e.name in scope.accs:
        raise error("E093", f"'{e.text()}': row math reads whole rows of an accumulator", e.span)
    if fragment_role(scope.role) and (e.field is not None or isinstance(info.symbols.get(e.name), SmemBuffer)):
        return _row_vector_source(info, e, scope) if per_row else _column_vector(info, e, scope)
    tmem = tcgen05.tmem_field(scope, e)
    if tmem is None:
        wide = "accumulators" if fragment_role(scope.role) else "Tensor Memory tiles"
        raise error("E067", f"row math reads {wide}, row registers and scalars; '{e.text()}' is none of them",
                    e.span)
    if e.block is not None:
        raise error("E093", f"'{e.text()}': row math reads whole rows of a Tensor Memory tile", e.span)
    _check_lanes(e, tmem)
    return _tmem_width(tmem)


def _row_accumulator(scope, ref: ast.Ref):
    """An accumulator row math reads or writes: split by rows, so that each row is one quad's."""
    acc = scope.accs[ref.name]
    if acc.parts > 1:
        raise error("E553", f"row math on '{ref.name}', whose columns are split over {acc.parts} warpgroups: a row's "
                    "values lie in several warpgroups", ref.span,
                    "row math works on accumulators split by rows (declared without 'by columns')")
    if acc.shape[0] % 64:
        raise error("E553", f"row math on '{ref.name}', a short accumulator of {acc.shape[0]} rows: its registers "
                    "hold wgmma's 64 rows, and row math does not yet tell its own rows from the rest", ref.span,
                    "declare the accumulator with 64 rows for row math")
    return acc


def _read_accumulator(scope, ref: ast.Ref):
    """An accumulator row math reads: f32. A bf16/f16 one holds an mma's A operand, packed two
    values per register; row math writes it (`p = bf16(s)`) and mma reads it."""
    acc = _row_accumulator(scope, ref)
    if acc.dtype != "f32":
        raise error("E085", f"row math reads f32 accumulators; '{ref.name}' is {acc.dtype}, an mma A operand",
                    ref.span, f"compute from the f32 accumulator that '{ref.name}' was converted from")
    return acc


def _row_vector_source(info: KernelInfo, ref: ast.Ref, scope) -> int:
    """An smem row vector read into a row register: one value per accumulator row (a window bound
    per query row, loaded with TMA)."""
    _row_vector(info, ref, scope, "a row register reads one value per accumulator row from smem")
    return ROW


def _column_vector(info: KernelInfo, ref: ast.Ref, scope) -> int:
    """An smem tile read by fragment row math: a column vector, one value per accumulator column,
    the same for every row (attention's backward reads each query's LSE this way, the queries being
    the columns of Sᵀ). An unswizzled [C] or [1, C] tile; its C columns meet accumulators of C."""
    tile = tile_ref(info, ref, scope)
    dims = list(tile.matrix)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    if len(dims) != 1 or tile.swizzle != "none":
        raise error("E067", f"row math reads accumulators, row registers, scalars and column vectors (unswizzled "
                    f"[C] tiles); '{ref.text()}' is {tile.matrix} swizzle {tile.swizzle}", ref.span,
                    "a column vector holds one value per accumulator column, the same for every row")
    if tile.dtype.name not in ("f32", "f16", "bf16"):
        raise error("E080", f"row math reads f32, f16 or bf16 tiles; '{ref.text()}' is {tile.dtype.name}", ref.span)
    if dims[0] % 8:
        raise error("E067", f"a column vector has as many columns as an accumulator, a multiple of 8; "
                    f"'{ref.text()}' has {dims[0]}", ref.span)
    return dims[0]


def _tmem_width(shape: list[int]) -> int:
    """A one-column tile holds one value per row."""
    return ROW if shape[1] == 1 else shape[1]


def _call_shape(info: KernelInfo, e: ast.Call, scope, per_row: bool = False) -> int:
    if e.func in MASKS:
        if len(e.args) != 2:
            raise error("E082", f"'{e.func}' takes 2 arguments, got {len(e.args)}", e.span)
        _mask_limit(info, e, scope)
        cols = shape_of(info, e.args[0], scope, per_row)
        if cols <= ROW:
            raise error("E067", f"{e.func} masks the columns of a row; its first argument has none", e.args[0].span)
        return cols
    arity = ELEMENTWISE.get(e.func, 1 if e.func in REDUCTIONS else None)
    if arity is None:
        raise error("E081", f"unknown function '{e.func}'", e.span,
                    f"row math knows {', '.join([*ELEMENTWISE, *REDUCTIONS, *MASKS])}")
    if len(e.args) != arity:
        raise error("E082", f"'{e.func}' takes {arity} argument(s), got {len(e.args)}", e.span)
    shapes = [shape_of(info, a, scope, per_row) for a in e.args]
    if e.func in REDUCTIONS:
        if shapes[0] <= ROW:
            raise error("E067", f"{e.func} reduces the columns of a row; its argument has one value per row",
                        e.args[0].span)
        return ROW
    return _broadcast(e, shapes)


def per_row_limit(limit, rows) -> tuple[str, object] | None:
    """A mask limit that differs per row: a row register `r`, or `r + n` / `r - n` with n an
    integer index expression; (register, the rest) with the rest None, ('+', n) or ('-', n)."""
    if _row_register(limit, rows):
        return limit.name, None
    if isinstance(limit, ast.BinOp) and limit.op in "+-" and _row_register(limit.lhs, rows):
        return limit.lhs.name, (limit.op, limit.rhs)
    return None


def _row_register(e, rows) -> bool:
    return isinstance(e, ast.Ref) and e.field is None and e.block is None and e.name in rows


def _mask_limit(info: KernelInfo, e: ast.Call, scope) -> None:
    """A mask's limit: an integer index expression (§18), the same for every row, or a row
    register plus or minus one (each row its own limit, its value taken as an integer)."""
    limit = e.args[1]
    per_row = per_row_limit(limit, scope.rows)
    if per_row is None:
        int_expr(info, limit, scope)
        return
    name, rest = per_row
    if scope.rows[name] != ROW:
        raise error("E067", f"a mask's limit holds one value per row; '{name}' has {scope.rows[name]} columns",
                    limit.span)
    if rest is not None:
        int_expr(info, rest[1], scope)


def _broadcast(e, shapes: list[int]) -> int:
    widths = {x for x in shapes if x > ROW}
    if len(widths) > 1:
        raise error("E067", f"row operands with {' and '.join(map(str, sorted(widths)))} columns do not mix",
                    e.span)
    return max(shapes)


def _check_lanes(ref: ast.Ref, shape: list[int]) -> None:
    if shape[0] != ROW_LANES:
        raise error("E099", f"'{ref.text()}' has {shape[0]} lanes; row math reads and writes 128-lane tiles, "
                    "one thread per lane", ref.span)


def _check_warpgroup(role, span) -> None:
    if role.warps != 4 or role.first_warp % 4:
        raise error("E099", f"row math runs on one warpgroup, thread t on lane (row) t of Tensor Memory; role "
                    f"'{role.name}' is warps {role.first_warp}..{role.last_warp}", span,
                    "declare the role as 4 warps starting at a multiple of 4")
