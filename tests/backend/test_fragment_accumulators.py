"""16-bit accumulators: `accumulator p: bf16[R, K]` holds wgmma's register A fragment, converted
when row math writes it (`p = bf16(s)`) and read as it lies (`mma acc, p, b`).

The chain D = bf16(A·Bᵀ)·Wᵀ written that way must compute exactly what the cast form `mma acc,
bf16(s), b` computes (same roundings, same sums), on the interpreter and the H100, against float64
at shapes that are not tile multiples; f16 works the same way. Its IR text round-trips, and the
conversion happens at the row math: the PTX converts each pair once (cvt.rn.bf16x2.f32), before
the wgmma that reads it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

SHAPES = [(77, 136, 100), (200, 64, 31)]      # (M, N, K); H = (M + 2N) / 5, not a multiple of 64


def source(dtype: str = "bf16", fragment: bool = True) -> str:
    convert = (f"pf = {dtype}(p)\n                consume wring as s {{ mma acc, pf, s.w }}" if fragment
               else f"consume wring as s {{ mma acc, {dtype}(p), s.w }}")
    return f"""
kernel chain(a: {dtype}[M, K], b: {dtype}[H, K], w: {dtype}[N, H], d: f32[M, N]) {{
    grid persistent
    box A = a[128, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box W = w[128, 64] swizzle 128B
    box D = d[128, 128]
    pipeline ring[3] {{ a: A, b: B }}
    pipeline wring[2] {{ w: W }}
    pipeline out[1] {{ d: D }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(d, D) {{
            for h in steps(H, 64) {{
                for k in steps(K, 64) {{
                    produce ring as s {{
                        load A[m, k] -> s.a
                        load B[h, k] -> s.b
                    }}
                }}
                produce wring as s {{ load W[n, h] -> s.w }}
            }}
        }}
    }}
    role store: warp 1, regs 40 {{
        for tile (m, n) in tiles(d, D) {{
            consume out as r {{ store D[m, n] <- r.d }}
        }}
    }}
    role consumer: warps 4..11, regs 232 {{
        accumulator p: f32[128, 64]
        accumulator pf: {dtype}[128, 64]
        accumulator acc: f32[128, 128]
        for tile (m, n) in tiles(d, D) {{
            acc = 0
            for h in steps(H, 64) {{
                p = 0
                for k in steps(K, 64) {{
                    consume ring as s {{ mma p, s.a, s.b }}
                }}
                {convert}
            }}
            produce out as r {{ r.d = acc }}
        }}
    }}
}}
"""


def inputs(dtype: str, m: int, n: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    h = (m + 2 * n) // 5
    storage = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16

    def matrix(rows, cols):
        return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(storage)[:, :cols]
    d = np.full((m, -(-n // 4) * 4), np.nan, np.float32)[:, :n]
    return matrix(m, k), matrix(h, k), matrix(n, h), d


def reference(a, b, w, dtype: str) -> np.ndarray:
    storage = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
    p = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32).astype(storage).astype(np.float64)
    return p @ w.astype(np.float64).T


def relative_error(d, expected) -> float:
    return float(np.linalg.norm(np.asarray(d, np.float64) - expected) / np.linalg.norm(expected))


@pytest.fixture(scope="module", params=["bf16", "f16"])
def kernels(request):
    dtype = request.param
    return dtype, tmalang.compile(source(dtype)), tmalang.compile(source(dtype, fragment=False))


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_interpreter_matches_float64_and_the_cast_form(kernels, m, n, k):
    dtype, fragment, cast = kernels
    a, b, w, d = inputs(dtype, m, n, k, m + n)
    fragment.interpret(a, b, w, d, seed=1)
    assert relative_error(d, reference(a, b, w, dtype)) < 1e-2
    again = d.copy()
    cast.interpret(a, b, w, again, seed=1)
    assert np.array_equal(d, again)


def test_ir_round_trips_and_ptx_converts_at_the_row_math(kernels):
    dtype, fragment, _ = kernels
    assert f"accumulator @pf dtype={dtype} shape=[128, 64]" in fragment.ir
    assert "a=!pf" in fragment.ir
    assert print_ir(parse_ir(fragment.ir)) == fragment.ir
    ptx = fragment.ptx
    convert = "cvt.rn.bf16x2.f32" if dtype == "bf16" else "cvt.rn.f16x2.f32"
    assert ptx.count(convert) == 16          # 64 columns: 16 pairs a thread, converted once
    assert ptx.index(convert) < ptx.index(f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{dtype}.{dtype}")
    _, stats = ptxas.assemble(ptx, "sm_90a")
    assert stats.spill_stores == 0


def on_gpu(kernel, a, b, w, d) -> np.ndarray:
    torch = pytest.importorskip("torch")

    def device(x):
        padded = torch.from_numpy(np.ascontiguousarray(x.base).view(np.int16)).cuda()
        return padded.view(torch.bfloat16 if x.dtype == ml_dtypes.bfloat16 else torch.float16)[:, :x.shape[1]]

    out = torch.full(d.base.shape, float("nan"), device="cuda")[:, :d.shape[1]]
    kernel(device(a), device(b), device(w), out)
    torch.cuda.synchronize()
    return out.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_h100_matches_float64_and_the_interpreter(kernels, m, n, k):
    dtype, fragment, _ = kernels
    a, b, w, d = inputs(dtype, m, n, k, 3 * m + n)
    got = on_gpu(fragment, a, b, w, d)
    assert relative_error(got, reference(a, b, w, dtype)) < 1e-2
    fragment.interpret(a, b, w, d, seed=2)
    # the same products, but A·Bᵀ's sums run in another order: a few elements of P round the other
    # way (one ulp: 2^-8 relative in bf16, 2^-11 in f16), which moves D by about 1e-5 of its norm
    assert relative_error(got, d) < 1e-3
