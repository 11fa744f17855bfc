"""Interleaved layouts (`interleave 16B|32B`): NC/8HWC8 and NC/16HWC16 tensors, declared in their
physical shape with one channel slice innermost. The interpreter against NumPy at shapes that are
not multiples of the box (the tile holds the box's elements in row-major order, as without
interleave), the tensor map's driver arguments, the launch checks of interleave 32B (E207), the
IR field, ptxas, the C++ launch header, and on the H100 the same bits as NumPy and the interpreter."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.cli.main import main as cli_main
from tmalang.contract.arrays import array_view
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.runtime.tensormap import tensor_map_fields

# scale a tensor in place of its layout: y = 2x + 1, computed in f32 and rounded once to f16
SOURCE = """
kernel interleaved_{il}(src: f16[N, C, H, W, {slice}], dst: f16[N, C, H, W, {slice}]) {{
    grid persistent
    box In  = src[1, {bc}, {bh}, {bw}, {slice}] interleave {il}{swizzle}
    box Out = dst[1, {bc}, {bh}, {bw}, {slice}] interleave {il}{swizzle}
    pipeline ring[3] {{ t: In }}
    role producer: warp 0 {{
        for tile (n, c, h, w, k) in tiles(dst, Out) {{ produce ring as s {{ load In[n, c, h, w, k] -> s.t }} }}
    }}
    role consumer: warps 4..7 {{
        for tile (n, c, h, w, k) in tiles(dst, Out) {{
            consume ring as s {{
                s.t = s.t * 2.0 + 1.0
                store Out[n, c, h, w, k] <- s.t
            }}
        }}
    }}
}}
"""
SLICE = {"16B": 8, "32B": 16}   # f16 channels per slice


def kernel(il="16B", bc=1, bh=4, bw=16):
    swizzle = " swizzle 32B" if il == "32B" else ""
    return tmalang.compile(SOURCE.format(il=il, slice=SLICE[il], bc=bc, bh=bh, bw=bw, swizzle=swizzle),
                           name=f"interleaved_{il}.tma")


def nchw_to_interleaved(x: np.ndarray, per_slice: int) -> np.ndarray:
    """NCHW → NC/kHWCk with zero-padded channels: [N, ceil(C/k), H, W, k]."""
    n, c, h, w = x.shape
    slices = -(-c // per_slice)
    padded = np.zeros((n, slices * per_slice, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, slices, per_slice, h, w).transpose(0, 1, 3, 4, 2))


def case(rng, il, nchw):
    x = nchw_to_interleaved(rng.standard_normal(nchw).astype(np.float16), SLICE[il])
    expected = (x.astype(np.float32) * np.float32(2) + np.float32(1)).astype(np.float16)
    return x, expected


CASES = [("16B", (2, 19, 5, 21), 1, 4, 16), ("16B", (1, 8, 3, 7), 1, 2, 8),
         ("32B", (3, 40, 6, 11), 1, 4, 8), ("32B", (1, 17, 9, 33), 1, 8, 32)]
IDS = [f"{il}-{'x'.join(map(str, s))}-box{bc}x{bh}x{bw}" for il, s, bc, bh, bw in CASES]


@pytest.mark.parametrize("il,nchw,bc,bh,bw", CASES, ids=IDS)
def test_interpreter_matches_numpy(il, nchw, bc, bh, bw):
    x, expected = case(np.random.default_rng(sum(nchw)), il, nchw)
    out = np.full_like(x, np.nan)
    kernel(il, bc, bh, bw).interpret(x, out, seed=1, explore=2)
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_nchw_to_interleaved_puts_channel_c_at_slice_c_over_k():
    x = np.arange(2 * 11 * 3 * 4, dtype=np.float16).reshape(2, 11, 3, 4)
    y = nchw_to_interleaved(x, 8)
    assert y.shape == (2, 2, 3, 4, 8)
    assert y[1, 1, 2, 3, 2] == x[1, 10, 2, 3] and y[0, 1, 0, 0, 3] == 0   # channel 11 is padding


@pytest.mark.parametrize("il", ["16B", "32B"])
def test_the_tensor_map_carries_the_interleave(il):
    k = kernel(il)
    param = k.manifest.ptx_params[0]
    assert param.interleave == il and param.swizzle == ("32B" if il == "32B" else "none")
    view = array_view(np.zeros((1, 2, 4, 16, SLICE[il]), np.float16), "src")
    fields = tensor_map_fields(param, view, 0x10000)
    assert fields.interleave == f"CU_TENSOR_MAP_INTERLEAVE_{il}"
    # the slice is the map's element, not a dim (the H100 moves one whole slice per index)
    assert fields.rank == 4 and fields.global_dim == (16, 4, 2, 1) and fields.box_dim == (16, 4, 1, 1)
    assert fields.global_strides == (16 * 2 * SLICE[il], 16 * 4 * 2 * SLICE[il], 16 * 4 * 2 * 2 * SLICE[il])


def test_a_box_two_slices_deep_is_refused():
    """On the H100 such a box never completes its barrier (measured 2026-11-23): E457 at the box."""
    with pytest.raises(TmalangError) as e:
        kernel("16B", bc=2, bh=2, bw=8)
    assert e.value.code == "E457" and "one channel slice" in e.value.message


def test_boxes_without_interleave_keep_the_plain_tensor_map():
    param = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma").manifest.ptx_params[0]
    view = array_view(np.zeros((64, 128), np.float32), "src")
    assert param.interleave == "none"
    assert tensor_map_fields(param, view, 0x10000).interleave == "CU_TENSOR_MAP_INTERLEAVE_NONE"


def test_interleave_32B_refuses_outer_strides_that_are_not_32_bytes_at_launch():
    """A dense interleaved tensor's strides are whole slices; a padded one can break 32 (E207)."""
    k = kernel("32B")
    wide = np.zeros((1, 2, 3, 5 * 16 + 8), np.float16)             # rows padded by 16 bytes
    x = wide[..., : 5 * 16].reshape(1, 2, 3, 5, 16)
    with pytest.raises(TmalangError) as e:
        k.interpret(x, np.zeros((1, 2, 3, 5, 16), np.float16))
    assert e.value.code == "E207" and "interleave 32B" in e.value.message and "multiple of 32" in e.value.message


