"""wgmma on panelled boxes (docs §4 "Panelled boxes", §15): operands and epilogue targets of several
128-byte panels, at attention's head dim 128.

- K-major A [128, 128] and B [128, 128]: K = 128 spans two panels; K steps 0..3 read panel 0,
  steps 4..7 panel 1 (the descriptor start moves rows × 128 bytes on).
- MN-major B `kn` [64, 128]: N = 128 is two 64-element columns, one panel each, LBO apart.
- The epilogue writes a panelled swizzled tile (two bf16 panels, four f32 panels) that a panelled box
  stores.
- O = bf16(Q·Kᵀ)·V with Q, K [S, 128] and V [S, 128] as stored (kn): attention's two GEMMs.

Interpreter (CPU) and H100 against float64 at shapes that are not box multiples, the H100 against
the interpreter; random data, so a misplaced panel shows as a large error.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas

BF16 = ml_dtypes.bfloat16
NUMPY = {"bf16": BF16, "f32": np.float32}


def gemm_source(out: str) -> str:
    """C = A · Bᵀ, A [M, K], B [N, K] in [128, 128] panelled boxes; C through a panelled swizzled tile."""
    return f"""
kernel gemm_panels(a: bf16[M, K], b: bf16[N, K], c: {out}[M, N]) {{
    grid persistent
    box A = a[128, 128] swizzle 128B
    box B = b[128, 128] swizzle 128B
    box C = c[128, 128] swizzle 128B
    smem cs: C
    pipeline ring[2] {{ a: A, b: B }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(c, C) {{
            for k in steps(K, 128) {{
                produce ring as s {{
                    load A[m, k] -> s.a
                    load B[n, k] -> s.b
                }}
            }}
        }}
    }}
    role consumer: warps 4..11, regs 232 {{
        accumulator acc: f32[128, 128]
        for tile (m, n) in tiles(c, C) {{
            acc = 0
            for k in steps(K, 128) {{
                consume ring as s {{ mma acc, s.a, s.b }}
            }}
            elect {{ wait_group read 0 }}
            sync
            cs = {out}(acc)
            elect {{
                store C[m, n] <- cs
                commit_group
            }}
        }}
        elect {{ wait_group 0 }}
    }}
}}
"""


KN_SOURCE = """
kernel gemm_kn_panels(a: bf16[M, K], b: bf16[K, N], c: f32[M, N]) {
    grid persistent
    box A = a[128, 64] swizzle 128B
    box B = b[64, 128] swizzle 128B
    box C = c[128, 128]
    smem cs: C
    pipeline ring[2] { a: A, b: B }

    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(c, C) {
            for k in steps(K, 64) {
                produce ring as s {
                    load A[m, k] -> s.a
                    load B[k, n] -> s.b
                }
            }
        }
    }
    role consumer: warps 4..11, regs 232 {
        accumulator acc: f32[128, 128]
        for tile (m, n) in tiles(c, C) {
            acc = 0
            for k in steps(K, 64) {
                consume ring as s { mma acc, s.a, s.b kn }
            }
            elect { wait_group read 0 }
            sync
            cs = acc
            elect {
                store C[m, n] <- cs
                commit_group
            }
        }
        elect { wait_group 0 }
    }
}
"""

CHAIN_SOURCE = """
kernel chain_panels(q: bf16[M, D], k: bf16[S, D], v: bf16[S, D], o: f32[M, D]) {
    grid persistent
    box Q = q[128, 128] swizzle 128B
    box Kb = k[128, 128] swizzle 128B
    box V = v[128, 128] swizzle 128B
    box O = o[128, 128]
    smem os: O
    pipeline qk[2] { q: Q, k: Kb }
    pipeline vs[1] { v: V }

    role producer: warp 0, regs 40 {
        for tile (m, d) in tiles(o, O) {
            for j in steps(S, 128) {
                produce qk as s {
                    load Q[m, 0] -> s.q
                    load Kb[j, 0] -> s.k
                }
                produce vs as s { load V[j, d] -> s.v }
            }
        }
    }
    role consumer: warps 4..11, regs 232 {
        accumulator p: f32[128, 128]
        accumulator acc: f32[128, 128]
        for tile (m, d) in tiles(o, O) {
            acc = 0
            for j in steps(S, 128) {
                p = 0
                consume qk as s { mma p, s.q, s.k }
                consume vs as s { mma acc, bf16(p), s.v kn }
            }
            elect { wait_group read 0 }
            sync
            os = acc
            elect {
                store O[m, d] <- os
                commit_group
            }
        }
        elect { wait_group 0 }
    }
}
"""


@pytest.fixture(scope="module", params=["bf16", "f32"])
def gemm(request):
    return request.param, tmalang.compile(gemm_source(request.param))


@pytest.fixture(scope="module")
def kn():
    return tmalang.compile(KN_SOURCE)


@pytest.fixture(scope="module")
def chain():
    return tmalang.compile(CHAIN_SOURCE)


def matrix(rng, rows, cols, dtype=BF16):
    """Random values, rows padded to 16 bytes (a view into the padded array)."""
    per_row = 16 // np.dtype(dtype).itemsize
    return rng.standard_normal((rows, -(-cols // per_row) * per_row)).astype(dtype)[:, :cols]


def poisoned(rows, cols, dtype):
    per_row = 16 // np.dtype(dtype).itemsize
    return np.full((rows, -(-cols // per_row) * per_row), np.nan, dtype=dtype)[:, :cols]


def error_to(c, reference) -> float:
    return float(np.linalg.norm(np.asarray(c, np.float64) - reference) / max(np.linalg.norm(reference), 1e-30))


def chain_reference(q, k, v):
    p = (q.astype(np.float64) @ k.astype(np.float64).T).astype(np.float32).astype(BF16)
    return p.astype(np.float64) @ v.astype(np.float64)


# ---- PTX ----------------------------------------------------------------------------------------

def test_gemm_ptx(gemm):
    """Eight k16 steps per warpgroup over both K panels; two loads of two panels each; the panelled
    C tile stored as one copy per panel (2 bf16, 4 f32); ptxas accepts it."""
    out, k = gemm
    assert k.ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 8
    assert k.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 4
    assert k.ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == {"bf16": 2, "f32": 4}[out]
    ptxas.assemble(k.ptx, "sm_90a")


def test_kn_ptx(kn):
    assert kn.ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 4
    assert ", p, 1, 1, 0, 1;" in kn.ptx
    ptxas.assemble(kn.ptx, "sm_90a")


def test_chain_ptx(chain):
    assert chain.ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 16
    assert "p, 1, 1, 1;" in chain.ptx      # register A, imm-trans-b = 1
    stats = chain.stats()
    assert stats.spill_stores == 0 and stats.spill_loads == 0


def test_panelled_tiles_keep_box_bytes(gemm):
    """expect_tx and the smem sizes count the whole tile: 2 × 32 KiB per ring stage."""
    _, k = gemm
    assert "65536" in k.explain()


# ---- interpreter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,kk", [(130, 200, 100), (77, 129, 300)], ids=str)
def test_gemm_interpreter_matches_float64(gemm, m, n, kk):
    out, k = gemm
    rng = np.random.default_rng(m + n + kk)
    a, b = matrix(rng, m, kk), matrix(rng, n, kk)
    c = poisoned(m, n, NUMPY[out])
    k.interpret(a, b, c, seed=m, explore=1)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    assert error_to(c, reference) < (1e-2 if out == "bf16" else 1e-5)


def test_kn_interpreter_matches_float64(kn):
    rng = np.random.default_rng(5)
    a, b = matrix(rng, 130, 100), matrix(rng, 100, 200)
    c = poisoned(130, 200, np.float32)
    kn.interpret(a, b, c, seed=1, explore=1)
    assert error_to(c, a.astype(np.float64) @ b.astype(np.float64)) < 1e-5


@pytest.mark.parametrize("m,s,d", [(77, 130, 128), (130, 200, 100)], ids=str)
def test_chain_interpreter_matches_float64(chain, m, s, d):
    rng = np.random.default_rng(m + s + d)
    q, k, v = matrix(rng, m, d), matrix(rng, s, d), matrix(rng, s, d)
    o = poisoned(m, d, np.float32)
    chain.interpret(q, k, v, o, seed=2, explore=1)
    assert error_to(o, chain_reference(q, k, v)) < 1e-2


# ---- H100 ----------------------------------------------------------------------------------------

def _cuda(torch, x):
    """A CUDA tensor with x's values and padded row stride (x is a view into padded rows)."""
    base = x.base if x.base is not None else x
    raw = torch.from_numpy(np.ascontiguousarray(base).view(np.int16 if x.dtype == BF16 else np.int32)).cuda()
    typed = raw.view(torch.bfloat16 if x.dtype == BF16 else torch.float32)
    return typed[:, :x.shape[1]]


