"""Conversions in tile math and epilogues (docs/language.md §14): float → i32 toward zero with NaN 0
and saturation, f32 → f16/bf16 to nearest even with overflow to ±inf, widenings, integers to
floats through f32.

The interpreter (interp/conversions.py) runs small kernels on edge values (NaN, ±inf, ±3e9, the
±2^31 boundary, -0.5, 2147483520, f16's overflow edge, subnormals) and random data, against
references written here in float64 from the definitions alone. The backend's PTX is checked
with filecheck (tests/conversions/casts.tma) and assembled by ptxas. On the GPU, the same kernels
at a shape that is not a box multiple must agree with the interpreter bit for bit.
"""

from __future__ import annotations

import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32,
      "f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
SHAPE = (77, 136)          # 3 x 5 tiles of 32 x 32, the last row and column of tiles partial
INT_MIN, INT_MAX = -2**31, 2**31 - 1
EDGES = [np.nan, -np.nan, np.inf, -np.inf, 3e9, -3e9, 2.0**31, -2.0**31, 2147483520.0, -2147483520.0,
         2147483648.0 + 256, -2147483904.0, -0.5, 0.5, -1.5, 1.5, 2.5, -0.0, 0.0, 0.9999999, -0.9999999,
         65504.0, 65519.99, 65520.0, -65520.0, 1e-8, -6e-8, 3e-5, 1e-40, -1e-45, 3.4e38, -3.4e38, 1e30,
         16777217.0, 123456.789, -7.75]


# ---- the kernels ------------------------------------------------------------------------------

def convert_source(src: str, outputs: list[tuple[str, str]]) -> str:
    """A kernel that loads x: src[M, N] in 32 x 32 tiles and writes output j, of dtype
    outputs[j][0], as the tile-math expression outputs[j][1] of the slot's tile `s.x`."""
    params = ", ".join(f"o{j}: {dtype}[M, N]" for j, (dtype, _) in enumerate(outputs))
    decls = "\n".join(f"    box O{j} = o{j}[32, 32]\n    smem t{j}: O{j}" for j in range(len(outputs)))
    math = "\n".join(f"                t{j} = {expr}" for j, (_, expr) in enumerate(outputs))
    stores = "\n".join(f"                store O{j}[m, n] <- t{j}" for j in range(len(outputs)))
    return f"""
kernel convert(x: {src}[M, N], {params}) {{
    grid persistent
    box X = x[32, 32]
{decls}
    pipeline ring[2] {{ x: X }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(x, X) {{
            produce ring as s {{ load X[m, n] -> s.x }}
        }}
    }}
    role consumer: warps 1..4 {{
        for tile (m, n) in tiles(x, X) {{
            consume ring as s {{
{math}
            }}
            elect {{
{stores}
                commit_group
                wait_group read 0
            }}
            sync
        }}
    }}
}}
"""


# Each case: source dtype, then (output dtype, tile-math expression, reference from float64 x).
def _as_i32(x64):
    """toward zero, NaN 0, saturating: written element by element from the definition."""
    def one(v: float) -> int:
        if v != v:
            return 0
        if v >= 2.0**31:
            return INT_MAX
        if v < -2.0**31:
            return INT_MIN
        return int(v)          # Python's int() truncates toward zero
    return np.array([one(float(v)) for v in x64.reshape(-1)], np.int64).reshape(x64.shape)


FORMATS = {"f32": (23, -126, float(np.finfo(np.float32).max)), "f16": (10, -14, 65504.0),
           "bf16": (7, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))}


