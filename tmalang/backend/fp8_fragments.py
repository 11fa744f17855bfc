"""An fp8 register A operand (`mma acc, f8e4m3(p), b`): accumulator p's fragment, converted and
regrouped into wgmma's m64nNk32 A fragment.

A 16-bit A fragment is the accumulator fragment as it lies, so `bf16(p)` only converts. An 8-bit
one is not: in each warp's 16 rows, thread t (quad position q = t % 4) must hold, for its rows g
and g + 8 of one 32-column K step, the columns 4q .. 4q+3 (registers 0, 1) and 16+4q .. 16+4q+3
(registers 2, 3), four e4m3 bytes a register, lowest column in the lowest byte (the m16n8k32
8-bit layout, ISA 9.7.14.5). The accumulator gives it columns 8j + 2q, 8j + 2q + 1 (j = 0..3) of
the same rows. So each thread packs its columns pairwise into fp8 (cvt.rn.satfinite.e4m3x2.f32),
and a register's four bytes come from two threads of its quad: the pairs 4q, 4q+1 from quad
position 2·(q % 2) and 4q+2, 4q+3 from the next, each in the half (q / 2) of the word that holds
block j = q / 2 (or 2 + q / 2). Two shuffles a register, eight per K step; no shared memory, and
the product is the plain fp8(p) · bᵀ that the interpreter computes (interp/mma.py).
"""

from __future__ import annotations

from llvmlite import ir

from . import emit

I16, I32 = ir.IntType(16), ir.IntType(32)
F32 = ir.FloatType()
CONVERT = {"f8e4m3": "e4m3x2", "f8e5m2": "e5m2x2"}


def a_registers(g, dtype: str, source: list, k: int) -> list[ir.Value]:
    """The four A registers of K step k (columns 32k .. 32k + 31) from accumulator registers
    `source` (the thread's elements 16k .. 16k + 15 are that step's)."""
    lane = emit.sreg(g.b, "laneid")
    first = g.b.or_(g.b.and_(lane, I32(~3 & 0xFFFFFFFF)), g.b.shl(g.b.and_(lane, I32(1)), I32(1)))
    shift = g.b.shl(g.b.and_(g.b.lshr(lane, I32(1)), I32(1)), I32(4))     # 16 · (q / 2): the half to take
    words = [[_pack(g, dtype, source, 16 * k + 8 * w + 2 * half) for w in range(2)] for half in range(2)]
    return [_gather(g, words[half][w], first, shift) for w in range(2) for half in range(2)]


def _pack(g, dtype: str, source: list, element: int) -> ir.Value:
    """Elements element, +1 (block j's pair of one row) and element + 4, + 5 (block j + 1's) as
    four fp8 bytes in that order: two e4m3x2 conversions."""
    low, high = (g.b.zext(_convert(g, dtype, source[e], source[e + 1]), I32) for e in (element, element + 4))
    return g.b.or_(low, g.b.shl(high, I32(16)))


def _convert(g, dtype: str, low, high) -> ir.Value:
    """cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a in d's upper byte and b in its lower."""
    asm = ir.InlineAsm(ir.FunctionType(I16, [F32, F32]), f"cvt.rn.satfinite.{CONVERT[dtype]}.f32 $0, $1, $2;",
                       "=h,f,f", side_effect=False)
    return g.b.call(asm, [g.b.load(high), g.b.load(low)])


def _gather(g, word: ir.Value, first: ir.Value, shift: ir.Value) -> ir.Value:
    """The register: the `shift` half of `word` from lanes `first` (low 16 bits) and first + 1."""
    parts = [g.b.and_(g.b.lshr(_shuffle(g, word, lane), shift), I32(0xFFFF)) for lane in (first, g.b.add(first, I32(1)))]
    return g.b.or_(parts[0], g.b.shl(parts[1], I32(16)))


def _shuffle(g, value: ir.Value, lane: ir.Value) -> ir.Value:
    name = "llvm.nvvm.shfl.sync.idx.i32"
    fn = g.module.globals.get(name) or ir.Function(g.module, ir.FunctionType(I32, [I32, I32, I32, I32]), name)
    return g.b.call(fn, [I32(0xFFFFFFFF), value, lane, I32(0x1F)])
