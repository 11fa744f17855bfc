"""`mma acc, a, b kn`: B stored [K, N] (MN-major, N innermost), read by wgmma with imm-trans-b = 1.

A small GEMM C = A · B with A [M, K] and B [K, N] as they lie in memory, in bf16 and f16, f32
out, at shapes that are not tile multiples: the interpreter (CPU) and the H100 against float64,
and the H100 against the interpreter. The encoding itself (wgmma.MNMajorTile) is checked against
the PTX ISA text in tests/targets/test_wgmma_encoding.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_source
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
TORCH = {"bf16": "bfloat16", "f16": "float16"}
SHAPES = [(77, 64, 48), (130, 100, 200), (257, 129, 1000), (1, 1, 1)]


def source(dtype: str) -> str:
    """One consumer warpgroup, a 3-stage ring of A [64, 64] and B [64 (K), 64 (N)] slices."""
    return f"""
kernel gemm_kn(a: {dtype}[M, K], b: {dtype}[K, N], c: f32[M, N]) {{
    grid persistent
    box A = a[64, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box C = c[64, 64]
    smem cs: C
    pipeline ring[3] {{ a: A, b: B }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(c, C) {{
            for k in steps(K, 64) {{
                produce ring as s {{
                    load A[m, k] -> s.a
                    load B[k, n] -> s.b
                }}
            }}
        }}
    }}
    role consumer: warps 4..7, regs 232 {{
        accumulator p: f32[64, 64]
        for tile (m, n) in tiles(c, C) {{
            p = 0
            for k in steps(K, 64) {{
                consume ring as s {{ mma p, s.a, s.b kn }}
            }}
            elect {{ wait_group read 0 }}
            sync
            cs = p
            elect {{
                store C[m, n] <- cs
                commit_group
            }}
        }}
        elect {{ wait_group 0 }}
    }}
}}
"""


@pytest.fixture(scope="module", params=["bf16", "f16"])
def kernel(request):
    return request.param, tmalang.compile(source(request.param))


def inputs(dtype, m, n, k, seed):
    """A [M, K] and B [K, N] with 16-byte aligned rows (views into padded rows)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, -(-k // 8) * 8)).astype(NUMPY[dtype])[:, :k]
    b = rng.standard_normal((k, -(-n // 8) * 8)).astype(NUMPY[dtype])[:, :n]
    return a, b


def output(m, n):
    return np.full((m, -(-n // 4) * 4), np.nan, dtype=np.float32)[:, :n]


def relative_error(c, a, b) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(np.asarray(c, np.float64) - reference) / max(np.linalg.norm(reference), 1e-30))


def test_ptx_sets_imm_trans_b_and_ptxas_accepts(kernel):
    dtype, k = kernel
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{dtype}.{dtype}" in k.ptx
    assert ", p, 1, 1, 0, 1;" in k.ptx            # imm-scale-a, imm-scale-b, imm-trans-a = 0, imm-trans-b = 1
    ptxas.assemble(k.ptx, "sm_90a")


def test_ir_round_trips_with_kn(kernel):
    dtype, _ = kernel
    c = compile_source(source(dtype), "gemm_kn.tma", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    assert "kn=true" in text
    assert print_ir(parse_ir(text)) == text


@pytest.mark.parametrize("m,n,k", SHAPES[:2], ids=lambda v: str(v))
def test_interpreter_matches_float64(kernel, m, n, k):
    dtype, gemm = kernel
    a, b = inputs(dtype, m, n, k, m + n + k)
    c = output(m, n)
    gemm.interpret(a, b, c, seed=m, explore=1)
    assert relative_error(c, a, b) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda v: str(v))
def test_h100_matches_float64_and_interpreter(kernel, m, n, k):
    """The MN-major descriptor (LBO = K·128, SBO = 1024, imm-trans-b = 1) on the tensor cores."""
    torch = pytest.importorskip("torch")
    dtype, gemm = kernel
    a, b = inputs(dtype, m, n, k, 7 * m + n + k)
    ta = torch.from_numpy(np.ascontiguousarray(a.base if a.base is not None else a).view(np.int16)).cuda()
    tb = torch.from_numpy(np.ascontiguousarray(b.base if b.base is not None else b).view(np.int16)).cuda()
    ta, tb = ta.view(getattr(torch, TORCH[dtype]))[:, :k], tb.view(getattr(torch, TORCH[dtype]))[:, :n]
    tc = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda", dtype=torch.float32)[:, :n]
    gemm(ta, tb, tc)
    torch.cuda.synchronize()
    c = tc.cpu().numpy()
    assert relative_error(c, a, b) < 1e-5
    if m * n * k <= 130 * 100 * 200:
        expected = output(m, n)
        gemm.interpret(a, b, expected, seed=1, explore=1)
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)


def chain_source(dtype: str) -> str:
    """Attention's second GEMM without the softmax: O = dtype(A · Bᵀ) · V, V [H, N] as stored.
    P = A · B[h]ᵀ stays in registers and feeds `mma o, dtype(p), s.v kn` (register A, MN-major B)."""
    return f"""
kernel chain_kn(a: {dtype}[M, K], b: {dtype}[H, K], v: {dtype}[H, N], o: f32[M, N]) {{
    grid persistent
    box A = a[64, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box V = v[64, 64] swizzle 128B
    box O = o[64, 64]
    smem os: O
    pipeline ring[3] {{ a: A, b: B }}
    pipeline vring[2] {{ v: V }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(o, O) {{
            for h in steps(H, 64) {{
                for k in steps(K, 64) {{
                    produce ring as s {{
                        load A[m, k] -> s.a
                        load B[h, k] -> s.b
                    }}
                }}
                produce vring as s {{ load V[h, n] -> s.v }}
            }}
        }}
    }}
    role consumer: warps 4..7, regs 232 {{
        accumulator p: f32[64, 64]
        accumulator acc: f32[64, 64]
        for tile (m, n) in tiles(o, O) {{
            acc = 0
            for h in steps(H, 64) {{
                p = 0
                for k in steps(K, 64) {{
                    consume ring as s {{ mma p, s.a, s.b }}
                }}
                consume vring as s {{ mma acc, {dtype}(p), s.v kn }}
            }}
            elect {{ wait_group read 0 }}
            sync
            os = acc
            elect {{
                store O[m, n] <- os
                commit_group
            }}
        }}
        elect {{ wait_group 0 }}
    }}
}}
"""


@pytest.fixture(scope="module", params=["bf16", "f16"])
def chain(request):
    return request.param, tmalang.compile(chain_source(request.param))


def chain_reference(dtype, a, b, v):
    p = (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32).astype(NUMPY[dtype])
    return p.astype(np.float64) @ v.astype(np.float64)


def chain_inputs(dtype, m, n, k, h, seed):
    """A [M, K], B [H, K] and V [H, N], rows 16-byte aligned."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((rows, -(-cols // 8) * 8)).astype(NUMPY[dtype])[:, :cols]
                 for rows, cols in ((m, k), (h, k), (h, n)))


def error_to(c, reference) -> float:
    return float(np.linalg.norm(np.asarray(c, np.float64) - reference) / max(np.linalg.norm(reference), 1e-30))


def test_chain_register_a_with_kn_ptx(chain):
    dtype, k = chain
    assert f"m64n64k16.f32.{dtype}.{dtype}" in k.ptx
    assert "p, 1, 1, 1;" in k.ptx          # register-A form: imm-scale-a, imm-scale-b, imm-trans-b = 1
    ptxas.assemble(k.ptx, "sm_90a")


def test_chain_interpreter_matches_float64(chain):
    dtype, kernel = chain
    a, b, v = chain_inputs(dtype, 77, 70, 100, 130, 3)
    o = output(77, 70)
    kernel.interpret(a, b, v, o, seed=2, explore=1)
    assert error_to(o, chain_reference(dtype, a, b, v)) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,h", [(77, 70, 100, 130), (1000, 129, 64, 300)], ids=lambda v: str(v))
def test_h100_chain_matches_float64(chain, m, n, k, h):
    """Register-A wgmma with an MN-major B: attention's P · V with V as stored."""
    torch = pytest.importorskip("torch")
    dtype, kernel = chain
    a, b, v = chain_inputs(dtype, m, n, k, h, m + h)
    tt = getattr(torch, TORCH[dtype])

    def cuda(x):
        base = x.base if x.base is not None else x
        return torch.from_numpy(np.ascontiguousarray(base).view(np.int16)).cuda().view(tt)[:, :x.shape[1]]

    to = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda", dtype=torch.float32)[:, :n]
    kernel(cuda(a), cuda(b), cuda(v), to)
    torch.cuda.synchronize()
    assert error_to(to.cpu().numpy(), chain_reference(dtype, a, b, v)) < 1e-2