def _nearest_even(x64, fmt: str):
    """float64 values rounded to `fmt`'s precision, ties to even, subnormals on emin's spacing,
    beyond the largest finite value ±inf; NaN and ±inf stay. Exact in float64 (powers of two)."""
    mantissa, emin, largest = FORMATS[fmt]
    x64 = np.asarray(x64, np.float64)
    _, e = np.frexp(x64)                                   # x = f · 2^e, 0.5 <= |f| < 1
    ulp = np.ldexp(1.0, np.maximum(e - 1, emin) - mantissa)
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.round(x64 / ulp) * ulp                      # np.round rounds halves to even
        y = np.where(np.abs(y) > largest, np.copysign(np.inf, x64), y)
    return np.where(np.isfinite(x64), y, x64)


# NaN bits of an output: cvt.rn.f16/bf16.f32 write 0x7FFF, cvt.f32.f16 0x7FFFFFFF, and
# cvt.f32.bf16 keeps the bf16's bits as the f32's upper half.
HALF_NAN, F32_NAN = 0x7FFF, 0x7FFFFFFF
BF16_WIDENED_NAN = 0x7FFF0000

CASES = {
    "f32-to-i32": ("f32", [("i32", "s.x", _as_i32, None), ("i32", "i32(s.x)", _as_i32, None),
                           ("f32", "i32(s.x)", lambda x: _nearest_even(_as_i32(x), "f32"), None)]),
    "f16-to-i32": ("f16", [("i32", "s.x", _as_i32, None), ("i32", "i32(s.x) + 0", _as_i32, None)]),
    "bf16-to-i32": ("bf16", [("i32", "s.x", _as_i32, None),
                             ("i32", "min(i32(s.x), 2147483647)", _as_i32, None)]),
    "f32-narrowing": ("f32", [("f16", "s.x", lambda x: _nearest_even(x, "f16"), HALF_NAN),
                              ("bf16", "s.x", lambda x: _nearest_even(x, "bf16"), HALF_NAN),
                              ("f32", "f16(s.x)", lambda x: _nearest_even(x, "f16"), F32_NAN),
                              ("f32", "bf16(s.x)", lambda x: _nearest_even(x, "bf16"), BF16_WIDENED_NAN)]),
    "i32-to-floats": ("i32", [("f16", "s.x", lambda x: _nearest_even(_nearest_even(x, "f32"), "f16"), None),
                              ("bf16", "s.x", lambda x: _nearest_even(_nearest_even(x, "f32"), "bf16"), None),
                              ("f32", "s.x", lambda x: _nearest_even(x, "f32"), None)]),
    "f16-widening": ("f16", [("f32", "s.x", lambda x: x, F32_NAN)]),
    "bf16-widening": ("bf16", [("f32", "s.x", lambda x: x, "bf16 bits")]),
}


def case_inputs(name: str, seed: int):
    """x (edge values first and in the last tile row, the rest random over 16 orders of magnitude)
    and NaN-filled outputs."""
    src, outputs = CASES[name]
    rng = np.random.default_rng(seed)
    if src == "i32":
        x = rng.integers(INT_MIN, INT_MAX, SHAPE, endpoint=True, dtype=np.int64)
        x.reshape(-1)[:8] = [0x01010001, -0x01010001, 16777217, INT_MAX, INT_MIN, 65519, 65520, -1]
        x = x.astype(np.int32)
    else:
        x = rng.standard_normal(SHAPE) * 10.0 ** rng.uniform(-8, 12, SHAPE)
        x.reshape(-1)[:len(EDGES)] = EDGES
        x[-1, -len(EDGES):] = EDGES
        with np.errstate(over="ignore"):
            x = x.astype(NP[src])
    outs = [np.full(SHAPE, np.nan if dtype != "i32" else 12345, NP[dtype]) for dtype, *_ in outputs]
    return x, outs


def expected_bits(dtype: str, reference, nan, x: np.ndarray) -> np.ndarray:
    """The output's bits: the reference in `dtype`, and where it is NaN the NaN the GPU writes."""
    values = np.asarray(reference(x.astype(np.float64)))
    with np.errstate(invalid="ignore", over="ignore"):
        bits = values.astype(NP[dtype]).view(f"u{np.dtype(NP[dtype]).itemsize}").copy()
    where = np.isnan(values) if dtype != "i32" else np.zeros(values.shape, bool)
    if where.any():
        bits[where] = (x.view(np.uint16)[where].astype(np.uint32) << 16) if nan == "bf16 bits" else nan
    return bits


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}")


