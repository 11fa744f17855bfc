"""Element coordinates (`T@[r, c]`, docs §13c): loads at any element offset along outer dims and
at 16-byte multiples innermost, negative and past the edge (filled with the box's oob value),
stores kept inside their own tile, the H100's faults behind E476/E461, the stencil
example against NumPy at shapes that are not box multiples, the IR flag, the race the
interpreter catches when stores overlap, ptxas, and on the H100 the same bits as NumPy and the
interpreter."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import CASES, padded, padded_copy
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.interp.tiles import TMA_NAN_HALFWORD, box_tile_bytes, check_element_start, read_box, write_box
from tmalang.interp.state import ProtocolError
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES

STENCIL = (ROOT / "examples" / "stencil_sm90.tma").read_text()
SHAPES = [(70, 45), (1, 1), (130, 97), (64, 64), (3, 200)]
IDS = [f"{m}x{n}" for m, n in SHAPES]

# Each 64x32 tile of out is x shifted by (DR, DC) elements: out[i, j] = x[i + DR, j + DC], the
# box's oob value where that lies outside x.
SHIFT = """
kernel shift(x: f32[M, N], out: f32[M, N]) {{
    grid {grid}
    box X = x[64, 32] {oob}
    box O = out[64, 32]
    pipeline ring[2] {{ t: X }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(out, O) {{
            produce ring as s {{ load X@[m*64 + {dr}, n*32 + {dc}] -> s.t }}
        }}
    }}
    role consumer: warps 4..7 {{
        for tile (m, n) in tiles(out, O) {{
            consume ring as s {{ store O[m, n] <- s.t }}
        }}
    }}
}}
"""

# The bottom 16 rows and columns 8..39 of each 64x64 tile, stored at element coordinates inside
# the tile (so tiles store disjoint elements: no E580); the rest of out keeps its old values.
INNER = """
kernel inner(x: f32[M, N], out: f32[M, N]) {
    grid persistent
    box T = out[64, 64]
    box X = x[16, 32]
    box O = out[16, 32]
    pipeline ring[2] { t: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, T) {
            produce ring as s { load X@[m*64 + 48, n*64 + 8] -> s.t }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, T) {
            consume ring as s { store O@[m*64 + 48, 8 + 64*n] <- s.t }
        }
    }
}
"""

# Three stores into each 64x64 tile of out, overlapping: the whole tile from s.t, then a 32-row
# box of x (rows 8..39 of the tile) at rows 16 and 32 of the tile. The compiler orders them
# (order_slot_release: a store at element coordinates waits for earlier stores of its tensor).
LAYERED = """
kernel layered(x: f32[M, N], out: f32[M, N]) {
    grid persistent
    box T = out[64, 64]
    box TX = x[64, 64]
    box X = x[32, 64]
    box O = out[32, 64]
    pipeline ring[2] { t: TX, a: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, T) {
            produce ring as s {
                load TX[m, n] -> s.t
                load X@[m*64 + 8, n*64] -> s.a
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, T) {
            consume ring as s {
                store T[m, n] <- s.t
                store O@[m*64 + 16, n*64] <- s.a
                store O@[m*64 + 32, n*64] <- s.a
            }
        }
    }
}
"""

# One tile (literal shapes), stored twice by one thread, one row apart, with nothing ordering the
# two stores: with its own mbarriers the kernel is in the explicit layer, whose protocol within
# a CTA and tile is the user's (E580 checks across tiles and CTAs); this race is the interpreter's.
OVERLAP = """
kernel overlap(x: f32[64, 32], out: f32[80, 32]) {
    grid tiles
    box X = x[64, 32]
    box O = out[64, 32]
    smem buf: X
    mbarrier loaded(1)
    role main: warp 0 {
        for tile (m, n) in tiles(x, X) {
            elect {
                expect_tx loaded, 8192
                load X@[0, 0] -> buf, loaded
                arrive loaded
            }
            wait loaded, 0
            elect {
                store O@[0, 0] <- buf
                store O@[1, 0] <- buf
                commit_group
                wait_group 0
            }
        }
    }
}
"""


def shift_source(dr: int, dc: int, oob: str = "", grid: str = "persistent") -> str:
    return SHIFT.format(dr=dr, dc=dc, oob=oob, grid=grid)


def shifted(x: np.ndarray, dr: int, dc: int, fill) -> np.ndarray:
    """out[i, j] = x[i + dr, j + dc], `fill` outside x."""
    rows, cols = x.shape
    want = np.full((rows, cols), fill, dtype=x.dtype)
    i0, i1 = max(0, -dr), min(rows, rows - dr)
    j0, j1 = max(0, -dc), min(cols, cols - dc)
    if i0 < i1 and j0 < j1:
        want[i0:i1, j0:j1] = x[i0 + dr:i1 + dr, j0 + dc:j1 + dc]
    return want


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_stencil_matches_numpy_bit_for_bit(shape):
    args, want = CASES["stencil"](np.random.default_rng(hash(shape) & 0xFFFF), shape)
    tmalang.compile(STENCIL, name="stencil_sm90.tma").interpret(*args, seed=7, explore=2)
    np.testing.assert_array_equal(bits(args[-1]), bits(want))


@pytest.mark.parametrize("dr,dc", [(-1, -4), (-70, 4), (3, -32), (65, 0), (-64, -32), (1, 44)])
def test_shifted_loads_fill_outside_with_zero(dr, dc):
    x = padded(np.random.default_rng((dr * 100 + dc) & 0xFFFF), (90, 45))
    out = padded(np.random.default_rng(0), (90, 45), np.nan)
    tmalang.compile(shift_source(dr, dc)).interpret(x, out)
    np.testing.assert_array_equal(bits(out), bits(shifted(x, dr, dc, 0.0)))


def test_shifted_loads_fill_outside_with_tma_nan():
    """`oob nan`: the fill is the H100's NaN pattern, 0x7FF77FF7 per f32 (docs/interpreter.md)."""
    x = padded(np.random.default_rng(3), (70, 45))
    out = padded(np.random.default_rng(0), (70, 45), 0.0)
    tmalang.compile(shift_source(-5, 8, "oob nan")).interpret(x, out, seed=2, explore=2, ctas=3)
    fill = np.uint32(TMA_NAN_HALFWORD * 0x10001).view(np.float32)
    np.testing.assert_array_equal(bits(out), bits(shifted(x, -5, 8, fill)))


