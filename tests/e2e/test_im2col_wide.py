"""Wide im2col boxes (`im2col A = x[PIXELS, CHANNELS] wide w|w128 ...`, sm_100a im2col::w and
im2col::w::128): what a load gathers, in the interpreter against a NumPy W-only walk written
from PTX ISA 5.5.5 (ranks 3, 4 and 5, halo rows after the row, traversal stride 2, wOffset
shifting the box, D/H coordinates outside the tensor, channels past C, NaN fill, w128); the
interpreter's refusals of what the ISA text leaves undefined (E509); the IR fields and their
verifier; the manifest and cuTensorMapEncodeIm2colWide's argument order; the PTX text and
ptxas -arch=sm_100a. No Blackwell GPU exists here: the GPU test needs compute capability 10.x."""

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
from tmalang.contract.manifest import Manifest, TensorMapParam
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.cli.opt import check_target
from tmalang.passes import PASS_NAMES
from tmalang.runtime import driver, tensormap
from tmalang.targets.arch import TARGETS

WIDE = """
kernel wide(x: {dt}[{xdims}], o: {dt}[M, {ch}]) {{
    im2col A = x[{pixels}, {ch}] wide {mode} lower [{lower}] upper [{upper}] strides [{stride}]{halo} swizzle {swizzle}{opts}
    box O = o[{rows}, {ch}] swizzle {swizzle}
    pipeline ring[2] {{ a: A }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(o, O) {{
            produce ring as st {{ load A[{coords}] offsets [{woffset}] -> st.a }}
        }}
    }}
    role consumer: warp 1 {{
        for tile (m, n) in tiles(o, O) {{ consume ring as st {{ store O[m, n] <- st.a }} }}
    }}
}}
"""
DONE = ["lower", *PASS_NAMES]
NUMPY = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}
NAN_BITS = {"bf16": (np.uint16, 0x7FF7), "f32": (np.uint32, 0x7FF77FF7)}


