"""im2col boxes (`im2col A = x[PIXELS, CHANNELS] lower [..] upper [..]`, TMA im2col mode): what a
load gathers, in the interpreter against a NumPy walk of the pixel box (ranks 3, 4 and 5,
traversal strides, corners on both sides, offsets reading past the image, walks past the last
image, channels past C, NaN fill); the run-time rules (E488) and the launch-time pixel box
(E485); the IR fields and their verifier; the manifest and the driver's argument order; ptxas;
the C++ header; and on the H100 every gather bit for bit against NumPy and the interpreter."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.cli.main import main as cli_main
from tmalang.compiler import Options, compile_source
from tmalang.contract.binding import bind
from tmalang.contract.errors import LaunchError
from tmalang.contract.manifest import Manifest, TensorMapParam
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES
from tmalang.runtime.tensormap import tensor_map_fields

GATHER = """
kernel gather(x: {dt}[{xdims}], o: {dt}[M, {ch}]) {{
    im2col A = x[{pixels}, {ch}] lower [{lower}] upper [{upper}] strides [{strides}]{opts}
    box O = o[{pixels}, {ch}]{store_opts}
    pipeline ring[2] {{ a: A }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(o, O) {{
            produce ring as st {{ load A[{coords}] offsets [{offsets}] -> st.a }}
        }}
    }}
    role consumer: warp 1 {{
        for tile (m, n) in tiles(o, O) {{ consume ring as st {{ store O[m, n] <- st.a }} }}
    }}
}}
"""

SPATIAL = "DHW"
DONE = ["lower", *PASS_NAMES]


@dataclass(frozen=True)
class Gather:
    """One im2col configuration: the tensor's shape and dtype, the box, and how each tile picks
    its start pixel (on the stride lattice of the pixel box), channel block and offsets."""

    name: str
    dtype: str
    shape: tuple[int, ...]          # N, spatial..., C
    pixels: int
    channels: int
    lower: tuple[int, ...]
    upper: tuple[int, ...]
    strides: tuple[int, ...]
    max_offset: int                 # offsets run over 0 .. max_offset - 1
    oob: str = "zero"
    swizzle: str = "none"
    tiles: int = 6

    @property
    def dims(self) -> list[str]:
        spatial = SPATIAL[-(len(self.shape) - 2):]
        return ["N", *spatial, "C"]

    def counts(self) -> list[int]:
        """Stride-lattice points of the pixel box along each spatial dim."""
        return [(d - 1 + hi - lo) // s + 1 for d, lo, hi, s in zip(self.shape[1:-1], self.lower, self.upper, self.strides)]

    def source(self) -> str:
        spatial = self.dims[1:-1]
        starts = [f"{lo} + {s} * ((m * {i + 2} + 1) % (({d} - 1 + {hi} - {lo}) / {s} + 1))"
                  for i, (d, lo, hi, s) in enumerate(zip(spatial, self.lower, self.upper, self.strides))]
        blocks = -(-self.shape[-1] // self.channels)
        coords = ["m * 3 % N", *starts, f"{self.channels} * (m % {blocks})"]
        offsets = [f"(m * {5 + i} + {i}) % {self.max_offset}" for i in range(len(spatial))]
        opts = (f" oob {self.oob}" if self.oob != "zero" else "") + (f" swizzle {self.swizzle}" if self.swizzle != "none" else "")
        return GATHER.format(dt=self.dtype, xdims=", ".join(self.dims), ch=self.channels, pixels=self.pixels,
                             lower=", ".join(map(str, self.lower)), upper=", ".join(map(str, self.upper)),
                             strides=", ".join(map(str, self.strides)), opts=opts,
                             store_opts=f" swizzle {self.swizzle}" if self.swizzle != "none" else "",
                             coords=", ".join(coords), offsets=", ".join(offsets))

    def tile_args(self, m: int) -> tuple[list[int], list[int]]:
        """The coordinates and offsets tile m's load uses (the source's expressions, in Python)."""
        starts = [lo + s * ((m * (i + 2) + 1) % count)
                  for i, (lo, s, count) in enumerate(zip(self.lower, self.strides, self.counts()))]
        blocks = -(-self.shape[-1] // self.channels)
        coords = [m * 3 % self.shape[0], *starts, self.channels * (m % blocks)]
        return coords, [(m * (5 + i) + i) % self.max_offset for i in range(len(self.shape) - 2)]


CONFIGS = [
    Gather("nhwc_bf16", "bf16", (2, 5, 7, 24), 64, 16, (-1, -2), (0, -1), (1, 2), 3),
    Gather("nwc_f32", "f32", (3, 11, 8), 40, 8, (-3,), (2,), (3,), 5),
    Gather("ndhwc_bf16", "bf16", (2, 3, 4, 5, 16), 32, 16, (-1, 0, -1), (-1, -2, 0), (1, 1, 2), 3),
    Gather("nhwc_nan_swizzled", "bf16", (1, 6, 6, 64), 128, 64, (-1, -1), (-1, -1), (2, 2), 3,
           oob="nan", swizzle="128B"),
]
NUMPY = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}
NAN_BITS = {"bf16": (np.uint16, 0x7FF7), "f32": (np.uint32, 0x7FF77FF7)}   # TMA's oob nan


def reference_gather(x: np.ndarray, g: Gather, coords: list[int], offsets: list[int]) -> np.ndarray:
    """The pixels of one load, walked one at a time from the definition (docs/language.md §13f)."""
    unsigned, nan = NAN_BITS[g.dtype]
    tile = np.zeros((g.pixels, g.channels), dtype=x.dtype)
    if g.oob == "nan":
        tile.view(unsigned)[...] = nan
    n, *pixel, c = coords
    last = [d - 1 + hi for d, hi in zip(x.shape[1:-1], g.upper)]
    for row in range(g.pixels):
        at = [p + o for p, o in zip(pixel, offsets)]
        if 0 <= n < x.shape[0] and all(0 <= a < d for a, d in zip(at, x.shape[1:-1])):
            for k in range(g.channels):
                if 0 <= c + k < x.shape[-1]:
                    tile[row, k] = x[(n, *at, c + k)]
        for axis in reversed(range(len(pixel))):
            pixel[axis] += g.strides[axis]
            if pixel[axis] <= last[axis]:
                break
            pixel[axis] = g.lower[axis]
        else:
            n += 1
    return tile


def inputs(g: Gather, rng):
    x = rng.standard_normal(g.shape).astype(NUMPY[g.dtype])
    o = np.full((g.tiles * g.pixels, g.channels), 7, dtype=NUMPY[g.dtype])
    return x, o


def expected(g: Gather, x: np.ndarray) -> np.ndarray:
    return np.concatenate([reference_gather(x, g, *g.tile_args(m)) for m in range(g.tiles)])


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_interpreter_gathers_what_the_walk_defines(g):
    k = tmalang.compile(g.source())
    x, o = inputs(g, np.random.default_rng(3))
    k.interpret(x, o)
    np.testing.assert_array_equal(bits(o), bits(expected(g, x)))


def test_each_config_exercises_the_edges():
    """The configurations reach what the definition describes: reads outside the image (zero or
    NaN), a walk into the next image and past the last, and channels past C."""
    for g in CONFIGS:
        x, _ = inputs(g, np.random.default_rng(3))
        ones = np.ones_like(x)
        filled = expected(g, ones).astype(np.float64)
        outside = ~(filled == 1)
        assert outside.any() and not outside.all(), g.name
    assert any(g.shape[-1] % g.channels for g in CONFIGS)


def test_a_hand_worked_load():
    """One 3x3 image, pixel box [-1, 1] x [-1, 1] (padding 1, a 3x3 filter): the 9 filter corners,
    each read one down and one right (offsets [1, 1]), are the image itself, row by row; with
    offsets [0, 0] the first row and column are padding."""
    g = Gather("hand", "f32", (1, 3, 3, 4), 9, 4, (-1, -1), (-1, -1), (1, 1), 2)
    x = np.arange(36, dtype=np.float32).reshape(1, 3, 3, 4)
    np.testing.assert_array_equal(reference_gather(x, g, [0, -1, -1, 0], [1, 1]), x.reshape(9, 4))
    shifted = reference_gather(x, g, [0, -1, -1, 0], [0, 0])
    padded = np.zeros((1, 4, 4, 4), dtype=np.float32)
    padded[:, 1:, 1:] = x
    np.testing.assert_array_equal(shifted, padded[0, :3, :3].reshape(9, 4))
    source = GATHER.format(dt="f32", xdims="N, H, W, C", ch=4, pixels=9, lower="-1, -1", upper="-1, -1",
                           strides="1, 1", opts="", store_opts="", coords="0, -1, -1, 0", offsets="1, 1")
    out = np.zeros((9, 4), dtype=np.float32)
    tmalang.compile(source).interpret(x, out)
    np.testing.assert_array_equal(out, x.reshape(9, 4))


def test_a_walk_wraps_inside_the_pixel_box_and_into_the_next_image():
    """Two 4x4 images numbered 1..32 (pixel order), pixel box [-1, 2] x [-1, 2]: 16 pixels from
    (0, 1, 2) are 7, then row 2 from column -1 (padding, 9, 10, 11), then image 1 from its box's
    corner (-1, -1): a padding row, and rows 0 and 1 each after a padding column. (The published
    Gluon im2col tutorial measures this very sequence on Hopper.)"""
    g = Gather("wrap", "f32", (2, 4, 4, 4), 16, 4, (-1, -1), (-1, -1), (1, 1), 1)
    x = np.repeat(np.arange(1, 33, dtype=np.float32), 4).reshape(2, 4, 4, 4)
    walked = reference_gather(x, g, [0, 1, 2, 0], [0, 0])[:, 0]
    np.testing.assert_array_equal(walked, [7, 0, 9, 10, 11, 0, 0, 0, 0, 0, 17, 18, 19, 0, 21, 22])
    source = GATHER.format(dt="f32", xdims="N, H, W, C", ch=4, pixels=16, lower="-1, -1", upper="-1, -1",
                           strides="1, 1", opts="", store_opts="", coords="0, 1, 2, 0", offsets="0, 0")
    out = np.zeros((16, 4), dtype=np.float32)
    tmalang.compile(source).interpret(x, out)
    np.testing.assert_array_equal(out[:, 0], walked)


def _one_load(coords: str, offsets: str) -> str:
    return GATHER.format(dt="f32", xdims="N, H, W, C", ch=4, pixels=9, lower="-1, -1", upper="-1, -1",
                         strides="1, 1", opts="", store_opts="", coords=coords, offsets=offsets)


@pytest.mark.parametrize("coords,offsets,message", [
    ("0, -2, 0, 0", "0, 0", "starts at -2 along dim 1 of 'x', outside its pixel box [-1, 1]"),
    ("0, 0, 2, 0", "0, 0", "starts at 2 along dim 2 of 'x', outside its pixel box [-1, 1]"),
    ("0, 0, 0, 0", "m + 256, 0", "im2col offset 256 along dim 1 of 'x' is outside [0, 255] (rank 4)"),
])
def test_the_interpreter_refuses_what_the_gpu_would_not_check(coords, offsets, message):
    k = tmalang.compile(_one_load(coords, offsets))
    with pytest.raises(TmalangError) as err:
        k.interpret(np.zeros((1, 3, 3, 4), np.float32), np.zeros((9, 4), np.float32))
    assert err.value.code == "E488" and message in err.value.message


def test_an_empty_pixel_box_is_refused_at_launch():
    """upper -3 makes dim - 4 the last corner row: a 2-pixel-high image has none from -1 on (E485),
    in the interpreter and before the driver alike (the binding is shared)."""
    k = tmalang.compile(_one_load("0, -1, -1, 0", "0, 0").replace("upper [-1, -1]", "upper [-3, -1]"))
    x = np.zeros((1, 2, 5, 4), np.float32)
    with pytest.raises(LaunchError) as err:
        k.interpret(x, np.zeros((9, 4), np.float32))
    assert err.value.code == "E485" and "dim 1 is 2" in err.value.message
    with pytest.raises(LaunchError):
        bind(k.manifest, (x, np.zeros((9, 4), np.float32)))


def test_manifest_and_driver_arguments():
    """The manifest carries the corners outermost first; the driver gets them innermost first,
    with pixels and channels from the box and the traversal strides inside (1, .., 1). A tiled
    map's JSON has no corner fields (it reads as before im2col existed)."""
    g = CONFIGS[2]
    k = tmalang.compile(g.source())
    param = next(p for p in k.manifest.ptx_params if isinstance(p, TensorMapParam) and p.box == "A")
    assert (param.box_shape, param.element_strides) == ((32, 16), (1, 1, 1, 2, 1))
    assert (param.lower, param.upper) == ((-1, 0, -1), (-1, -2, 0))
    assert Manifest.from_json(k.manifest.to_json()) == k.manifest
    tiled = next(p for p in k.manifest.to_json()["ptx_params"] if p.get("box") == "O")
    assert "lower" not in tiled and "upper" not in tiled
    x = np.zeros(g.shape, dtype=ml_dtypes.bfloat16)
    view = bind(k.manifest, (x, np.zeros((g.tiles * g.pixels, g.channels), ml_dtypes.bfloat16))).views["x"]
    f = tensor_map_fields(param, view, 0x1000)
    assert f.global_dim == tuple(reversed(g.shape)) and f.box_dim == (16, 32)
    assert (f.lower, f.upper, f.element_strides) == ((-1, 0, -1), (0, -2, -1), (1, 2, 1, 1, 1))


