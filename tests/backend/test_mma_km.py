"""`mma acc, a km, b`: A stored [K, M] (MN-major, M innermost), read by wgmma with imm-trans-a = 1.

The backward pass of attention needs it: dQ = dS · K with dS held as dSᵀ [keys, queries], the
layout the key-row warpgroups write it in. Here a small GEMM C = Aᵀ · B with Aᵀ as it lies in
memory ([K, M]), B K-major ([N, K]) or MN-major (`kn`, [K, N]), on one and two warpgroups (the
second reads its 64 rows from the A tile's second 64-column panel), at shapes that are not tile
multiples: the interpreter and the H100 against float64. Wrong operand forms are refused.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
SHAPES = [(77, 64, 48), (130, 100, 200), (257, 129, 1000), (1, 1, 1)]
FORMS = [("bf16", 1, False), ("bf16", 2, False), ("bf16", 2, True), ("f16", 1, True)]


def source(dtype: str, warpgroups: int, kn: bool) -> str:
    """Consumer warpgroups computing a [64·G, 64] tile of C from a 3-stage ring of Aᵀ [64 (K),
    64·G (M)] and B slices ([64 (N), 64 (K)], or [64 (K), 64 (N)] with kn)."""
    rows = 64 * warpgroups
    b_shape, b_load, b_word = ("K, N", "load B[k, n]", " kn") if kn else ("N, K", "load B[n, k]", "")
    return f"""
kernel gemm_km(at: {dtype}[K, M], b: {dtype}[{b_shape}], c: f32[M, N]) {{
    grid persistent
    box AT = at[64, {rows}] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box C = c[{rows}, 64]
    smem cs: C
    pipeline ring[3] {{ a: AT, b: B }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(c, C) {{
            for k in steps(K, 64) {{
                produce ring as s {{
                    load AT[k, m] -> s.a
                    {b_load} -> s.b
                }}
            }}
        }}
    }}
    role consumer: warps 4..{3 + 4 * warpgroups}, regs 232 {{
        accumulator p: f32[{rows}, 64]
        for tile (m, n) in tiles(c, C) {{
            p = 0
            for k in steps(K, 64) {{
                consume ring as s {{ mma p, s.a km, s.b{b_word} }}
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


@pytest.fixture(scope="module", params=FORMS, ids=lambda f: f"{f[0]}-wg{f[1]}{'-kn' if f[2] else ''}")
def kernel(request):
    return request.param, tmalang.compile(source(*request.param))


def inputs(dtype, kn, m, n, k, seed):
    """Aᵀ [K, M] and B ([N, K], or [K, N] with kn), rows 16-byte aligned (views into padded rows)."""
    rng = np.random.default_rng(seed)
    at = rng.standard_normal((k, -(-m // 8) * 8)).astype(NUMPY[dtype])[:, :m]
    rows, cols = (k, n) if kn else (n, k)
    b = rng.standard_normal((rows, -(-cols // 8) * 8)).astype(NUMPY[dtype])[:, :cols]
    return at, b


def reference(at, b, kn):
    return at.astype(np.float64).T @ (b.astype(np.float64) if kn else b.astype(np.float64).T)


def relative_error(c, expected) -> float:
    return float(np.linalg.norm(np.asarray(c, np.float64) - expected) / max(np.linalg.norm(expected), 1e-30))


def test_ptx_sets_imm_trans_a_and_ptxas_accepts(kernel):
    (dtype, _, kn), k = kernel
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{dtype}.{dtype}" in k.ptx
    assert f", p, 1, 1, 1, {int(kn)};" in k.ptx     # imm-scale-a, imm-scale-b, imm-trans-a = 1, imm-trans-b
    ptxas.assemble(k.ptx, "sm_90a")


def test_ir_round_trips_with_km(kernel):
    form, _ = kernel
    c = compile_source(source(*form), "gemm_km.tma", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    assert "km=true" in text
    assert print_ir(parse_ir(text)) == text


@pytest.mark.parametrize("m,n,k", SHAPES[:2], ids=str)
def test_interpreter_matches_float64(kernel, m, n, k):
    (dtype, _, kn), gemm = kernel
    at, b = inputs(dtype, kn, m, n, k, m + n + k)
    c = np.full((m, -(-n // 4) * 4), np.nan, dtype=np.float32)[:, :n]
    gemm.interpret(at, b, c, seed=m, explore=1)
    assert relative_error(c, reference(at, b, kn)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_h100_matches_float64(kernel, m, n, k):
    """The MN-major A descriptor (SBO = 1024, warpgroup g at panel g, imm-trans-a = 1) on the tensor cores."""
    torch = pytest.importorskip("torch")
    (dtype, _, kn), gemm = kernel
    at, b = inputs(dtype, kn, m, n, k, 7 * m + n + k)

    def device(x):
        padded = torch.from_numpy(np.ascontiguousarray(x.base).view(np.int16)).cuda()
        return padded.view(torch.bfloat16 if dtype == "bf16" else torch.float16)[:, :x.shape[1]]

    tc = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda", dtype=torch.float32)[:, :n]
    gemm(device(at), device(b), tc)
    torch.cuda.synchronize()
    assert relative_error(tc.cpu().numpy(), reference(at, b, kn)) < 1e-5


def refusal(src: str) -> TmalangError:
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(src)
    return caught.value


def test_km_refuses_a_register_operand_and_wrong_tiles():
    register_a = source("bf16", 1, True).replace("p = 0\n", "p = 0\n            q = 0\n").replace(
        "accumulator p: f32[64, 64]", "accumulator p: f32[64, 64]\n        accumulator q: f32[64, 64]").replace(
        "mma p, s.a km, s.b kn", "mma p, bf16(q) km, s.b kn")
    assert refusal(register_a).code == "E088"
    unswizzled = source("bf16", 1, False).replace("box AT = at[64, 64] swizzle 128B", "box AT = at[64, 64]")
    assert refusal(unswizzled).code == "E510"
    fp8 = source("bf16", 1, False).replace("at: bf16[K, M]", "at: f8e4m3[K, M]").replace(
        "box AT = at[64, 64] swizzle 128B", "box AT = at[64, 128] swizzle 128B")
    assert refusal(fp8).code == "E511"
    odd_k = source("bf16", 1, False).replace("box AT = at[64, 64]", "box AT = at[40, 64]")
    assert refusal(odd_k).code in ("E513", "E088")