def test_stores_inside_their_own_tile_write_only_their_box():
    rng = np.random.default_rng(9)
    x, out = padded(rng, (150, 100)), padded(rng, (150, 100))
    want = out.copy()
    for r in range(0, 150, 64):
        for c in range(0, 100, 64):
            rows, cols = slice(r + 48, r + 64), slice(c + 8, c + 40)
            want[rows, cols] = x[rows, cols]
    tmalang.compile(INNER).interpret(x, out, seed=1, explore=4, ctas=2)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_interpreter_catches_overlapping_element_stores():
    """Two unordered stores writing the same rows race (E421), at element coordinates as at tile ones."""
    x, out = padded(np.random.default_rng(1), (64, 32)), padded(np.random.default_rng(2), (80, 32))
    with pytest.raises(TmalangError, match=r"E421.*global memory race on out\[1:65, 0:32\]"):
        tmalang.compile(OVERLAP).interpret(x, out)


def test_overlapping_stores_of_one_tile_are_ordered_by_the_compiler():
    """A high-level program the compiler accepts does not race: overlapping stores of one tile
    (different boxes over one tensor, element coordinates) land in program order on every schedule."""
    rng = np.random.default_rng(13)
    x, out = padded(rng, (150, 100)), padded(rng, (150, 100), np.nan)
    want = x.copy()
    for r in range(0, 150, 64):
        want[r + 16:r + 32] = x[r + 8:r + 24][: max(0, min(150, r + 32) - (r + 16))]
        want[r + 32:r + 64] = x[r + 8:r + 40][: max(0, min(150, r + 64) - (r + 32))]
    tmalang.compile(LAYERED).interpret(x, out, seed=5, explore=8, ctas=2)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_element_reduces_may_overlap():
    """A reduce at element coordinates needs no E461 form: reduces are atomic per element.
    Each tile adds x's tile into out one row lower: tiles (m, n) and (m + 1, n) overlap."""
    src = shift_source(0, 0).replace("store O[m, n] <- s.t", "reduce add O@[m*64 + 1, n*32] <- s.t")
    x, out = padded(np.random.default_rng(4), (150, 40)), padded(np.random.default_rng(5), (150, 40), 0.0)
    tmalang.compile(src).interpret(x, out, seed=3, explore=2, ctas=3)
    want = np.zeros_like(x)
    want[1:] = x[:-1]
    np.testing.assert_array_equal(bits(out), bits(want))


