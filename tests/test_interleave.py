"""Interleaved layouts (`interleave 16B|32B`): the driver's rules are located errors (E445-E449,
tests/diagnostics/interleave.tma), and a box that passes them is refused (E457): on the H100 the
copies fault with the tensor map this compiler encodes (measured 2026-11-23), so no program with
an interleaved box is accepted until the encoding is settled on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.contract.arrays import array_view
from tmalang.diagnostics import TmalangError
from tmalang.runtime.tensormap import tensor_map_fields

SOURCE = """
kernel interleaved(src: f16[N, C, H, W, {slice}], dst: f16[N, C, H, W, {slice}]) {{
    grid persistent
    box In  = src[1, {bc}, {bh}, {bw}, {slice}] interleave {il}{swizzle}
    box Out = dst[1, {bc}, {bh}, {bw}, {slice}]
    pipeline ring[3] {{ t: In }}
    role producer: warp 0 {{
        for tile (n, c, h, w, k) in tiles(dst, Out) {{ produce ring as s {{ load In[n, c, h, w, k] -> s.t }} }}
    }}
    role consumer: warps 4..7 {{
        for tile (n, c, h, w, k) in tiles(dst, Out) {{ consume ring as s {{ store Out[n, c, h, w, k] <- s.t }} }}
    }}
}}
"""
SLICE = {"16B": 8, "32B": 16}   # f16 channels per slice


@pytest.mark.parametrize("il,bc,bh,bw", [("16B", 1, 4, 16), ("16B", 2, 2, 8), ("32B", 1, 4, 8)])
def test_a_box_that_passes_the_driver_rules_is_refused_at_its_option(il, bc, bh, bw):
    swizzle = " swizzle 32B" if il == "32B" else ""
    src = SOURCE.format(il=il, slice=SLICE[il], bc=bc, bh=bh, bw=bw, swizzle=swizzle)
    with pytest.raises(TmalangError) as e:
        tmalang.compile(src, name="il.tma")
    d = e.value
    assert d.code == "E457" and "faults" in d.message and "box 'In'" in d.message
    assert d.span is not None and src.splitlines()[d.span.line - 1][d.span.col - 1:].startswith(f"interleave {il}")


def test_boxes_without_interleave_keep_the_plain_tensor_map():
    param = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma").manifest.ptx_params[0]
    view = array_view(np.zeros((64, 128), np.float32), "src")
    assert param.interleave == "none"
    assert tensor_map_fields(param, view, 0x10000).interleave == "CU_TENSOR_MAP_INTERLEAVE_NONE"
