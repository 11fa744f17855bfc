"""tests/user_kernels/softmax_pv_fragment.tma, a kernel written from docs/language.md §15 alone:
O = softmax(scale · Q·Kᵀ) · V for at most 64 keys, the probabilities kept in a bf16 accumulator
written by a fused row expression (`p = bf16(exp2(s - mx))`) and read as the A operand. Against
float64 at query counts that are not multiples of the 128-row box and key counts below the
64-key box, on the interpreter (several schedules), verified for every schedule, through ptxas,
and on the GPU, where it must agree with float64 and with the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "softmax_pv_fragment.tma"
SHAPES = [(77, 50), (200, 64), (1, 3), (300, 17)]      # (S queries, T keys)
SCALE = np.float32(0.125)


def inputs(s, t, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, 64)).astype(ml_dtypes.bfloat16) for n in (s, t, t))
    return q, k, v, np.zeros((s, 64), ml_dtypes.bfloat16), np.zeros(-(-s // 4) * 4, np.float32)[:s]


def reference(q, k, v):
    scores = q.astype(np.float64) @ k.astype(np.float64).T * float(SCALE)
    top = scores.max(1, keepdims=True)
    weights = np.exp(scores - top)
    lse2 = (top[:, 0] + np.log(weights.sum(1))) / np.log(2)
    return weights / weights.sum(1, keepdims=True) @ v.astype(np.float64), lse2


def relative_error(got, expected) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - expected) / np.linalg.norm(expected))


@pytest.mark.parametrize("s,t", SHAPES, ids=str)
def test_interpreter_matches_float64(s, t):
    q, k, v, o, lse = inputs(s, t, s + t)
    o, lse = tmalang.compile_file(KERNEL).interpret(q, k, v, SCALE, o, lse, seed=s, explore=2)
    expected, expected_lse = reference(q, k, v)
    assert relative_error(o, expected) < 1e-2
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=1e-4)


def test_verified_for_every_schedule():
    kernel = tmalang.compile_file(KERNEL)
    verdict = kernel.verify(*inputs(200, 50, 1)[:3], SCALE, *inputs(200, 50, 1)[3:], ctas=2)
    assert verdict.verified, verdict.summary()


def test_ptxas_assembles_without_spills():
    stats = ptxas.assemble(tmalang.compile_file(KERNEL).ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


@pytest.mark.gpu
@pytest.mark.parametrize("s,t", SHAPES, ids=str)
def test_h100_matches_float64_and_the_interpreter(s, t):
    torch = pytest.importorskip("torch")
    q, k, v, o, lse = inputs(s, t, 7 * s + t)

    def device(x):
        return torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)

    to, tl = torch.zeros(s, 64, device="cuda", dtype=torch.bfloat16), torch.zeros(-(-s // 4) * 4, device="cuda")[:s]
    tmalang.compile_file(KERNEL)(device(q), device(k), device(v), SCALE, to, tl)
    torch.cuda.synchronize()
    got = to.float().cpu().numpy()
    expected, expected_lse = reference(q, k, v)
    assert relative_error(got, expected) < 1e-2
    np.testing.assert_allclose(tl.cpu().numpy(), expected_lse, rtol=0, atol=1e-3)
    interpreted, _ = tmalang.compile_file(KERNEL).interpret(q, k, v, SCALE, o, lse, seed=1)
    assert relative_error(got, np.asarray(interpreted, np.float64)) < 1e-3