def test_element_prefetch_runs_and_assembles():
    src = STENCIL.replace("            produce ring as s {",
                          "            elect { prefetch X@[m*16 - 1, n*32 + 31, 0] }\n            produce ring as s {")
    args, want = CASES["stencil"](np.random.default_rng(6), (70, 90))
    tmalang.compile(src).interpret(*args)
    np.testing.assert_array_equal(bits(args[-1]), bits(want))
    c = compile_source(src, "p.tma", Options(arch="sm_90a"))
    assert "cp.async.bulk.prefetch.tensor.3d.L2.global.tile" in c.ptx
    cubin, _ = ptxas.assemble(c.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"


def _ir(source: str):
    return compile_source(source, "s.tma", Options(arch="sm_90a"), until="ir").ir


def test_ir_prints_elements_only_when_set_and_round_trips():
    text = print_ir(_ir(STENCIL))
    assert "tma_load box=X coords=[((%m * 16) - 1), (%n * 32), 0]" in text and "elements=true" in text
    assert "tma_store box=O coords=[%m, %n, %k] source=@ring.mid[%s]\n" in text     # tile coordinates: no field
    assert print_ir(parse_ir(text)) == text


def test_verifier_refuses_element_coordinates_on_a_sliced_box():
    src = (ROOT / "examples" / "gemm_multicast_sm100.tma").read_text()
    text = print_ir(_ir_for(src, "sm_100a"))
    line = next(l for l in text.splitlines() if "multicast=true" in l)
    [kernel] = parse_ir(text.replace(line, line + " elements=true", 1))
    with pytest.raises(TmalangError, match="E999.*tma_load elements=true: element coordinates on a sliced box"):
        verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])


def _ir_for(source: str, arch: str):
    return compile_source(source, "g.tma", Options(arch=arch)).ir


def test_ptx_passes_element_coordinates_unscaled():
    """The tile form multiplies by the extent in PTX; the element form passes the value through:
    X@[m*16, n*32, 0] and X[m, n, k] give the same PTX."""
    tile = STENCIL.replace("load X@[m*16, n*32, 0] -> s.mid", "load X[m, n, k] -> s.mid")
    assert compile_source(tile, "a.tma", Options(arch="sm_90a")).ptx == \
        compile_source(STENCIL, "a.tma", Options(arch="sm_90a")).ptx


# ---- on the H100 ------------------------------------------------------------------------------

GPU_SHAPES = [(1000, 1000), (4099, 257), (1, 64), (515, 8192), (70, 45)]
GPU_IDS = [f"{m}x{n}" for m, n in GPU_SHAPES]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=GPU_IDS)
def test_h100_stencil_matches_numpy_and_the_interpreter(shape):
    """Bit-exact against NumPy (f32, one rounding per operation, the kernel's order); at up to 2^18
    elements, the interpreter gives the same bits."""
    kernel = tmalang.compile(STENCIL, name="stencil_sm90.tma")
    args, want = CASES["stencil"](np.random.default_rng(31), shape)
    kernel(*args)
    np.testing.assert_array_equal(bits(args[-1]), bits(want))
    if shape[0] * shape[1] <= 1 << 18:
        interp = [*args[:3], padded_copy(args[3])]
        interp[3][...] = np.nan
        kernel.interpret(*interp)
        np.testing.assert_array_equal(bits(interp[3]), bits(args[3]))


