"""`accumulator acc: f32[64, C] by columns`: the role's warpgroups split the columns.

Attention's backward needs it for dQ = dS·K at head dim 128: both warpgroups multiply the same
64 query rows of dS by their own half of K's columns. Here C = A·B on two warpgroups, each
holding 64 of C's 128 columns, with B K-major ([N, K]) or MN-major (`kn`, [K, N]) and A K-major
or MN-major (`km`): the interpreter and the H100 against float64 at shapes that are not tile
multiples, the epilogue into a swizzled f32 tile (each warpgroup writing its columns), and the
forms that cannot split refused.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError

FORMS = [(False, False), (True, False), (False, True), (True, True)]   # (a km, b kn)
SHAPES = [(77, 200, 100), (130, 256, 64), (1, 1, 1)]


def source(km: bool, kn: bool) -> str:
    a_shape, a_box, a_load = ("K, M", "a[64, 64]", "load A[k, m]") if km else ("M, K", "a[64, 64]", "load A[m, k]")
    b_shape, b_box, b_load = ("K, N", "b[64, 128]", "load B[k, n]") if kn else ("N, K", "b[128, 64]", "load B[n, k]")
    return f"""
kernel gemm_columns(a: bf16[{a_shape}], b: bf16[{b_shape}], c: f32[M, N]) {{
    grid persistent
    box A = {a_box} swizzle 128B
    box B = {b_box} swizzle 128B
    box C = c[64, 128] swizzle 128B
    pipeline ring[2] {{ a: A, b: B }}
    pipeline out[1] {{ c: C }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(c, C) {{
            for k in steps(K, 64) {{
                produce ring as s {{
                    {a_load} -> s.a
                    {b_load} -> s.b
                }}
            }}
        }}
    }}
    role store: warp 1, regs 40 {{
        for tile (m, n) in tiles(c, C) {{
            consume out as r {{ store C[m, n] <- r.c }}
        }}
    }}
    role consumer: warps 4..11, regs 232 {{
        accumulator p: f32[64, 128] by columns
        for tile (m, n) in tiles(c, C) {{
            p = 0
            for k in steps(K, 64) {{
                consume ring as s {{ mma p, s.a{' km' if km else ''}, s.b{' kn' if kn else ''} }}
            }}
            produce out as r {{ r.c = p * 0.5 }}
        }}
    }}
}}
"""


@pytest.fixture(scope="module", params=FORMS, ids=lambda f: f"km{int(f[0])}-kn{int(f[1])}")
def kernel(request):
    return request.param, tmalang.compile(source(*request.param))


def inputs(km, kn, m, n, k, seed):
    rng = np.random.default_rng(seed)

    def matrix(rows, cols):
        return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :cols]
    return matrix(*((k, m) if km else (m, k))), matrix(*((k, n) if kn else (n, k)))


def reference(a, b, km, kn):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return 0.5 * (a.T if km else a) @ (b if kn else b.T)


def relative_error(c, expected) -> float:
    return float(np.linalg.norm(np.asarray(c, np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))


def test_each_warpgroup_issues_n64_and_ptxas_accepts(kernel):
    _, k = kernel
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in k.ptx
    _, stats = ptxas.assemble(k.ptx, "sm_90a")
    assert stats.spill_stores == 0


@pytest.mark.parametrize("m,n,k", SHAPES[:2], ids=str)
def test_interpreter_matches_float64(kernel, m, n, k):
    (km, kn), gemm = kernel
    a, b = inputs(km, kn, m, n, k, m + n + k)
    c = np.full((m, -(-n // 4) * 4), np.nan, np.float32)[:, :n]
    gemm.interpret(a, b, c, seed=m, explore=2)
    assert relative_error(c, reference(a, b, km, kn)) < 1e-5


def on_gpu(gemm, a, b, m: int, n: int) -> np.ndarray:
    """C = gemm(A, B) on the GPU, A and B views into rows padded to 16 bytes, as on the host."""
    torch = pytest.importorskip("torch")

    def device(x):
        padded = torch.from_numpy(np.ascontiguousarray(x.base).view(np.int16)).cuda()
        return padded.view(torch.bfloat16)[:, :x.shape[1]]

    tc = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda")[:, :n]
    gemm(device(a), device(b), tc)
    torch.cuda.synchronize()
    return tc.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_h100_matches_float64(kernel, m, n, k):
    (km, kn), gemm = kernel
    a, b = inputs(km, kn, m, n, k, 7 * m + n + k)
    assert relative_error(on_gpu(gemm, a, b, m, n), reference(a, b, km, kn)) < 1e-5


@pytest.mark.parametrize("change,code", [
    (("accumulator p: f32[64, 128] by columns", "accumulator p: f32[128, 128] by columns"), "E087"),
    (("accumulator p: f32[64, 128] by columns", "accumulator p: f32[64, 24] by columns"), "E087"),
    (("produce out as r { r.c = p * 0.5 }", "p = exp2(p)\n            produce out as r { r.c = p * 0.5 }"), "E553"),
    (("r.c = p * 0.5", "r.c = p[0, 1]"), "E093"),
], ids=["128-rows", "12-columns-each", "row-math", "block"])
def test_refusals(change, code):
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(source(False, False).replace(*change))
    assert caught.value.code == code


def narrow(km: bool) -> str:
    """64 columns over two warpgroups: each reads 32 of B's, half a 128-byte panel (kn)."""
    return source(km, True).replace("b[64, 128]", "b[64, 64]").replace(
        "f32[64, 128] by columns", "f32[64, 64] by columns").replace("c[64, 128]", "c[64, 64]")


@pytest.mark.parametrize("km", [False, True])
def test_half_panels_of_an_mn_major_b(km):
    """Warpgroup 1's B starts 64 bytes into each 128-byte row of the panel."""
    gemm = tmalang.compile(narrow(km))
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16" in gemm.ptx
    a, b = inputs(km, True, 77, 100, 130, 5)
    c = np.full((77, 100), np.nan, np.float32)
    gemm.interpret(a, b, c, seed=2, explore=2)
    assert relative_error(c, reference(a, b, km, True)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("km", [False, True])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_h100_half_panels_of_an_mn_major_b(km, m, n, k):
    gemm = tmalang.compile(narrow(km))
    a, b = inputs(km, True, m, n, k, 3 * m + n + k)
    assert relative_error(on_gpu(gemm, a, b, m, n), reference(a, b, km, True)) < 1e-5


def test_kn_parts_that_cross_a_panel_are_refused():
    crossing = source(False, True).replace("b[64, 128]", "b[64, 192]").replace(
        "f32[64, 128] by columns", "f32[64, 192] by columns").replace("c[64, 128]", "c[64, 192]")
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(crossing)
    assert caught.value.code == "E512"
