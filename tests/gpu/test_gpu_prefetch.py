"""On the H100: kernels that prefetch to L2 and carry L2 cache policies give exactly the results
of their NumPy references (copies and f32 sums bit-exact, GEMMs against float64), and the same
bits as the interpreter, at shapes that are not box multiples (prefetches past the tensor's edge
included)."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import CASES, check, padded_copy

pytestmark = pytest.mark.gpu

COPY = (ROOT / "examples" / "tma_copy.tma").read_text()
SHAPES = [(1000, 1000), (4099, 257), (1, 64), (515, 8192)]
IDS = [f"{m}x{n}" for m, n in SHAPES]


def hinted_copy() -> str:
    """tma_copy with evict_first loads, evict_last stores, tensor maps prefetched at start, and
    the producer prefetching the tile to the right of the one it loads (past the edge: skipped)."""
    src = COPY.replace("box In  = src[64, 128]", "box In  = src[64, 128] cache evict_first\n    box Next = src[64, 128]")
    src = src.replace("box Out = dst[64, 128]", "box Out = dst[64, 128] cache evict_last")
    src = src.replace("    grid persistent\n", "    grid persistent\n    prefetch tensormaps\n")
    return src.replace("            produce ring as s", "            elect { prefetch Next[m, n + 1] }\n            produce ring as s")


def hinted_gemm(name: str) -> str:
    """A wgmma GEMM example with A and B kept in L2 (evict_last), C streamed out (evict_first),
    tensor maps prefetched, and A prefetched 8 K-slices ahead of the ring."""
    src = (ROOT / "examples" / f"{name}.tma").read_text()
    src = src.replace("box A = a[128, 64] swizzle 128B", "box A = a[128, 64] swizzle 128B cache evict_last\n"
                      "    box Ahead = a[128, 64] swizzle 128B")
    src = src.replace("box B = b[256, 64] swizzle 128B", "box B = b[256, 64] swizzle 128B cache evict_last")
    src = src.replace("box B = b[128, 64] swizzle 128B", "box B = b[128, 64] swizzle 128B cache evict_last")
    src = src.replace("box C = c[128, 64] swizzle 128B", "box C = c[128, 64] swizzle 128B cache evict_first")
    # gemm_sm90 spells its extents and swizzles with compile-time constants (docs/language.md §2a)
    src = src.replace("box A = a[BM, BK] swizzle SWIZZLE", "box A = a[BM, BK] swizzle SWIZZLE cache evict_last\n"
                      "    box Ahead = a[BM, BK] swizzle SWIZZLE")
    src = src.replace("box B = b[BN, BK] swizzle SWIZZLE", "box B = b[BN, BK] swizzle SWIZZLE cache evict_last")
    src = src.replace("box C = c[BM, (BN / 4)] swizzle CSWIZZLE",
                      "box C = c[BM, (BN / 4)] swizzle CSWIZZLE cache evict_first")
    src = src.replace("    grid persistent\n", "    grid persistent\n    prefetch tensormaps\n")
    for chunk in ("64", "BK"):
        src = src.replace(f"            for k in steps(K, {chunk}) {{\n                produce",
                          f"            for k in steps(K, {chunk}) {{\n                elect {{ prefetch Ahead[m, k + 8] }}\n"
                          "                produce", 1)
    assert src.count("cache evict_") == 3 and "prefetch Ahead" in src, name
    return src


def _gpu_equals_numpy_and_the_interpreter(kernel, case: str, seed: int, shape) -> None:
    """Bit-exact against NumPy on the GPU; at up to 2^20 elements, the interpreter gives the same bits."""
    args, expected = CASES[case](np.random.default_rng(seed), shape)
    kernel(*args)
    np.testing.assert_array_equal(args[-1], expected)
    if shape[0] * shape[1] <= 1 << 20:
        interp = [args[0], padded_copy(args[1])]
        interp[1][...] = np.nan
        kernel.interpret(*interp)
        np.testing.assert_array_equal(interp[-1], args[-1])


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_hinted_copy_matches_exactly_and_equals_the_interpreter(shape):
    _gpu_equals_numpy_and_the_interpreter(tmalang.compile(hinted_copy()), "tma_copy", 21, shape)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_blocksum_prefetch_matches_numpy_exactly_and_equals_the_interpreter(shape):
    kernel = tmalang.compile_file(ROOT / "examples" / "blocksum_prefetch.tma")
    _gpu_equals_numpy_and_the_interpreter(kernel, "blocksum_prefetch", 22, shape)


@pytest.mark.parametrize("name", ["gemm_sm90", "multistage_sm90"])
@pytest.mark.parametrize("shape", [(1000, 1000), (130, 300), (257, 513)], ids=["1000x1000", "130x300", "257x513"])
def test_hinted_gemm_matches_float64(name, shape):
    kernel = tmalang.compile(hinted_gemm(name))
    assert "prefetch Ahead" in hinted_gemm(name) and "cache evict_last" in hinted_gemm(name)
    args, expected = CASES["gemm"](np.random.default_rng(23), shape)
    kernel(*args)
    check("gemm", args[-1], expected)
    plain = [padded_copy(a) for a in args]
    tmalang.compile_file(ROOT / "examples" / f"{name}.tma")(*plain)
    np.testing.assert_array_equal(args[-1].view(np.uint16), plain[-1].view(np.uint16))   # hints change no bit
