"""Gathered rows (TMA .tile::gather4 / .tile::scatter4, sm_100a): `load X[idx[m], n] -> t` and
`store Y[idx[m], n] <- t`. No Blackwell GPU runs them here: the interpreter (the definition of
what they move) is checked against NumPy, bit for bit for copies and in float64 for the MoE GEMM,
at shapes that are not multiples of the box, with indices in random order and with repeats;
ptxas -arch=sm_100a assembles what the backend emits; the IR field, the verifier, the manifest,
the packed parameters and the C++ header are checked as text."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.cli.main import main as cli_main
from tmalang.compiler import Options, compile_source
from tmalang.contract.binding import bind
from tmalang.contract.manifest import IndexParam, Manifest, TensorMapParam
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.cli.opt import optimize
from tmalang.passes import PASS_NAMES
from tmalang.passes.order_slot_release import _may_overlap
from tmalang.runtime.params import pack_params
from tmalang.targets.arch import target_named

BF16 = ml_dtypes.bfloat16

GATHER = """
kernel gather_rows(x: {dt}[R, C], idx: i32[M], y: {dt}[P, C]) {{
    grid {grid}
    box X = x[{rows}, {cols}]{opt}
    box Y = y[{rows}, {cols}]
    pipeline ring[2] {{ t: Y }}
    role load: warp 0 {{
        for tile (m, n) in tiles(y, Y) {{ produce ring as s {{ load X[idx[m], n] -> s.t }} }}
    }}
    role store: warp 1 {{
        for tile (m, n) in tiles(y, Y) {{ consume ring as s {{ store Y[m, n] <- s.t }} }}
    }}
}}
"""

SCATTER = """
kernel scatter_rows(x: f32[M, C], idx: i32[M], y: f32[R, C]) {
    grid persistent
    box X = x[8, 32]
    box Y = y[8, 32]
    pipeline ring[2] { t: X }
    role load: warp 0 {
        for tile (m, n) in tiles(x, X) { produce ring as s { load X[m, n] -> s.t } }
    }
    role store: warp 1 {
        for tile (m, n) in tiles(x, X) { consume ring as s { store Y[idx[m], n] <- s.t } }
    }
}
"""

# one role, the explicit layer: gather into a buffer, scatter the same rows into another tensor
ROUND_TRIP = """
kernel round_trip(x: f32[R, C], idx: i32[M], z: f32[R, C]) {
    box X = x[4, 16] cache evict_last
    box Z = z[4, 16]
    smem buf: X
    mbarrier loaded(1)
    role main: warp 0 {
        for tile (m, n) in tiles(z, Z) as i {
            elect {
                expect_tx loaded, 256
                load X[idx[m], n] -> buf, loaded
                arrive loaded
            }
            wait loaded, i & 1
            elect {
                store Z[idx[m], n] <- buf
                commit_group
                wait_group 0
            }
        }
    }
}
"""


def gather_kernel(dt="f32", rows=8, cols=32, grid="persistent", opt=""):
    return tmalang.compile(GATHER.format(dt=dt, rows=rows, cols=cols, grid=grid, opt=opt), arch="sm_100a",
                           name="gather.tma")


def matrix(rng, shape, dtype=np.float32):
    rows, cols = shape
    base = rng.standard_normal((rows, -(-cols * np.dtype(dtype).itemsize // 16) * 16 // np.dtype(dtype).itemsize))
    return base.astype(dtype)[:, :cols]


def filled(shape, value, dtype=np.float32):
    """A padded matrix (rows 16-byte aligned, as TMA needs) of one value."""
    rows, cols = shape
    return np.full((rows, -(-cols * np.dtype(dtype).itemsize // 16) * 16 // np.dtype(dtype).itemsize), value,
                   dtype)[:, :cols]


@pytest.mark.parametrize("dt,rows,cols,r,m,c,grid", [
    ("f32", 8, 32, 37, 13, 70, "persistent"),      # repeats (13 picks of 37), a partial column tile
    ("f32", 4, 16, 5, 23, 16, "tiles"),            # more picks than rows: every row picked again
    ("bf16", 128, 64, 300, 130, 100, "persistent"),   # the MoE tile: 32 gather4 copies per load
    ("f16", 12, 16, 9, 1, 8, "tiles"),             # one pick, a 12-row tile of which 11 rows lie past M
])
def test_gathered_rows_match_numpy_bit_for_bit(dt, rows, cols, r, m, c, grid):
    k = gather_kernel({"f32": "f32", "bf16": "bf16", "f16": "f16"}[dt], rows, cols, grid)
    dtype = {"f32": np.float32, "bf16": BF16, "f16": np.float16}[dt]
    rng = np.random.default_rng(r + m)
    x, idx = matrix(rng, (r, c), dtype), rng.integers(0, r, m).astype(np.int32)
    y = filled((m, c), 7, dtype)
    k.interpret(x, idx, y, seed=2, explore=2, ctas=3)
    np.testing.assert_array_equal(y.view(np.uint8), x[idx].view(np.uint8))


@pytest.mark.parametrize("oob,fill", [("", 0.0), (" oob nan", np.nan)])
def test_positions_past_the_index_tensor_fill_their_rows(oob, fill):
    """y has more rows than idx has entries: the tile rows past the end name no row (on the GPU
    the row just past the tensor's end), which TMA fills as it fills any row outside the tensor."""
    k = gather_kernel(opt=oob)
    rng = np.random.default_rng(1)
    x, idx = matrix(rng, (11, 40)), np.array([3, 10, 0, 3, 7], np.int32)
    y = np.full((13, 40), 7.0, np.float32)
    k.interpret(x, idx, y, seed=1)
    np.testing.assert_array_equal(y[:5], x[idx])
    np.testing.assert_array_equal(y[5:], np.full((8, 40), fill, np.float32))


def test_scattered_rows_match_numpy_and_leave_other_rows():
    k = tmalang.compile(SCATTER, arch="sm_100a", name="scatter.tma")
    rng = np.random.default_rng(4)
    x = matrix(rng, (21, 50))
    idx = rng.permutation(40)[:21].astype(np.int32)     # distinct rows, arbitrary order
    y = matrix(rng, (40, 50))
    expected = y.copy()
    expected[idx] = x
    k.interpret(x, idx, y, seed=3, explore=2, ctas=2)
    np.testing.assert_array_equal(y, expected)


def test_gather_then_scatter_restores_the_picked_rows():
    k = tmalang.compile(ROUND_TRIP, arch="sm_100a", name="round_trip.tma")
    rng = np.random.default_rng(6)
    x = matrix(rng, (16, 20))
    idx = np.array([5, 0, 15, 9, 2, 11, 7, 1, 14, 3, 12, 6, 4, 13, 8, 10], np.int32)   # a permutation
    z = np.zeros((16, 20), np.float32)
    k.interpret(x, idx, z, seed=1)
    np.testing.assert_array_equal(z, x)


@pytest.mark.parametrize("bad", [-1, 37, 2**31 - 1, -(2**31)])
def test_an_index_outside_the_rows_is_e497_at_the_copy(bad):
    k = gather_kernel()
    idx = np.arange(13, dtype=np.int32)
    idx[9] = bad
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((37, 32), np.float32), idx, np.zeros((13, 32), np.float32))
    assert e.value.code == "E497" and f"idx[9] = {bad} is not a row of tensor 'x' (0..36)" in e.value.message
    assert e.value.span.line == 8 and "fills that tile row" in "".join(e.value.notes)


