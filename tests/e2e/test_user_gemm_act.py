"""tests/user_kernels/gemm_act.tma, a kernel written from the docs: one GEMM source, six epilogues
chosen by compile-time constants (`if ACT == ...`, `if BIAS == 1` around declarations, a producer's
statement and the epilogue). Each version against float64 at shapes that are not multiples of
the 128 x 128 tile, on the interpreter, through ptxas without spills, and on the GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "gemm_act.tma"
BF16 = ml_dtypes.bfloat16
VERSIONS = [(act, bias) for act in (0, 1, 2) for bias in (0, 1)]


def inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((n, k)).astype(BF16)
    bias = np.empty(-(-n // 4) * 4, np.float32)[:n]
    bias[...] = rng.standard_normal(n) * 4
    return a, b, bias


def reference(a, b, bias, act, with_bias):
    x = a.astype(np.float64) @ b.astype(np.float64).T + (bias if with_bias else 0)
    return {0: x, 1: np.maximum(x, 0), 2: np.maximum(x, 0) ** 2}[act]


def relative_error(got, want):
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("act,bias", VERSIONS)
def test_each_version_matches_float64_on_the_interpreter(act, bias):
    kernel = tmalang.compile_file(KERNEL, constants={"ACT": act, "BIAS": bias})
    a, b, vec = inputs(150, 200, 96, act * 2 + bias)
    c = np.full((150, 200), np.nan, BF16)
    kernel.interpret(a, b, vec, c, seed=act, explore=2, ctas=2)
    assert relative_error(c, reference(a, b, vec, act, bias)) < 1e-2
    assert ("biases" in str(kernel.ir)) == bool(bias)


@pytest.mark.parametrize("act,bias", [(2, 1), (0, 0)])
def test_ptxas_assembles_without_spills(act, bias):
    kernel = tmalang.compile_file(KERNEL, constants={"ACT": act, "BIAS": bias})
    stats = ptxas.assemble(kernel.ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


@pytest.mark.gpu
@pytest.mark.parametrize("act,bias", VERSIONS)
def test_each_version_matches_float64_on_the_gpu(act, bias):
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(KERNEL, constants={"ACT": act, "BIAS": bias})
    a, b, vec = inputs(1000, 777, 200, act + 10 * bias)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    c = torch.full((1000, 784), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :777]
    kernel(device(a), device(b), torch.from_numpy(np.ascontiguousarray(vec)).cuda(), c)
    torch.cuda.synchronize()
    assert relative_error(c.float().cpu().numpy(), reference(a, b, vec, act, bias)) < 1e-2
