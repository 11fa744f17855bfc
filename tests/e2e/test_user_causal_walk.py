"""tests/user_kernels/causal_block_sums.tma, a kernel written from the docs: running sums over
64-row blocks, where output tile i folds i + 1 blocks (a causal cost), walked `grouped 2 reversed
dynamic` over a 3-D tile space. Against NumPy at shapes that are not multiples of the box, on the
interpreter (CTAs claiming in random schedules), verified for every schedule on one CTA, through
ptxas, and on the GPU; and the walk's words must agree across roles (E053)."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "causal_block_sums.tma"


def inputs(b, r, c, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, r, c)).astype(np.float32)


def reference(x):
    b, r, c = x.shape
    blocks = -(-r // 64)
    padded = np.zeros((b, blocks * 64, c))
    padded[:, :r] = x
    return np.cumsum(padded.reshape(b, blocks, 64, c), axis=1).reshape(b, blocks * 64, c)[:, :r]


@pytest.mark.parametrize("shape,ctas", [((3, 200, 148), 3), ((5, 77, 36), 2), ((1, 300, 260), 1)])
def test_running_block_sums_match_numpy_on_the_interpreter(shape, ctas):
    kernel = tmalang.compile_file(KERNEL)
    x = inputs(*shape, seed=sum(shape))
    out = np.zeros(shape, np.float32)
    kernel.interpret(x, out, seed=ctas, explore=3, ctas=ctas)
    np.testing.assert_allclose(out, reference(x), rtol=0, atol=1e-4)


def test_one_cta_is_verified_for_every_schedule():
    kernel = tmalang.compile_file(KERNEL)
    x = inputs(3, 200, 148, seed=1)
    verdict = kernel.verify(x, np.zeros_like(x), ctas=1)
    assert verdict.verified, verdict.summary()


def test_ptxas_assembles_without_spills():
    stats = ptxas.assemble(tmalang.compile_file(KERNEL).ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


def test_a_walk_reversed_in_one_role_only_is_refused_with_a_caret():
    text = KERNEL.read_text()
    first = text.index("grouped 2 reversed dynamic")
    once = text[:first] + "grouped 2 dynamic" + text[first + len("grouped 2 reversed dynamic"):]
    with pytest.raises(TmalangError) as refused:
        tmalang.compile(once, name="once.tma")
    report = refused.value.render()
    assert "error[E053]" in report and "reversed" in report and "^" in report and "once.tma:" in report


@pytest.mark.gpu
def test_running_block_sums_match_numpy_on_the_gpu():
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(KERNEL)
    for shape in [(3, 200, 148), (8, 1000, 260)]:
        x = inputs(*shape, seed=sum(shape))
        out = torch.zeros(shape, device="cuda")
        kernel(torch.from_numpy(x).cuda(), out)
        torch.cuda.synchronize()
        np.testing.assert_allclose(out.cpu().numpy(), reference(x), rtol=0, atol=1e-3)


def test_a_sweep_verifies_every_launch_on_one_cta_and_says_why_one():
    from tmalang.verify.sweep import verify_sweep
    kernel = tmalang.compile_file(KERNEL)
    report = verify_sweep(kernel._c.ir, kernel.manifest)
    assert report.failed is None and report.verdicts and not report.skipped, report.summary()
    assert {launch.ctas for launch, _ in report.verdicts} == {1}
    assert all(v.verified for _, v in report.verdicts)
    assert "grids of [1] CTAs (a dynamic walk: on more CTAs its claims depend on the schedule)" in report.summary()