def test_a_scatter_index_outside_the_rows_is_e497():
    k = tmalang.compile(SCATTER, arch="sm_100a", name="scatter.tma")
    idx = np.arange(9, dtype=np.int32)
    idx[4] = 40
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((9, 32), np.float32), idx, np.zeros((40, 32), np.float32))
    assert e.value.code == "E497" and "gathered store" in e.value.message and e.value.span.line == 11


def test_a_scatter_writing_one_row_twice_is_e498():
    k = tmalang.compile(SCATTER, arch="sm_100a", name="scatter.tma")
    idx = np.arange(8, dtype=np.int32)
    idx[6] = 2
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((8, 32), np.float32), idx, np.zeros((40, 32), np.float32))
    assert e.value.code == "E498" and "writes row 2 of tensor 'y' twice (tile rows 2 and 6)" in e.value.message


def test_scatters_of_two_ctas_to_one_row_race():
    """Rows named in two tiles are written by two CTAs that nothing orders: E421, row by row."""
    k = tmalang.compile(SCATTER, arch="sm_100a", name="scatter.tma")
    idx = np.arange(16, dtype=np.int32)
    idx[12] = 3
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((16, 32), np.float32), idx, np.zeros((40, 32), np.float32), ctas=2)
    assert e.value.code == "E421" and "y[3:4, 0:32]" in e.value.message


