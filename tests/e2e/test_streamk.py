"""Stream-K tile loops (§9 `stream`, §10 `steps .. stream`) and the stream-K GEMM
(examples/gemm_streamk_sm90.tma): the lowered range arithmetic against a Python model (every
(tile, step) unit once, no tile visited without a step, equal shares), the interpreter against
float64 at shapes that are not tile multiples on grids the tiles do not divide, the launch
contract (units, E206), the IR fields' round trip and verify hooks, the launch header and
--explain; on the H100 (marked gpu) the GEMM against float64 and against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import check, gemm_streamk_case, padded, padded_copy
from tmalang.backend import launch_header, ptxas
from tmalang.compiler import Options, compile_source
from tmalang.contract.binding import MAX_TILES, _check_tile_count, bind
from tmalang.contract.errors import LaunchError
from tmalang.contract.manifest import Manifest
from tmalang.diagnostics import TmalangError
from tmalang.interp import Launch
from tmalang.interp.machine import CTA, Cluster
from tmalang.ir import exprs as ex
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES, PassLog, lower_tile_walk
from tmalang.targets.arch import SM_90A

EXAMPLE = ROOT / "examples" / "gemm_streamk_sm90.tma"


@pytest.fixture(scope="module")
def streamk():
    return tmalang.compile_file(EXAMPLE)


# ---- the range arithmetic ------------------------------------------------------------------


def _walk_kernel(group: int) -> ops.KernelOp:
    """A persistent kernel whose one warp walks a stream tile space of [M, N] by [8, 4] with
    steps(K, 16), doing nothing but a let per tile."""
    walk = ops.ForTiles(["v0", "v1"], "t", "B", "i", group, [ops.Let("probe", ex.Const(0))],
                        extent=ex.Param("K"), chunk=16, stream=["i.step0", "i.nsteps"])
    kernel = ops.KernelOp("walk", "persistent", 1, 1, 32, 0, [
        ops.TensorDecl("t", "f32", ["M", "N"]),
        ops.TensorDecl("k", "f32", ["K"]),
        ops.BoxDecl("B", "t", "f32", [8, 4], [1, 1], "none", "zero", "none", 1, False),
        ops.RoleOp("r", 0, 0, 0, [walk]),
    ])
    lower_tile_walk.run(kernel, SM_90A)
    verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])
    return kernel


def _order(rows: int, cols: int, group: int) -> list[tuple[int, int]]:
    """The walk's tile order: row-major, or bands of `group` rows walked column by column (§9)."""
    if not group:
        return [(r, c) for r in range(rows) for c in range(cols)]
    order = []
    for first in range(0, rows, group):
        height = min(group, rows - first)
        order += [(first + r, c) for c in range(cols) for r in range(height)]
    return order


def model(tiles: int, steps: int, ctas: int) -> dict[int, list[tuple[int, int, int]]]:
    """Stream-K's split of tiles x steps units into ctas ranges: q = U / G each, the first U % G
    one more; per CTA the (tile, first step, count) of each tile its range meets, in order."""
    units = tiles * steps
    share, extra = divmod(units, ctas)
    out = {}
    for g in range(ctas):
        begin = g * share + min(g, extra)
        end = begin + share + (g < extra)
        out[g] = [(t, max(begin, t * steps) - t * steps, min(end, t * steps + steps) - max(begin, t * steps))
                  for t in range(tiles) if max(begin, t * steps) < min(end, t * steps + steps)]
    return out


def _run_walk(kernel, rows, cols, k, ctas, group):
    launch = Launch({}, {"M": rows * 8 - 3, "N": cols * 4 - 1, "K": k}, None, SM_90A)
    role = ops.roles(kernel)[0]
    walked = {}
    for cta in range(ctas):
        machine = CTA(kernel, launch, cta, ctas, Cluster())
        warp = machine.warps[0]
        probes = [tuple(warp.env.get(v) for v in ("i", "v0", "v1", "i.step0", "i.nsteps"))
                  for _ in machine.region(warp, role.body)][:-1]
        assert [p[0] for p in probes] == list(range(len(probes))), "the index counts the iterations"
        walked[cta] = [p[1:] for p in probes]
    return walked


