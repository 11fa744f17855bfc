"""The wgmma GEMM example: interpreter (CPU) and H100 against a float64 reference.

bf16 inputs, f32 accumulation, bf16 output: the relative error to float64 is about 2^-9 from
the final rounding; shapes are not tile multiples (partial tiles in M, N and K).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT

BF16 = ml_dtypes.bfloat16


def bf16_matrix(rng, rows, cols):
    """A bf16 matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    base = rng.standard_normal((rows, -(-cols // 8) * 8)).astype(BF16)
    return base[:, :cols]


def relative_error(c, a, b) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    return float(np.linalg.norm(np.asarray(c, dtype=np.float64) - reference) / np.linalg.norm(reference))


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")


@pytest.mark.parametrize("m,n,k", [(130, 300, 100), (64, 256, 64), (257, 129, 200)])
def test_interpreter_matches_float64(gemm, m, n, k):
    rng = np.random.default_rng(m + n + k)
    a, b = bf16_matrix(rng, m, k), bf16_matrix(rng, n, k)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]
    gemm.interpret(a, b, c, seed=m, explore=2)
    assert relative_error(c, a, b) < 1e-2


def test_interpreter_validates_512_cubed_quickly(gemm):
    import time

    rng = np.random.default_rng(512)
    a, b = bf16_matrix(rng, 512, 512), bf16_matrix(rng, 512, 512)
    c = np.zeros((512, 512), dtype=BF16)
    start = time.perf_counter()
    gemm.interpret(a, b, c)
    assert time.perf_counter() - start < 5.0
    assert relative_error(c, a, b) < 1e-2


def test_ptx_uses_wgmma_without_spills(gemm):
    assert gemm.ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4
    assert "wgmma.fence.sync.aligned" in gemm.ptx and "wgmma.wait_group.sync.aligned 0" in gemm.ptx
    stats = gemm.stats()
    assert stats.spill_stores == 0 and stats.spill_loads == 0


def check_on_h100(kernel, m: int, n: int, k: int, input_dtype: str, fused: bool = False) -> None:
    """Random inputs (rows padded to 16 bytes), a NaN-poisoned bf16 output, float64 reference.
    `fused`: the kernel takes (a, b, bias, alpha, c) and computes relu(alpha · A·Bᵀ + bias)."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, input_dtype)
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    per_row = 16 // torch.empty(0, dtype=dtype).element_size()

    def matrix(rows, cols):
        base = torch.randn(rows, -(-cols // per_row) * per_row, device="cuda", generator=gen).to(dtype)
        return base[:, :cols]

    a, b = matrix(m, k), matrix(n, k)
    c = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    reference = a.double() @ b.double().T
    if fused:
        bias = torch.randn(-(-n // 4) * 4, device="cuda", generator=gen)[:n]
        kernel(a, b, bias, np.float32(0.5), c)
        reference = torch.relu(0.5 * reference + bias.double())
    else:
        kernel(a, b, c)
    torch.cuda.synchronize()
    error = (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item()
    assert error < 1e-2, error


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (4096, 4096, 4096), (257, 513, 2000)])
def test_h100_matches_float64(gemm, m, n, k):
    check_on_h100(gemm, m, n, k, "bfloat16")


def test_interpreter_catches_a_slot_released_under_an_inflight_wgmma(gemm):
    """defer_mma_release frees step k-1's slot after wait_group 1; freeing step k's own slot
    (whose MMAs may still be reading it) breaks the protocol and must be reported."""
    import copy

    from tmalang.interp import interpret
    from tmalang.ir import exprs as ex
    from tmalang.ir import ops

    kernel = copy.deepcopy(gemm._c.ir)
    loop_release = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.If) and "%k" in str(o.cond))
    elect = next(o for o in loop_release.body if isinstance(o, ops.Elect))
    elect.body[0] = ops.MbarArrive(ex.BufferRef("ring.empty", ex.Var("s")), span=elect.body[0].span)
    rng = np.random.default_rng(3)
    a, b = bf16_matrix(rng, 128, 512), bf16_matrix(rng, 192, 512)
    c = np.zeros((128, 192), dtype=BF16)
    with pytest.raises(tmalang.TmalangError, match="E40[125]"):
        interpret(kernel, gemm.manifest, a, b, c, seed=1, explore=8)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1024), (130, 300, 112), (4096, 4096, 4096)])
def test_h100_fp8_matches_float64(m, n, k):
    check_on_h100(tmalang.compile_file(ROOT / "examples" / "gemm_fp8_sm90.tma"), m, n, k, "float8_e4m3fn")


@pytest.mark.parametrize("remove,code", [(lambda o: isinstance(o, ops_module().WgmmaFence), "E414"),
                                         (lambda o: isinstance(o, ops_module().WgmmaWait) and o.pending == 0, "E413")])
def test_interpreter_checks_wgmma_ordering(gemm, remove, code):
    """Without wgmma.fence after acc_zero (E414), or without the final wait before the epilogue
    reads the accumulator (E413), the interpreter reports the misuse."""
    import copy

    from tmalang.interp import interpret

    kernel = copy.deepcopy(gemm._c.ir)

    def strip(region):
        region[:] = [o for o in region if not remove(o)]
        for o in region:
            for r in o.regions():
                strip(r)

    strip(kernel.body)
    rng = np.random.default_rng(4)
    a, b = bf16_matrix(rng, 128, 128), bf16_matrix(rng, 192, 128)
    with pytest.raises(tmalang.TmalangError, match=code):
        interpret(kernel, gemm.manifest, a, b, np.zeros((128, 192), dtype=BF16))


def ops_module():
    from tmalang.ir import ops

    return ops


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (2048, 4096, 1024)])
def test_h100_fused_epilogue_matches_float64(m, n, k):
    """relu(alpha · A·Bᵀ + bias), the bias slice loaded by the consumers themselves."""
    check_on_h100(tmalang.compile_file(ROOT / "examples" / "gemm_bias_relu_sm90.tma"), m, n, k, "bfloat16", fused=True)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,h", [(1000, 1000, 1000, 296), (130, 300, 100, 72), (2048, 2048, 1024, 512)])
def test_h100_chain_matches_float64(m, n, k, h):
    """D = bf16(A·Bᵀ)·Wᵀ, the intermediate fed to the second GEMM from registers."""
    torch = pytest.importorskip("torch")
    chain = tmalang.compile_file(ROOT / "examples" / "gemm_chain_sm90.tma")
    gen = torch.Generator(device="cuda").manual_seed(m + n + k + h)

    def matrix(rows, cols):
        return torch.randn(rows, -(-cols // 8) * 8, device="cuda", generator=gen).to(torch.bfloat16)[:, :cols]

    a, b, w = matrix(m, k), matrix(h, k), matrix(n, h)
    d = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    chain(a, b, w, d)
    torch.cuda.synchronize()
    p = (a.double() @ b.double().T).to(torch.bfloat16).double()
    reference = p @ w.double().T
    error = (torch.linalg.norm(d.double() - reference) / torch.linalg.norm(reference)).item()
    assert error < 1e-2, error


def test_interpreter_rejects_register_operand_in_flight():
    """Without the wait that completes p, the register-A wgmma would read p while the wgmmas
    writing it are in flight: E413."""
    import copy

    import ml_dtypes

    from tmalang.interp import interpret
    from tmalang.ir import ops

    chain = tmalang.compile_file(ROOT / "examples" / "gemm_chain_sm90.tma")
    kernel = copy.deepcopy(chain._c.ir)

    def strip(region):   # the wait pending=0 that ends each k loop (it precedes the register-A mma)
        for i, o in enumerate(region):
            if isinstance(o, ops.ForRange) and any(isinstance(x, ops.WgmmaWait) for x in o.body):
                o.body.remove(next(x for x in o.body if isinstance(x, ops.WgmmaWait) and x.pending == 0))
                return True
            if any(strip(r) for r in o.regions()):
                return True
        return False

    assert strip(kernel.body)
    rng = np.random.default_rng(5)
    bf = ml_dtypes.bfloat16
    a, b, w = (rng.standard_normal(s).astype(bf) for s in ((128, 64), (64, 64), (128, 64)))
    with pytest.raises(tmalang.TmalangError, match="E413.*reads accumulator 'p'"):
        interpret(kernel, chain.manifest, a, b, w, np.zeros((128, 128), dtype=bf))


def narrow_swizzle_gemm(span: int):
    """gemm_sm90.tma with K slices of `span` bytes (swizzle 32B or 64B) instead of 128."""
    k = span // 2
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma", constants={"BK": k, "SWIZZLE": f"{span}B"})


@pytest.mark.parametrize("span", [32, 64])
def test_narrow_swizzle_operands_compile_and_interpret(span):
    gemm = narrow_swizzle_gemm(span)
    assert gemm.ptx.count("wgmma.mma_async.sync.aligned.m64n256k16") == span // 32
    rng = np.random.default_rng(span)
    a, b = bf16_matrix(rng, 200, 104), bf16_matrix(rng, 296, 104)
    c = np.zeros((200, 296), dtype=BF16)
    gemm.interpret(a, b, c)
    assert relative_error(c, a, b) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("span", [32, 64])
def test_h100_narrow_swizzle_operands_match_float64(span):
    """The descriptors for 32B and 64B swizzled operands (SBO 256 / 512, layout type 3 / 2)."""
    check_on_h100(narrow_swizzle_gemm(span), 257, 513, 200, "bfloat16")


def f16_operand_gemm():
    """gemm_sm90.tma with f16 A and B (bf16 C): wgmma's .f32.f16.f16 form, K-major."""
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma", constants={"T": "f16"})


def test_f16_operands_compile_and_interpret():
    gemm = f16_operand_gemm()
    assert gemm.ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    rng = np.random.default_rng(16)
    a = rng.standard_normal((130, 104)).astype(np.float16)[:, :100]
    b = rng.standard_normal((300, 104)).astype(np.float16)[:, :100]
    c = np.zeros((130, 304), dtype=BF16)[:, :300]
    gemm.interpret(a, b, c)
    assert relative_error(c, a, b) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (257, 513, 200)])
def test_h100_f16_operands_match_float64(m, n, k):
    check_on_h100(f16_operand_gemm(), m, n, k, "float16")
