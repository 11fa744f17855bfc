"""Elementwise tile math: `dest[k] = value(k)` over every element of a smem tile.

The role's threads split the tile into 16-byte vectors (V elements of the widest operand type),
thread t handling vectors t, t + threads, ... . Sema guarantees every operand tile has the same
shape and, when swizzled, the same swizzle and element size, so element k of one tile lines up
with element k of the others whatever the layout. Floats compute in f32 (f16/bf16 widen on load
and round on store, like the interpreter); i32 computes in i32.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import exprs as ex
from ..ir import ops
from ..targets.dtypes import DTYPES
from .conversions import f32_to_i32

I32 = ir.IntType(32)
F32 = ir.FloatType()


class BFloatType(ir.types._BaseFloatType):
    """LLVM's `bfloat`, which llvmlite's IR builder does not define."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"


BFloatType._create_instance()


STORAGE = {"f32": F32, "f16": ir.HalfType(), "bf16": BFloatType(), "i32": I32}


def emit_tile_assign(g, o: ops.TileAssign) -> None:
    dest_dtype = _dtype_of(g, o.dest.name)
    refs = [o.dest, *ex.buffer_refs(o.value)]
    width = 16 // max(DTYPES[_dtype_of(g, r.name)].itemsize for r in refs)
    elements = g.tile_bytes(o.dest.name) // DTYPES[dest_dtype].itemsize
    threads = g.role_threads()
    lane = g.b.sub(g.tid, I32(32 * g.role.first_warp))
    k_var = g.alloca("k")
    g.b.store(g.b.mul(lane, I32(width)), k_var)
    cond_bb, body_bb, exit_bb = (g.fn.append_basic_block(f"tile.{n}") for n in ("cond", "body", "exit"))
    g.b.branch(cond_bb)
    g.b.position_at_end(cond_bb)
    k = g.b.load(k_var)
    g.b.cbranch(g.b.icmp_unsigned("<", k, I32(elements)), body_bb, exit_bb)
    g.b.position_at_end(body_bb)
    k = g.b.load(k_var)
    math = _VectorMath(g, k, width)
    value, kind = math.eval(o.value)
    math.store(o.dest, math.convert(value, kind, dest_dtype))
    g.b.store(g.b.add(k, I32(width * threads)), k_var)
    g.b.branch(cond_bb)
    g.b.position_at_end(exit_bb)


def _dtype_of(g, buffer: str) -> str:
    return g.boxes[g.buffers[buffer].box].dtype


