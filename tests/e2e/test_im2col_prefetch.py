"""`prefetch A[n, h, w, c] offsets [r, s]` through an im2col box (cp.async.bulk.prefetch.tensor
.im2col): written from docs/language.md as a user would (tests/user_kernels/im2col_taps_prefetched.tma,
every 3x3 tap of an NHWC image as a column block, each tap's pixels prefetched before its load).
The interpreter against float64 at odd shapes, its E488 for a prefetch outside the pixel box, the
IR verifier, the PTX through ptxas, and the H100 against float64 and the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_ir, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.printer import print_ir

SOURCE = (ROOT / "tests" / "user_kernels" / "im2col_taps_prefetched.tma").read_text()
SHAPES = [(1, 5, 7), (2, 9, 13), (3, 17, 11)]   # N, H, W: N·H·W never a multiple of the 128-pixel box


def taps(x: np.ndarray) -> np.ndarray:
    """The [N·H·W, 9·C] matrix of every pixel's 3x3 neighbourhood (zero padding), in float64."""
    n, h, w, c = x.shape
    padded = np.zeros((n, h + 2, w + 2, c))
    padded[:, 1:-1, 1:-1] = x
    return np.concatenate([padded[:, r:r + h, s:s + w].reshape(n * h * w, c) for r in range(3) for s in range(3)],
                          axis=1)


def inputs(shape, seed: int):
    x = np.random.default_rng(seed).standard_normal((*shape, 64)).astype(ml_dtypes.bfloat16)
    return x, np.zeros((np.prod(shape), 9 * 64), ml_dtypes.bfloat16)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_interpreter_matches_float64(shape):
    x, out = inputs(shape, 5)
    tmalang.compile(SOURCE).interpret(x, out, seed=2)
    np.testing.assert_array_equal(out.astype(np.float64), taps(x.astype(np.float64)))


def test_a_prefetch_outside_the_pixel_box_is_e488():
    # one pixel further up than the box's lower corner (-1) allows
    bad = SOURCE.replace("prefetch A[128 * m / (H * W), 128 * m / W % H - 1,",
                         "prefetch A[128 * m / (H * W), 128 * m / W % H - 2,")
    x, out = inputs(SHAPES[0], 1)
    with pytest.raises(TmalangError, match="E488") as caught:
        tmalang.compile(bad).interpret(x, out)
    assert "im2col prefetch through 'A' starts at" in str(caught.value) and "outside its pixel box" in str(caught.value)


def test_the_ptx_prefetches_im2col_and_ptxas_takes_it():
    c = compile_source(SOURCE, "taps.tma", Options(arch="sm_90a", watchdog=False))
    assert "cp.async.bulk.prefetch.tensor.4d.L2.global.im2col" in c.ptx
    cubin, _ = ptxas.assemble(c.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"


def test_the_verifier_holds_an_im2col_prefetch_to_its_offsets():
    text = print_ir(compile_source(SOURCE, "taps.tma", Options(arch="sm_90a"), until="ir").ir)
    assert "tma_prefetch_im2col box=A" in text and "offsets=[" in text
    one_offset = text.replace("offsets=[", "offsets=[0, ", 1)   # the prefetch is the first op with offsets
    with pytest.raises(TmalangError, match="E432.*not one per spatial dimension"):
        compile_ir(one_offset, "taps.ir", Options(arch="sm_90a"))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES + [(4, 33, 65)], ids=lambda s: "x".join(map(str, s)))
def test_gpu_matches_float64_and_the_interpreter(shape):
    k = tmalang.compile(SOURCE)
    x, gpu = inputs(shape, 11)
    interp = gpu.copy()
    k(x, gpu)
    k.interpret(x, interp)
    np.testing.assert_array_equal(gpu.astype(np.float64), taps(x.astype(np.float64)))
    np.testing.assert_array_equal(gpu.view(np.uint16), interp.view(np.uint16))
