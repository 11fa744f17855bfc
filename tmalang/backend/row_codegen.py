"""Row math → LLVM IR: a one-warpgroup role computing over its rows, one row per thread.

Thread t of warp w holds row 32·(w % 4) + t % 32: the lane tcgen05.ld.32x32b and
tcgen05.st.32x32b give it. A row value is a Python list of f32 SSA values, one per column (one
for a value per row or a uniform scalar), so reductions are a thread's own tree of max/add and
nothing crosses lanes. Row registers are entry-block slots that mem2reg turns into registers.
Tensor Memory is read in tcgen05.ld chunks pinned by wait::ld (tcgen05_codegen) and written by
tcgen05.st followed by wait::st, so a later signal cannot overtake the store. Shared-memory rows
go out as pairs at the tile's (swizzled) address, as the GEMM epilogue writes them.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import exprs as ex
from ..ir import ops
from ..target.tcgen05 import instructions as tcgen05
from .mma_codegen import store_pair
from .tcgen05_codegen import load_columns, tile_address
from .tile_math import FLOAT_OPS, STORAGE

I32, F32 = ir.IntType(32), ir.FloatType()
NEG_INF = F32(float("-inf"))


def _row_decl(g, o: ops.RowDecl) -> None:
    g.rows[o.symbol] = [g.alloca(f"{o.symbol}.{c}", F32) for c in range(max(o.cols, 1))]


def _row_assign(g, o: ops.RowAssign) -> None:
    quarter = g.b.and_(g.b.sub(g.warp, I32(g.role.first_warp)), I32(3))
    row = g.b.add(g.b.mul(quarter, I32(32)), g.b.and_(g.tid, I32(31)))
    lanes = g.b.shl(g.b.mul(quarter, I32(32)), I32(16))      # TMEM address: lane in bits 31..16
    value = _RowMath(g, lanes).eval(o.value)
    if isinstance(o.dest, ex.RowVar):
        slots = g.rows[o.dest.name]
        for slot, v in zip(slots, _widen(value, len(slots))):
            g.b.store(v, slot)
    elif o.dest.name in g.tmem_tiles:
        width = g.tmem_tiles[o.dest.name].shape[1]
        _store_columns(g, g.b.add(tile_address(g, o.dest), lanes), _widen(value, width))
    else:
        box = g.boxes[g.buffers[o.dest.name].box]
        values = [v if box.dtype == "f32" else g.b.fptrunc(v, STORAGE[box.dtype])
                  for v in _widen(value, box.shape[1])]
        for j in range(0, len(values), 2):
            store_pair(g, o.dest, row, I32(j), values[j:j + 2])


def _widen(value: list[ir.Value], width: int) -> list[ir.Value]:
    return value * width if len(value) == 1 else value


def _store_columns(g, taddr: ir.Value, values: list[ir.Value]) -> None:
    """tcgen05.st of this thread's lane, in power-of-two chunks, then wait::st."""
    done = 0
    while done < len(values):
        n = 1 << (min(len(values) - done, g.ld_width).bit_length() - 1)
        registers = [f"${i + 1}" for i in range(n)]
        chunk = [g.b.bitcast(v, I32) for v in values[done:done + n]]
        g.asm(tcgen05.st("$0", registers, "32x32b", n), ",".join(["r"] * (n + 1)),
              [g.b.add(taddr, I32(done)), *chunk])
        done += n
    g.asm(tcgen05.WAIT_ST, "", [])


class _RowMath:
    """Evaluates a row expression for the calling thread's row."""

    def __init__(self, g, lanes: ir.Value):
        self.g, self.b, self.lanes = g, g.b, lanes

    def eval(self, e: ex.Expr) -> list[ir.Value]:
        if isinstance(e, ex.RowVar):
            return [self.b.load(slot) for slot in self.g.rows[e.name]]
        if isinstance(e, ex.TmemRef):
            width = self.g.tmem_tiles[e.tile.name].shape[1] - e.col
            taddr = self.b.add(self.b.add(tile_address(self.g, e.tile), self.lanes), I32(e.col))
            return [self.b.bitcast(v, F32) for v in load_columns(self.g, taddr, width)]
        if isinstance(e, ex.Const):
            return [F32(float(e.value))]
        if isinstance(e, ex.Param):
            return [self._scalar(self.g.args[e.name])]
        if isinstance(e, ex.Neg):
            return [self.b.fneg(v) for v in self.eval(e.operand)]
        if isinstance(e, ex.Cast):    # round through the narrower type, as the interpreter does
            return [v if e.dtype == "f32" else self.b.fpext(self.b.fptrunc(v, STORAGE[e.dtype]), F32)
                    for v in self.eval(e.operand)]
        if isinstance(e, ex.Call):
            return self._call(e)
        lhs, rhs = self.eval(e.lhs), self.eval(e.rhs)
        width = max(len(lhs), len(rhs))
        return [self._binary(e.op, x, y) for x, y in zip(_widen(lhs, width), _widen(rhs, width))]

    def _scalar(self, arg: ir.Value) -> ir.Value:
        if isinstance(arg.type, ir.DoubleType):
            return self.b.fptrunc(arg, F32)
        if isinstance(arg.type, ir.IntType):
            return self.b.sitofp(arg if arg.type.width <= 32 else self.b.trunc(arg, I32), F32)
        return arg

    def _binary(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        if op in ("max", "min"):    # NaN-propagating, like NumPy's maximum (PTX max.NaN)
            return self.b.call(self._intrinsic(f"llvm.{op}imum.f32", 2), [x, y])
        return FLOAT_OPS[op](self.b, x, y)

    def _intrinsic(self, name: str, arity: int) -> ir.Function:
        fn = self.g.module.globals.get(name)
        return fn or ir.Function(self.g.module, ir.FunctionType(F32, [F32] * arity), name)

    def _call(self, e: ex.Call) -> list[ir.Value]:
        x = self.eval(e.args[0])
        if e.func == "exp2":
            return [self.g.asm("ex2.approx.ftz.f32 $0, $1;", "=f,f", [v], ret=F32) for v in x]
        if e.func in ("rowmax", "rowsum"):
            return [_tree(x, lambda a, b: self._binary("max" if e.func == "rowmax" else "+", a, b))]
        limit = self.g.expr(e.args[1])       # mask_cols: columns at or past `limit` read as -inf
        return [self.b.select(self.b.icmp_signed("<", I32(c), limit), v, NEG_INF) for c, v in enumerate(x)]


def _tree(values: list[ir.Value], combine) -> ir.Value:
    """A balanced reduction: log2(N) dependent steps instead of N."""
    while len(values) > 1:
        pairs = [combine(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = pairs + ([values[-1]] if len(values) % 2 else [])
    return values[0]


ROW_EMITTERS = {ops.RowDecl: _row_decl, ops.RowAssign: _row_assign}