@pytest.mark.gpu
@pytest.mark.parametrize("oob", ["", "oob nan"])
@pytest.mark.parametrize("dr,dc", [(-1, -4), (-70, 4), (3, -32), (65, 0), (-2, 76)])
def test_h100_shifted_loads_fill_like_the_interpreter(dr, dc, oob):
    """Negative and past-the-edge element coordinates: the GPU fills what the interpreter fills
    (zeros, or the NaN pattern with `oob nan`), bit for bit."""
    kernel = tmalang.compile(shift_source(dr, dc, oob))
    x = padded(np.random.default_rng((dr * 7 + dc) & 0xFFFF), (200, 77))
    gpu, interp = padded(np.random.default_rng(0), (200, 77), 1.0), padded(np.random.default_rng(0), (200, 77), 1.0)
    kernel(x, gpu)
    kernel.interpret(x, interp)
    np.testing.assert_array_equal(bits(gpu), bits(interp))
    if not oob:
        np.testing.assert_array_equal(bits(gpu), bits(shifted(x, dr, dc, 0.0)))


@pytest.mark.gpu
def test_h100_stores_inside_their_own_tile_match_the_interpreter():
    kernel = tmalang.compile(INNER)
    rng = np.random.default_rng(12)
    x, gpu = padded(rng, (1000, 300)), padded(rng, (1000, 300))
    interp = padded_copy(gpu)
    kernel(x, gpu)
    kernel.interpret(x, interp)
    np.testing.assert_array_equal(bits(gpu), bits(interp))


@pytest.fixture(scope="module")
def probe():
    pytest.importorskip("torch")
    from tma_probe import Probe

    return Probe()


@pytest.mark.gpu
@pytest.mark.parametrize("box,strides,at", [((64, 64), (1, 1), (-3, -4)), ((64, 64), (1, 1), (247, 248)),
                                            ((16, 64), (3, 1), (-7, 100)), ((8, 16), (2, 1), (-64, -16))])
def test_h100_element_offsets_land_as_the_interpreter_says(probe, box, strides, at):
    """Hand-written PTX (tests/tma_probe.py) at negative and over-the-edge element coordinates
    (innermost starts 16-byte aligned): the whole box's bytes complete the barrier, and smem holds
    what interp.tiles reads (zeros outside)."""
    r, c = np.meshgrid(np.arange(250), np.arange(256), indexing="ij")
    tensor = (((r << 16) | c) + 0x01000000).astype(np.uint32)
    decl = ops.BoxDecl("B", "t", "u32", list(box), list(strides), "none", "zero", "none", 1, False)
    shape, size = box_tile_bytes(decl)
    landed, smem = probe.landed_bytes(tensor, box, strides, at)
    assert landed == size
    np.testing.assert_array_equal(smem.reshape(shape), read_box(tensor, decl, list(at), elements=True))


@pytest.mark.gpu
@pytest.mark.parametrize("box,strides,at", [((64, 64), (1, 1), (247, 248)), ((16, 64), (3, 1), (7, 100)),
                                            ((8, 16), (2, 1), (0, 240))])
def test_h100_element_stores_clip_as_the_interpreter_says(probe, box, strides, at):
    """A store at non-negative element coordinates past the edge writes the inside part only."""
    decl = ops.BoxDecl("B", "t", "u32", list(box), list(strides), "none", "zero", "none", 1, False)
    shape, _ = box_tile_bytes(decl)
    target = np.zeros((250, 256), np.uint32)
    pattern = np.arange(1, 1 + int(np.prod(shape)), dtype=np.uint32).reshape(shape)
    expected = target.copy()
    write_box(expected, decl, list(at), pattern, elements=True)
    np.testing.assert_array_equal(probe.store_box(pattern, target, box, strides, at), expected)