def test_ir_round_trips_and_the_verifier_holds_the_im2col_rules():
    c = compile_source(CONFIGS[0].source(), "<gather>", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    assert "im2col={lower=[-1, -2] upper=[0, -1] strides=[1, 2]}" in text and "offsets=[" in text
    assert print_ir(parse_ir(text)) == text
    assert "im2col=" not in print_ir(compile_source((ROOT / "examples" / "tma_copy.tma").read_text(), "<copy>",
                                                   Options(arch="sm_90a"), until="ir").ir)
    for good, bad, complaint in [
        ("lower=[-1, -2]", "lower=[-1]", "lower: not 2 values"),
        ("upper=[0, -1]", "upper=[0, -200]", "upper: not 2 values"),
        ("strides=[1, 2]}", "strides=[1, 9]}", "strides: not 2 traversal strides"),
        ("strides=[1, 2]}", "strides=[1, 2] halo=1}", "halo: a halo belongs to a wide im2col box"),
        ("strides=[1, 2]}", "stride=[1, 2]}", "the record Im2col has no field 'stride'"),
        (" strides=[1, 2]}", "}", "the record Im2col needs lower, upper, strides"),
    ]:
        with pytest.raises(TmalangError, match=complaint):
            verify(parse_ir(text.replace(good, bad))[0], "lower_tile_walk", DONE)
    load = next(line for line in text.splitlines() if "tma_load" in line)
    offsets = load[load.index("offsets="):]
    verify(parse_ir(text)[0], "lower_tile_walk", DONE)
    with pytest.raises(TmalangError, match="offsets"):
        verify(parse_ir(text.replace(offsets, "offsets=[1]"))[0], "lower_tile_walk", DONE)


def test_explain_shows_each_gather_and_its_pixel_box(capsys):
    source = ROOT / "examples" / "conv2d_sm90.tma"
    assert cli_main([str(source), "--kernel", "conv2d_s2", "--explain", "-o", "/dev/null"]) == 0
    captured = capsys.readouterr()
    out = captured.err + captured.out
    assert "A: 128 pixels x 64 channels of x; pixel box -1 .. H - 2 by 2 x -1 .. W - 2 by 2" in out
    assert cli_main([str(ROOT / "examples" / "gemm_sm90.tma"), "--explain", "-o", "/dev/null"]) == 0
    captured = capsys.readouterr()
    assert "im2col" not in captured.err + captured.out


def _ptx(source: str, kernel: str | None = None) -> str:
    return compile_source(source, "<im2col>", Options(arch="sm_90a", kernel=kernel)).ptx


@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_ptxas_accepts_im2col_loads(g):
    ptx = _ptx(g.source())
    rank = len(g.shape)
    offsets = ", ".join(["%rs\\d+"] * (rank - 2))
    assert re.search(rf"cp\.async\.bulk\.tensor\.{rank}d\.shared::cluster\.global\.im2col\."
                     rf"mbarrier::complete_tx::bytes \[%r\d+\], \[%rd\d+, \{{[^}}]*\}}\], \[%r\d+\], \{{{offsets}\}};", ptx)
    ptxas.assemble(ptx, "sm_90a")


@pytest.mark.parametrize("kernel", ["conv2d", "conv2d_s2"])
def test_ptxas_accepts_both_convolutions(kernel):
    ptxas.assemble(_ptx((ROOT / "examples" / "conv2d_sm90.tma").read_text(), kernel), "sm_90a")


def test_a_cache_policy_rides_on_the_im2col_load():
    g = CONFIGS[0]
    ptx = _ptx(g.source().replace("strides [1, 2]", "strides [1, 2] cache evict_last"))
    assert ".im2col.mbarrier::complete_tx::bytes.L2::cache_hint" in ptx
    ptxas.assemble(ptx, "sm_90a")


def test_the_launch_header_encodes_im2col_maps(tmp_path):
    cuda_h = Path("/usr/local/cuda/include/cuda.h")
    if shutil.which("g++") is None or not cuda_h.exists():
        pytest.skip("needs g++ and the CUDA driver header")
    for g in CONFIGS:
        source, header = tmp_path / f"{g.name}.tma", tmp_path / f"{g.name}.h"
        source.write_text(g.source())
        assert cli_main([str(source), "--emit", "header", "-o", str(header)]) == 0
        text = header.read_text()
        assert "tmalang::encode_im2col(&m_A" in text
        assert f"const int lower[] = {{{', '.join(map(str, g.lower))}}};" in text
        unit = tmp_path / f"use_{g.name}.cpp"
        unit.write_text(f'#include "{header.name}"\n')
        run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                              f"-I{tmalang.get_include()}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_gpu_im2col_gather_equals_numpy_and_the_interpreter(g):
    """On the H100, bit for bit: the pixels TMA gathers are the walk's, and the interpreter's."""
    k = tmalang.compile(g.source())
    x, gpu_out = inputs(g, np.random.default_rng(17))
    interp_out = gpu_out.copy()
    k(x, gpu_out)
    k.interpret(x, interp_out)
    np.testing.assert_array_equal(bits(gpu_out), bits(expected(g, x)))
    np.testing.assert_array_equal(bits(gpu_out), bits(interp_out))
