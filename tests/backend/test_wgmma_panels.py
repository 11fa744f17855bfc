"""wgmma descriptors over the panels of a panelled box (docs §4, §15), against the PTX ISA.

A panelled box [R, P·W/itemsize] lands in shared memory as P narrow tiles [R, W/itemsize] one after
the other (W the swizzle span), each swizzled as TMA swizzles a narrow box. These tests check
that this image is exactly the layout the descriptors the backend builds describe:

- K-major (ISA 9.7.15.5.1.2.1, "Major-ness supported by strides"): for swizzled layouts LBO is
  "not used, assumed to be 1"; SBO is the offset between 8-row groups, 8·W. A k16 instruction
  reads 32 bytes of K per row, inside one panel, so K step k starts in panel
  k // (W / 32) at byte (k mod W / 32)·32 of its rows: the descriptor's start address moves
  R·W bytes per panel (`KMajorTile.k_step_offset`).
- MN-major B (imm-trans-b = 1; same section): for swizzled layouts LBO is "the stride from the
  first (swizzle-byte-size/16) rows to the next (swizzle-byte-size/16) rows" of the matrix
  normalised to 128-bit elements along MN: for 128B, 8 rows of 8 bf16 = 64 N elements, i.e. one
  panel, K·128 bytes; SBO is the stride between 8-row K groups, 1024 bytes. One descriptor per
  k16 step covers all N = 64·P columns.

The H100 check is tests/backend/test_panels_mma.py (GEMMs over these layouts against float64).
"""

from __future__ import annotations

import ctypes
import re
from types import SimpleNamespace

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from tmalang.backend import panel_codegen
from tmalang.backend.mma_codegen import _swizzled
from tmalang.compiler import Options, compile_source
from tmalang.ir import ops
from tmalang.targets import wgmma as w

from test_panels_mma import KN_SOURCE, gemm_source

MODE_128B = 1


def panel_image(matrix: np.ndarray, layout, panels: int, **kwargs) -> np.ndarray:
    """The bytes P TMA copies of one panel each write: panel p's columns, packed as a narrow tile,
    at p × panel bytes."""
    cols = matrix.shape[1] // panels
    return np.concatenate([layout(matrix.shape[0], cols, **kwargs).pack(matrix[:, p * cols:(p + 1) * cols])
                           for p in range(panels)])


@pytest.mark.parametrize("rows,k,dtype,swizzle", [
    (128, 128, "bf16", "128B"),     # attention's Q, K at head dim 128: 2 panels
    (64, 256, "f16", "128B"),       # 4 panels
    (64, 64, "bf16", "64B"),        # 2 panels of 32
    (64, 64, "bf16", "32B"),        # 4 panels of 16
    (64, 256, "f8e4m3", "128B"),    # 2 panels of 128 fp8
])
def test_kmajor_panelled_tile_is_its_panels(rows, k, dtype, swizzle):
    tile = w.KMajorTile(rows, k, dtype, swizzle)
    span = w.SWIZZLE_BYTES[swizzle]
    panels = tile.k_bytes // span
    matrix = np.arange(rows * k, dtype=np.uint8 if tile.dtype_bytes == 1 else np.uint16).reshape(rows, k)
    narrow = panel_image(matrix, lambda r, c: w.KMajorTile(r, c, dtype, swizzle), panels)
    assert np.array_equal(tile.pack(matrix), narrow)
    assert tile.column_bytes == rows * span == tile.nbytes // panels


def test_kmajor_descriptors_per_k_step_across_two_panels():
    """Q [128, 128] bf16: steps 0-3 in panel 0 (+32 bytes each), steps 4-7 in panel 1 (16384 on)."""
    tile = w.KMajorTile(128, 128, "bf16", "128B")
    base = 0x8000                                   # 1024-aligned
    fields = [w.decode_descriptor(tile.descriptor(base, tile.k_step_offset(k))) for k in range(tile.k_steps)]
    assert [f.address - base for f in fields] == [0, 32, 64, 96, 16384, 16416, 16448, 16480]
    assert {(f.leading_byte_offset, f.stride_byte_offset, f.base_offset, f.swizzle) for f in fields} == \
        {(16, 1024, 0, "128B")}
    # warpgroup 1's rows 64..127: 8 atoms on in each panel, the same K steps
    assert tile.row_block_offset(1) == 8192
    assert tile.row_block_offset(1) + tile.k_step_offset(4) == 16384 + 8192


def test_kmajor_64B_panels():
    tile = w.KMajorTile(64, 64, "bf16", "64B")      # [64, 32] panels of 64-byte rows: 2 k16 steps each
    assert [tile.k_step_offset(k) for k in range(4)] == [0, 32, 4096, 4128]
    assert (tile.lbo, tile.sbo) == (16, 512)


