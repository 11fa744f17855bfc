"""A pipeline that one role both produces and consumes: the multistage loop of `cuda::pipeline`.

The role keeps its own producer and consumer positions (`%P.put`, `%P.get`) and, in a steps
loop, loads up to D slices ahead of what it consumes (prefetch_own_pipelines): D = S, or S − 1
when tcgen05 reads the slot (a commit frees it only when the MMAs complete). Checked here on the interpreter under random schedules for
rings of 1, 2 and 4 stages, trip counts 0, 1, 2, S − 1, S, S + 1 and many, and shapes that are
not box multiples; on the H100 (`-m gpu`) against float64 and against the interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import padded_copy
from tmalang.compiler import Options, compile_source
from tmalang.ir import ops
from tmalang.passes import PassLog

COPY = """
kernel copy_own(src: f32[M, N], dst: f32[M, N]) {
    grid persistent
    box In  = src[64, 128]
    box Out = dst[64, 128]
    pipeline ring[STAGES] { t: In }

    role worker: warps 0..3 {
        for tile (m, n) in tiles(src, In) {
            produce ring as s { load In[m, n] -> s.t }
            consume ring as s { store Out[m, n] <- s.t }
        }
    }
}
"""

# out[m, j] = sum over k of x[m, 64k + j], the slices loaded ahead in the steps loop
BLOCKSUM = """
kernel blocksum_own(x: f32[M, K], out: f32[M, 64]) {
    grid persistent
    box X = x[64, 64]
    box O = out[64, 64]
    smem acc: O
    pipeline ring[STAGES] { xs: X }

    role worker: warps 0..3 {
        for tile (m, n) in tiles(out, O) {
            acc = 0.0
            for k in steps(EXTENT, 64) {
                produce ring as s { load X[m, k] -> s.xs }
                consume ring as s { acc = acc + s.xs }
            }
            elect {
                store O[m, n] <- acc
                commit_group
                wait_group read 0
            }
            sync
        }
    }
}
"""

GEMM_PATH = ROOT / "examples" / "multistage_sm90.tma"


def copy_kernel(stages: int):
    return tmalang.compile(COPY.replace("STAGES", str(stages)))


def blocksum_kernel(stages: int, extent: str = "K"):
    return tmalang.compile(BLOCKSUM.replace("STAGES", str(stages)).replace("EXTENT", extent))


def gemm_kernel(stages: int):
    return tmalang.compile(GEMM_PATH.read_text().replace("ring[4]", f"ring[{stages}]"))


def padded(rng, shape, dtype=np.float32, fill=None):
    """A matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    rows, cols = shape
    per_row = 16 // np.dtype(dtype).itemsize
    base = rng.standard_normal((rows, -(-cols // per_row) * per_row)) if fill is None else \
        np.full((rows, -(-cols // per_row) * per_row), fill)
    return base.astype(dtype)[:, :cols]


def blocksum_reference(x: np.ndarray, slices: int) -> np.ndarray:
    """The first `slices` 64-column slices of x summed in float32 in the kernel's order (exact)."""
    out = np.zeros((x.shape[0], 64), dtype=np.float32)
    for k in range(slices):
        part = x[:, 64 * k: 64 * k + 64]
        chunk = np.zeros_like(out)
        chunk[:, : part.shape[1]] = part
        out = out + chunk
    return out


def gemm_case(rng, m, n, k):
    import ml_dtypes

    a, b = padded(rng, (m, k), ml_dtypes.bfloat16), padded(rng, (n, k), ml_dtypes.bfloat16)
    c = padded(rng, (m, n), ml_dtypes.bfloat16, fill=np.nan)
    return a, b, c


def relative_error(c, a, b) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    return float(np.linalg.norm(np.asarray(c, dtype=np.float64) - reference) / np.linalg.norm(reference))


def trip_counts(stages: int) -> list[int]:
    return sorted({1, 2, max(1, stages - 1), stages, stages + 1, 9})


# ---- interpreter ------------------------------------------------------------------------------


@pytest.mark.parametrize("stages", [1, 2, 4])
@pytest.mark.parametrize("shape", [(300, 200), (1, 64), (257, 129)], ids=["300x200", "1x64", "257x129"])
def test_tile_copy_matches_numpy(stages, shape):
    """Produce and consume once per tile (no steps loop): a shared counter deadlocked (E401)."""
    rng = np.random.default_rng(stages)
    src, dst = padded(rng, shape), padded(rng, shape, fill=np.nan)
    copy_kernel(stages).interpret(src, dst, seed=stages, explore=4, ctas=2)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_steps_loop_every_trip_count(stages):
    """Trip counts 1, 2, S - 1, S, S + 1 and many, the last slice a partial one (K not a multiple
    of 64), 130 rows (a partial row tile), several schedules each."""
    kernel = blocksum_kernel(stages)
    for trips in trip_counts(stages):
        k = 64 * trips - 23
        rng = np.random.default_rng(trips * 10 + stages)
        x, out = padded(rng, (130, k)), padded(rng, (130, 64), fill=np.nan)
        kernel.interpret(x, out, seed=trips, explore=3, ctas=2)
        np.testing.assert_array_equal(out, blocksum_reference(x, trips))
        reference = sum(np.pad(x.astype(np.float64), ((0, 0), (0, 64 * trips - k)))[:, 64 * j: 64 * j + 64]
                        for j in range(trips))
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_zero_trip_steps_loop_loads_nothing(stages):
    """steps(K - 64, 64) with K <= 64 runs no step: no prologue load, no wait, out = 0."""
    kernel = blocksum_kernel(stages, extent="K - 64")
    rng = np.random.default_rng(0)
    x, out = padded(rng, (70, 64)), padded(rng, (70, 64), fill=np.nan)
    kernel.interpret(x, out, seed=1, explore=3)
    np.testing.assert_array_equal(out, np.zeros((70, 64), dtype=np.float32))


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_multistage_gemm_matches_float64(stages):
    """The wgmma example with rings of 1, 2 and 4 stages, K-loops of 1, S - 1, S, S + 1 and many
    slices (the last partial), M and N not tile multiples."""
    kernel = gemm_kernel(stages)
    for m, n, k in [(130, 300, 100), (257, 129, max(1, 64 * (stages - 1) - 1)), (100, 70, 64 * stages),
                    (100, 70, 64 * stages + 1), (40, 200, 1), (64, 128, 1000)]:
        a, b, c = gemm_case(np.random.default_rng(m + n + k), m, n, max(k, 1))
        kernel.interpret(a, b, c, seed=k, explore=2)
        assert relative_error(c, a, b) < 1e-2


def test_own_ring_keeps_every_wgmma_release_in_its_step():
    """The lookahead D = S relies on it: step k loads k + S into the slot it has just released.
    A release deferred to step k + 1 (defer_mma_release) would make that load wait for itself."""
    for stages in (1, 2, 4):
        body = gemm_kernel(stages)._c.ir.body
        assert not any(isinstance(o, ops.WgmmaWait) and o.pending == 1 for o in ops.walk(body))


def test_consumers_never_lap_a_slot():
    """A consumer warp that has not yet waited on `full` when another thread of its role frees
    the slot would find the barrier a phase on: with one stage and stores only, some schedule let
    the producer refill the slot twice and the lagging warp waited forever (E401, seed 45)."""
    source = (ROOT / "examples" / "tma_copy.tma").read_text().replace("ring[4]", "ring[1]")
    rng = np.random.default_rng(45)
    src, dst = padded(rng, (700, 700)), padded(rng, (700, 700), fill=np.nan)
    tmalang.compile(source).interpret(src, dst, seed=45, ctas=1)
    np.testing.assert_array_equal(dst, src)


def test_own_ring_warps_never_lap_a_slot():
    """The same in a role on both sides of its ring: only the thread that stores the slot waits
    for it (confine_idle_waits, which must see `%P.get` / `%P.put` as the block's end); with all
    warps waiting, schedule seed 18 left one of them a phase behind, waiting forever (E401)."""
    rng = np.random.default_rng(18)
    src, dst = padded(rng, (700, 700)), padded(rng, (700, 700), fill=np.nan)
    copy_kernel(1).interpret(src, dst, seed=18, ctas=1)
    np.testing.assert_array_equal(dst, src)


# ---- what the compiler derives ------------------------------------------------------------------


def _ir_after(source: str, name: str) -> str:
    log = PassLog(print_after={name})
    compile_source(source, "blocksum_own.tma", Options(log=log), until="ir")
    return log.snapshots[0][1]


@pytest.mark.parametrize("name", ["prefetch_own_pipelines", "expand_pipelines"])
def test_ir_golden(name, golden):
    source = BLOCKSUM.replace("STAGES", "2").replace("EXTENT", "K")
    golden(ROOT / "tests" / "golden" / "single_role_blocksum" / f"{name}.ir", _ir_after(source, name))


def _prologue_counts(kernel) -> list[str]:
    return [str(o.count) for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.ForRange) and o.var == "ring.fill"]


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_lookahead_is_the_ring_depth(stages):
    """Stores, tile math and wgmma free the slot within its step: the role loads S steps ahead."""
    assert _prologue_counts(blocksum_kernel(stages)) == [f"min({stages}, %k.trips)"]
    assert _prologue_counts(gemm_kernel(stages)) == [f"min({stages}, %k.trips)"]
    kernel = blocksum_kernel(stages)._c.ir
    guard = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.If) and "%k.trips" in str(o.cond))
    assert str(guard.cond) == f"(%k.trips > (%k + {stages}))"


def tcgen05_own_gemm(stages: int):
    """gemm_sm100.tma with its load warp folded into the MMA warp, which then loads ahead itself."""
    source = (ROOT / "examples" / "gemm_sm100.tma").read_text().replace("ring[3]", f"ring[{stages}]")
    load_role = source[source.index("    role load: warp 0 {"):source.index("    role mma: warp 1 {")]
    source = source.replace(load_role, "").replace(
        "                    consume ring as s { mma t.d, s.a, s.b }",
        "                    produce ring as s {\n                        load A[m, k] -> s.a\n"
        "                        load B[n, k] -> s.b\n                    }\n"
        "                    consume ring as s { mma t.d, s.a, s.b }")
    return tmalang.compile(source, arch="sm_100a")


@pytest.mark.parametrize("stages,ahead", [(1, 0), (2, 1), (3, 2)])
def test_tcgen05_lookahead_is_one_less(stages, ahead):
    """A tcgen05 slot is freed by a commit once its MMAs complete: loading into step k's own slot
    would hold the issuing thread until MMA k is done, so the role loads into k - 1's."""
    kernel = tcgen05_own_gemm(stages)
    assert _prologue_counts(kernel) == ([f"min({ahead}, %k.trips)"] if ahead else [])
    a, b, c = gemm_case(np.random.default_rng(stages), 200, 300, 64 * stages + 13)
    kernel.interpret(a, b, c, seed=stages, explore=3, ctas=2)
    assert relative_error(c, a, b) < 1e-2


def test_tile_loop_pair_stays_in_place():
    """Loads do not cross tile iterations: produce, then consume, in every tile, two positions."""
    kernel = copy_kernel(4)._c.ir
    role = ops.roles(kernel)[0]
    assert [o.var for o in role.body[:2]] == ["ring.put", "ring.get"]
    assert not any(isinstance(o, ops.ForRange) for o in ops.walk(role.body))


def test_explain_shows_both_positions_and_one_phase_of_bytes():
    """The prologue's and the loop's produce blocks arm `full` alternately: a phase expects one
    block's bytes (64 x 64 x 4), not their sum."""
    rows = {line.split()[0]: line for line in blocksum_kernel(4).explain().splitlines() if line.startswith("ring.")}
    assert rows["ring.full"].split()[1:4] == ["4", "1", "16384"]
    assert " ".join(rows["ring.full"].split()[4:]) == "worker ((%ring.get / 4) & 1) worker"
    assert " ".join(rows["ring.empty"].split()[4:]) == "worker (1 - ((%ring.put / 4) & 1)) worker"


# ---- the H100 ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 4])
@pytest.mark.parametrize("shape", [(1000, 1000), (257, 129), (1, 64), (4099, 260)],
                         ids=["1000x1000", "257x129", "1x64", "4099x260"])
def test_h100_tile_copy_is_exact(stages, shape):
    rng = np.random.default_rng(stages)
    src, dst = padded(rng, shape), padded(rng, shape, fill=np.nan)
    copy_kernel(stages)(src, dst)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_h100_steps_loop_matches_interpreter_and_numpy(stages):
    kernel = blocksum_kernel(stages)
    for trips in [*trip_counts(stages), 100]:
        k = 64 * trips - 23
        rng = np.random.default_rng(trips * 10 + stages)
        x = padded(rng, (1000, k))
        gpu, interp = padded(rng, (1000, 64), fill=np.nan), padded(rng, (1000, 64), fill=np.nan)
        kernel(x, gpu)
        kernel.interpret(x, interp)
        np.testing.assert_array_equal(gpu, interp)
        np.testing.assert_array_equal(gpu, blocksum_reference(x, trips))


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_h100_zero_trip_steps_loop(stages):
    kernel = blocksum_kernel(stages, extent="K - 64")
    rng = np.random.default_rng(0)
    x, out = padded(rng, (300, 64)), padded(rng, (300, 64), fill=np.nan)
    kernel(x, out)
    np.testing.assert_array_equal(out, np.zeros((300, 64), dtype=np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (257, 513, 2000), (4096, 4096, 4096),
                                   (200, 200, 64), (200, 200, 192)])
def test_h100_multistage_gemm_matches_float64(m, n, k):
    a, b, c = gemm_case(np.random.default_rng(m + n + k), m, n, k)
    tmalang.compile_file(GEMM_PATH)(a, b, c)
    assert relative_error(c, a, b) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_h100_multistage_gemm_matches_interpreter(stages):
    """The H100 and the interpreter on the same inputs: the same bf16 result up to the order of
    the f32 accumulation inside the tensor cores."""
    kernel = gemm_kernel(stages)
    for m, n, k in [(130, 300, 100), (100, 70, 64 * stages + 1), (257, 129, 1000)]:
        a, b, c = gemm_case(np.random.default_rng(m + n + k), m, n, k)
        expected = padded_copy(c)
        kernel(a, b, c)
        kernel.interpret(a, b, expected)
        difference = np.abs(c.astype(np.float64) - expected.astype(np.float64))
        assert relative_error(c, a, b) < 1e-2
        assert np.linalg.norm(difference) / np.linalg.norm(expected.astype(np.float64)) < 1e-2