def test_the_ir_round_trips_and_the_verifier_checks_the_interleave():
    c = kernel("32B")._c
    text = print_ir(c.ir)
    assert "interleave=32B" in text and print_ir(parse_ir(text)) == text
    plain = print_ir(tmalang.compile_file(ROOT / "examples" / "tma_copy.tma")._c.ir)
    assert "interleave" not in plain   # the default is left out: goldens unchanged


@pytest.mark.parametrize("il", ["16B", "32B"])
def test_ptxas_accepts_interleaved_copies(il):
    k = kernel(il)
    assert "cp.async.bulk.tensor.4d.shared::cluster.global.tile" in k.ptx   # no slice coordinate
    assert ptxas.assemble(k.ptx, "sm_90a")[0][:4] == b"\x7fELF"


def test_the_launch_header_encodes_the_interleave(tmp_path):
    path = tmp_path / "il.tma"
    path.write_text(SOURCE.format(il="32B", slice=16, bc=1, bh=4, bw=8, swizzle=" swizzle 32B"))
    header = tmp_path / "il.h"
    assert cli_main([str(path), "--emit", "header", "-o", str(header)]) == 0
    assert "CU_TENSOR_MAP_INTERLEAVE_32B" in header.read_text()
    cuda_h = Path("/usr/local/cuda/include/cuda.h")
    if shutil.which("g++") is None or not cuda_h.exists():
        pytest.skip("needs g++ and the CUDA driver header")
    unit = tmp_path / "use.cpp"
    unit.write_text('#include "il.h"\n')
    run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{tmalang.get_include()}",
                          f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# ---- on the H100 ------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("il,nchw,bc,bh,bw", CASES + [("16B", (8, 61, 17, 29), 1, 8, 32),
                                                      ("32B", (4, 100, 13, 37), 1, 4, 16)],
                         ids=IDS + ["16B-8x61x17x29-big", "32B-4x100x13x37-big"])
def test_gpu_interleaved_equals_numpy_and_the_interpreter(il, nchw, bc, bh, bw):
    """Bit for bit: f32 math rounded once to f16, on every element including padded channels."""
    k = kernel(il, bc, bh, bw)
    x, expected = case(np.random.default_rng(17), il, nchw)
    gpu = np.full_like(x, np.nan)
    k(x, gpu)
    np.testing.assert_array_equal(gpu.view(np.uint16), expected.view(np.uint16))
    if x.size <= 1 << 16:
        interp = np.full_like(x, np.nan)
        k.interpret(x, interp, seed=1)
        np.testing.assert_array_equal(gpu.view(np.uint16), interp.view(np.uint16))