@pytest.mark.parametrize("n", [64, 128, 192, 256])
def test_mnmajor_panelled_b_is_its_panels(n):
    tile = w.MNMajorTile(k_rows=64, n_elems=n, dtype="bf16")
    matrix = np.arange(64 * n, dtype=np.uint16).reshape(64, n)
    narrow = panel_image(matrix, lambda k, c: w.MNMajorTile(k_rows=k, n_elems=c, dtype="bf16"), n // 64)
    assert np.array_equal(tile.pack(matrix), narrow)


@pytest.mark.parametrize("k_rows,n", [(64, 128), (128, 128), (64, 256), (256, 192)])
def test_mnmajor_descriptor_lbo_is_one_panel(k_rows, n):
    """LBO = K rows × 128 bytes (the next 64-element N column, one panel on); SBO = 1024; each k16
    step 2048 bytes on inside every panel; the instruction's N is all of it."""
    tile = w.MNMajorTile(k_rows=k_rows, n_elems=n, dtype="bf16")
    d = w.decode_descriptor(tile.descriptor(0x10000, tile.k_step_offset(1)))
    assert (d.address, d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle) == \
        (0x10000 + 2048, k_rows * 128, 1024, 0, "128B")
    assert tile.byte_offset(0, 64) == k_rows * 128 == tile.lbo       # column 64 starts panel 1
    assert w.instruction(64, n, 16, "bf16", "bf16", "f32", trans_b=True).endswith(f"m64n{n}k16.f32.bf16.bf16")


def _llvm(source: str) -> str:
    return compile_source(source, "k.tma", Options(arch="sm_90a"), until="ll").llvm_ir


def _descriptor_constants(text: str) -> set[int]:
    return {int(v) for v in re.findall(r"or i64 %\"?[\w.]+\"?, (\d+)", text)}


def _step_adds(text: str) -> set[int]:
    """The constant offsets added to a descriptor, 0 included: the codegen's builder folds `+ 0`
    away (backend/builder.py), so the first K step adds nothing and shows no `add`."""
    return {0} | {int(v) for v in re.findall(r"add i64 %\"?[\w.]+\"?, (\d+)", text)}


def test_backend_descriptors_for_k_over_panels():
    """The GEMM on [128, 128] operands: both descriptors 128B K-major (LBO 16, SBO 1024), and the
    K steps add the encoded offsets of `k_step_offset`, panel 1 at 16384 >> 4 = 1024."""
    text = _llvm(gemm_source("bf16"))
    tile = w.KMajorTile(128, 128, "bf16", "128B")
    assert _descriptor_constants(text) == {tile.descriptor_base()}
    assert {tile.k_step_offset(k) >> 4 for k in range(8)} == {0, 2, 4, 6, 1024, 1026, 1028, 1030} <= _step_adds(text)


def test_backend_descriptor_for_mn_major_n_128():
    """B [64, 128] kn: LBO = 64 × 128 = 8192 (field 512), SBO = 1024 (field 64), 128B mode."""
    text = _llvm(KN_SOURCE)
    b = w.MNMajorTile(k_rows=64, n_elems=128, dtype="bf16")
    assert b.descriptor_base() == (512 << 16) | (64 << 32) | (MODE_128B << 62)
    assert b.descriptor_base() in _descriptor_constants(text)
    assert {0, 128, 256, 384} <= _step_adds(text)          # 2048-byte k16 slices


def _host_offset_function(box: ops.BoxDecl, itemsize: int):
    """The LLVM IR the epilogue and row math compute an element's address with
    (`panel_codegen.element_offset` + `_swizzled`), compiled for this CPU: (row, col) -> bytes."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = ir.Module("offsets")
    module.triple = llvm.get_process_triple()
    i32 = ir.IntType(32)
    fn = ir.Function(module, ir.FunctionType(i32, [i32, i32]), "offset")
    g = SimpleNamespace(b=ir.IRBuilder(fn.append_basic_block()))
    row, col = fn.args
    g.b.ret(panel_codegen.element_offset(g, box, row, col, itemsize, lambda x: _swizzled(g, x, box.swizzle)))
    compiled = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(compiled, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    call = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)(engine.get_function_address("offset"))
    return call, engine


@pytest.mark.parametrize("dtype,layout_dtype,rows,cols,swizzle", [
    ("bf16", "bf16", 128, 128, "128B"),    # 2 panels: attention's O tile at head dim 128
    ("f32", "tf32", 64, 128, "128B"),      # 4 panels of 32 f32
    ("bf16", "bf16", 64, 64, "64B"),       # 2 panels of 32
    ("f16", "f16", 64, 64, "32B"),         # 4 panels of 16
    ("bf16", "bf16", 64, 64, "128B"),      # one panel: the narrow formula, unchanged
])
def test_epilogue_addresses_are_the_panel_layout(dtype, layout_dtype, rows, cols, swizzle):
    """Every (row, col) an epilogue or row math writes lands where TMA (and wgmma) keep it: the
    K-major tile layout, which test_kmajor_panelled_tile_is_its_panels shows is the panels'."""
    box = ops.BoxDecl("C", "c", dtype, [rows, cols], [1, 1], swizzle, "zero", "none", 1, False)
    offset, _engine = _host_offset_function(box, w.dtype_bytes(layout_dtype))
    tile = w.KMajorTile(rows, cols, layout_dtype, swizzle)
    wrong = [(r, c) for r in range(rows) for c in range(cols) if offset(r, c) != tile.byte_offset(r, c)]
    assert not wrong
