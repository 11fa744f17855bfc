"""Split tile loops (§9 `split`, §10 `part`) and the split-K GEMM (examples/gemm_splitk_sm90.tma):
the interpreter against float64 NumPy at shapes that are not tile multiples and several split
counts, a literal split on a `grid tiles` kernel, the launch contract (tile count, a split scalar
below 1), the launch header and --explain; on the H100 (marked gpu) the GEMM against float64."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import check, gemm_splitk_case, padded, padded_copy
from tmalang.backend import launch_header
from tmalang.contract.manifest import Manifest
from tmalang.diagnostics import TmalangError

EXAMPLE = ROOT / "examples" / "gemm_splitk_sm90.tma"

# rows, cols, K, parts: K not a multiple of 64, parts that do not divide the steps, more parts
# than steps (those parts add zeros), and M past one cluster of tile rows (the padded rank clips)
CPU_CASES = [((100, 300), 200, 3), ((257, 129), 333, 5), ((130, 4), 64, 2), ((1, 64), 21, 3),
             ((200, 260), 700, 1), ((129, 513), 130, 17)]


@pytest.fixture(scope="module")
def splitk():
    return tmalang.compile_file(EXAMPLE)


def clustered_source() -> str:
    """The example with clusters of two and B multicast, as gemm_sm90: the CTAs of a cluster take
    adjacent tile rows of one part (the part is the walk's slowest index)."""
    text = EXAMPLE.read_text()
    assert "\n    cluster" not in text and "-> s.b\n" in text
    return text.replace("    grid persistent\n", "    grid persistent\n    cluster 2\n").replace(
        "-> s.b\n", "-> s.b multicast\n")


@pytest.fixture(scope="module")
def clustered():
    return tmalang.compile(clustered_source())


@pytest.mark.parametrize("shape,k,parts", CPU_CASES, ids=[f"{m}x{n}x{k}-S{s}" for (m, n), k, s in CPU_CASES])
def test_splitk_gemm_matches_float64_in_the_interpreter(splitk, shape, k, parts):
    args, expected = gemm_splitk_case(np.random.default_rng(k + parts), shape, parts, k)
    splitk.interpret(*args, seed=parts)
    check("gemm_splitk", args[-1], expected)


# the clustered walk: M of 1, 2 and 3 tile rows (a padded second cluster row whose rank-1 CTA
# reduces nothing), parts that do not divide the steps
CLUSTER_CASES = [((257, 300), 333, 3), ((100, 600), 256, 2), ((200, 129), 100, 4)]


@pytest.mark.parametrize("shape,k,parts", CLUSTER_CASES, ids=[f"{m}x{n}x{k}-S{s}" for (m, n), k, s in CLUSTER_CASES])
def test_clustered_splitk_gemm_matches_float64_in_the_interpreter(clustered, shape, k, parts):
    assert clustered.manifest.cluster == (2, 1, 1)
    args, expected = gemm_splitk_case(np.random.default_rng(k), shape, parts, k)
    clustered.interpret(*args, seed=k, ctas=6)
    check("gemm_splitk", args[-1], expected)


def test_splitk_gemm_is_sound_across_schedules(splitk):
    args, expected = gemm_splitk_case(np.random.default_rng(9), (140, 300), 4, 300)
    splitk.interpret(*args, seed=77, explore=8, ctas=5)
    check("gemm_splitk", args[-1], expected)


SPLITSUM = """
kernel splitsum(x: f32[M, K], out: f32[M, 64]) {
    grid tiles
    box X = x[64, 64]
    box O = out[64, 64]
    smem acc: O
    pipeline ring[2] { xs: X }
    role producer: warp 0 {
        for tile (p, m, n) in tiles(out, O) split 3 {
            for k in steps(K, 64) part p {
                produce ring as s { load X[m, k] -> s.xs }
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (p, m, n) in tiles(out, O) split 3 {
            acc = 0.0
            for k in steps(K, 64) part p {
                consume ring as s { acc = acc + s.xs }
            }
            elect {
                reduce add O[m, n] <- acc
                commit_group
                wait_group read 0
            }
            sync
        }
    }
}
"""


def _splitsum_expected(x, out0, parts=3):
    """out0 + the 64-wide chunks of each row of x, summed per part in the kernel's order."""
    rows, k = x.shape
    chunks = -(-k // 64)
    padded_x = np.zeros((rows, chunks * 64), np.float32)
    padded_x[:, :k] = x
    share, rest = divmod(chunks, parts)
    expected = out0.astype(np.float64)
    for p in range(parts):
        first = p * share + min(p, rest)
        acc = np.zeros((rows, 64), np.float32)
        for step in range(first, first + share + (p < rest)):
            acc = acc + padded_x[:, 64 * step: 64 * step + 64]
        expected = expected + acc
    return expected


@pytest.mark.parametrize("rows,k", [(70, 64 * 7 + 5), (64, 64), (1, 200)])
def test_literal_split_on_a_tiles_grid(rows, k):
    kernel = tmalang.compile(SPLITSUM)
    assert kernel.manifest.grid.split == 3
    rng = np.random.default_rng(rows)
    x, out = padded(rng, (rows, k)), padded(rng, (rows, 64))
    expected = _splitsum_expected(x, out)
    kernel.interpret(x, out, seed=rows)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_grid_counts_every_part(splitk):
    from tmalang.contract.binding import bind

    args, _ = gemm_splitk_case(np.random.default_rng(1), (300, 600), 7, 100)
    assert splitk.manifest.grid.split == "S"
    assert bind(splitk.manifest, tuple(args)).tile_count() == 7 * 3 * 3
    assert Manifest.from_json(splitk.manifest.to_json()) == splitk.manifest


@pytest.mark.parametrize("parts", [0, -2])
def test_a_split_scalar_below_one_is_refused_at_launch(splitk, parts):
    args, _ = gemm_splitk_case(np.random.default_rng(1), (64, 64), parts, 64)
    with pytest.raises(TmalangError) as caught:
        splitk.interpret(*args)
    assert caught.value.code == "E206" and "split count" in caught.value.message


def test_launch_header_multiplies_the_tiles_by_the_split(splitk):
    header = launch_header.render(splitk.manifest, "gemm_splitk_sm90.tma")
    assert "if (s_S < 1)" in header and "* uint64_t(s_S);" in header
    literal = launch_header.render(tmalang.compile(SPLITSUM).manifest, "x.tma")
    assert "tmalang::ceil_div(d_M, 64) * tmalang::ceil_div(64, 64) * 3u;" in literal


def test_explain_names_the_split(splitk):
    assert "tile walk: ceil(M/128) x ceil(N/256) tiles, each split into S parts" in splitk.explain()
    assert "tile walk" not in tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma").explain()


def test_part_steps_keep_the_consume_loop_the_passes_match():
    """The consumer's K loop still gets the one-step-late release (defer_mma_release), as in gemm_sm90."""
    ir = tmalang.compile_file(EXAMPLE).ir
    assert "let var=ring.prev" in ir and "wgmma_wait pending=1" in ir


# ---- on the H100 -------------------------------------------------------------------------------

GPU_CASES = [((128, 8192), 8192, 4), ((1000, 1000), 1000, 3), ((257, 513), 4099, 8), ((1, 64), 21, 2),
             ((1024, 1024), 8192, 16), ((333, 777), 2000, 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,k,parts", GPU_CASES, ids=[f"{m}x{n}x{k}-S{s}" for (m, n), k, s in GPU_CASES])
def test_splitk_gemm_matches_float64_on_the_gpu(splitk, shape, k, parts):
    args, expected = gemm_splitk_case(np.random.default_rng(k * parts), shape, parts, k)
    splitk(*args)
    check("gemm_splitk", args[-1], expected)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,k,parts", GPU_CASES[:3], ids=[f"{m}x{n}x{k}-S{s}" for (m, n), k, s in GPU_CASES[:3]])
def test_clustered_splitk_gemm_matches_float64_on_the_gpu(clustered, shape, k, parts):
    args, expected = gemm_splitk_case(np.random.default_rng(k + parts), shape, parts, k)
    clustered(*args)
    check("gemm_splitk", args[-1], expected)


@pytest.mark.gpu
def test_splitk_gemm_gpu_agrees_with_the_interpreter(splitk):
    args, expected = gemm_splitk_case(np.random.default_rng(3), (197, 330), 3, 450)
    gpu_args = [padded_copy(a) if isinstance(a, np.ndarray) else a for a in args]
    splitk(*gpu_args)
    splitk.interpret(*args, seed=1)
    check("gemm_splitk", gpu_args[-1], expected)
    check("gemm_splitk", args[-1], expected)
    diff = np.linalg.norm(gpu_args[-1].astype(np.float64) - args[-1]) / np.linalg.norm(expected)
    assert diff < 1e-5, diff
