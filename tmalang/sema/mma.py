"""Tensor-core statements: register accumulators, `mma`, and epilogues that read accumulators.

Hardware rules (PTX ISA, wgmma): a warpgroup is 4 consecutive warps starting at a multiple of
4, and each wgmma computes a 64-row slice, so an accumulator of R rows needs R / 64 warpgroups
in its role (rounded up for a short accumulator, R a multiple of 8); N is a multiple of 8 up to
256; f16/bf16 operands take K in steps of 16. Both
operands are read K-major from swizzled smem tiles whose rows are one swizzle span, the layout a
TMA box of [rows, 64 x bf16] with `swizzle 128B` produces, or whole spans, the panels of a panelled
box (§4); with `kn`, b is read MN-major: a [K, 64·P] f16/bf16 tile, 128B-swizzled, as TMA
writes V [seq, d]; with `km`, a likewise ([K, R], warpgroup g reading its 64 columns, panel g).
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma
from . import tcgen05
from .declarations import Box, KernelInfo, Scalar
from .operands import Accumulator, block_index, check_operand
from .scope import check_local, tile_expr_functions, tile_ref

ACC_DTYPES = ("f32", "bf16", "f16")
FRAGMENT_DTYPES = ("bf16", "f16")   # a 16-bit accumulator: a register A fragment, written by row math
MN_MAJOR_DTYPES = ("bf16", "f16")   # wgmma's imm-trans exists in the .f16/.bf16 forms only (ISA 9.7.15.5.2)


def declare(info: KernelInfo, s: ast.AccumulatorDecl, scope) -> None:
    if scope.pipeline is not None or scope.elected or scope.nest:
        raise error("E084", "declare accumulators at the top of a role, outside loops and blocks", s.span)
    check_local(info, scope, s.name, s.span)
    if s.name in scope.accs:
        raise error("E017", f"'{s.name}' is already an accumulator of this role", s.span)
    if s.dtype.name not in ACC_DTYPES:
        raise error("E085", f"accumulators hold {', '.join(ACC_DTYPES)}; got {s.dtype.name}", s.dtype.span)
    role = scope.role
    if len(s.shape) != 2:
        raise error("E087", f"an accumulator is a 2-D tile, got rank {len(s.shape)}", s.span)
    rows, cols = s.shape
    if role.first_warp % 4 or role.warps % 4:
        raise error("E086", f"role '{role.name}' (warps {role.first_warp}..{role.last_warp}) is not whole "
                    "warpgroups; tensor-core MMA is issued by warpgroups", role.decl.warps_span,
                    "a warpgroup is 4 consecutive warps starting at a multiple of 4")
    parts = _column_parts(s, role) if s.by_columns is not None else 1
    if parts > 1 and s.dtype.name in FRAGMENT_DTYPES:
        raise error("E085", f"a {s.dtype.name} accumulator is a register A operand, a warpgroup's own rows; it "
                    "cannot be split by columns", s.by_columns)
    if parts == 1 and not _short(rows, role, s) and rows != 64 * role.tile_warpgroups:
        holds = ("walks its tiles by warpgroup (each warpgroup holds a tile's accumulator alone)" if role.by_warpgroup
                 else f"has {role.warps // 4} warpgroup(s)")
        raise error("E087", f"accumulator rows must be 64 per warpgroup: role '{role.name}' {holds}, so "
                    f"{64 * role.tile_warpgroups} rows, not {rows}", s.span)
    if cols % (8 * parts) or not 8 <= cols // parts <= 256:
        each = f" per warpgroup (the {parts} warpgroups split {cols})" if parts > 1 else ""
        raise error("E087", f"accumulator columns must be a multiple of 8 in 8..256{each}, got {cols // parts}",
                    s.span)
    acc = Accumulator(s.name, s.dtype.name, list(s.shape), role, s.span, parts)
    scope.accs[s.name] = acc
    info.accumulators[(role.name, s.name)] = acc


def _short(rows: int, role, s: ast.AccumulatorDecl) -> bool:
    """A short accumulator: R rows, a multiple of 8 but not of 64, for an M that is not whole
    wgmma tiles (a decode GEMM's 1..32 rows, 77 rows in two warpgroups): warpgroup g holds rows
    64g .. up to R - 1, so its A tile has R rows, TMA loads no rows past the tensor's end, and
    the epilogue writes those rows only. The last warpgroup's wgmma still computes 64 rows; the
    rows past R read the A slot's spare footprint (plan_smem) and are never written out
    (language.md §15, short accumulators)."""
    if not (rows > 0 and rows % 8 == 0 and rows % 64):
        return False
    need = -(-rows // 64)
    if role.warps != 4 * need or role.by_warpgroup or s.dtype.name != "f32":
        raise error("E087", f"an accumulator of {rows} rows (the last warpgroup's short of wgmma's 64) is an f32 "
                    f"tile of a role of {need} warpgroup(s); role '{role.name}' has {role.warps // 4}"
                    + (" walked by warpgroup" if role.by_warpgroup else "")
                    + ("" if s.dtype.name == "f32" else f" and '{s.name}' is {s.dtype.name}"), s.span,
                    f"give the role {need} warpgroup(s), or make the rows a multiple of 64")
    return True


def _column_parts(s: ast.AccumulatorDecl, role) -> int:
    """`by columns`: 64 rows, every warpgroup of the role holding its share of the columns, so
    that warpgroups multiply the same A by different parts of B (dQ = dS·K in attention's
    backward, where both warpgroups need all of dS's rows)."""
    if role.by_warpgroup:
        raise error("E087", f"'by columns' splits an accumulator over the role's warpgroups; role '{role.name}' "
                    "walks its tiles by warpgroup, each holding its tile alone", s.by_columns)
    if s.shape[0] != 64:
        raise error("E087", f"an accumulator split by columns has 64 rows (one wgmma M), not {s.shape[0]}", s.span)
    return role.warps // 4


def lookup(scope, ref: ast.Ref) -> Accumulator:
    acc = scope.accs.get(ref.name) if ref.field is None else None
    if acc is None:
        raise error("E013", f"'{ref.text()}' is not an accumulator of role '{scope.role.name}'", ref.span)
    return acc


def check_mma(info: KernelInfo, s: ast.Mma, scope) -> None:
    shape = tcgen05.tmem_field(scope, s.acc)
    if shape is not None:
        if s.kn or s.km:
            raise error("E514", f"'{'kn' if s.kn else 'km'}' (an MN-major {'b' if s.kn else 'a'}) is a wgmma form; "
                        "tcgen05 mma reads K-major operands only", s.span,
                        f"store {'b as [N, K]' if s.kn else 'a as [M, K]'}, or accumulate in registers")
        return tcgen05.check_mma(info, s, scope, shape)
    acc = lookup(scope, s.acc)
    if acc.dtype != "f32":
        raise error("E085", f"mma accumulates in f32; '{acc.name}' is a {acc.dtype} accumulator, which holds an A "
                    "operand", s.acc.span, f"write it with row math ({acc.name} = {acc.dtype}(s)) and read it as "
                    f"mma's A: mma o, {acc.name}, b")
    if scope.elected:
        raise error("E083", "mma inside elect: wgmma is issued by whole warpgroups", s.span)
    info.wgmma_sites.append(s.span)
    fragment = _names_accumulator(s.a, scope)
    if fragment or isinstance(s.a, ast.Call):
        if s.km:
            raise error("E088", "an A operand from registers cannot be MN-major ('km')", s.a.span,
                        "wgmma's imm-trans-a exists only for an A read from shared memory")
        a_dtype, a_shape = (_fragment_operand if fragment else _register_operand)(s.a, acc, scope)
    else:
        a = tile_ref(info, s.a, scope)
        if s.km:
            if acc.shape[0] % 64:
                raise error("E088", f"'km' reads a's 64 rows from one MN-major panel; '{acc.name}' has "
                            f"{acc.shape[0]} rows", s.span, "store a K-major ([M, K]) for a short accumulator")
            _check_mn_major(s.a, a, "a", "km")
            a_dtype, a_shape = a.dtype.name, a.matrix[::-1]     # stored [K, R]: the operand is its transpose
        else:
            check_operand(s.a, a, panelled=True)
            a_dtype, a_shape = a.dtype.name, a.matrix
    b = tile_ref(info, s.b, scope)
    if s.kn:
        return _check_kn(s, acc, a_dtype, a_shape, b)
    check_operand(s.b, b, panelled=True)
    if a_dtype != b.dtype.name:
        raise error("E088", f"mma operands differ in dtype: {a_dtype} and {b.dtype.name}", s.span)
    rows, cols = acc.shape
    if a_shape[0] != rows or b.matrix[0] != cols:
        raise error("E088", f"mma shapes do not fit: acc is [{rows}, {cols}], a is {a_shape}, b is {b.matrix}",
                    s.span, "a must be [acc rows, K] and b [acc columns, K] (acc += a · bᵀ)")
    if a_shape[1] != b.matrix[1]:
        raise error("E088", f"mma operands disagree on K: {a_shape[1]} and {b.matrix[1]}", s.span)


def _check_kn(s: ast.Mma, acc: Accumulator, a_dtype: str, a_shape: list[int], b: Box) -> None:
    """`mma acc, a, b kn`: b is [K, N], N innermost, read through an MN-major descriptor with
    imm-trans-b = 1 (wgmma.MNMajorTile). imm-trans exists for f16/bf16 only, and v1 encodes the
    128B swizzle only, so b's rows are 128 bytes, or whole 128-byte panels of a panelled box (§4):
    N = 64·P, one 64-element N column per panel, LBO bytes apart."""
    _check_mn_major(s.b, b, "b", "kn")
    k, n = b.matrix
    each = n // acc.parts
    if acc.parts > 1 and each % 64 and 64 % each:
        raise error("E512", f"an MN-major b read by {acc.parts} warpgroups of a column-split accumulator: each reads "
                    f"{each} columns, which cross a 64-element panel", s.b.span,
                    "split the columns into parts that divide 64 or are whole panels, or store b K-major")
    if a_dtype != b.dtype.name:
        raise error("E088", f"mma operands differ in dtype: {a_dtype} and {b.dtype.name}", s.span)
    rows, cols = acc.shape
    if a_shape[0] != rows or n != cols or a_shape[1] != k:
        raise error("E512", f"mma shapes do not fit: acc is [{rows}, {cols}], a is {a_shape}, b (kn) is {b.matrix}",
                    s.span, "with 'kn', a is [acc rows, K] and b [K, acc columns] (acc += a · b)")


def _check_mn_major(ref: ast.Ref, tile: Box, operand: str, word: str) -> None:
    """An MN-major operand (`b kn`, `a km`): a [K, MN] tile, MN innermost, read with imm-trans = 1
    through wgmma.MNMajorTile. imm-trans exists for f16/bf16 only, and v1 encodes the 128B
    swizzle only, so the rows are whole 128-byte spans: one 64-element MN column per span (panel)."""
    if tile.dtype.name not in MN_MAJOR_DTYPES:
        raise error("E511", f"an MN-major ('{word}') {operand} must be {' or '.join(MN_MAJOR_DTYPES)}; "
                    f"'{ref.text()}' is {tile.dtype.name}", ref.span,
                    "wgmma transposes 16-bit operands only: store other types K-major")
    if len(tile.matrix) != 2 or tile.swizzle != "128B" or tile.matrix[1] * tile.dtype.itemsize % 128:
        raise error("E510", f"an MN-major ('{word}') {operand} must be a 2-D [K, {'N' if operand == 'b' else 'M'}] "
                    f"tile with swizzle 128B and rows of whole 128-byte spans; '{ref.text()}' is "
                    f"{tile.dtype.name}{tile.matrix} swizzle {tile.swizzle}", ref.span,
                    f"e.g. box V = v[K, {128 // tile.dtype.itemsize}] swizzle 128B, or a panelled "
                    f"v[K, {256 // tile.dtype.itemsize}] swizzle 128B")
    if tile.matrix[0] % 16:
        raise error("E513", f"an MN-major {operand} has K = {tile.matrix[0]} rows; wgmma consumes them 16 at a time",
                    ref.span)


def _names_accumulator(a, scope) -> bool:
    return isinstance(a, ast.Ref) and a.field is None and a.block is None and a.name in scope.accs


def _fragment_operand(ref: ast.Ref, acc: Accumulator, scope) -> tuple[str, list[int]]:
    """`mma acc, p, b` with p a bf16/f16 accumulator: its registers are the A fragment as they lie,
    converted when row math wrote them (`p = bf16(s)`), so s's f32 registers are free before the
    mma that reads p is issued."""
    p = lookup(scope, ref)
    if p.dtype not in FRAGMENT_DTYPES:
        raise error("E088", f"accumulator '{p.name}' holds f32; an A operand from registers is 16 or 8 bits",
                    ref.span, f"convert it: mma {acc.name}, bf16({p.name}), ...; or keep it converted in a bf16 "
                    f"accumulator written by row math")
    return _register_a(p, acc, p.dtype, ref.span)


REGISTER_A_DTYPES = {"bf16": 16, "f16": 16, "f8e4m3": 32, "f8e5m2": 32}   # the cast -> K of one wgmma


def _register_operand(call: ast.Call, acc: Accumulator, scope) -> tuple[str, list[int]]:
    """`bf16(p)` / `f16(p)` / `f8e4m3(p)` / `f8e5m2(p)` as the A operand: accumulator p of this
    role, converted in registers. A 16-bit fragment is wgmma's A fragment as it lies (16 columns
    per K step); an fp8 one is regrouped across each quad of threads (32 columns per K step)."""
    if call.func not in REGISTER_A_DTYPES or len(call.args) != 1 or not isinstance(call.args[0], ast.Ref):
        raise error("E088", f"'{call.func}(...)' cannot be an mma operand", call.span,
                    "A from registers is bf16(p), f16(p), f8e4m3(p) or f8e5m2(p), p an accumulator of this role")
    p = lookup(scope, call.args[0])
    if p.dtype != "f32":
        raise error("E088", f"accumulator '{p.name}' already holds {p.dtype}", call.span,
                    f"read it as it is: mma {acc.name}, {p.name}, ...")
    if p.parts > 1:
        raise error("E553", f"accumulator '{p.name}' is split by columns over {p.parts} warpgroups; a register A "
                    "operand is a warpgroup's own rows", call.span)
    return _register_a(p, acc, call.func, call.span)


def _register_a(p: Accumulator, acc: Accumulator, dtype: str, span) -> tuple[str, list[int]]:
    """What both register-A forms need of p: not the accumulator it feeds, and K (its columns) a
    multiple of one wgmma's K in `dtype`."""
    if p.name == acc.name:
        raise error("E088", f"mma reads and writes accumulator '{acc.name}'", span)
    if p.shape[0] % 64 or acc.shape[0] % 64:
        raise error("E088", "an A operand from registers feeds an accumulator of 64 rows per warpgroup; "
                    f"'{p.name}' has {p.shape[0]} and '{acc.name}' {acc.shape[0]}", span,
                    "short accumulators (rows not a multiple of 64) take their A from shared memory")
    k_step = REGISTER_A_DTYPES[dtype]
    if p.shape[1] % k_step:
        raise error("E088", f"accumulator '{p.name}' has {p.shape[1]} columns; as a {dtype} mma operand they "
                    f"are K, a multiple of {k_step}", span)
    return dtype, p.shape


def check_acc_assign(info: KernelInfo, s: ast.Assign, scope) -> bool:
    """`acc = 0` and `tile = f(acc, scalars)`; False when the statement involves no accumulator."""
    if s.target.field is None and s.target.name in scope.accs:
        return True       # `acc = 0`; anything else assigned to an accumulator is row math (sema/rows.py)
    if tcgen05.tmem_field(scope, s.target) is not None:
        if isinstance(s.value, ast.Ref):
            tcgen05.check_copy(info, s, scope, tcgen05.tmem_field(scope, s.target))
        else:
            tcgen05.check_zero(s, scope)
        return True

    def is_acc(r: ast.Ref) -> bool:
        return (r.field is None and r.name in scope.accs) or tcgen05.tmem_field(scope, r) is not None

    accs = [r for r in ast.refs(s.value) if is_acc(r)]
    if not accs:
        return False
    if accs[0].field is not None:
        acc = tcgen05.check_epilogue(info, s, scope, accs[0], tcgen05.tmem_field(scope, accs[0]))
    else:
        acc = scope.accs[accs[0].name]
        if acc.dtype != "f32":
            raise error("E085", f"'{acc.name}' is a {acc.dtype} accumulator, an mma A operand; an epilogue reads f32 "
                        "accumulators", accs[0].span)
    target = tile_ref(info, s.target, scope)
    if scope.elected:
        raise error("E083", "an epilogue inside elect runs on one thread, which holds only its fragment", s.span)
    if scope.producing and s.target.name == scope.slot:
        scope.loaded.add(s.target.field)        # the epilogue fills this field of the slot
    if accs[0].block is not None:
        if acc.parts > 1:
            raise error("E093", f"'{accs[0].text()}': accumulator '{acc.name}' is split by columns; an epilogue "
                        "reads it whole", accs[0].span)
        _check_block(accs[0], acc, target)
    elif target.matrix != acc.shape:
        raise error("E067", f"tile {s.target.text()} has shape {target.matrix}, accumulator '{acc.name}' has "
                    f"{acc.shape}", s.target.span, f"to write it in parts, read a block: {acc.name}[0, j]")
    span = tma.SWIZZLES[target.swizzle].span
    if span is not None and target.matrix[-1] * target.dtype.itemsize % span:
        raise error("E089", f"an epilogue into a tile with swizzle {target.swizzle} needs rows of whole "
                    f"{span}-byte spans; '{s.target.text()}' has {target.matrix[-1] * target.dtype.itemsize}",
                    s.target.span, "cut the accumulator into column blocks, e.g. cs = bf16(acc[0, j]) into "
                    f"[{target.matrix[0]}, {span // target.dtype.itemsize}] tiles")
    if target.dtype.name not in ("f32", "f16", "bf16"):
        raise error("E080", f"an epilogue writes f32, f16 or bf16 tiles; '{s.target.text()}' is "
                    f"{target.dtype.name}", s.target.span)
    for r in ast.refs(s.value):
        if is_acc(r):
            if (r.name, r.field) != (accs[0].name, accs[0].field) or (r.block is None) != (accs[0].block is None) \
                    or (r.block is not None and block_index(r) != block_index(accs[0])):
                raise error("E067", "an epilogue reads one accumulator, or one block of it", r.span)
        elif r.field is None and r.block is None and r.name in scope.rows:
            continue    # a row register of a fragment role (sema/rows.py): one value per row
        elif r.block is not None or r.field is not None or not isinstance(info.symbols.get(r.name), Scalar):
            _check_epilogue_tile(info, r, scope, target)
    tile_expr_functions(s.value)
    return True


def _check_block(ref: ast.Ref, acc: Accumulator, target: Box) -> None:
    """`acc[0, j]`: columns j·Ct .. (j+1)·Ct − 1 of the accumulator, all of its rows, where the
    target is [R, Ct]. Rows stay whole because each warpgroup holds its own 64 of them."""
    rows, cols = acc.shape
    if len(ref.block) != 2 or not all(isinstance(c, ast.Number) and isinstance(c.value, int) for c in ref.block):
        raise error("E093", f"'{ref.text()}': an accumulator block index is two integer literals", ref.span,
                    f"e.g. {acc.name}[0, 1]")
    if len(target.matrix) != 2 or target.matrix[0] != rows or cols % target.matrix[1] or target.matrix[1] % 8:
        raise error("E067", f"target {target.matrix} does not cut accumulator '{acc.name}' {acc.shape} into "
                    "column blocks", ref.span, f"a block of {acc.name} is [{rows}, C] with C a multiple of 8 "
                    f"that divides {cols}")
    i, j = block_index(ref)
    if i != 0 or j >= cols // target.matrix[1]:
        raise error("E093", f"block ({i}, {j}) is outside accumulator '{acc.name}' cut in {target.matrix} blocks",
                    ref.span, f"blocks are (0, 0) .. (0, {cols // target.matrix[1] - 1})")


def _check_epilogue_tile(info: KernelInfo, ref: ast.Ref, scope, target: Box) -> None:
    """An smem tile in an epilogue: a row vector [C] broadcast over the rows (a bias), or a tile
    of the target's shape (a residual), unswizzled, in a dtype tile math reads."""
    tile = tile_ref(info, ref, scope)
    rows, cols = target.matrix
    if tile.matrix not in ([cols], [rows, cols]) or tile.swizzle != "none":
        raise error("E067", f"'{ref.text()}' ({tile.dtype.name}{tile.shape}) cannot join the epilogue into "
                    f"[{rows}, {cols}]", ref.span,
                    f"an epilogue reads a row vector [{cols}] (broadcast over rows) or an "
                    f"unswizzled [{rows}, {cols}] tile, scalars and numbers")
    if tile.dtype.name not in ("f32", "f16", "bf16"):
        raise error("E080", f"an epilogue reads f32, f16 or bf16 tiles; '{ref.text()}' is {tile.dtype.name}", ref.span)