@pytest.fixture(scope="module")
def kernels():
    return {name: tmalang.compile(convert_source(src, [(d, e) for d, e, *_ in outputs]))
            for name, (src, outputs) in CASES.items()}


# ---- the interpreter --------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_interpreter_converts_as_defined(kernels, name):
    _, outputs = CASES[name]
    x, outs = case_inputs(name, seed=len(name))
    kernels[name].interpret(x, *outs, seed=2)
    for (dtype, expr, reference, nan), out in zip(outputs, outs):
        expected = expected_bits(dtype, reference, nan, x)
        mismatch = np.argwhere(_bits(out) != expected)
        assert mismatch.size == 0, (f"{dtype} = {expr}: at {mismatch[:5].tolist()} x = "
                                    f"{[x[tuple(i)] for i in mismatch[:5]]}, got {out[tuple(mismatch[0])]}")


def test_the_edges_are_where_numpy_and_the_gpu_disagree():
    """Guards the test's reach: numpy's own cast gets the i32 edges wrong (x86: INT_MIN) and keeps
    NaN payloads, so a plain astype in the interpreter would fail the test above."""
    x = np.array(EDGES, np.float32)
    with np.errstate(invalid="ignore"):
        plain = x.astype(np.int32)
    assert (plain != _as_i32(x.astype(np.float64))).any()
    assert (_bits(x.astype(np.float16))[np.isnan(x)] != HALF_NAN).any()


EPILOGUE = """
kernel epilogue(a: bf16[M, K], b: bf16[N, K], alpha: f32, c: f32[M, N]) {
    grid persistent
    box A = a[64, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box C = c[64, 64]
    smem cs: C
    pipeline ring[2] { a: A, b: B }
    role producer: warp 0 {
        for tile (m, n) in tiles(c, C) {
            for k in steps(K, 64) {
                produce ring as s {
                    load A[m, k] -> s.a
                    load B[n, k] -> s.b
                }
            }
        }
    }
    role consumer: warps 4..7 {
        accumulator acc: f32[64, 64]
        for tile (m, n) in tiles(c, C) {
            elect { wait_group read 0 }
            sync
            acc = 0
            for k in steps(K, 64) {
                consume ring as s { mma acc, s.a, s.b }
            }
            cs = i32(acc * alpha) + 0.5
            elect {
                store C[m, n] <- cs
                commit_group
            }
        }
        elect { wait_group 0 }
    }
}
"""


def epilogue_inputs(seed: int):
    """Small integers (exact products and sums in f32), a row of A with NaN and one with +inf,
    B without zeros; alpha makes many products leave the i32 range."""
    rng = np.random.default_rng(seed)
    m, n, k = 131, 72, 128
    a = rng.integers(-8, 9, (m, k)).astype(np.float64)
    b = rng.choice([-1, 1], (n, k)) * rng.integers(1, 9, (n, k)).astype(np.float64)
    a[3, 5], a[70, 0] = np.nan, np.inf
    alpha = np.float32(rng.choice([-1, 1]) * 3e7)
    c = np.full((m, n), np.nan, np.float32)
    return a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), alpha, c


def epilogue_reference(a, b, alpha) -> np.ndarray:
    acc = a.astype(np.float64) @ b.astype(np.float64).T          # exact: small integers
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = (acc.astype(np.float32) * alpha).astype(np.float64)     # one f32 multiply
    return (_nearest_even(_as_i32(scaled), "f32") + 0.5).astype(np.float32)


@pytest.fixture(scope="module")
def epilogue():
    return tmalang.compile(EPILOGUE)


