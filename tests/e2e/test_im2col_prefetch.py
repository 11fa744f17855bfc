"""`prefetch A[n, h, w, c] offsets [r, s]` through an im2col box (cp.async.bulk.prefetch.tensor
.im2col, and through a wide box .im2col::w[::128] on sm_100a): written from docs/language.md as a user would (tests/user_kernels/im2col_taps_prefetched.tma,
every 3x3 tap of an NHWC image as a column block, each tap's pixels prefetched before its load).
The interpreter against float64 at odd shapes, its E488 for a prefetch outside the pixel box, the
IR verifier, the PTX through ptxas, and the H100 against float64 and the interpreter."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_ir, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.printer import print_ir
from test_im2col_wide import CONFIGS as WIDE_CONFIGS, WIDE, bits, expected, inputs as wide_inputs

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


# ---- through a wide box (sm_100a: .im2col::w and .im2col::w::128, {wHalo, wOffset}) ------------

def _prefetched(source: str) -> str:
    """The wide configurations of test_im2col_wide, each tile's row also prefetched before its load."""
    load = re.search(r"load A\[(.*)\] offsets \[(.*)\] -> st\.a", source)
    prefetch = f"prefetch A[{load.group(1)}] offsets [{load.group(2)}]\n            produce ring"
    return source.replace("produce ring", prefetch, 1)


@pytest.mark.parametrize("g", WIDE_CONFIGS, ids=[g.name for g in WIDE_CONFIGS])
def test_a_wide_prefetch_leaves_the_interpreter_s_walk_as_it_was(g):
    x, out = wide_inputs(g, np.random.default_rng(9))
    tmalang.compile(_prefetched(g.source()), arch="sm_100a").interpret(x, out)
    np.testing.assert_array_equal(bits(out), bits(expected(g, x)))


@pytest.mark.parametrize("g", WIDE_CONFIGS, ids=[g.name for g in WIDE_CONFIGS])
def test_ptxas_sm100a_takes_the_wide_prefetch(g):
    c = compile_source(_prefetched(g.source()), "wide.tma", Options(arch="sm_100a", watchdog=False))
    qualifier = {"w": r"im2col::w", "w128": r"im2col::w::128"}[g.mode]
    assert re.search(rf"cp\.async\.bulk\.prefetch\.tensor\.{len(g.shape)}d\.L2\.global\.{qualifier} "
                     rf"\[%rd\d+, \{{[^}}]*\}}\], \{{%rs\d+, %rs\d+\}};", c.ptx), c.ptx
    ptxas.assemble(c.ptx, "sm_100a")


def test_a_wide_prefetch_left_of_its_bounding_box_is_e509():
    source = WIDE.format(dt="f32", xdims="N, W, C", ch=4, pixels=7, mode="w", lower=-1, upper=-1, stride=1,
                         halo="", swizzle="64B", opts="", rows=7, coords="0, -1, 0", woffset="0")
    bad = _prefetched(source).replace("prefetch A[0, -1, 0]", "prefetch A[0, -2, 0]", 1)
    with pytest.raises(TmalangError) as err:
        tmalang.compile(bad, arch="sm_100a").interpret(np.zeros((1, 9, 4), np.float32), np.zeros((7, 4), np.float32))
    assert err.value.code == "E509" and "starts at W -2, left of its bounding box [-1, 7]" in err.value.message
