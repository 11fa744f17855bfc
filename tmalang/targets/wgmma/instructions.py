"""The wgmma instructions as PTX text: the multiplicand and accumulator types with their PTX
spellings and the K one instruction consumes (32 bytes of each row), `check` and `WgmmaShape`
(a validated `wgmma.mma_async` variant, ISA 9.7.15.5.2), its mnemonic (`instruction`), the LLVM
inline-asm template and constraint string of one call (`inline_asm`), and the ordering
instructions `FENCE`, `COMMIT_GROUP` and `wait_group(n)` (ISA 9.7.15.7)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------------

# tmalang names and PTX names of the wgmma multiplicand types -> (PTX type, bytes per element)
_OPERAND_TYPES = {
    "f16": ("f16", 2), "bf16": ("bf16", 2), "tf32": ("tf32", 4),
    "f8e4m3": ("e4m3", 1), "e4m3": ("e4m3", 1),
    "f8e5m2": ("e5m2", 1), "e5m2": ("e5m2", 1),
}
# accumulator types each multiplicand family allows (ISA 9.7.15.5.2 syntax: .f16 -> .dtype
# {.f16, .f32}; .bf16 -> {.f32}; .tf32 -> {.f32}; FP8 -> {.f16, .f32})
_ACC_TYPES = {"f16": ("f16", "f32"), "bf16": ("f32",), "tf32": ("f32",), "e4m3": ("f16", "f32"), "e5m2": ("f16", "f32")}

INSTRUCTION_K_BYTES = 32
"""Every dense floating-point wgmma consumes 32 bytes of K per row: k16 for f16/bf16, k8 for
tf32, k32 for e4m3/e5m2 (ISA 9.7.15.5.2 shapes)."""


def ptx_type(dtype: str) -> str:
    """The PTX spelling of a multiplicand type ('bf16', 'e4m3', ...); ValueError if unsupported."""
    try:
        return _OPERAND_TYPES[dtype][0]
    except KeyError:
        raise ValueError(f"wgmma has no multiplicand type {dtype!r}: expected one of "
                         f"{', '.join(sorted(_OPERAND_TYPES))}") from None


def dtype_bytes(dtype: str) -> int:
    ptx_type(dtype)
    return _OPERAND_TYPES[dtype][1]


def instruction_k(dtype: str) -> int:
    """K of one wgmma for this multiplicand type: 16 (f16/bf16), 8 (tf32), 32 (e4m3/e5m2)."""
    return INSTRUCTION_K_BYTES // dtype_bytes(dtype)


# ---------------------------------------------------------------------------------------------
# The instruction (ISA 9.7.15.5.2 wgmma.mma_async)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WgmmaShape:
    """A checked wgmma.mma_async variant (see `check`)."""

    m: int
    n: int
    k: int
    a_type: str    # PTX spelling
    b_type: str
    acc_type: str  # "f32" or "f16"
    a_from_registers: bool
    trans_a: bool
    trans_b: bool

    @property
    def has_transpose_operands(self) -> bool:
        """imm-trans-a/b exist only in the .f16 / .bf16 forms (ISA 9.7.15.5.2 syntax)."""
        return self.a_type in ("f16", "bf16")

    @property
    def accumulator_registers(self) -> int:
        """Per thread: N/2 .f32 registers, or N/4 .f16x2 registers (ISA 9.7.15.5.1.1.1)."""
        return self.n // 2 if self.acc_type == "f32" else self.n // 4

    @property
    def mnemonic(self) -> str:
        return f"wgmma.mma_async.sync.aligned.m{self.m}n{self.n}k{self.k}.{self.acc_type}.{self.a_type}.{self.b_type}"


def check(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
          *, trans_a: bool = False, trans_b: bool = False) -> WgmmaShape:
    """Validate a dense floating-point wgmma variant against ISA 9.7.15.5.2; ValueError if invalid."""
    a, b = ptx_type(a_dtype), ptx_type(b_dtype)
    fp8 = ("e4m3", "e5m2")
    if a != b and not (a in fp8 and b in fp8):
        raise ValueError(f"wgmma needs A and B of the same type except for FP8 (e4m3/e5m2 mixes), got {a_dtype} and {b_dtype}")
    acc = {"f32": "f32", "f16": "f16"}.get(acc_dtype)
    if acc is None or acc not in _ACC_TYPES[a]:
        raise ValueError(f"accumulator type {acc_dtype!r} is not allowed with {a} inputs: "
                         f"allowed {', '.join(_ACC_TYPES[a])}")
    if m != 64:
        raise ValueError(f"wgmma has M = 64 only, got m = {m}")
    want_k = instruction_k(a_dtype)
    if k != want_k:
        raise ValueError(f"{a} wgmma has K = {want_k}, got k = {k}")
    if not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got n = {n}")
    if (trans_a or trans_b) and a not in ("f16", "bf16"):
        raise ValueError(f"{a} wgmma has no transpose: its operands must be K-major (imm-trans exists for f16/bf16 only)")
    if trans_a and a_from_registers:
        raise ValueError("A from registers cannot be transposed (imm-trans-a exists only with an A descriptor)")
    return WgmmaShape(m, n, k, a, b, acc, bool(a_from_registers), bool(trans_a), bool(trans_b))


def instruction(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
                *, trans_a: bool = False, trans_b: bool = False) -> str:
    """The PTX mnemonic, e.g. 'wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16'.

    The mnemonic is the same whether A comes from registers or shared memory; the flag only
    changes which variants are legal (no transposed A from registers).
    """
    return check(m, n, k, a_dtype, b_dtype, acc_dtype, a_from_registers, trans_a=trans_a, trans_b=trans_b).mnemonic


class InlineAsm(NamedTuple):
    template: str
    constraints: str


def inline_asm(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
               *, trans_a: bool = False, trans_b: bool = False, scale_a: int = 1, scale_b: int = 1) -> InlineAsm:
    """(template, constraints) of one wgmma.mma_async as an LLVM inline-asm call.

    PTX operand order (ISA 9.7.15.5.2):
        f16/bf16, A in smem:  d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b;
        f16/bf16, A in regs:  d, a,      b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b;
        tf32 / fp8:           d, a-desc | a, b-desc, scale-d, imm-scale-a, imm-scale-b;
    scale-d is a predicate: false computes D = A*B (so the first K slice needs no zeroed
    accumulator), true D = A*B + D. We take it as an i32 and set a local predicate from it.

    LLVM operands, in order (R = accumulator registers per thread, `WgmmaShape.accumulator_registers`):
        $0 .. $R-1    outputs: the accumulators, "=f" (f32) or "=r" (f16: i32 holding .f16x2)
        SS form:  $R = A descriptor ("l", i64), $R+1 = B descriptor ("l", i64), $R+2 = scale-d ("r", i32)
        RS form:  $R..$R+3 = A fragment ("r", i32 each), $R+4 = B descriptor ("l"), $R+5 = scale-d ("r")
        then R inputs tied to the outputs ("0" .. "R-1"): the accumulators' incoming values.
    The call returns a struct of R floats (or i32s). The constraint string carries no clobber;
    the backend's asm helper appends ~{memory} (wgmma reads shared memory) and marks it
    side-effecting. imm-scale-a/b are 1 (or -1 to negate), imm-trans 0 for K-major operands,
    1 for MN-major ones (`MNMajorTile`).
    """
    shape = check(m, n, k, a_dtype, b_dtype, acc_dtype, a_from_registers, trans_a=trans_a, trans_b=trans_b)
    if scale_a not in (1, -1) or scale_b not in (1, -1):
        raise ValueError(f"imm-scale-a/b must be 1 or -1, got {scale_a}, {scale_b}")
    r = shape.accumulator_registers
    out = "f" if shape.acc_type == "f32" else "r"
    d = ", ".join(f"${i}" for i in range(r))
    if a_from_registers:
        a = "{" + ", ".join(f"${r + i}" for i in range(4)) + "}"
        b, scale_d = f"${r + 4}", f"${r + 5}"
        inputs = ["r"] * 4 + ["l", "r"]
    else:
        a, b, scale_d = f"${r}", f"${r + 1}", f"${r + 2}"
        inputs = ["l", "l", "r"]
    immediates = [str(scale_a), str(scale_b)]
    if shape.has_transpose_operands:
        if not a_from_registers:
            immediates.append(str(int(shape.trans_a)))
        immediates.append(str(int(shape.trans_b)))
    template = (
        "{\n"
        ".reg .pred p;\n"
        f"setp.ne.b32 p, {scale_d}, 0;\n"
        f"{shape.mnemonic} {{{d}}}, {a}, {b}, p, {', '.join(immediates)};\n"
        "}"
    )
    constraints = ",".join([f"={out}"] * r + inputs + [str(i) for i in range(r)])
    return InlineAsm(template, constraints)


# ---------------------------------------------------------------------------------------------
# Ordering instructions (ISA 9.7.15.7.1 wgmma.fence, 9.7.15.7.2 wgmma.commit_group,
# 9.7.15.7.3 wgmma.wait_group; 9.7.15.4 "Async Proxy")
#
# wgmma reads its shared-memory operands through the async proxy: operands written by TMA need
# only the mbarrier wait, but operands written with st.shared need `fence.proxy.async.shared::cta`
# (and a barrier) before the wgmma.
# ---------------------------------------------------------------------------------------------

FENCE = "wgmma.fence.sync.aligned;"
"""Issued by all warps of the warpgroup before the first wgmma.mma_async, and between any other
register access to an accumulator or A fragment and a wgmma that uses it; back-to-back wgmmas
of the same shape on the same accumulators are ordered without it (ISA 9.7.15.7.1)."""

COMMIT_GROUP = "wgmma.commit_group.sync.aligned;"
"""Close the current wgmma-group: every uncommitted wgmma.mma_async of this warpgroup."""


def wait_group(n: int) -> str:
    """'wgmma.wait_group.sync.aligned N;': wait until at most N wgmma-groups are pending
    (0: all done; only then may the accumulators be read)."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise ValueError(f"wgmma.wait_group takes a non-negative integer constant, got {n!r}")
    return f"wgmma.wait_group.sync.aligned {int(n)};"
