"""tcgen05.cp: `t.d[0, j] = tile` copies an f32 smem tile into Tensor Memory, and the MMAs that
follow add onto it. examples/gemm_residual_sm100.tma computes C = R + A·Bᵀ that way."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from references import gemm_residual_case
from test_gemm_sm100 import _edit, _is, _regions, _remove_fence

import tmalang
from tmalang.targets.tcgen05 import descriptors
from tmalang.interp import interpret
from tmalang.ir import ops


@pytest.fixture(scope="module")
def residual():
    return tmalang.compile_file(ROOT / "examples" / "gemm_residual_sm100.tma", arch="sm_100a")


def _error(out, expected) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - expected) / np.linalg.norm(expected))


@pytest.mark.parametrize("m,n,ctas", [(130, 300, 2), (257, 129, 3), (1, 8, 1)])
def test_interpreter_matches_float64(residual, m, n, ctas):
    args, expected = gemm_residual_case(np.random.default_rng(m + n), (m, n))
    residual.interpret(*args, ctas=ctas)
    assert _error(args[-1], expected) < 1e-2


def test_the_copy_is_what_the_mmas_add_to(residual):
    """Without the copies, each CTA's first tile overwrites (C = A·Bᵀ there): the copy, not the
    epilogue, adds R. With two tiles per CTA the second one adds onto stage 1 of the accumulator,
    which nothing has written (E422)."""
    kernel = _edit(residual, _drop_copies)
    args, expected = gemm_residual_case(np.random.default_rng(1), (130, 140))
    interpret(kernel, residual.manifest, *args, ctas=4)     # 2 x 2 tiles: one per CTA
    a, b, _, c = args
    assert not _error(c, expected) < 0.1
    assert _error(c, a.astype(np.float64) @ b.astype(np.float64).T) < 1e-2
    with pytest.raises(tmalang.TmalangError, match=r"E422\]: tcgen05.mma accumulates into 'accs.d\[1\]'"):
        interpret(kernel, residual.manifest, *args, ctas=2)


def _drop_copies(kernel):
    for region in _regions(next(r for r in ops.roles(kernel) if r.symbol == "mma").body):
        region[:] = [o for o in region if not isinstance(o, ops.Tcgen05Cp)]


def test_ptx_copies_32_bytes_of_each_row_per_instruction(residual):
    ptx = residual.ptx
    assert ptx.count("tcgen05.cp.cta_group::1.128x256b") == 16      # 4 blocks x 32 columns / 8
    assert ptx.count("tcgen05.commit.cta_group::1") == 3            # R's slot, the ring slot, the accumulator
    layout = descriptors.smem_descriptor(0, "128B", 1024)             # K-major, 8-row groups 1024 B apart
    assert str(layout) in ptx
    assert residual.stats().spill_stores == 0


def _thread_release(kernel):
    """Release R's slot with a thread arrive: the loader may overwrite it before the copy ran."""
    for region in _regions(next(r for r in ops.roles(kernel) if r.symbol == "mma").body):
        for o in region:
            if isinstance(o, ops.Elect) and isinstance(o.body[0], ops.Tcgen05Commit) and "res" in o.body[0].barrier.name:
                o.body[0] = ops.MbarArrive(o.body[0].barrier, span=o.span)
                return
    raise AssertionError("no release of res")


@pytest.mark.parametrize("change,code", [
    (_remove_fence("tcgen05_after_thread_sync", "mma", _is(ops.Tcgen05Cp)), "E417"),
    (_thread_release, "E405"),
])
def test_interpreter_catches_copy_protocol_bugs(residual, change, code):
    # K = 128: two k-steps, fewer than the ring's 3 stages, so the loader reaches the next tile's
    # R load without waiting for an MMA commit (which would complete the copy before it)
    kernel = _edit(residual, change)
    args, _ = gemm_residual_case(np.random.default_rng(2), (256, 128))
    with pytest.raises(tmalang.TmalangError, match=code):
        interpret(kernel, residual.manifest, *args, seed=5, explore=16, ctas=1)
