"""Row math on wgmma fragments reading a column vector and masking below the diagonal.

Attention's backward computes the transposed scores Sᵀ (keys by queries) and needs, per query
column, its log-sum-exp (a column vector in smem, the same for every row) and the causal mask
of the transposed tile (`mask_below`: element (r, c) reads -inf where c < r + d). Here a small
kernel P = exp2(mask_below(mask_cols(A·Bᵀ, e − 64n), 64(m − n) + d) · ½ − v) on one warpgroup,
at shapes that are not tile multiples: the interpreter and the H100 against float64, the PTX
through ptxas, and wrong column vectors refused.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError

SOURCE = """
kernel columns(a: bf16[M, 64], b: bf16[N, 64], v: f32[N], d: i32, e: i32, c: f32[M, N]) {
    grid persistent
    box A = a[64, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box V = v[64]
    box C = c[64, 64]
    smem cs: C
    pipeline ring[2] { a: A, b: B, v: V }

    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(c, C) {
            produce ring as s {
                load A[m, 0] -> s.a
                load B[n, 0] -> s.b
                load V[n] -> s.v
            }
        }
    }
    role consumer: warps 4..7, regs 232 {
        accumulator p: f32[64, 64]
        for tile (m, n) in tiles(c, C) {
            consume ring as s {
                p = 0
                mma p, s.a, s.b
                p = exp2(mask_below(mask_cols(p, e - 64 * n), 64 * (m - n) + d) * 0.5 - s.v)
            }
            elect { wait_group read 0 }
            sync
            cs = p
            elect {
                store C[m, n] <- cs
                commit_group
            }
        }
        elect { wait_group 0 }
    }
}
"""
CASES = [(77, 100, 3, 90), (130, 70, -20, 70), (64, 64, 0, 10)]   # M, N, d, e


@pytest.fixture(scope="module")
def kernel():
    return tmalang.compile(SOURCE)


def inputs(m, n, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, 64)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal(-(-n // 4) * 4).astype(np.float32)[:n]
    return a, b, v


def reference(a, b, v, d, e):
    s = a.astype(np.float64) @ b.astype(np.float64).T
    rows, cols = np.indices(s.shape)
    keep = (cols >= rows + d) & (cols < e)
    return np.where(keep, np.exp2(s * 0.5 - v[None, :]), 0.0)


def output(m, n):
    return np.full((m, -(-n // 4) * 4), np.nan, np.float32)[:, :n]


def test_ptx_reads_the_vector_in_pairs_and_assembles(kernel):
    assert "ld.shared.v2.b32" in kernel.ptx or "ld.shared.v2.f32" in kernel.ptx
    ptxas.assemble(kernel.ptx, "sm_90a")


@pytest.mark.parametrize("m,n,d,e", CASES, ids=str)
def test_interpreter_matches_float64(kernel, m, n, d, e):
    a, b, v = inputs(m, n, m + n)
    c = output(m, n)
    kernel.interpret(a, b, v, d, e, c, seed=1, explore=1)
    np.testing.assert_allclose(c, reference(a, b, v, d, e), rtol=1e-5, atol=1e-30)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,d,e", CASES, ids=str)
def test_h100_matches_float64(kernel, m, n, d, e):
    torch = pytest.importorskip("torch")
    a, b, v = inputs(m, n, m + n)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)

    tv = torch.from_numpy(np.ascontiguousarray(v.base)).cuda()[:n]
    tc = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda")[:, :n]
    kernel(device(a), device(b), tv, d, e, tc)
    torch.cuda.synchronize()
    np.testing.assert_allclose(tc.cpu().numpy(), reference(a, b, v, d, e), rtol=2e-5, atol=1e-30)


SWIZZLED = SOURCE.replace("v: f32[N]", "v: bf16[N, 64]").replace("box V = v[64]", "box V = v[64, 64] swizzle 128B") \
    .replace("load V[n] -> s.v", "load V[n, 0] -> s.v")
NARROW = SOURCE.replace("box V = v[64]", "box V = v[16]")


@pytest.mark.parametrize("source", [SWIZZLED, NARROW], ids=["swizzled-tile", "16-columns"])
def test_refuses_tiles_that_are_not_column_vectors_of_the_width(source):
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(source)
    assert caught.value.code == "E067"
