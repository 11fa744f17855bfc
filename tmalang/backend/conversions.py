"""Float → i32 conversions with a defined result for every input.

LLVM's `fptosi` is poison for NaN, ±inf and values outside the integer range, so the optimiser
may assume they never happen (and fold a constant one to anything). The language defines them
(docs/language.md §14): toward zero, NaN → 0, saturating at INT_MIN / INT_MAX, which is what
PTX `cvt.rzi.s32.f32` does (measured on the H100 and an H200; interp/conversions.py is the
definition). The backend calls NVVM's `llvm.nvvm.f2i.rz`, which is that instruction: LLVM knows
its meaning (it folds a constant NaN to 0 and 3e9 to INT_MAX) and keeps a tile's 16-byte vector
load whole. The alternatives cost more: LLVM 22's NVPTX lowers `llvm.fptosi.sat` to the cvt
plus three compares and three selects per element, and with an inline-asm cvt LLVM split the
vector load into one load per element.

Narrowing float conversions stay LLVM's `fptrunc`: NVPTX emits `cvt.rn.f16.f32` /
`cvt.rn.bf16.f32` (or their x2 forms), round to nearest even with overflow to ±inf, which is
also what LLVM's constant folding does.
"""

from __future__ import annotations

from llvmlite import ir

I32 = ir.IntType(32)
F32 = ir.FloatType()
F2I_RZ = "llvm.nvvm.f2i.rz"


def f32_to_i32(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """An f32 (or a vector of f32) as i32, element by element, by `cvt.rzi.s32.f32`."""
    if not isinstance(value.type, ir.VectorType):
        return b.call(_f2i_rz(b.module), [value])
    result = ir.Constant(ir.VectorType(I32, value.type.count), ir.Undefined)
    for i in range(value.type.count):
        lane = b.call(_f2i_rz(b.module), [b.extract_element(value, I32(i))])
        result = b.insert_element(result, lane, I32(i))
    return result


def _f2i_rz(module: ir.Module) -> ir.Function:
    fn = module.globals.get(F2I_RZ)
    return fn or ir.Function(module, ir.FunctionType(I32, [F32]), F2I_RZ)