FAULT_PROBE = """
import sys, numpy as np
sys.path.insert(0, "tests")
from tma_probe import Probe
kind, r, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tensor = np.arange(50 * 96, dtype=np.uint32).reshape(50, 96) + 1
try:
    if kind == "load":
        Probe().landed_bytes(tensor, (16, 32), (1, 1), (r, c))
    else:
        Probe().store_box(np.ones((16, 32), np.uint32), tensor, (16, 32), (1, 1), (r, c))
except AssertionError as e:
    print("FAULT", e)
else:
    print("RAN")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("kind,r,c,outcome", [("load", 3, 5, "FAULT"), ("load", -7, -1, "FAULT"),
                                              ("load", -7, -4, "RAN"), ("store", 3, 1, "FAULT"),
                                              ("store", -7, 0, "FAULT"), ("store", 3, -4, "FAULT"),
                                              ("store", 40, 92, "RAN")])
def test_h100_faults_where_sema_refuses(kind, r, c, outcome):
    """The hardware facts behind E476 and E461 (targets/tma.py INNER_START_ALIGNMENT), pinned with
    hand-written PTX in a process of its own (a fault poisons the CUDA context): on u32, an
    innermost start that is not a multiple of 4 elements faults for loads and stores, and a store
    at any negative coordinate faults; a load at negative (aligned) coordinates runs."""
    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", FAULT_PROBE, kind, str(r), str(c)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.split()[:1] == [outcome], run.stdout + run.stderr


def test_interpreter_defines_what_the_h100_faults_on():
    """check_element_start, run by every copy at element coordinates (sema refuses what it can see
    statically; IR written by hand reaches the interpreter directly)."""
    box = ops.BoxDecl("B", "t", "bf16", [64, 64], [1, 1], "none", "zero", "none", 1, False)
    load = ops.TmaLoad("B", [], ops.BufferRef("buf", None), None, False, False, elements=True)
    store = ops.TmaStore("B", [], ops.BufferRef("buf", None), elements=True)
    check_element_start(box, [-5, -8], load, "w")
    check_element_start(box, [0, 8], store, "w")
    with pytest.raises(ProtocolError, match="innermost start 4 is not a multiple of 8 bf16") as e:
        check_element_start(box, [3, 4], load, "w")
    assert e.value.code == "E476"
    with pytest.raises(ProtocolError, match="TMA store through box 'B' at negative element coordinates") as e:
        check_element_start(box, [-1, 8], store, "w")
    assert e.value.code == "E461"


# Written from docs/language.md §13d alone, as a user would: f16 (16 bytes = 8 elements), a
# vertical shift by -1 and a diagonal one by (+2 rows, +8 columns), the difference stored at the
# tile's own coordinates. Shapes below are not multiples of the 32x64 box.
USER_DIFF = """
kernel diff(x: f16[M, N], out: f16[M, N]) {
    grid persistent
    box X = x[32, 64]
    box O = out[32, 64]
    pipeline ring[3] { above: X, below: X }
    role loader: warp 0 {
        for tile (i, j) in tiles(out, O) {
            produce ring as s {
                load X@[i*32 - 1, j*64] -> s.above
                load X@[i*32 + 2, j*64 + 8] -> s.below
            }
        }
    }
    role math: warps 4..7 {
        for tile (i, j) in tiles(out, O) {
            consume ring as s {
                s.above = s.above - s.below
                store O@[i*32, j*64] <- s.above
            }
        }
    }
}
"""


def user_diff_reference(x: np.ndarray) -> np.ndarray:
    rows, cols = x.shape
    p = np.zeros((rows + 3, cols + 8), np.float32)
    p[1:rows + 1, :cols] = x
    above, below = p[:rows, :cols], p[3:rows + 3, 8:cols + 8]
    return (above - below).astype(np.float16)


def _f16(rng, shape) -> np.ndarray:
    base = np.empty((shape[0], -(-shape[1] // 8) * 8), np.float16)      # 16-byte rows
    base[...] = rng.standard_normal(base.shape)
    return base[:, :shape[1]]


@pytest.mark.parametrize("shape", [(33, 70), (5, 9), (100, 129)])
def test_user_kernel_from_the_docs_in_the_interpreter(shape):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    x, out = _f16(rng, shape), _f16(rng, shape)
    tmalang.compile(USER_DIFF).interpret(x, out, seed=4, explore=2, ctas=2)
    np.testing.assert_array_equal(out, user_diff_reference(x))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(33, 70), (1001, 777), (4099, 130)])
def test_h100_user_kernel_from_the_docs(shape):
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    x, gpu = _f16(rng, shape), _f16(rng, shape)
    kernel = tmalang.compile(USER_DIFF)
    kernel(x, gpu)
    np.testing.assert_array_equal(gpu, user_diff_reference(x))
    if shape[0] * shape[1] <= 1 << 16:
        interp = _f16(rng, shape)
        kernel.interpret(x, interp)
        np.testing.assert_array_equal(interp, gpu)
