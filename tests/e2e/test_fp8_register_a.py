"""An fp8 register A operand (language.md §15): `mma acc, f8e4m3(s), b` converts accumulator s
to e4m3 in registers (round to nearest even, saturating at ±448) and multiplies. On the GPU the
fragment is regrouped across each quad of threads (backend/fp8_fragments.py); the product must
be the plain fp8(s)·bᵀ the interpreter computes.

tests/user_kernels/fp8_chain.tma, written from the docs: O = fp8(scale · Q·Kᵀ) · V with fp8 Q, K
and Vᵀ, against float64 (the scores rounded to e4m3 as the kernel rounds them) at row counts
that are not multiples of 64, with scores large enough that some saturate; on the interpreter
over schedules, through ptxas, and on the GPU, whose output must also match the interpreter's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.contract.errors import TmalangError
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "fp8_chain.tma"
E4M3 = ml_dtypes.float8_e4m3fn


def inputs(m: int, seed: int):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((m, 128)) * 2).astype(E4M3)
    k = (rng.standard_normal((128, 128)) * 2).astype(E4M3)
    vt = rng.standard_normal((64, 128)).astype(E4M3)
    return q, k, vt


def reference(q, k, vt, scale: float):
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    p = np.clip(s, -448, 448).astype(np.float32).astype(E4M3).astype(np.float64)
    return p @ vt.astype(np.float64).T


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.fixture(scope="module")
def kernel():
    return tmalang.compile_file(KERNEL)


def test_ptxas_assembles_it_and_the_fragment_is_regrouped_in_registers(kernel):
    ptx = kernel.ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "shfl.sync.idx.b32" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in ptx
    _, stats = ptxas.assemble(ptx, "sm_90a")
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


@pytest.mark.parametrize("m", [64, 200, 77])
@pytest.mark.parametrize("scale", [0.05, 8.0])        # 8: |scale · s| reaches past 448, which saturates
def test_interpreter_matches_float64_with_the_scores_in_e4m3(kernel, m, scale):
    q, k, vt = inputs(m, m)
    o = np.full((m, 64), np.nan, np.float32)
    kernel.interpret(q, k, vt, np.float32(scale), o, seed=m, explore=2, ctas=2)
    want = reference(q, k, vt, scale)
    if scale > 1:
        assert (np.abs(q.astype(np.float64) @ k.astype(np.float64).T * scale) > 448).any()
    assert relative_error(o, want) < 1e-3


def test_satfinite_conversion_semantics():
    from tmalang.interp.conversions import convert

    got = convert(np.array([1000.0, -1e30, np.inf, 0.3, np.nan], np.float32), np.dtype(E4M3))
    assert got[:3].astype(np.float32).tolist() == [448.0, -448.0, 448.0]
    assert got[3] == np.float32(0.3).astype(E4M3) and np.isnan(got[4].astype(np.float32))


@pytest.mark.parametrize("change,message", [
    ("accumulator s: f32[64, 128]", "a multiple of 32"),
    ("box VT = vt[64, 128] swizzle 128B", "differ in dtype"),
])
def test_an_fp8_register_operand_that_cannot_run_is_refused(change, message):
    source = KERNEL.read_text()
    if "multiple" in message:       # 112 columns: not whole k32 steps
        source = source.replace("k: f8e4m3[128, 128]", "k: f8e4m3[112, 128]").replace(
            "box K = k[128, 128]", "box K = k[112, 128]").replace(change, "accumulator s: f32[64, 112]").replace(
            "vt: f8e4m3[64, 128]", "vt: f8e4m3[64, 112]").replace("box VT = vt[64, 128]", "box VT = vt[64, 112]")
    else:                           # a bf16 B beside an fp8 A
        source = source.replace("vt: f8e4m3[64, 128]", "vt: bf16[64, 128]").replace(change, "box VT = vt[64, 64] swizzle 128B")
    with pytest.raises(TmalangError, match=message):
        tmalang.compile(source, name="fp8_chain.tma")


def on_gpu(kernel, q, k, vt, scale: float):
    torch = pytest.importorskip("torch")

    def device(x):
        return torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
    o = torch.full((q.shape[0], 64), float("nan"), device="cuda")
    kernel(device(q), device(k), device(vt), np.float32(scale), o)
    torch.cuda.synchronize()
    return o.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("m", [200, 4099])
def test_the_gpu_is_the_interpreter_bit_for_bit_where_every_sum_is_exact(kernel, m):
    """-1, 0, 1 in Q, K and V and a scale of 1: the scores are integers below 129 (those from 17
    up rounded to e4m3's coarser steps, ties among them), and O's sums integers of a few hundred:
    exact even in fp8 wgmma's short accumulator, so the scores, their e4m3 roundings and O are
    the same numbers on the GPU and in the interpreter. A wrong byte in the regrouped fragment, or a wrong
    rounding, shows here as an exact mismatch."""
    rng = np.random.default_rng(m)
    q, k, vt = (rng.integers(-1, 2, (n, 128)).astype(np.float32).astype(E4M3) for n in (m, 128, 64))
    got = on_gpu(kernel, q, k, vt, 1.0)
    expected = np.full((m, 64), np.nan, np.float32)
    kernel.interpret(q, k, vt, np.float32(1.0), expected)
    assert np.array_equal(expected, reference(q, k, vt, 1.0))
    assert np.array_equal(got, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [200, 4099])
def test_the_gpu_matches_float64_on_random_data(kernel, m):
    """On random data the GPU differs from the interpreter in the last bits of Q·Kᵀ: Hopper's fp8
    wgmma accumulates with fewer bits than f32 (the interpreter adds in f32), which moves a few
    scores across an e4m3 rounding boundary; O stays within 1% of float64."""
    q, k, vt = inputs(m, m + 1)
    got = on_gpu(kernel, q, k, vt, 0.05)
    assert relative_error(got, reference(q, k, vt, 0.05)) < 1e-2