@dataclass(frozen=True)
class Wide:
    """One wide configuration; tile m starts its row where it stays inside the bounding box."""

    name: str
    dtype: str
    shape: tuple[int, ...]          # N, spatial..., C
    mode: str
    pixels: int
    channels: int
    lower: int
    upper: int
    stride: int = 1
    halo: int = 0
    swizzle: str = "128B"
    oob: str = "zero"
    tiles: int = 6

    @property
    def dims(self) -> list[str]:
        return ["N", *"DHW"[-(len(self.shape) - 2):], "C"]

    def starts(self) -> int:
        """How many W starts keep the row's last pixel inside the box."""
        return self.shape[-2] - 1 + self.upper - self.lower - (self.pixels - 1) * self.stride + 1

    def source(self) -> str:
        outer = [f"(m * {i + 2} + 1) % ({d} + 2) - 1" for i, d in enumerate(self.dims[1:-2])]
        blocks = -(-self.shape[-1] // self.channels)
        coords = ["m * 3 % (N + 1)", *outer, f"{self.lower} + (m * 5 + 1) % {self.starts()}",
                  f"{self.channels} * (m % {blocks})"]
        return WIDE.format(dt=self.dtype, xdims=", ".join(self.dims), ch=self.channels, pixels=self.pixels,
                           mode=self.mode, lower=self.lower, upper=self.upper, stride=self.stride,
                           halo=f" halo {self.halo}" if self.halo else "", swizzle=self.swizzle,
                           opts=f" oob {self.oob}" if self.oob != "zero" else "", rows=self.pixels + self.halo,
                           coords=", ".join(coords), woffset="(m * 7 + 3) % 32")

    def tile_args(self, m: int) -> tuple[list[int], int]:
        outer = [(m * (i + 2) + 1) % (d + 2) - 1 for i, d in enumerate(self.shape[1:-2])]
        blocks = -(-self.shape[-1] // self.channels)
        coords = [m * 3 % (self.shape[0] + 1), *outer, self.lower + (m * 5 + 1) % self.starts(),
                  self.channels * (m % blocks)]
        return coords, (m * 7 + 3) % 32


CONFIGS = [
    Wide("nhwc_bf16_halo2", "bf16", (2, 3, 41, 24), "w", 32, 16, -1, -1, halo=2, swizzle="64B"),
    Wide("nwc_f32_stride2", "f32", (3, 67, 8), "w", 16, 8, -1, 0, stride=2, swizzle="64B"),
    Wide("ndhwc_bf16_halo1", "bf16", (2, 3, 2, 19, 64), "w", 9, 64, 0, -2, halo=1),
    Wide("nhwc_nan_halo2", "bf16", (1, 4, 37, 40), "w", 30, 32, -1, -1, halo=2, oob="nan"),
    Wide("nwc_w128", "f32", (2, 133, 24), "w128", 128, 16, -2, 1, swizzle="64B"),
]


def reference(x: np.ndarray, g: Wide, coords: list[int], woffset: int) -> np.ndarray:
    """PTX ISA 5.5.5, one pixel at a time: W from the start plus wOffset by the stride, then the
    halo pixels right after the row; D, H and N where the coordinates put them."""
    unsigned, nan = NAN_BITS[g.dtype]
    tile = np.zeros((g.pixels + g.halo, g.channels), dtype=x.dtype)
    if g.oob == "nan":
        tile.view(unsigned)[...] = nan
    *fixed, w, c = coords
    last = w + woffset + (g.pixels - 1) * g.stride
    for row in range(g.pixels + g.halo):
        at = w + woffset + row * g.stride if row < g.pixels else last + row - g.pixels + 1
        pixel = (*fixed, at)
        if all(0 <= p < d for p, d in zip(pixel, x.shape[:-1])):
            for k in range(g.channels):
                if 0 <= c + k < x.shape[-1]:
                    tile[row, k] = x[(*pixel, c + k)]
    return tile


def inputs(g: Wide, rng):
    x = rng.standard_normal(g.shape).astype(NUMPY[g.dtype])
    return x, np.full((g.tiles * (g.pixels + g.halo), g.channels), 7, dtype=NUMPY[g.dtype])


def expected(g: Wide, x: np.ndarray) -> np.ndarray:
    return np.concatenate([reference(x, g, *g.tile_args(m)) for m in range(g.tiles)])


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def compiled(source: str):
    return tmalang.compile(source, arch="sm_100a")


@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_interpreter_gathers_the_w_only_walk(g):
    x, o = inputs(g, np.random.default_rng(5))
    compiled(g.source()).interpret(x, o)
    np.testing.assert_array_equal(bits(o), bits(expected(g, x)))


def test_the_configs_reach_the_edges():
    """Reads outside the tensor (W shifted past its end by wOffset, D/H/N outside) next to reads
    inside, in every configuration, and channels past C in some."""
    for g in CONFIGS:
        filled = expected(g, np.ones(g.shape, dtype=NUMPY[g.dtype])).astype(np.float64)
        outside = ~(filled == 1)
        assert outside.any() and not outside.all(), g.name
    assert any(g.shape[-1] % g.channels for g in CONFIGS)


def test_a_hand_worked_row_with_its_halo():
    """One image row of 9 pixels numbered 1..9, box -1 .. 7 (padding 1, a 3-wide filter): 7 pixels
    from W -1 are padding, 1..6, and the halo two more, 7 and 8; with wOffset 1 the same row
    starts one pixel later: 1..7, halo 8 and 9."""
    source = WIDE.format(dt="f32", xdims="N, W, C", ch=4, pixels=7, mode="w", lower=-1, upper=-1, stride=1,
                         halo=" halo 2", swizzle="64B", opts="", rows=9, coords="0, -1, 0", woffset="{}")
    x = np.repeat(np.arange(1, 10, dtype=np.float32), 4).reshape(1, 9, 4)
    for woffset, row in ((0, [0, 1, 2, 3, 4, 5, 6, 7, 8]), (1, [1, 2, 3, 4, 5, 6, 7, 8, 9])):
        out = np.zeros((9, 4), np.float32)
        compiled(source.replace("{}", str(woffset))).interpret(x, out)
        np.testing.assert_array_equal(out[:, 0], row)


@pytest.mark.parametrize("coords,woffset,message", [
    ("0, -2, 0", "0", "starts at W -2, left of its bounding box [-1, 7]"),
    ("0, 2, 0", "0", "run from W 2 to 8, past its bounding box's end 7"),
    ("0, -1, 0", "m + 32", "wOffset 32 of the wide im2col load through 'A' is outside [0, 31]"),
])
def test_the_interpreter_refuses_what_the_isa_leaves_undefined(coords, woffset, message):
    source = WIDE.format(dt="f32", xdims="N, W, C", ch=4, pixels=7, mode="w", lower=-1, upper=-1, stride=1,
                         halo="", swizzle="64B", opts="", rows=7, coords=coords, woffset=woffset)
    with pytest.raises(TmalangError) as err:
        compiled(source).interpret(np.zeros((1, 9, 4), np.float32), np.zeros((7, 4), np.float32))
    assert err.value.code == "E509" and message in err.value.message


def test_ir_round_trips_and_the_verifier_holds_the_wide_rules():
    c = compile_source(CONFIGS[0].source(), "<wide>", Options(arch="sm_100a"), until="ir")
    text = print_ir(c.ir)
    assert "im2col={lower=[0, -1] upper=[0, -1] strides=[1, 1] wide=w halo=2}" in text
    assert "shape=[34, 16]" in text
    assert print_ir(parse_ir(text)) == text
    verify(parse_ir(text)[0], "lower_tile_walk", DONE)
    for good, bad, complaint in [
        ("wide=w halo=2", "wide=v halo=2", "wide: not a wide im2col mode"),
        ("wide=w halo=2", "wide=w halo=512", "halo: out of range"),
        ("wide=w halo=2", "wide=w128 halo=2", "halo: out of range"),
        ("lower=[0, -1]", "lower=[1, -1]", "lower: not 1 zeros and a W corner"),
        ("strides=[1, 1] wide", "strides=[2, 1] wide", "strides: not ones and a W traversal stride"),
        ("swizzle=64B oob=zero l2=none multicast=1 pair=false mode=im2col_wide",
         "swizzle=none oob=zero l2=none multicast=1 pair=false mode=im2col_wide", "swizzle"),
    ]:
        with pytest.raises(TmalangError, match=complaint):
            verify(parse_ir(text.replace(good, bad))[0], "lower_tile_walk", DONE)
    load = next(line for line in text.splitlines() if "tma_load" in line)
    offsets = load[load.index("offsets="):]
    with pytest.raises(TmalangError, match="offsets"):
        verify(parse_ir(text.replace(offsets, "offsets=[1, 2]"))[0], "lower_tile_walk", DONE)


def test_manifest_and_the_wide_driver_call(monkeypatch):
    """pixelsPerColumn leaves out the halo; the W corners go as two ints, the mode after the
    interleave (cuTensorMapEncodeIm2colWide's order); a plain im2col map's JSON has no `wide`."""
    g = CONFIGS[0]
    k = compiled(g.source())
    param = next(p for p in k.manifest.ptx_params if isinstance(p, TensorMapParam) and p.box == "A")
    assert (param.box_shape, param.wide, param.lower, param.upper) == ((32, 16), "w", (0, -1), (0, -1))
    assert Manifest.from_json(k.manifest.to_json()) == k.manifest
    conv = tmalang.compile((ROOT / "examples" / "conv2d_sm90.tma").read_text(), kernel="conv2d")
    assert all("wide" not in p for p in conv.manifest.to_json()["ptx_params"])
    x = np.zeros(g.shape, dtype=ml_dtypes.bfloat16)
    view = bind(k.manifest, (x, np.zeros((g.tiles * 34, g.channels), ml_dtypes.bfloat16))).views["x"]
    f = tensormap.tensor_map_fields(param, view, 0x1000)
    assert (f.wide_mode, f.box_dim, f.lower, f.upper) == ("CU_TENSOR_MAP_IM2COL_WIDE_MODE_W", (16, 32), (-1, 0), (-1, 0))
    seen = []

    class Opaque:
        opaque = [0] * 16

    cu = pytest.importorskip("cuda.bindings.driver")   # the enums only: no GPU or libcuda is called
    monkeypatch.setattr(driver, "api", lambda: cu)
    monkeypatch.setattr(driver, "call", lambda name, *args: seen.append((name, args)) or Opaque())
    tensormap.encode_tensor_map(param, view, 0x1000)
    name, args = seen[0]
    assert name == "cuTensorMapEncodeIm2colWide"
    assert args[5:9] == (-1, -1, 16, 32)
    assert "IM2COL_WIDE_MODE_W" in str(args[11]) and "INTERLEAVE_NONE" in str(args[10])


def _ptx(source: str) -> str:
    return compile_source(source, "<wide>", Options(arch="sm_100a")).ptx


@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_ptxas_sm100a_accepts_wide_loads(g):
    ptx = _ptx(g.source())
    rank, qualifier = len(g.shape), {"w": r"im2col::w", "w128": r"im2col::w::128"}[g.mode]
    assert re.search(rf"cp\.async\.bulk\.tensor\.{rank}d\.shared::cluster\.global\.{qualifier}\."
                     rf"mbarrier::complete_tx::bytes \[%r\d+\], \[%rd\d+, \{{[^}}]*\}}\], \[%r\d+\], "
                     rf"\{{%rs\d+, %rs\d+\}};", ptx)
    ptxas.assemble(ptx, "sm_100a")


def test_a_cache_policy_rides_on_the_wide_load():
    ptx = _ptx(CONFIGS[0].source().replace("swizzle 64B\n", "swizzle 64B cache evict_first\n", 1))
    assert ".im2col::w.mbarrier::complete_tx::bytes.L2::cache_hint" in ptx
    ptxas.assemble(ptx, "sm_100a")


@pytest.mark.gpu
@pytest.mark.parametrize("g", CONFIGS, ids=[g.name for g in CONFIGS])
def test_gpu_wide_gather_equals_numpy_and_the_interpreter(g):
    """On a Blackwell GPU (compute capability 10.x), bit for bit."""
    if driver.compute_capability(0)[0] != 10:
        pytest.skip("needs an sm_100 GPU")
    k = compiled(g.source())
    x, gpu_out = inputs(g, np.random.default_rng(17))
    interp_out = gpu_out.copy()
    k(x, gpu_out)
    k.interpret(x, interp_out)
    np.testing.assert_array_equal(bits(gpu_out), bits(expected(g, x)))
    np.testing.assert_array_equal(bits(gpu_out), bits(interp_out))


def test_the_launch_header_encodes_wide_maps(tmp_path):
    cuda_h = Path("/usr/local/cuda/include/cuda.h")
    if shutil.which("g++") is None or not cuda_h.exists():
        pytest.skip("needs g++ and the CUDA driver header")
    for g in CONFIGS:
        source, header = tmp_path / f"{g.name}.tma", tmp_path / f"{g.name}.h"
        source.write_text(g.source())
        assert cli_main([str(source), "--arch", "sm_100a", "--emit", "header", "-o", str(header)]) == 0
        text = header.read_text()
        mode = {"w": "CU_TENSOR_MAP_IM2COL_WIDE_MODE_W", "w128": "CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128"}[g.mode]
        assert f"tmalang::encode_im2col_wide(&m_A" in text and f"{g.lower}, {g.upper}, {g.stride}," in text
        assert mode in text
        unit = tmp_path / f"use_{g.name}.cpp"
        unit.write_text(f'#include "{header.name}"\n')
        run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                              f"-I{tmalang.get_include()}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr


def test_tmalangc_opt_refuses_a_wide_box_for_sm90a():
    """The IR of a wide box names an sm_100a mode: `tmalangc opt --arch sm_90a` refuses it (E434)."""
    text = print_ir(compile_source(CONFIGS[0].source(), "<wide>", Options(arch="sm_100a"), until="ir").ir)
    check_target(parse_ir(text)[0], TARGETS["sm_100a"])
    with pytest.raises(TmalangError) as err:
        check_target(parse_ir(text)[0], TARGETS["sm_90a"])
    assert err.value.code == "E434" and "im2col_w" in err.value.message