def test_an_epilogue_casts_to_i32_and_goes_on_in_f32(epilogue):
    """`i32(x)` in an epilogue once crashed LLVM (fptrunc float to i32); now it is the cast of §14."""
    a, b, alpha, c = epilogue_inputs(seed=4)
    epilogue.interpret(a, b, alpha, c, seed=1)
    expected = epilogue_reference(a, b, alpha)
    np.testing.assert_array_equal(c, expected)
    assert {2.0**31, -2.0**31, 0.5} <= set(np.unique(expected).tolist())   # saturated, and the NaN row
    assert "cvt.rzi.s32.f32" in epilogue.ptx and "fptosi" not in epilogue.llvm_ir


# ---- what the language refuses ----------------------------------------------------------------

@pytest.mark.parametrize("src,expr", [("f8e4m3", "s.x"), ("f8e5m2", "i32(s.x)"), ("f32", "f8e4m3(s.x)"),
                                      ("f32", "u32(s.x)")])
def test_fp8_and_other_integer_casts_are_not_tile_math(src, expr):
    """The float → integer conversions the language has are those to i32: fp8 tiles, fp8 casts
    and casts to other integer types are E080."""
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(convert_source(src, [("i32", expr)]))
    assert caught.value.code == "E080"


# ---- the backend ------------------------------------------------------------------------------

def test_ptx_matches_its_checks():
    """tests/conversions/casts.tma: its CHECK lines state the PTX of each conversion."""
    path = ROOT / "tests" / "conversions" / "casts.tma"
    k = tmalang.compile_file(path)
    checked = subprocess.run([sys.executable, "-m", "filecheck", str(path)], input=k.ptx,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert ptxas.assemble(k.ptx, "sm_90a")[0][:4] == b"\x7fELF"


def test_no_float_to_integer_conversion_is_an_llvm_fptosi(kernels, epilogue):
    """fptosi/fptoui are poison out of range; the codegen never emits them, and LLVM's optimiser
    introduces none."""
    for path in sorted((ROOT / "tmalang" / "backend").glob("*.py")):
        assert not re.search(r"\.fpto[su]i\(", path.read_text()), path.name
    for k in [*kernels.values(), epilogue]:
        assert not re.search(r"\bfpto[su]i\b", k.llvm_ir)


def test_every_conversion_kernel_assembles(kernels):
    for name, k in kernels.items():
        assert ptxas.assemble(k.ptx, "sm_90a")[0][:4] == b"\x7fELF", name


# ---- on the GPU -------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_gpu_converts_as_the_interpreter_bit_for_bit(kernels, name):
    _, outputs = CASES[name]
    x, outs = case_inputs(name, seed=len(name) + 100)
    gpu_outs = [o.copy() for o in outs]
    kernels[name](x, *gpu_outs)
    kernels[name].interpret(x, *outs, seed=3)
    for (dtype, expr, reference, nan), gpu, interp in zip(outputs, gpu_outs, outs):
        expected = expected_bits(dtype, reference, nan, x)
        differ = np.argwhere(_bits(gpu) != _bits(interp))
        assert differ.size == 0, (f"{dtype} = {expr}: GPU and interpreter differ at {differ[:5].tolist()}, "
                                  f"x = {[x[tuple(i)] for i in differ[:5]]}, GPU {gpu[tuple(differ[0])]!r}, "
                                  f"interpreter {interp[tuple(differ[0])]!r}")
        np.testing.assert_array_equal(_bits(gpu), expected)


@pytest.mark.gpu
def test_gpu_epilogue_i32_cast_matches(epilogue):
    a, b, alpha, c = epilogue_inputs(seed=9)
    gpu = c.copy()
    epilogue(a, b, alpha, gpu)
    epilogue.interpret(a, b, alpha, c, seed=1)
    np.testing.assert_array_equal(_bits(gpu), _bits(c))
    np.testing.assert_array_equal(gpu, epilogue_reference(a, b, alpha))