@pytest.mark.parametrize("group", [0, 3])
@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 3), (2, 5), (7, 3), (4, 4)])
def test_the_lowered_walk_cuts_the_units_as_the_model(rows, cols, group):
    """Many (tiles, steps per tile, grid): every unit once, in the model's ranges and order; no
    tile visited without a step (also with more CTAs than units, and with no step at all)."""
    kernel = _walk_kernel(group)
    order = _order(rows, cols, group)
    for k in (0, 1, 16, 17, 40, 16 * 5, 16 * 13 - 3):
        steps = -(-k // 16)
        for ctas in (1, 2, 3, 5, 7, 13, 40):
            walked = _run_walk(kernel, rows, cols, k, ctas, group)
            expected = {g: [(*order[t], first, count) for t, first, count in visits]
                        for g, visits in model(rows * cols, steps, ctas).items()}
            assert walked == expected, (rows, cols, k, ctas)
            units = sorted((v0, v1, first + s) for visits in walked.values()
                           for v0, v1, first, count in visits for s in range(count))
            assert units == sorted((r, c, s) for r in range(rows) for c in range(cols) for s in range(steps))
            assert all(count >= 1 for visits in walked.values() for *_, count in visits)
            shares = [sum(v[3] for v in visits) for visits in walked.values()]
            assert max(shares) - min(shares) <= 1


def test_the_model_covers_every_unit_once():
    for tiles in range(1, 30):
        for steps in (1, 2, 7, 64, 129):
            for ctas in (1, 2, 3, 4, 7, 33, 132, 1000):
                visits = model(tiles, steps, ctas)
                units = sorted(t * steps + first + s for v in visits.values() for t, first, count in v
                               for s in range(count))
                assert units == list(range(tiles * steps))
                assert sum(1 for v in visits.values() if v) == min(ctas, tiles * steps)


# ---- the interpreter ---------------------------------------------------------------------------

# rows, cols, K, CTAs: K not a multiple of 64, tile counts the grid does not divide, fewer tiles
# than CTAs (a tile finished by up to 7 CTAs), one step per tile, M of one row
CPU_CASES = [((100, 300), 200, 5), ((257, 129), 333, 4), ((1, 64), 21, 3), ((300, 600), 130, 7),
             ((129, 513), 700, 13), ((130, 4), 64, 2), ((600, 260), 1000, 3)]


@pytest.mark.parametrize("shape,k,ctas", CPU_CASES, ids=[f"{m}x{n}x{k}-G{g}" for (m, n), k, g in CPU_CASES])
def test_streamk_gemm_matches_float64_in_the_interpreter(streamk, shape, k, ctas):
    args, expected = gemm_streamk_case(np.random.default_rng(k + ctas), shape, k)
    streamk.interpret(*args, seed=ctas, ctas=ctas)
    check("gemm_streamk", args[-1], expected)


def test_streamk_gemm_is_sound_across_schedules(streamk):
    args, expected = gemm_streamk_case(np.random.default_rng(9), (140, 300), 300)
    streamk.interpret(*args, seed=77, explore=8, ctas=5)
    check("gemm_streamk", args[-1], expected)


STREAMSUM = """
kernel streamsum(x: f32[M, L], out: f32[M, 64]) {
    grid persistent
    box X = x[64, 64]
    box O = out[64, 64]
    smem acc: O
    pipeline ring[2] { xs: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, O) stream {
            for k in steps(EXTENT, 64) stream {
                produce ring as s { load X[m, k] -> s.xs }
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, O) stream {
            acc = 0.0
            for k in steps(EXTENT, 64) stream {
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


@pytest.mark.parametrize("extent", ["L", "S", "200"])
@pytest.mark.parametrize("rows,length,ctas", [(70, 64 * 7 + 5, 4), (130, 64, 5), (1, 200, 2), (200, 64 * 3, 11)])
def test_every_step_lands_once(extent, rows, length, ctas):
    """Integer-valued data, so any f32 order sums exactly: out = out0 + the row's 64-wide chunks,
    each once, whichever CTAs share a tile. The extent is a dimension, a scalar or a literal."""
    source = STREAMSUM.replace("EXTENT", extent)
    if extent == "S":
        source = source.replace("out: f32[M, 64])", "out: f32[M, 64], S: i32)")
    kernel = tmalang.compile(source)
    length = 200 if extent == "200" else length
    rng = np.random.default_rng(rows + length)
    x = padded(rng, (rows, length), fill=rng.integers(-8, 9, (rows, -(-length // 4) * 4)))
    out = padded(rng, (rows, 64), fill=rng.integers(-8, 9, (rows, 64)))
    chunks = -(-length // 64)
    wide = np.zeros((rows, chunks * 64), np.float64)
    wide[:, :length] = x
    expected = out.astype(np.float64) + wide.reshape(rows, chunks, 64).sum(axis=1)
    kernel.interpret(x, out, *([np.int32(length)] if extent == "S" else []), seed=rows, ctas=ctas)
    np.testing.assert_array_equal(out, expected)


# ---- the launch contract, the IR, the header, --explain -------------------------------------


def test_the_grid_counts_units(streamk):
    args, _ = gemm_streamk_case(np.random.default_rng(1), (300, 600), 100)
    assert streamk.manifest.grid.stream == ("K", 64)
    assert bind(streamk.manifest, tuple(args)).tile_count() == 3 * 3 * 2
    assert Manifest.from_json(streamk.manifest.to_json()) == streamk.manifest
    plain = tmalang.compile_file(ROOT / "examples" / "gemm_splitk_sm90.tma").manifest
    assert "stream" not in plain.to_json()["grid"], "the JSON of a kernel without stream-K is unchanged"


def test_units_past_31_bits_are_refused_at_launch(streamk):
    grid = streamk.manifest
    _check_tile_count(grid, {"M": 128 * 1024, "N": 256 * 1024, "K": 64 * 2047})     # 2^20 tiles x 2047 steps
    with pytest.raises(LaunchError) as caught:
        _check_tile_count(grid, {"M": 128 * 1024, "N": 256 * 1024, "K": 64 * 2048})
    assert caught.value.code == "E206" and "stream-K units" in caught.value.message
    assert 1024 * 1024 * 2048 == MAX_TILES   # 2^20 tiles x 2048 steps: the first count refused


def test_launch_header_multiplies_the_tiles_by_the_steps(streamk):
    header = launch_header.render(streamk.manifest, "gemm_streamk_sm90.tma")
    assert "* (d_K > 0 ? tmalang::ceil_div(uint64_t(d_K), 64) : 0);" in header
    assert "too many stream-K units" in header


def test_explain_names_the_stream_walk(streamk):
    assert "tile walk: ceil(M/128) x ceil(N/256) tiles x ceil(K/64) K steps each (stream-K)" in streamk.explain()


def _ir_after(stage: str) -> str:
    log = PassLog(print_after={stage})
    compile_source(EXAMPLE.read_text(), EXAMPLE.name, Options(arch="sm_90a", log=log), until="ir")
    return log.snapshots[0][1]


@pytest.mark.parametrize("old,new,message", [
    ("grid=persistent", "grid=tiles", "a stream walk on a grid of tiles"),
    ("stream=[tile1.step0, tile1.nsteps]", "stream=[tile1.step0]", "not \\[first step, step count\\]"),
    ("chunk=64 stream", "chunk=0 stream", "not a stream walk's positive chunk"),
    ("extent=$K chunk", "extent=($K / 2) chunk", "not a stream walk's launch-bound extent"),
    ("group=8 extent=$K chunk=64 stream=[tile1.step0, tile1.nsteps]", "group=8 extent=$K chunk=64",
     "not a stream walk's positive chunk"),
    ("group=8 extent=$K", "group=8 split=2 part=p extent=$K", "a walk both split and streamed"),
])
def test_the_stream_fields_round_trip_and_are_verified(old, new, message):
    text = _ir_after("dispatch_roles")
    assert print_ir(parse_ir(text)) == text and old in text
    [kernel] = parse_ir(text.replace(old, new, 1))
    with pytest.raises(TmalangError, match=f"E999.*{message}"):
        verify(kernel, "dispatch_roles", ["lower", *PASS_NAMES[: PASS_NAMES.index("dispatch_roles") + 1]])


def test_the_stream_steps_keep_the_consume_loop_the_passes_match(streamk):
    """The consumer's K loop still gets the one-step-late release (defer_mma_release)."""
    assert "let var=ring.prev" in streamk.ir and "wgmma_wait pending=1" in streamk.ir


def test_ptxas_assembles_the_example_for_sm_90a(streamk):
    assert "div.u32" in streamk.ptx   # the range arithmetic is unsigned
    cubin, _ = ptxas.assemble(streamk.ptx, "sm_90a")
    assert cubin


# ---- on the H100 -------------------------------------------------------------------------------

GPU_SHAPES = [((128, 8192), 8192), ((1000, 1000), 1000), ((257, 513), 4099), ((1, 64), 21),
              ((1024, 1024), 1024), ((333, 777), 2000), ((4096, 4096), 512), ((64, 8192), 8192)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,k", GPU_SHAPES, ids=[f"{m}x{n}x{k}" for (m, n), k in GPU_SHAPES])
def test_streamk_gemm_matches_float64_on_the_gpu(streamk, shape, k):
    args, expected = gemm_streamk_case(np.random.default_rng(k + shape[0]), shape, k)
    streamk(*args)
    check("gemm_streamk", args[-1], expected)


@pytest.mark.gpu
def test_streamk_gemm_gpu_agrees_with_the_interpreter(streamk):
    args, expected = gemm_streamk_case(np.random.default_rng(3), (197, 330), 450)
    gpu_args = [padded_copy(a) if isinstance(a, np.ndarray) else a for a in args]
    streamk(*gpu_args)
    streamk.interpret(*args, seed=1, ctas=7)
    check("gemm_streamk", gpu_args[-1], expected)
    check("gemm_streamk", args[-1], expected)
    diff = np.linalg.norm(gpu_args[-1].astype(np.float64) - args[-1]) / np.linalg.norm(expected)
    assert diff < 1e-5, diff
