"""Row math → LLVM IR: each thread computes over the rows it holds.

Which rows a thread holds, and how it reads them, is its role's layout (row_layouts.py): one
Tensor Memory lane in a tcgen05 role, two rows of the wgmma accumulator fragment in a wgmma
role. A row value is a list of held rows, each a list of f32 SSA values (its columns, or one
value per row or uniform), so elementwise math is the same code for both; reductions end in
the layout's cross-thread combine. Row registers are entry-block slots that mem2reg turns into
registers: one per column in a tcgen05 role, one per held row in a wgmma role. exp2 and log2
are the approximate MUFU instructions (`ex2.approx.ftz.f32`, `lg2.approx.ftz.f32`), emitted as
pure asm so that LLVM may schedule them like arithmetic.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import exprs as ex
from ..ir import ops
from ..targets import tma
from ..targets.dtypes import DTYPES
from .mma_codegen import pack_pair, store_pair
from .row_layouts import FragmentRows, accumulator_rows, holds_fragments, layout_of, store_tmem_row
from .tcgen05_codegen import tile_address
from .tile_math import FLOAT_OPS, STORAGE

I32, F32 = ir.IntType(32), ir.FloatType()
NEG_INF = F32(float("-inf"))
CONTRACTED = {
    "+": lambda b, x, y: b.fadd(x, y, flags=("contract",)), "-": lambda b, x, y: b.fsub(x, y, flags=("contract",)),
    "*": lambda b, x, y: b.fmul(x, y, flags=("contract",)),
}
MASKS = ex.MASKS
MUFU = {"exp2": "ex2.approx.ftz.f32 $0, $1;", "log2": "lg2.approx.ftz.f32 $0, $1;"}


def _row_decl(g, o: ops.RowDecl) -> None:
    held = 2 if holds_fragments(g) else max(o.cols, 1)
    g.rows[o.symbol] = [g.alloca(f"{o.symbol}.{c}", F32) for c in range(held)]


def _row_assign(g, o: ops.RowAssign) -> None:
    layout = layout_of(g)
    per_row = isinstance(layout, FragmentRows) and isinstance(o.dest, ex.RowVar)   # smem [R]: row vectors
    value = _RowMath(g, layout, per_row).eval(o.value)
    if isinstance(o.dest, ex.RowVar):
        slots = g.rows[o.dest.name]
        flat = [v for row in value for v in row] if isinstance(layout, FragmentRows) else _widen(value[0], len(slots))
        for slot, v in zip(slots, flat):
            g.b.store(v, slot)
    elif isinstance(o.dest, ex.AccRef) and g.accumulator_dtypes[o.dest.name] != "f32":
        _store_fragment(g, o.dest.name, value)
    elif isinstance(o.dest, ex.AccRef):
        for row, regs in zip(value, accumulator_rows(g, o.dest.name)):
            for reg, v in zip(regs, _widen(row, len(regs))):
                g.b.store(v, reg)
    elif o.dest.name in g.tmem_tiles:
        width = g.tmem_tiles[o.dest.name].shape[1]
        store_tmem_row(g, g.b.add(tile_address(g, o.dest), layout.lanes), _widen(value[0], width))
    elif isinstance(layout, FragmentRows):
        _store_row_vector(g, o.dest, layout, value)
    else:
        _store_lane_row(g, o.dest, layout.row, value[0])


def _store_fragment(g, name: str, value) -> None:
    """Row math into a bf16/f16 accumulator: each row's values, rounded, two to a register. Held row
    h's columns 2c, 2c + 1 are fragment elements 4c + 2h, 4c + 2h + 1, i.e. register 2c + h."""
    regs, dtype = g.accumulators[name], g.accumulator_dtypes[name]
    for half, row in enumerate(value):
        row = _widen(row, len(regs))
        for c in range(len(regs) // 2):
            g.b.store(pack_pair(g, dtype, row[2 * c:2 * c + 2]), regs[2 * c + half])


def _store_lane_row(g, dest: ex.BufferRef, row: ir.Value, value: list[ir.Value]) -> None:
    box = g.boxes[g.buffers[dest.name].box]
    values = [v if box.dtype == "f32" else g.b.fptrunc(v, STORAGE[box.dtype])
              for v in _widen(value, tma.matrix_shape(box.shape)[1])]
    for j in range(0, len(values), 2):
        store_pair(g, dest, row, I32(j), values[j:j + 2])


def _store_row_vector(g, dest: ex.BufferRef, layout: FragmentRows, value) -> None:
    """One value per row into element `row` of an unswizzled [R] tile: the quad's first thread
    writes each of its two rows."""
    box = g.boxes[g.buffers[dest.name].box]
    itemsize = DTYPES[box.dtype].itemsize

    def write():
        for row, values in zip(layout.rows(), value):
            v = values[0] if box.dtype == "f32" else g.b.fptrunc(values[0], STORAGE[box.dtype])
            address = g.b.add(g.address(dest), g.b.mul(row, I32(itemsize)))
            g.b.store(v, g.b.inttoptr(address, ir.PointerType(addrspace=3))).align = itemsize
    g.if_then(layout.quad_leader, write)


def _widen(value: list[ir.Value], width: int) -> list[ir.Value]:
    return value * width if len(value) == 1 else value


class _RowMath:
    """Evaluates a row expression over the rows the calling thread holds."""

    def __init__(self, g, layout, per_row: bool = False):
        self.g, self.b, self.layout, self.per_row = g, g.b, layout, per_row

    def eval(self, e: ex.Expr) -> list[list[ir.Value]]:
        held = len(self.layout.rows())
        if isinstance(e, ex.BufferRef) and self.per_row:
            return self.layout.row_vector(e)
        if isinstance(e, (ex.RowVar, ex.TmemRef, ex.AccRef, ex.BufferRef)):
            return self.layout.leaf(e)
        if isinstance(e, ex.Const):
            return [[F32(float(e.value))]] * held
        if isinstance(e, ex.Param):
            return [[self._scalar(self.g.args[e.name])]] * held
        if isinstance(e, ex.Neg):
            return [[self.b.fneg(v) for v in row] for row in self.eval(e.operand)]
        if isinstance(e, ex.Cast):    # round through the narrower type, as the interpreter does
            return [[v if e.dtype == "f32" else self.b.fpext(self.b.fptrunc(v, STORAGE[e.dtype]), F32) for v in row]
                    for row in self.eval(e.operand)]
        if isinstance(e, ex.Call):
            return self._call(e)
        return [self._elementwise(e.op, x, y) for x, y in zip(self.eval(e.lhs), self.eval(e.rhs))]

    def _elementwise(self, op: str, lhs: list[ir.Value], rhs: list[ir.Value]) -> list[ir.Value]:
        width = max(len(lhs), len(rhs))
        return [self._binary(op, x, y) for x, y in zip(_widen(lhs, width), _widen(rhs, width))]

    def _scalar(self, arg: ir.Value) -> ir.Value:
        if isinstance(arg.type, ir.DoubleType):
            return self.b.fptrunc(arg, F32)
        if isinstance(arg.type, ir.IntType):
            return self.b.sitofp(arg if arg.type.width <= 32 else self.b.trunc(arg, I32), F32)
        return arg

    def _binary(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        if op in ("max", "min"):    # NaN-propagating, like NumPy's maximum (PTX max.NaN)
            return self.b.call(self._intrinsic(f"llvm.{op}imum.f32", 2), [x, y])
        if op in CONTRACTED:        # a product feeding a sum may fuse into one fma (s·c − m·c)
            return CONTRACTED[op](self.b, x, y)
        return FLOAT_OPS[op](self.b, x, y)

    def _intrinsic(self, name: str, arity: int) -> ir.Function:
        fn = self.g.module.globals.get(name)
        return fn or ir.Function(self.g.module, ir.FunctionType(F32, [F32] * arity), name)

    def _call(self, e: ex.Call) -> list[list[ir.Value]]:
        if e.func in MASKS:
            return self._masked(e)
        x = self.eval(e.args[0])
        if e.func in MUFU:
            unit = ir.InlineAsm(ir.FunctionType(F32, [F32]), MUFU[e.func], "=f,f")
            return [[self.b.call(unit, [v]) for v in row] for row in x]
        if e.func in ("rowmax", "rowsum"):
            op = "max" if e.func == "rowmax" else "+"

            def combine(a, b):
                return self._binary(op, a, b)
            return [[self.layout.combine(_tree(row, combine), combine)] for row in x]
        raise AssertionError(f"row math function {e.func} (sema admits only these)")

    def _masked(self, e: ex.Call) -> list[list[ir.Value]]:
        """Nested masks (mask_above(mask_cols(x, n), d)) keep each row's columns in one range
        [low, high): one compare pair per element, and one branch around them."""
        masks = []
        while isinstance(e, ex.Call) and e.func in MASKS:
            masks.append((e.func, self._limits(e.args[1])))
            e = e.args[0]
        x = self.eval(e)
        return [self._mask(row, *self._bounds([(f, limits[k]) for f, limits in masks], at))
                for k, (row, at) in enumerate(zip(x, self.layout.rows()))]

    def _limits(self, e: ex.Expr) -> list[ir.Value]:
        """A mask's limit for each held row: one integer, or a row register's value per row
        (converted toward zero, saturating, NaN as 0) plus or minus an integer."""
        held = len(self.layout.rows())
        per_row = ex.row_limit(e)
        if per_row is None:
            return [self.g.expr(e)] * held
        register, op, rest = per_row
        convert = self.g.module.globals.get("llvm.fptosi.sat.i32.f32") or ir.Function(
            self.g.module, ir.FunctionType(I32, [F32]), "llvm.fptosi.sat.i32.f32")
        rows = [self.b.call(convert, [row[0]]) for row in self.layout.leaf(register)]
        if rest is None:
            return rows
        offset = self.g.expr(rest)
        return [self.b.add(r, offset) if op == "+" else self.b.sub(r, offset) for r in rows]

    def _bounds(self, masks, row: ir.Value) -> tuple[ir.Value | None, ir.Value | None]:
        """(low, high) of `row`'s kept columns, None where no mask bounds that side: mask_cols keeps
        columns below its limit, mask_left those from it on, mask_above those up to row + d,
        mask_below those from row + d on."""
        highs = [limit if func == "mask_cols" else self.b.add(self.b.add(row, limit), I32(1))
                 for func, limit in masks if func in ("mask_cols", "mask_above")]
        lows = [limit if func == "mask_left" else self.b.add(row, limit)
                for func, limit in masks if func in ("mask_below", "mask_left")]
        return self._extreme(lows, ">"), self._extreme(highs, "<")

    def _extreme(self, values: list[ir.Value], better: str) -> ir.Value | None:
        if not values:
            return None
        best = values[0]
        for other in values[1:]:
            best = self.b.select(self.b.icmp_signed(better, other, best), other, best)
        return best

    def _mask(self, values: list[ir.Value], low: ir.Value | None, high: ir.Value | None) -> list[ir.Value]:
        """Columns outside [low, high) read as -inf. A thread whose columns all lie inside branches
        around the selects: in attention only the last (or diagonal) key block masks."""
        columns = self.layout.width(len(values))
        inside_all = [self.b.icmp_signed(">=", high, I32(columns))] if high is not None else []
        inside_all += [self.b.icmp_signed("<=", low, I32(0))] if low is not None else []
        whole = inside_all[0] if len(inside_all) == 1 else self.b.and_(*inside_all)
        before = self.b.block
        with self.b.if_then(self.b.not_(whole)):
            first = self.layout.column(0)     # compare each column's constant offset against the bounds
            upper = self.b.sub(high, first) if high is not None else None
            lower = self.b.sub(low, first) if low is not None else None
            masked = []
            for c, v in enumerate(values):
                offset = I32(self.layout.offset(c))
                keep = [self.b.icmp_signed("<", offset, upper)] if upper is not None else []
                keep += [self.b.icmp_signed(">=", offset, lower)] if lower is not None else []
                kept = keep[0] if len(keep) == 1 else self.b.and_(*keep)
                masked.append(self.b.select(kept, v, NEG_INF))
            inside = self.b.block
        joined = []
        for v, m in zip(values, masked):
            phi = self.b.phi(F32)
            phi.add_incoming(v, before)
            phi.add_incoming(m, inside)
            joined.append(phi)
        return joined


def _tree(values: list[ir.Value], combine) -> ir.Value:
    """A balanced reduction: log2(N) dependent steps instead of N."""
    while len(values) > 1:
        pairs = [combine(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


ROW_EMITTERS = {ops.RowDecl: _row_decl, ops.RowAssign: _row_assign}
