"""Tensor-core ops → LLVM IR: accumulators as registers, wgmma as inline PTX, epilogues.

An accumulator is N/2 f32 values per thread (one wgmma m64nNk16 fragment); they are allocas
with constant indices, which LLVM promotes to registers. Warpgroup g of the role works on rows
64g .. 64g + 63: its A operand starts `row_block_offset(g)` bytes into the A tile. Descriptors
are built at run time from the tile's shared address (`descriptor_base | encode(address)`) and
advanced per K slice by adding the encoded byte offset. An MN-major B (`mma acc, a, b kn`) is
an `MNMajorTile` read with imm-trans-b = 1, an MN-major A (`a km`) one read with imm-trans-a = 1,
warpgroup g's 64 rows being its column (panel) g. All layout facts come from targets/wgmma/. A panelled
operand (language.md §4) needs nothing more: both tile layouts cut K (or N) into span-wide
columns rows × span bytes apart, which is where a panelled box's copies put its panels.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from ..ir import exprs as ex
from ..ir import ops
from ..targets import tma, wgmma
from ..targets.dtypes import DTYPES
from . import fp8_fragments, panel_codegen
from .conversions import f32_to_i32
from .tile_math import STORAGE

I32, I64, F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()


def _acc_decl(g, o: ops.AccDecl) -> None:
    """f32: one register per element the thread holds. bf16/f16 (an A fragment): one register per
    pair of them, as wgmma's register A packs it (register j: elements 2j, 2j + 1)."""
    if o.dtype == "f32":
        g.accumulators[o.symbol] = [g.alloca(f"{o.symbol}.{i}", F32) for i in range(o.shape[1] // o.parts // 2)]
    else:
        g.accumulators[o.symbol] = [g.alloca(f"{o.symbol}.{i}", I32) for i in range(o.shape[1] // 4)]
    g.accumulator_roles[o.symbol] = g.role.name
    g.accumulator_parts[o.symbol] = o.parts
    g.accumulator_dtypes[o.symbol] = o.dtype


def _pin_accumulators(g, pins: list[str]) -> None:
    """Pass every accumulator register of the role through an empty asm that claims to rewrite it.

    LLVM sees the accumulators as plain SSA values and would move the epilogue's reads above
    `wgmma.wait_group`, or the zeroing of `acc = 0` below `wgmma.fence`: nothing ties them to
    those asm statements. ptxas then finds ordinary instructions touching registers of an
    in-flight wgmma and serialises every wgmma of the kernel (C7514). Pinned after each wait
    and before each fence, reads depend on the wait and writes precede the fence. The asm is
    empty: no instruction reaches the SASS. A pin keeps the accumulator alive up to that point,
    so wait_wgmma_late names what each wait and fence needs pinned (`pins`): a wait, what the
    groups it retires wrote; a fence, what no group in flight uses (empty: every accumulator)."""
    for name, role in g.accumulator_roles.items():
        if role != g.role.name or (pins and name not in pins):
            continue
        for reg in g.accumulators[name]:
            kind = reg.type.pointee
            pin = ir.InlineAsm(ir.FunctionType(kind, [kind]), "", "=f,0" if kind == F32 else "=r,0", side_effect=True)
            g.b.store(g.b.call(pin, [g.b.load(reg)]), reg)


def _wgmma_fence(g, o: ops.WgmmaFence) -> None:
    _pin_accumulators(g, o.pins)
    g.asm(wgmma.FENCE, "", [])


def _wgmma_wait(g, o: ops.WgmmaWait) -> None:
    g.asm(wgmma.wait_group(o.pending), "", [])
    _pin_accumulators(g, o.pins)


def _acc_zero(g, o: ops.AccZero) -> None:
    for reg in g.accumulators[o.acc]:
        g.b.store(reg.type.pointee(0), reg)


def _warpgroup(g) -> ir.Value:
    """This thread's warpgroup index within its role (uniform across the warpgroup)."""
    return g.b.lshr(g.b.sub(g.tid, I32(32 * g.role.first_warp)), I32(7))


def _operand(g, ref: ex.BufferRef, row_block: ir.Value | None, mn_major: bool = False, block_rows: int = 64):
    """(tile layout, descriptor of the tile at its runtime address); `mn_major`: a [K, MN] tile
    (`b kn`, `a km`). `row_block`: which `block_rows` operand rows (MN) this warpgroup reads: its
    64 rows of A, or its columns of B under a `by columns` accumulator."""
    box = g.boxes[g.buffers[ref.name].box]
    layout = wgmma.MNMajorTile if mn_major else wgmma.KMajorTile
    rows, cols = tma.matrix_shape(box.shape)
    tile = layout(rows, cols, box.dtype, box.swizzle)
    address = g.address(ref)
    if row_block is not None:
        address = g.b.add(address, _block_offset(g, tile, row_block, block_rows, mn_major))
    encoded = g.b.lshr(g.b.and_(g.b.zext(g.here(address), I64), I64(wgmma.ENCODE_MASK)), I64(4))
    return tile, g.b.or_(encoded, I64(tile.descriptor_base()))



def _block_offset(g, tile, block: ir.Value, block_rows: int, mn_major: bool) -> ir.Value:
    """Bytes from an operand tile to its rows block·block_rows .. (MN rows: M of A, N of B).
    K-major: 8-row swizzle atoms, SBO bytes apart. MN-major: 64 rows are one 64-element column
    (a panel), column_bytes apart; a block that divides 64 starts inside a panel, whole 16-byte
    chunks on (the swizzle is a function of the absolute address, as for K steps inside a span)."""
    if not mn_major:
        return g.b.mul(block, I32(tile.sbo * (block_rows // 8)))
    if block_rows % 64 == 0:
        return g.b.mul(block, I32(tile.column_bytes * (block_rows // 64)))
    first = g.b.mul(block, I32(block_rows))      # the block's first MN row, inside one panel
    panel, inside = g.b.lshr(first, I32(6)), g.b.and_(first, I32(63))
    return g.b.add(g.b.mul(panel, I32(tile.column_bytes)), g.b.mul(inside, I32(tile.dtype_bytes)))


def _wgmma(g, o: ops.Wgmma) -> None:
    if not isinstance(o.a, ex.BufferRef):
        return _wgmma_register_a(g, o)
    regs = g.accumulators[o.acc]
    split = g.accumulator_parts[o.acc] > 1      # `by columns`: one A for all, each warpgroup its B columns
    tile_a, desc_a = _operand(g, o.a, None if split else _warpgroup(g), o.km)
    tile_b, desc_b = _operand(g, o.b, _warpgroup(g) if split else None, o.kn, 2 * len(regs))
    n = 2 * len(regs)
    template, constraints = wgmma.inline_asm(64, n, tile_a.instruction_k, tile_a.dtype, tile_b.dtype, "f32",
                                             trans_a=o.km, trans_b=o.kn)
    result_type = g.registers(F32, len(regs))
    for k in range(tile_a.k_steps):
        da = g.b.add(desc_a, I64(tile_a.k_step_offset(k) >> 4))
        db = g.b.add(desc_b, I64(tile_b.k_step_offset(k) >> 4))
        values = [g.b.load(r) for r in regs]
        result = g.asm(template, constraints, [da, db, I32(1), *values], ret=result_type)
        for i, reg in enumerate(regs):
            g.b.store(g.b.extract_value(result, i), reg)


def _wgmma_register_a(g, o: ops.Wgmma) -> None:
    """acc += dtype(p) · bᵀ with A from registers. A 16-bit operand: an accumulator's fragment is
    wgmma's A fragment: elements 8k .. 8k+7 of p are the A elements a0..a7 of K step k (columns
    16k .. 16k+15), and A register j packs a(2j) (low half) and a(2j+1). An fp8 one is regrouped
    across each quad (fp8_fragments.py)."""
    packed = isinstance(o.a, ex.AccRef)      # a bf16/f16 accumulator: converted when row math wrote it
    name = o.a.name if packed else o.a.operand.name
    dtype = g.accumulator_dtypes[name] if packed else o.a.dtype
    regs, source = g.accumulators[o.acc], g.accumulators[name]
    tile_b, desc_b = _operand(g, o.b, None, o.kn)
    template, constraints = wgmma.inline_asm(64, 2 * len(regs), wgmma.instruction_k(dtype), dtype,
                                             tile_b.dtype, "f32", a_from_registers=True, trans_b=o.kn)
    result_type = g.registers(F32, len(regs))
    for k in range(tile_b.k_steps):
        if packed:
            a = [g.b.load(r) for r in source[4 * k:4 * k + 4]]
        elif dtype in fp8_fragments.CONVERT:
            a = fp8_fragments.a_registers(g, dtype, source, k)
        else:
            a = _a_registers_16bit(g, dtype, source, k)
        db = g.b.add(desc_b, I64(tile_b.k_step_offset(k) >> 4))
        values = [g.b.load(r) for r in regs]
        result = g.asm(template, constraints, [*a, db, I32(1), *values], ret=result_type)
        for i, reg in enumerate(regs):
            g.b.store(g.b.extract_value(result, i), reg)


def _a_registers_16bit(g, dtype: str, source: list, k: int) -> list[ir.Value]:
    """K step k's four A registers: elements 8k .. 8k+7 of the fragment, converted, in pairs."""
    return [pack_pair(g, dtype, [g.b.load(source[8 * k + 2 * j + half]) for half in range(2)]) for j in range(4)]


def pack_pair(g, dtype: str, values: list[ir.Value]) -> ir.Value:
    """Two f32 values rounded to a 16-bit dtype, packed into one register (the first in the low half)."""
    pair = ir.Constant(ir.VectorType(STORAGE[dtype], 2), ir.Undefined)
    for half, value in enumerate(values):
        pair = g.b.insert_element(pair, g.b.fptrunc(value, STORAGE[dtype]), I32(half))
    return g.b.bitcast(pair, I32)


def _acc_store(g, o: ops.AccStore) -> None:
    """Each thread writes its fragment: element i sits at the (row, col) wgmma.accumulator_coord
    gives. An `acc[col]` epilogue writes the registers of columns col .. col + dest width only."""
    acc = next(e for e in ex.walk(o.value) if isinstance(e, ex.AccRef))
    rows, cols = tma.matrix_shape(g.boxes[g.buffers[o.dest.name].box].shape)
    thread = g.here(g.b.sub(g.tid, I32(32 * g.role.first_warp)))
    group, lane = g.b.lshr(thread, I32(7)), g.b.and_(thread, I32(31))
    warp_in_group = g.b.and_(g.b.lshr(thread, I32(5)), I32(3))
    col0 = g.b.mul(g.b.and_(lane, I32(3)), I32(2))
    if g.accumulator_parts[acc.name] > 1:     # `by columns`: all 64 rows, this warpgroup's columns
        regs = g.accumulators[acc.name]
        col0 = g.b.add(col0, g.b.mul(group, I32(len(regs) * 2)))
        group = I32(0)
    else:
        regs = g.accumulators[acc.name][acc.col // 2:(acc.col + cols) // 2]   # 4 registers per 8 columns
    row0 = g.b.add(g.b.add(g.b.mul(group, I32(64)), g.b.mul(warp_in_group, I32(16))), g.b.lshr(lane, I32(2)))
    for i in range(0, len(regs), 2):
        block, half = divmod(i, 4)
        row = g.b.add(row0, I32(8 * (half // 2)))
        col = g.b.add(col0, I32(8 * block))
        write = functools.partial(store_epilogue_pair, g, o, row, col, [g.b.load(regs[i]), g.b.load(regs[i + 1])],
                                  half // 2)
        if rows % 64:     # a short accumulator: rows past the tile's are wgmma's, not the program's (the
            g.if_then(g.b.icmp_unsigned("<", row, I32(rows)), write)   # test is uniform per warp)
        else:
            write()


def store_epilogue_pair(g, o, row: ir.Value, col: ir.Value, accumulators: list[ir.Value], held: int = 0) -> None:
    """Elements (row, col) and (row, col + 1) of an epilogue's target, from their two f32
    accumulator values: evaluated, converted, and written together. `held`: which of the
    thread's rows this is, for row registers (backend/row_layouts.py)."""
    dtype = g.boxes[g.buffers[o.dest.name].box].dtype
    values = [_evaluate(g, o.value, acc, dtype, (row, g.b.add(col, I32(j)), held))
              for j, acc in enumerate(accumulators)]
    store_pair(g, o.dest, row, col, values)


def store_pair(g, dest: ex.BufferRef, row: ir.Value, col: ir.Value, values: list[ir.Value]) -> None:
    """Two elements (row, col), (row, col + 1) of smem tile `dest`, already in its storage type,
    written as one 2-element vector at the (swizzled) address the tile's layout gives them."""
    box = g.boxes[g.buffers[dest.name].box]
    itemsize = DTYPES[box.dtype].itemsize
    vector = ir.Constant(ir.VectorType(STORAGE[box.dtype], 2), ir.Undefined)
    for j, value in enumerate(values):
        vector = g.b.insert_element(vector, value, I32(j))
    offset = panel_codegen.element_offset(g, box, row, col, itemsize, lambda x: _swizzled(g, x, box.swizzle))
    pointer = g.b.inttoptr(g.b.add(g.address(dest), offset), ir.PointerType(addrspace=3))
    g.b.store(vector, pointer).align = 2 * itemsize


def _swizzled(g, offset: ir.Value, swizzle: str) -> ir.Value:
    """Where TMA keeps byte `offset` of a tile whose rows are one swizzle span long (or of one
    panel of a panelled tile: panel_codegen): the 16-byte chunk index is XORed with the row (mod the
    span's chunk count). A quad of lanes writes one chunk and the 8 rows of a warp's store land
    in 8 different chunks: no bank conflicts."""
    if swizzle == "none":
        return offset
    chunks = tma.SWIZZLES[swizzle].span // 16
    row = g.b.and_(g.b.lshr(offset, I32(7)), I32(chunks - 1))
    return g.b.xor(offset, g.b.shl(row, I32(4)))


def _evaluate(g, e: ex.Expr, acc: ir.Value, dtype: str, at: tuple[ir.Value, ir.Value]) -> ir.Value:
    """One epilogue element (at (row, col)) in f32, converted to the storage type of `dtype`. A
    conversion to that type as the whole expression (`c = OUT(acc)`) rounds once: rounding, widening
    and rounding again is the same value, in three instructions."""
    if dtype != "f32" and isinstance(e, ex.Cast) and e.dtype == dtype:
        e = e.operand
    value = _float(g, e, acc, at)
    return value if dtype == "f32" else g.b.fptrunc(value, STORAGE[dtype])


def _tile_element(g, ref: ex.BufferRef, at: tuple[ir.Value, ir.Value]) -> ir.Value:
    """Element (row, col) of an unswizzled smem tile, or element col of a row vector, as f32."""
    box = g.boxes[g.buffers[ref.name].box]
    row, col, _ = at
    shape = tma.matrix_shape(box.shape)
    index = col if len(shape) == 1 else g.b.add(g.b.mul(row, I32(shape[1])), col)
    itemsize = DTYPES[box.dtype].itemsize
    pointer = g.b.inttoptr(g.b.add(g.address(ref), g.b.mul(index, I32(itemsize))), ir.PointerType(addrspace=3))
    value = g.b.load(pointer, typ=STORAGE[box.dtype])
    value.align = itemsize
    return value if box.dtype == "f32" else g.b.fpext(value, F32)


def _float(g, e: ex.Expr, acc: ir.Value, at) -> ir.Value:
    if isinstance(e, (ex.AccRef, ex.TmemRef)):
        return acc
    if isinstance(e, ex.BufferRef):
        return _tile_element(g, e, at)
    if isinstance(e, ex.RowVar):
        return g.b.load(g.rows[e.name][at[2]])
    if isinstance(e, ex.Const):
        return F32(float(e.value))
    if isinstance(e, ex.Param):
        arg = g.args[e.name]
        if isinstance(arg.type, ir.DoubleType):
            return g.b.fptrunc(arg, F32)
        return arg if isinstance(arg.type, ir.FloatType) else g.b.sitofp(arg, F32)
    if isinstance(e, ex.Neg):
        return g.b.fneg(_float(g, e.operand, acc, at))
    if isinstance(e, ex.Cast):
        inner = _float(g, e.operand, acc, at)
        if e.dtype == "i32":    # toward zero, saturating (§14), and on in f32
            return g.b.sitofp(f32_to_i32(g.b, inner), F32)
        return inner if e.dtype == "f32" else g.b.fpext(g.b.fptrunc(inner, STORAGE[e.dtype]), F32)
    lhs, rhs = _float(g, e.lhs, acc, at), _float(g, e.rhs, acc, at)
    if e.op in ("max", "min"):
        name = f"llvm.{e.op}imum.f32"
        fn = g.module.globals.get(name) or ir.Function(g.module, ir.FunctionType(F32, [F32, F32]), name)
        return g.b.call(fn, [lhs, rhs])
    return {"+": g.b.fadd, "-": g.b.fsub, "*": g.b.fmul, "/": g.b.fdiv}[e.op](lhs, rhs)


MMA_EMITTERS = {
    ops.AccDecl: _acc_decl,
    ops.AccZero: _acc_zero,
    ops.Wgmma: _wgmma,
    ops.WgmmaFence: _wgmma_fence,
    ops.WgmmaCommit: lambda g, o: g.asm(wgmma.COMMIT_GROUP, "", []),
    ops.WgmmaWait: _wgmma_wait,
    ops.AccStore: _acc_store,
}