def _run_on_h100(kernel, *arrays):
    """Launch with the inputs copied to the GPU and the last array (NaN-poisoned) as the output."""
    torch = pytest.importorskip("torch")
    tensors = [_cuda(torch, x) for x in arrays]
    kernel(*tensors)
    torch.cuda.synchronize()
    out = tensors[-1].cpu()
    return (out.view(torch.int16).numpy().view(BF16) if out.dtype == torch.bfloat16 else out.numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,kk", [(130, 200, 100), (77, 129, 300), (1000, 515, 1030)], ids=str)
def test_h100_gemm_matches_float64_and_interpreter(gemm, m, n, kk):
    """K over two panels (descriptor start + rows × 128 bytes at step 4), the panelled epilogue tile."""
    out, k = gemm
    rng = np.random.default_rng(3 * m + n + kk)
    a, b = matrix(rng, m, kk), matrix(rng, n, kk)
    c = _run_on_h100(k, a, b, poisoned(m, n, NUMPY[out]))
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    assert error_to(c, reference) < (1e-2 if out == "bf16" else 1e-5)
    if m * n * kk <= 77 * 129 * 300:
        expected = poisoned(m, n, NUMPY[out])
        k.interpret(a, b, expected, seed=1, explore=1)
        np.testing.assert_allclose(np.asarray(c, np.float32), np.asarray(expected, np.float32),
                                   rtol=1e-2 if out == "bf16" else 1e-4, atol=1e-2 if out == "bf16" else 1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,kk", [(130, 200, 100), (257, 129, 1000)], ids=str)
def test_h100_kn_matches_float64_and_interpreter(kn, m, n, kk):
    """An MN-major B of N = 128: two 64-element columns, LBO = K rows × 128 bytes apart."""
    rng = np.random.default_rng(m + 5 * n + kk)
    a, b = matrix(rng, m, kk), matrix(rng, kk, n)
    c = _run_on_h100(kn, a, b, poisoned(m, n, np.float32))
    assert error_to(c, a.astype(np.float64) @ b.astype(np.float64)) < 1e-5
    if m * n * kk <= 130 * 200 * 100:
        expected = poisoned(m, n, np.float32)
        kn.interpret(a, b, expected, seed=1, explore=1)
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("m,s,d", [(77, 130, 128), (130, 200, 100), (1000, 4099, 128)], ids=str)
def test_h100_chain_matches_float64_and_interpreter(chain, m, s, d):
    """O = bf16(Q·Kᵀ)·V at head dim 128 (and 100: panel 1 partly outside the tensor)."""
    rng = np.random.default_rng(m + s + d)
    q, k, v = matrix(rng, m, d), matrix(rng, s, d), matrix(rng, s, d)
    o = _run_on_h100(chain, q, k, v, poisoned(m, d, np.float32))
    assert error_to(o, chain_reference(q, k, v)) < 1e-2
    if m * s <= 130 * 200:
        expected = poisoned(m, d, np.float32)
        chain.interpret(q, k, v, expected, seed=1, explore=1)
        np.testing.assert_allclose(o, expected, rtol=2e-2, atol=2e-2)