class _VectorMath:
    """Evaluates one vector (V consecutive elements at index k) of a tile expression."""

    def __init__(self, g, k: ir.Value, width: int):
        self.g, self.b, self.k, self.width = g, g.b, k, width

    def vec(self, t: ir.Type) -> ir.VectorType:
        return ir.VectorType(t, self.width)

    def pointer(self, ref: ex.BufferRef, itemsize: int) -> ir.Value:
        addr = self.b.add(self.g.address(ref), self.b.mul(self.k, I32(itemsize)))
        return self.b.inttoptr(addr, ir.PointerType(addrspace=3))

    def load(self, ref: ex.BufferRef):
        dtype = _dtype_of(self.g, ref.name)
        size = DTYPES[dtype].itemsize
        value = self.b.load(self.pointer(ref, size), typ=self.vec(STORAGE[dtype]))
        value.align = min(16, size * self.width)
        if dtype == "i32":
            return value, "i"
        return (value if dtype == "f32" else self.b.fpext(value, self.vec(F32))), "f"

    def store(self, ref: ex.BufferRef, value: ir.Value) -> None:
        size = DTYPES[_dtype_of(self.g, ref.name)].itemsize
        stored = self.b.store(value, self.pointer(ref, size))
        stored.align = min(16, size * self.width)

    def splat(self, scalar: ir.Value) -> ir.Value:
        vec = ir.Constant(self.vec(scalar.type), ir.Undefined)
        for i in range(self.width):
            vec = self.b.insert_element(vec, scalar, I32(i))
        return vec

    def scalar(self, arg: ir.Value):
        """A scalar parameter, narrowed to the compute types (f32 or i32) and splatted."""
        if isinstance(arg.type, ir.DoubleType):
            arg = self.b.fptrunc(arg, F32)
        elif isinstance(arg.type, ir.IntType) and arg.type.width > 32:
            arg = self.b.trunc(arg, I32)
        return self.splat(arg), "f" if isinstance(arg.type, ir.FloatType) else "i"

    def nan_propagating(self, op: str) -> ir.Function:
        """llvm.maximum/minimum (PTX max.NaN/min.NaN): NaN in, NaN out, like NumPy's maximum."""
        name = f"llvm.{op}imum.v{self.width}f32"
        fn = self.g.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.g.module, ir.FunctionType(self.vec(F32), [self.vec(F32)] * 2), name)
        return fn

    def convert(self, value: ir.Value, kind: str, dtype: str) -> ir.Value:
        """A computed vector (kind f: f32, i: i32) in the storage type of `dtype`."""
        if dtype == "i32":
            return value if kind == "i" else f32_to_i32(self.b, value)   # defined for NaN, ±inf, out of range
        value = value if kind == "f" else self.b.sitofp(value, self.vec(F32))
        return value if dtype == "f32" else self.b.fptrunc(value, self.vec(STORAGE[dtype]))

    def eval(self, e: ex.Expr):
        if isinstance(e, ex.BufferRef):
            return self.load(e)
        if isinstance(e, ex.Const):
            if isinstance(e.value, float):
                return self.splat(F32(e.value)), "f"
            return self.splat(I32(e.value)), "i"
        if isinstance(e, ex.Param):
            return self.scalar(self.g.args[e.name])
        if isinstance(e, ex.Neg):
            value, kind = self.eval(e.operand)
            return (self.b.fneg(value) if kind == "f" else self.b.neg(value)), kind
        if isinstance(e, ex.Cast):
            value, kind = self.eval(e.operand)
            stored = self.convert(value, kind, e.dtype)
            if e.dtype == "i32":
                return stored, "i"
            return (stored if e.dtype == "f32" else self.b.fpext(stored, self.vec(F32))), "f"
        return self.binary(e)

    def binary(self, e: ex.Bin):
        (lhs, lk), (rhs, rk) = self.eval(e.lhs), self.eval(e.rhs)
        if lk != rk:  # mixed int/float: compute in float
            lhs = lhs if lk == "f" else self.b.sitofp(lhs, self.vec(F32))
            rhs = rhs if rk == "f" else self.b.sitofp(rhs, self.vec(F32))
            lk = "f"
        if lk == "f":
            if e.op in ("max", "min"):
                return self.b.call(self.nan_propagating(e.op), [lhs, rhs]), "f"
            return FLOAT_OPS[e.op](self.b, lhs, rhs), "f"
        return INT_BINARY[e.op](self.b, lhs, rhs), "i"


# Integer operators of index math and i32 tile math (signed, as the kernel's 32-bit indices are,
# but for the unsigned ones of the tile walk: udiv urem umin).
INT_BINARY = {
    ">": lambda b, x, y: b.zext(b.icmp_signed(">", x, y), I32),
    "+": lambda b, x, y: b.add(x, y), "-": lambda b, x, y: b.sub(x, y), "*": lambda b, x, y: b.mul(x, y),
    "/": lambda b, x, y: b.sdiv(x, y), "%": lambda b, x, y: b.srem(x, y), "&": lambda b, x, y: b.and_(x, y),
    "^": lambda b, x, y: b.xor(x, y),
    "max": lambda b, x, y: b.select(b.icmp_signed(">", x, y), x, y),
    "min": lambda b, x, y: b.select(b.icmp_signed("<", x, y), x, y),
    "udiv": lambda b, x, y: b.udiv(x, y), "urem": lambda b, x, y: b.urem(x, y),
    "umin": lambda b, x, y: b.select(b.icmp_unsigned("<", x, y), x, y),
}


FLOAT_OPS = {
    "+": lambda b, x, y: b.fadd(x, y), "-": lambda b, x, y: b.fsub(x, y),
    "*": lambda b, x, y: b.fmul(x, y), "/": lambda b, x, y: b.fdiv(x, y),
}