def moe():
    return tmalang.compile_file(ROOT / "examples" / "moe_gemm_sm100.tma", arch="sm_100a")


@pytest.mark.parametrize("t,m,n,k", [(77, 130, 300, 100), (5, 257, 64, 64), (300, 129, 257, 72), (40, 1, 8, 8)])
def test_moe_gemm_matches_float64(t, m, n, k):
    """Y = X[idx]·Wᵀ: random routing with repeats (more rows than tokens, or the reverse), M and N
    not multiples of the tile."""
    rng = np.random.default_rng(t * m)
    x, w = matrix(rng, (t, k), BF16), matrix(rng, (n, k), BF16)
    idx = rng.integers(0, t, m).astype(np.int32)
    y = np.full((m, -(-n // 8) * 8), np.nan, BF16)[:, :n]
    moe().interpret(x, idx, w, y, ctas=3)
    reference = x.astype(np.float64)[idx] @ w.astype(np.float64).T
    error = np.linalg.norm(y.astype(np.float64) - reference) / np.linalg.norm(reference)
    assert np.isfinite(y.astype(np.float64)).all() and error < 1e-2


def test_moe_gemm_ptx_gathers_with_guarded_index_reads():
    ptx = moe().ptx
    assert ptx.count("tile::gather4.mbarrier::complete_tx::bytes") == 32         # 128 rows, four per copy
    assert ptx.count("@q ld.global.s32") == 128 and "setp.lt.u32 q" in ptx
    # an index outside the rows becomes the row past the end, never a negative row (the H100
    # faults on a tensor store at a negative coordinate)
    assert ptx.count("setp.ge.u32 q") == 128
    assert ".param .u64 moe_gemm_param_" in ptx


def test_ptx_assembles_for_sm_100a():
    for k in (moe(), tmalang.compile(SCATTER, arch="sm_100a"),
              tmalang.compile(ROUND_TRIP, arch="sm_100a")):
        assert "tile::gather4" in k.ptx or "tile::scatter4.bulk_group" in k.ptx
        cubin, stats = ptxas.assemble(k.ptx, "sm_100a")
        assert cubin[:4] == b"\x7fELF" and stats.spill_stores == 0
    hinted = tmalang.compile(ROUND_TRIP, arch="sm_100a").ptx
    assert "tile::gather4.mbarrier::complete_tx::bytes.L2::cache_hint" in hinted
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile::scatter4.bulk_group [" in hinted


def test_sm_90a_refuses_gathered_rows():
    with pytest.raises(TmalangError) as e:
        tmalang.compile(SCATTER, arch="sm_90a")
    assert e.value.code == "E490" and e.value.span.line == 11


def test_the_tensor_map_has_one_row_and_the_index_tensor_is_a_parameter():
    manifest = moe().manifest
    maps = {p.box: p for p in manifest.ptx_params if isinstance(p, TensorMapParam)}
    assert maps["A"].box_shape == (1, 64) and maps["B"].box_shape == (256, 64)
    assert manifest.ptx_params[-1] == IndexParam("idx", ("x",))
    assert Manifest.from_json(manifest.to_json()) == manifest
    rng = np.random.default_rng(0)
    x, w = matrix(rng, (5, 64), BF16), matrix(rng, (8, 64), BF16)
    binding = bind(manifest, (x, np.zeros(3, np.int32), w, np.zeros((3, 8), BF16)))
    params = pack_params(binding, lambda p: b"\0" * 128, {"idx": 0x5000}.__getitem__)
    assert struct.unpack("<Q", params.value(len(params) - 1))[0] == 0x5000
    plain = tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a").manifest.ptx_params
    assert not any(isinstance(p, IndexParam) for p in plain)


def test_ir_round_trips_and_the_verifier_holds_the_gather_rules():
    c = compile_source(SCATTER, "scatter.tma", Options(arch="sm_100a"), until="ir")
    text = print_ir(c.ir)
    assert "mode=gather4" in text and "gather=idx" in text and print_ir(parse_ir(text)) == text
    done = ["lower", *PASS_NAMES]
    verify(parse_ir(text)[0], "lower_tile_walk", done)
    wrong = {"gather=idx": "gather=x", "shape=[8, 32] strides=[1, 1] swizzle=none oob=zero l2=none multicast=1 "
             "pair=false mode=gather4": "shape=[6, 32] strides=[1, 1] swizzle=none oob=zero l2=none multicast=1 "
             "pair=false mode=gather4"}
    for old, new in wrong.items():
        assert old in text
        with pytest.raises(TmalangError, match="gather"):
            verify(parse_ir(text.replace(old, new, 1))[0], "lower_tile_walk", done)
    assert "tma_store_scatter4 box=Y" in text   # a copy's op is its box's mode: a tiled store cannot go through Y
    tiled = text.replace("tma_store_scatter4 box=Y", "tma_store box=Y", 1).replace(" gather=idx", "", 1)
    with pytest.raises(TmalangError, match="box @Y is a gather4 box, not tiled"):
        verify(parse_ir(tiled)[0], "lower_tile_walk", done)


def test_the_launch_header_passes_the_index_tensor_address(tmp_path):
    header = tmp_path / "moe.h"
    assert cli_main([str(ROOT / "examples" / "moe_gemm_sm100.tma"), "--arch", "sm_100a", "--emit", "header",
                     "-o", str(header)]) == 0
    text = header.read_text()
    assert "uint64_t x_idx = uint64_t(args.idx.data);" in text and text.count("&x_idx") == 1


def test_opt_refuses_gathered_copies_for_sm_90a():
    path = ROOT / "tests" / "passes" / "order_slot_release" / "scatters_overlap.ir"
    with pytest.raises(TmalangError) as e:
        optimize(path.read_text(), str(path), ["order_slot_release"], target_named("sm_90a"))
    assert e.value.code == "E434" and "'tma_store_scatter4' needs a target with gather4" in e.value.message
    optimize(path.read_text(), str(path), ["order_slot_release"], target_named("sm_100a"))


def test_a_scattered_store_is_taken_to_overlap_any_store_of_its_tensor():
    scatter = ("y", (8, 32), (1, 1), None)
    assert _may_overlap(scatter, ("y", (8, 32), (1, 1), ("%m", "%n")))
    assert _may_overlap(("y", (8, 32), (1, 1), ("%m", "%n")), scatter)
    assert _may_overlap(scatter, scatter) and not _may_overlap(scatter, ("z", (8, 32), (1, 1), None))


PREFETCHED = GATHER.format(dt="f32", rows=8, cols=32, grid="persistent", opt=" cache evict_first").replace(
    "for tile (m, n) in tiles(y, Y) { produce", "for tile (m, n) in tiles(y, Y) {\n"
    "            elect { prefetch X[idx[m + 1], n] }\n            produce")


def test_a_gathered_prefetch_is_gather4_into_l2_and_changes_no_value():
    k = tmalang.compile(PREFETCHED, arch="sm_100a", name="prefetched.tma")
    assert k.ptx.count("cp.async.bulk.prefetch.tensor.2d.L2.global.tile::gather4.L2::cache_hint [") == 2
    cubin, _ = ptxas.assemble(k.ptx, "sm_100a")
    assert cubin[:4] == b"\x7fELF"
    rng = np.random.default_rng(9)
    x, idx = matrix(rng, (30, 40)), rng.integers(0, 30, 21).astype(np.int32)
    y = filled((21, 40), 7.0)
    k.interpret(x, idx, y, seed=4, explore=2)     # the last tile prefetches past the index tensor
    np.testing.assert_array_equal(y, x[idx])
