"""The wgmma encoding layer (tmalang/targets/wgmma/): descriptor bits, K-major tile offsets,
mnemonics and inline asm, the accumulator fragment, and ptxas/LLVM acceptance.

The expected descriptor values are written as explicit bit compositions from the PTX ISA table
(9.7.15.5.1.2.2 "Matrix Descriptor Format"), not computed by the code under test. The GPU test
at the end runs the real instruction on an H100: operand tiles packed with `KMajorTile.pack`,
descriptors from `KMajorTile`, the instruction from `inline_asm`, and the result mapped back with
`accumulator_layout`; it must equal A @ B^T exactly.
"""

from __future__ import annotations

import ctypes
import re
import subprocess

import numpy as np
import pytest

from tmalang.targets import wgmma as w
from tmalang.targets.arch import TARGETS

# ------------------------------------------------------------------ descriptor bit positions

MODE_NONE, MODE_128B, MODE_64B, MODE_32B = 0, 1, 2, 3  # ISA: 0 none, 1 128B, 2 64B, 3 32B


def test_each_field_lands_on_its_bits():
    # start address: bits 0-13 hold address >> 4
    assert w.smem_descriptor(16, 0, 0, "none") == 1 << 0
    assert w.smem_descriptor(0x3FFF0, 0, 0, "none") == 0x3FFF << 0
    # LBO: bits 16-29
    assert w.smem_descriptor(0, 16, 0, "none") == 1 << 16
    assert w.smem_descriptor(0, 0x3FFF0, 0, "none") == 0x3FFF << 16
    # SBO: bits 32-45
    assert w.smem_descriptor(0, 0, 16, "none") == 1 << 32
    assert w.smem_descriptor(0, 0, 0x3FFF0, "none") == 0x3FFF << 32
    # base offset: bits 49-51
    assert w.smem_descriptor(0, 0, 0, "128B", base_offset=1) == (MODE_128B << 62) | (1 << 49)
    assert w.smem_descriptor(0, 0, 0, "128B", base_offset=7) == (MODE_128B << 62) | (0b111 << 49)
    # swizzle mode: bits 62-63
    assert w.smem_descriptor(0, 0, 0, "128B") == 0b01 << 62
    assert w.smem_descriptor(0, 0, 0, "64B") == 0b10 << 62
    assert w.smem_descriptor(0, 0, 0, "32B") == 0b11 << 62
    assert w.smem_descriptor(0, 0, 0, "none") == 0


def test_all_fields_at_maximum_touch_no_other_bit():
    desc = w.smem_descriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, "32B", base_offset=7)
    fields = (0x3FFF << 0) | (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62)
    assert desc == fields == 0xC00E3FFF3FFF3FFF


def test_descriptor_128B_kmajor_bf16():
    # A tile at shared address 0x2400, 128B swizzle: LBO unused (encoded 1), SBO = 1024
    expected = (
        (0x2400 >> 4) << 0      # start address 0x2400 -> 0x240
        | (16 >> 4) << 16       # LBO "assumed 1"
        | (1024 >> 4) << 32     # SBO: 8 rows x 128 B
        | 0 << 49               # base offset: tile on a 1024-byte boundary
        | MODE_128B << 62
    )
    assert expected == 0x4000004000010240
    assert w.smem_descriptor(0x2400, 16, 1024, "128B") == expected


def test_descriptor_64B():
    expected = (0x1200 >> 4) << 0 | (16 >> 4) << 16 | (512 >> 4) << 32 | MODE_64B << 62
    assert expected == 0x8000002000010120
    assert w.smem_descriptor(0x1200, 16, 512, "64B") == expected


def test_descriptor_32B():
    expected = (0x300 >> 4) << 0 | (16 >> 4) << 16 | (256 >> 4) << 32 | MODE_32B << 62
    assert expected == 0xC000001000010030
    assert w.smem_descriptor(0x300, 16, 256, "32B") == expected


def test_descriptor_no_swizzle():
    # 64-row tile, core matrices 8 x 16 B: LBO = next K column (64 * 16 B), SBO = 128 B
    expected = (0x80 >> 4) << 0 | (1024 >> 4) << 16 | (128 >> 4) << 32 | MODE_NONE << 62
    assert expected == 0x0000000800400008
    assert w.smem_descriptor(0x80, 1024, 128, "none") == expected


def test_encode_keeps_18_address_bits():
    assert w.encode(0x3FFFF) == 0x3FFF
    assert w.encode(0x40010) == 1  # bit 18 and above are dropped by the & 0x3FFFF
    assert w.encode(0x2400) == 0x240


def test_base_plus_runtime_address():
    base = w.descriptor_base(16, 1024, "128B")
    assert base == (16 >> 4) << 16 | (1024 >> 4) << 32 | MODE_128B << 62
    assert base & 0x3FFF == 0
    for addr in (0, 0x400, 0x2400, 0x37C00):
        assert w.with_address(base, addr) == base | ((addr & 0x3FFFF) >> 4) == w.smem_descriptor(addr, 16, 1024, "128B")


def test_advance_moves_only_the_address_field():
    desc = w.smem_descriptor(0x2400, 16, 1024, "128B")
    assert w.advance(desc, 32) == desc + 2  # next K=16 bf16 slice: +32 B = +2 encoded
    assert w.decode_descriptor(w.advance(desc, 96)).address == 0x2400 + 96
    with pytest.raises(ValueError):
        w.advance(desc, 8)
    with pytest.raises(ValueError):
        w.advance(w.smem_descriptor(0x3FFF0, 16, 1024, "128B"), 16)


def test_decode_round_trip_and_reserved_bits():
    desc = w.smem_descriptor(0x1230, 0x40, 0x400, "64B", base_offset=3)
    assert w.decode_descriptor(desc) == (0x1230, 0x40, 0x400, 3, "64B")
    for reserved_bit in (14, 15, 30, 31, 46, 47, 48, 52, 61):
        with pytest.raises(ValueError):
            w.decode_descriptor(desc | 1 << reserved_bit)


@pytest.mark.parametrize("args", [
    (8, 16, 1024, "128B"),         # address not 16-byte aligned
    (0, 24, 1024, "128B"),         # LBO not 16-byte aligned
    (0, 16, 1000, "128B"),         # SBO not 16-byte aligned
    (1 << 18, 16, 1024, "128B"),   # address beyond 18 bits
    (0, 1 << 18, 1024, "128B"),
    (-16, 16, 1024, "128B"),
    (0, 16, 1024, "16B"),          # no such swizzle
])
def test_descriptor_rejects(args):
    with pytest.raises(ValueError):
        w.smem_descriptor(*args)


def test_descriptor_rejects_base_offset_out_of_range():
    with pytest.raises(ValueError):
        w.smem_descriptor(0, 16, 1024, "128B", base_offset=8)


def test_swizzle_spellings():
    assert [w.swizzle_name(s) for s in ("128B", "128b", "SWIZZLE_128B", "64B", "32b", "none", "interleave")] == [
        "128B", "128B", "128B", "64B", "32B", "none", "none"]


# ------------------------------------------------------------------ K-major tiles


def test_kmajor_128B_bf16_tile():
    t = w.KMajorTile(rows=128, k_elems=64, dtype="bf16", swizzle="128B")  # one TMA box [128, 64]
    assert (t.k_bytes, t.atom_columns, t.box_k_elems, t.k_steps, t.instruction_k) == (128, 1, 64, 4, 16)
    assert (t.lbo, t.sbo, t.alignment, t.nbytes) == (16, 1024, 1024, 16384)
    assert t.descriptor_base() == (1 << 16) | (64 << 32) | (MODE_128B << 62)
    # the K=16 slices step 32 B inside the 128 B swizzle row: +2 in the encoded address field
    assert [t.k_step_offset(k) for k in range(4)] == [0, 32, 64, 96]
    assert [t.row_block_offset(b) for b in range(2)] == [0, 8192]  # 64 rows = 8 atoms of 1024 B
    assert t.row_offset(8) == 1024
    assert t.descriptor(0x4000, t.k_step_offset(3)) == t.descriptor_base() | (0x4000 >> 4) + (96 >> 4)


def test_kmajor_128B_two_boxes_along_k():
    t = w.KMajorTile(rows=64, k_elems=128, dtype="f16", swizzle="128B")  # two [64, 64] boxes
    assert t.atom_columns == 2 and t.column_bytes == 8192
    assert [t.k_step_offset(k) for k in range(8)] == [0, 32, 64, 96, 8192, 8224, 8256, 8288]


def test_kmajor_64B_tile():
    t = w.KMajorTile(rows=128, k_elems=64, dtype="bf16", swizzle="64B")  # two [128, 32] boxes
    assert (t.lbo, t.sbo, t.alignment, t.atom_columns) == (16, 512, 512, 2)
    assert t.descriptor_base() == (1 << 16) | (32 << 32) | (MODE_64B << 62)
    assert [t.k_step_offset(k) for k in range(4)] == [0, 32, 128 * 64, 128 * 64 + 32]
    assert t.row_block_offset(1) == 64 * 64


def test_kmajor_32B_tile():
    t = w.KMajorTile(rows=64, k_elems=64, dtype="bf16", swizzle="32B")  # four [64, 16] boxes
    assert (t.lbo, t.sbo, t.alignment) == (16, 256, 256)
    assert t.descriptor_base() == (1 << 16) | (16 << 32) | (MODE_32B << 62)
    assert [t.k_step_offset(k) for k in range(4)] == [0, 2048, 4096, 6144]


def test_kmajor_unswizzled_tile():
    t = w.KMajorTile(rows=64, k_elems=64, dtype="bf16", swizzle="none")  # eight [64, 8] boxes
    # core matrices 8 rows x 16 B; LBO = between the two 16 B K chunks = one column = 64 * 16 B
    assert (t.lbo, t.sbo) == (1024, 128)
    assert t.descriptor_base() == (64 << 16) | (8 << 32) | (MODE_NONE << 62)
    assert [t.k_step_offset(k) for k in range(4)] == [0, 2048, 4096, 6144]


def test_kmajor_fp8_and_tf32_slices_are_32_bytes():
    fp8 = w.KMajorTile(rows=64, k_elems=128, dtype="f8e4m3", swizzle="128B")
    assert (fp8.instruction_k, fp8.k_steps, fp8.box_k_elems) == (32, 4, 128)
    assert [fp8.k_step_offset(k) for k in range(4)] == [0, 32, 64, 96]
    tf32 = w.KMajorTile(rows=64, k_elems=32, dtype="tf32", swizzle="128B")
    assert (tf32.instruction_k, tf32.k_steps) == (8, 4)


def test_element_placement_128B():
    t = w.KMajorTile(rows=16, k_elems=64, dtype="bf16", swizzle="128B")
    # 16-byte chunk c of row r lands at chunk c ^ (r % 8) of the row's 128 B
    assert t.byte_offset(0, 0) == 0
    assert t.byte_offset(0, 8) == 16          # chunk 1 of row 0
    assert t.byte_offset(1, 0) == 128 + 16    # row 1: chunk 0 -> chunk 1
    assert t.byte_offset(1, 8) == 128 + 0     # row 1: chunk 1 -> chunk 0
    assert t.byte_offset(7, 0) == 7 * 128 + 7 * 16
    assert t.byte_offset(8, 0) == 1024        # the pattern repeats every 8 rows
    assert t.byte_offset(3, 9) == 3 * 128 + (1 ^ 3) * 16 + 2


def test_element_placement_64B_and_32B():
    t64 = w.KMajorTile(rows=16, k_elems=32, dtype="bf16", swizzle="64B")
    assert [t64.byte_offset(r, 0) for r in range(4)] == [0, 64, 128 + 16, 192 + 16]  # XOR with row // 2
    assert t64.byte_offset(2, 8) == 128
    t32 = w.KMajorTile(rows=16, k_elems=16, dtype="bf16", swizzle="32B")
    assert [t32.byte_offset(r, 0) for r in range(5)] == [0, 32, 64, 96, 128 + 16]  # XOR with row // 4


@pytest.mark.parametrize("swizzle", ["128B", "64B", "32B", "none"])
@pytest.mark.parametrize("dtype", ["bf16", "f8e4m3"])
def test_pack_is_a_permutation(swizzle, dtype):
    t = w.KMajorTile(rows=64, k_elems=128 // w.dtype_bytes(dtype), dtype=dtype, swizzle=swizzle)
    r, k = np.meshgrid(np.arange(t.rows), np.arange(t.k_elems), indexing="ij")
    offsets = t._offsets(r, k)
    assert sorted(offsets.ravel().tolist()) == list(range(0, t.nbytes, t.dtype_bytes))
    matrix = np.arange(t.rows * t.k_elems, dtype=np.uint16 if t.dtype_bytes == 2 else np.uint8).reshape(t.rows, -1)
    assert np.array_equal(t.unpack(t.pack(matrix), matrix.dtype), matrix)


@pytest.mark.parametrize("kwargs", [
    {"rows": 60, "k_elems": 64, "dtype": "bf16", "swizzle": "128B"},      # rows not a multiple of 8
    {"rows": 64, "k_elems": 8, "dtype": "bf16", "swizzle": "none"},       # 16 B of K: not a whole K=16 slice
    {"rows": 64, "k_elems": 32, "dtype": "bf16", "swizzle": "128B"},      # 64 B of K cannot fill a 128 B swizzle row
    {"rows": 64, "k_elems": 16, "dtype": "bf16", "swizzle": "64B"},       # 32 B of K in a 64 B swizzle row
    {"rows": 64, "k_elems": 64, "dtype": "f32", "swizzle": "128B"},       # not a wgmma input type
    {"rows": 64, "k_elems": 64, "dtype": "bf16", "swizzle": "256B"},
])
def test_kmajor_rejects(kwargs):
    with pytest.raises(ValueError):
        w.KMajorTile(**kwargs)


def test_kmajor_offset_range_checks():
    t = w.KMajorTile(rows=64, k_elems=64, dtype="bf16", swizzle="128B")
    for bad in (lambda: t.k_step_offset(4), lambda: t.k_step_offset(-1), lambda: t.row_block_offset(1),
                lambda: t.row_offset(4), lambda: t.descriptor(0x200)):
        with pytest.raises(ValueError):
            bad()


# ------------------------------------------------------------------ instruction and inline asm


def test_mnemonics():
    assert w.instruction(64, 256, 16, "bf16", "bf16", "f32", False) == "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"
    assert w.instruction(64, 8, 16, "f16", "f16", "f16", True) == "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16"
    assert w.instruction(64, 128, 32, "f8e4m3", "f8e5m2", "f32", False) == "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2"
    assert w.instruction(64, 64, 8, "tf32", "tf32", "f32", False) == "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32"
    assert [w.instruction(64, n, 16, "bf16", "bf16", "f32", False).split(".")[4] for n in (8, 24, 248)] == [
        "m64n8k16", "m64n24k16", "m64n248k16"]


@pytest.mark.parametrize("args, kwargs, message", [
    ((64, 4, 16, "bf16", "bf16", "f32"), {}, "multiple of 8"),
    ((64, 12, 16, "bf16", "bf16", "f32"), {}, "multiple of 8"),
    ((64, 264, 16, "bf16", "bf16", "f32"), {}, "8..256"),
    ((64, 0, 16, "bf16", "bf16", "f32"), {}, "8..256"),
    ((128, 64, 16, "bf16", "bf16", "f32"), {}, "M = 64"),
    ((64, 64, 32, "bf16", "bf16", "f32"), {}, "K = 16"),
    ((64, 64, 16, "f8e4m3", "f8e4m3", "f32"), {}, "K = 32"),
    ((64, 64, 16, "tf32", "tf32", "f32"), {}, "K = 8"),
    ((64, 64, 16, "bf16", "bf16", "f16"), {}, "accumulator"),
    ((64, 64, 8, "tf32", "tf32", "f16"), {}, "accumulator"),
    ((64, 64, 16, "bf16", "bf16", "bf16"), {}, "accumulator"),
    ((64, 64, 16, "f16", "bf16", "f32"), {}, "same type"),
    ((64, 64, 16, "s8", "s8", "f32"), {}, "multiplicand type"),
    ((64, 64, 32, "f8e4m3", "f8e4m3", "f32"), {"trans_b": True}, "K-major"),
    ((64, 64, 16, "bf16", "bf16", "f32", True), {"trans_a": True}, "registers"),
])
def test_invalid_variants_raise(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        w.instruction(*args, **kwargs)
    with pytest.raises(ValueError):
        w.inline_asm(*args, **kwargs)


def _operands(template: str) -> list[int]:
    return [int(x) for x in re.findall(r"\$(\d+)", template)]


def test_inline_asm_ss_bf16_f32():
    template, constraints = w.inline_asm(64, 64, 16, "bf16", "bf16", "f32", False)
    r = 32  # m64n64 f32: N/2 accumulators per thread
    parts = constraints.split(",")
    assert parts == ["=f"] * r + ["l", "l", "r"] + [str(i) for i in range(r)]
    assert "setp.ne.b32 p, $34, 0;" in template and ".reg .pred p;" in template
    d = ", ".join(f"${i}" for i in range(r))
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{d}}}, $32, $33, p, 1, 1, 0, 0;" in template
    assert max(_operands(template)) == r + 2  # tied inputs are never named in the text


def test_inline_asm_m64n256_has_128_accumulators():
    template, constraints = w.inline_asm(64, 256, 16, "bf16", "bf16", "f32")
    parts = constraints.split(",")
    assert parts.count("=f") == 128 and len(parts) == 128 + 3 + 128
    assert "{$0, $1," in template and "$127}, $128, $129, p, 1, 1, 0, 0;" in template


def test_inline_asm_rs_and_f16_and_fp8_forms():
    template, constraints = w.inline_asm(64, 32, 16, "f16", "f16", "f16", True, trans_b=True, scale_a=-1)
    assert constraints.split(",") == ["=r"] * 8 + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(8)]
    assert "{$0, $1, $2, $3, $4, $5, $6, $7}, {$8, $9, $10, $11}, $12, p, -1, 1, 1;" in template
    assert "setp.ne.b32 p, $13, 0;" in template
    template, constraints = w.inline_asm(64, 16, 32, "f8e4m3", "f8e5m2", "f32")
    assert "m64n16k32.f32.e4m3.e5m2 {$0, $1, $2, $3, $4, $5, $6, $7}, $8, $9, p, 1, 1;" in template  # no imm-trans
    with pytest.raises(ValueError):
        w.inline_asm(64, 16, 16, "bf16", "bf16", "f32", scale_a=2)


def test_ordering_instructions():
    assert w.FENCE == "wgmma.fence.sync.aligned;"
    assert w.COMMIT_GROUP == "wgmma.commit_group.sync.aligned;"
    assert w.wait_group(0) == "wgmma.wait_group.sync.aligned 0;"
    assert w.wait_group(1) == "wgmma.wait_group.sync.aligned 1;"
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            w.wait_group(bad)


# ------------------------------------------------------------------ accumulator fragment


@pytest.mark.parametrize("n", [8, 16, 24, 64, 128, 200, 256])
def test_accumulators_cover_the_tile_once(n):
    layout = w.accumulator_layout(n)
    assert layout.shape == (128, n // 2, 2)
    flat = layout[..., 0] * n + layout[..., 1]
    assert sorted(flat.ravel().tolist()) == list(range(64 * n))


def test_accumulator_spot_checks_from_figure_149():
    layout = w.accumulator_layout(64)
    assert [tuple(layout[0, i]) for i in range(4)] == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert tuple(layout[0, 4]) == (0, 8)      # next 8-column block
    assert tuple(layout[1, 0]) == (0, 2)      # lanes 0..3 share a row, 2 columns each
    assert tuple(layout[3, 1]) == (0, 7)
    assert tuple(layout[4, 0]) == (1, 0)      # lane 4 starts the next row
    assert tuple(layout[31, 3]) == (15, 7)
    assert tuple(layout[32, 0]) == (16, 0)    # warp 1 owns rows 16..31
    assert tuple(layout[127, 31]) == (63, 63)
    assert w.accumulator_coord(69, 13) == tuple(layout[69, 13])


def test_accumulator_owner_inverts_coord():
    for t in range(128):
        for i in range(0, 128, 7):
            assert w.accumulator_owner(*w.accumulator_coord(t, i)) == (t, i)
    matrix = np.arange(64 * 40).reshape(64, 40)
    assert np.array_equal(w.gather_accumulators(w.scatter_accumulators(matrix)), matrix)


# ------------------------------------------------------------------ a probe kernel in PTX

# A warpgroup of 128 threads copies A (m_blocks * 64 rows) and B (N rows) images, built by
# KMajorTile.pack, from global into 1024-aligned dynamic shared memory, then for each 64-row
# block of A runs the K slices with descriptors from KMajorTile, the instruction text from
# inline_asm with registers substituted, and writes every thread's raw accumulators out.


def _expand(template: str, names: list[str]) -> str:
    return re.sub(r"\$(\d+)", lambda m: names[int(m.group(1))], template)


class Probe:
    def __init__(self, n: int, dtype: str, acc: str, swizzle: str, m_blocks: int = 2, a_from_registers=False):
        k_elems = 128 // w.dtype_bytes(dtype)  # 128 bytes of K: 4 instruction slices
        self.n, self.dtype, self.acc, self.m_blocks = n, dtype, acc, m_blocks
        self.shape = w.check(64, n, w.instruction_k(dtype), dtype, dtype, acc, a_from_registers)
        self.a = w.KMajorTile(64 * m_blocks, k_elems, dtype, swizzle)
        self.b = w.KMajorTile(n, k_elems, dtype, swizzle)
        self.a_off = 0
        self.b_off = -(-self.a.nbytes // 1024) * 1024
        self.total = -(-(self.b_off + self.b.nbytes) // 16) * 16
        self.smem = self.total + 1024  # room to align the dynamic shared window to 1024
        self.regs = self.shape.accumulator_registers

    def ptx(self) -> str:
        r, shape = self.regs, self.shape
        dreg = "f32" if shape.acc_type == "f32" else "b32"
        garbage = "0f49742400" if shape.acc_type == "f32" else "0x63D063D0"  # 1e6 / f16x2(1000, 1000)
        template, _ = w.inline_asm(64, self.n, shape.k, self.dtype, self.dtype, self.acc)
        acc_names = [f"%d{i}" for i in range(r)]
        lines = [
            ".version 8.0",
            ".target sm_90a",
            ".address_size 64",
            ".extern .shared .align 16 .b8 dsmem[];",
            ".visible .entry probe(.param .u64 p_img, .param .u64 p_out)",
            "{",
            f"  .reg .{dreg} %d<{r}>;",
            "  .reg .b32 %t, %s, %i, %x, %zero, %one, %v<4>;",
            "  .reg .b64 %img, %out, %g, %da, %db, %dak, %dbk, %o;",
            "  .reg .pred %done;",
            "  ld.param.u64 %img, [p_img];",
            "  ld.param.u64 %out, [p_out];",
            "  cvta.to.global.u64 %img, %img;",
            "  cvta.to.global.u64 %out, %out;",
            "  mov.u32 %t, %tid.x;",
            "  mov.u32 %s, dsmem;",
            "  add.u32 %s, %s, 1023;",
            "  and.b32 %s, %s, -1024;",
            "  shl.b32 %i, %t, 4;",
            "COPY:",
            f"  setp.ge.u32 %done, %i, {self.total};",
            "  @%done bra COPIED;",
            "  cvt.u64.u32 %o, %i;",
            "  add.u64 %g, %img, %o;",
            "  ld.global.v4.u32 {%v0, %v1, %v2, %v3}, [%g];",
            "  add.u32 %x, %s, %i;",
            "  st.shared.v4.u32 [%x], {%v0, %v1, %v2, %v3};",
            "  add.u32 %i, %i, 2048;",
            "  bra COPY;",
            "COPIED:",
            "  fence.proxy.async.shared::cta;",  # generic-proxy stores -> async-proxy wgmma reads
            "  bar.sync 0;",
            "  mov.u32 %zero, 0;",
            "  mov.u32 %one, 1;",
        ]
        for name, off, tile in (("%da", self.a_off, self.a), ("%db", self.b_off, self.b)):
            lines += [  # desc = base | ((addr & 0x3FFFF) >> 4)
                f"  add.u32 %x, %s, {off};",
                f"  cvt.u64.u32 {name}, %x;",
                f"  and.b64 {name}, {name}, 0x3FFFF;",
                f"  shr.u64 {name}, {name}, 4;",
                f"  or.b64 {name}, {name}, 0x{tile.descriptor_base():016X};",
            ]
        for mb in range(self.m_blocks):
            lines += [f"  mov.{dreg} %d{i}, {garbage};" for i in range(r)]  # scale-d = 0 must ignore this
            lines.append("  " + w.FENCE)
            for k in range(self.a.k_steps):
                a_step = (self.a.row_block_offset(mb) + self.a.k_step_offset(k)) >> 4
                lines += [f"  add.u64 %dak, %da, {a_step};", f"  add.u64 %dbk, %db, {self.b.k_step_offset(k) >> 4};"]
                scale = "%zero" if k == 0 else "%one"
                lines.append(_expand(template, acc_names + ["%dak", "%dbk", scale]))
            lines += ["  " + w.COMMIT_GROUP, "  " + w.wait_group(0)]
            lines += [f"  mad.wide.u32 %g, %t, {4 * r}, %out;", f"  add.u64 %g, %g, {mb * 128 * 4 * r};"]
            lines += [f"  st.global.b32 [%g+{4 * i}], %d{i};" for i in range(r)]
        lines += ["  ret;", "}", ""]
        return "\n".join(lines)

    def operands(self, seed: int):
        rng = np.random.default_rng(seed)
        np_dtype = _numpy_dtype(self.dtype)
        a = rng.integers(-3, 4, (self.a.rows, self.a.k_elems)).astype(np.float32).astype(np_dtype)
        b = rng.integers(-3, 4, (self.b.rows, self.b.k_elems)).astype(np.float32).astype(np_dtype)
        image = np.zeros(self.total, dtype=np.uint8)
        image[self.a_off:self.a_off + self.a.nbytes] = self.a.pack(a)
        image[self.b_off:self.b_off + self.b.nbytes] = self.b.pack(b)
        return a, b, image

    def results(self, raw: np.ndarray) -> list[np.ndarray]:
        """The m_blocks 64xN result tiles from the raw per-thread accumulator words."""
        words = raw.reshape(self.m_blocks, 128, self.regs)
        if self.shape.acc_type == "f32":
            frags = words.view(np.float32)
        else:  # register r packs elements 2r (low half) and 2r + 1 (high half)
            frags = words.view(np.float16).reshape(self.m_blocks, 128, self.n // 2)
        return [w.gather_accumulators(f).astype(np.float32) for f in frags]


def _numpy_dtype(dtype: str):
    import ml_dtypes

    return {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f8e4m3": ml_dtypes.float8_e4m3fn,
            "f8e5m2": ml_dtypes.float8_e5m2}[dtype]


def _ptxas():
    from tmalang.backend.ptxas import find_ptxas

    exe = find_ptxas()
    if exe is None:
        pytest.skip("ptxas not found")
    return exe


def _assemble(ptx: str, tmp_path, name: str = "k") -> subprocess.CompletedProcess:
    src = tmp_path / f"{name}.ptx"
    src.write_text(ptx)
    return subprocess.run([_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / f"{name}.cubin")],
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize("n, dtype, acc, swizzle", [
    (64, "bf16", "f32", "128B"),
    (256, "bf16", "f32", "128B"),
    (64, "f16", "f16", "64B"),
    (128, "f8e4m3", "f32", "32B"),
    (8, "bf16", "f32", "none"),
])
def test_ptxas_accepts_probe_kernel(tmp_path, n, dtype, acc, swizzle):
    probe = Probe(n, dtype, acc, swizzle)
    ptx = probe.ptx()
    assert ptx.count("wgmma.mma_async") == probe.m_blocks * 4
    assert w.FENCE in ptx and w.COMMIT_GROUP in ptx and w.wait_group(0) in ptx
    run = _assemble(ptx, tmp_path)
    assert run.returncode == 0, run.stderr
    # no serialization or injected waits: ptxas reports those as warnings/info naming wgmma
    assert "wgmma" not in (run.stdout + run.stderr), run.stdout + run.stderr


def test_ptxas_accepts_register_a_form(tmp_path):
    template, _ = w.inline_asm(64, 64, 16, "bf16", "bf16", "f32", True)
    names = [f"%d{i}" for i in range(32)] + ["%a0", "%a1", "%a2", "%a3", "%db", "%sc"]
    ptx = "\n".join([
        ".version 8.0", ".target sm_90a", ".address_size 64",
        ".visible .entry rs(.param .u64 p_out, .param .u64 p_desc)", "{",
        "  .reg .f32 %d<32>;", "  .reg .b32 %a<4>, %sc;", "  .reg .b64 %out, %db;",
        "  ld.param.u64 %out, [p_out];", "  ld.param.u64 %db, [p_desc];",
        *[f"  mov.b32 %a{i}, {i};" for i in range(4)], "  mov.u32 %sc, 0;",
        *[f"  mov.f32 %d{i}, 0f00000000;" for i in range(32)],
        "  " + w.FENCE, _expand(template, names), "  " + w.COMMIT_GROUP, "  " + w.wait_group(0),
        *[f"  st.global.f32 [%out+{4 * i}], %d{i};" for i in range(32)],
        "  ret;", "}", "",
    ])
    run = _assemble(ptx, tmp_path, "rs")
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("n, dtype, acc", [(64, "bf16", "f32"), (256, "bf16", "f32"), (64, "f16", "f16"),
                                           (128, "f8e5m2", "f32")])
def test_llvm_inline_asm_compiles(tmp_path, n, dtype, acc):
    """The template and constraints as the backend will use them: llvmlite -> NVPTX -> ptxas."""
    from llvmlite import ir

    from tmalang.backend.llvm_to_ptx import llvm_to_ptx

    shape = w.check(64, n, w.instruction_k(dtype), dtype, dtype, acc)
    r = shape.accumulator_registers
    elem = ir.FloatType() if acc == "f32" else ir.IntType(32)
    i32, i64 = ir.IntType(32), ir.IntType(64)
    module = ir.Module()
    module.triple = "nvptx64-nvidia-cuda"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(elem, 1), i64, i64]), "k")
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block())
    out, desc_a, desc_b = fn.args

    def side_effect(text: str, constraints: str = "", args=(), ret=None):
        ret = ir.VoidType() if ret is None else ret
        constraints = f"{constraints},~{{memory}}" if constraints else "~{memory}"
        asm = ir.InlineAsm(ir.FunctionType(ret, [a.type for a in args]), text, constraints, side_effect=True)
        return b.call(asm, list(args))

    template, constraints = w.inline_asm(64, n, shape.k, dtype, dtype, acc)
    accs = [elem(0)] * r
    side_effect(w.FENCE)
    for k in range(4):
        step = i64(2 * k)  # +32 B per K slice inside a 128B swizzle row
        result = side_effect(template, constraints, [b.add(desc_a, step), b.add(desc_b, step), i32(int(k > 0)), *accs],
                             ret=ir.LiteralStructType([elem] * r))
        accs = [b.extract_value(result, i) for i in range(r)]
    side_effect(w.COMMIT_GROUP)
    side_effect(w.wait_group(0))
    for i, value in enumerate(accs):
        b.store(value, b.gep(out, [i32(i)]))
    b.ret_void()
    _, ptx = llvm_to_ptx(str(module), TARGETS["sm_90a"])
    assert ptx.count(shape.mnemonic) == 4
    run = _assemble(ptx, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "wgmma" not in (run.stdout + run.stderr), run.stdout + run.stderr


# ------------------------------------------------------------------ on the GPU


def _load(ptx: str, tmp_path, name: str):
    """(module, function) from PTX: assembled by ptxas where there is one, else JIT by the driver."""
    from tmalang.runtime import driver

    driver.activate(0)
    try:
        run = _assemble(ptx, tmp_path, name)
        assert run.returncode == 0, run.stderr
        image = (tmp_path / f"{name}.cubin").read_bytes()
    except pytest.skip.Exception:
        image = ptx.encode() + b"\0"
    return driver.load_function(image, name)


def _launch(function, smem: int, params: list[bytes], out_bytes: int,
            inputs: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """Launch one 128-thread CTA; params are the raw parameter bytes, except that an int i in
    `inputs` is replaced by a device copy of inputs[i]; the last parameter is an output buffer
    of `out_bytes`, returned as uint8."""
    from tmalang.runtime import driver

    buffers = []
    try:
        raw_params = []
        inputs = inputs or {}
        for i, param in enumerate(params):
            if i in inputs:
                host = np.ascontiguousarray(inputs[i])
                ptr = driver.alloc(host.nbytes)
                buffers.append(ptr)
                driver.call("cuMemcpyHtoD", ptr, host.ctypes.data, host.nbytes)
                param = ctypes.c_uint64(ptr)
            raw_params.append(param)
        out_ptr = driver.alloc(out_bytes)
        buffers.append(out_ptr)
        raw_params.append(ctypes.c_uint64(out_ptr))
        storage = [p if isinstance(p, (ctypes.Array, ctypes.c_uint64)) else ctypes.create_string_buffer(p, len(p))
                   for p in raw_params]
        pointers = (ctypes.c_void_p * len(storage))(*[ctypes.addressof(p) for p in storage])
        driver.set_max_dynamic_smem(function, smem)
        driver.launch(function, driver.launch_config(1, 128, smem, 0, (1, 1, 1)), ctypes.addressof(pointers))
        driver.synchronize(0)
        out = np.empty(out_bytes, dtype=np.uint8)
        driver.call("cuMemcpyDtoH", out.ctypes.data, out_ptr, out_bytes)
        return out
    finally:
        for ptr in buffers:
            driver.free(ptr)


def run_probe(probe: Probe, tmp_path, seed: int = 0):
    """(A, B, [64xN result tile per 64-row block of A]) from running `probe` on the GPU."""
    a, b, image = probe.operands(seed)
    _, function = _load(probe.ptx(), tmp_path, "probe")
    raw = _launch(function, probe.smem, [0], probe.m_blocks * 128 * probe.regs * 4, inputs={0: image})
    return a, b, probe.results(raw.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("n, dtype, acc, swizzle", [
    (n, "bf16", "f32", s) for n in (64, 256) for s in ("128B", "64B", "32B", "none")
] + [
    (8, "bf16", "f32", "128B"),
    (24, "bf16", "f32", "64B"),
    (128, "f16", "f32", "128B"),
    (64, "f16", "f16", "128B"),
    (40, "f16", "f16", "32B"),
    (64, "f8e4m3", "f32", "128B"),
    (256, "f8e4m3", "f32", "64B"),
    (32, "f8e5m2", "f16", "none"),
])
def test_wgmma_on_gpu_matches_numpy(tmp_path, n, dtype, acc, swizzle):
    """Descriptors, K slices, 64-row blocks, scale-d = 0 on the first slice and the accumulator
    layout, all at once: the result must be A @ B^T exactly (small integers)."""
    a, b, tiles = run_probe(Probe(n, dtype, acc, swizzle), tmp_path, seed=n * 7 + len(swizzle))
    bt = b.astype(np.float32).T
    for mb, got in enumerate(tiles):
        expected = a[mb * 64:(mb + 1) * 64].astype(np.float32) @ bt
        np.testing.assert_array_equal(got, expected, err_msg=f"m block {mb}")


def _tma_probe_ptx(tile: w.KMajorTile) -> str:
    """Thread 0 loads `tile` with one TMA box per column (box [rows, W / dtype_bytes]); then the
    CTA copies the shared-memory bytes out unchanged."""
    bar = -(-tile.nbytes // 8) * 8
    lines = [
        ".version 8.0", ".target sm_90a", ".address_size 64",
        ".extern .shared .align 16 .b8 dsmem[];",
        ".visible .entry tma_probe(.param .align 64 .b8 tmap[128], .param .u64 p_out)", "{",
        "  .reg .b32 %t, %s, %bar, %x, %i, %v<4>;", "  .reg .b64 %tm, %out, %g, %o;", "  .reg .pred %first, %p;",
        "  ld.param.u64 %out, [p_out];", "  cvta.to.global.u64 %out, %out;",
        "  mov.u32 %t, %tid.x;", "  mov.u32 %s, dsmem;", "  add.u32 %s, %s, 1023;", "  and.b32 %s, %s, -1024;",
        f"  add.u32 %bar, %s, {bar};", "  setp.eq.u32 %first, %t, 0;",
        "  @%first mbarrier.init.shared::cta.b64 [%bar], 1;", "  fence.mbarrier_init.release.cluster;", "  bar.sync 0;",
        "  mov.b64 %tm, tmap;", "  cvta.param.u64 %tm, %tm;",
        f"  @%first mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bar], {tile.nbytes};",
    ]
    for c in range(tile.atom_columns):
        lines += [f"  add.u32 %x, %s, {c * tile.column_bytes};",
                  ("  @%first cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                   f"[%x], [%tm, {{{c * tile.box_k_elems}, 0}}], [%bar];")]
    lines += [
        "WAIT:", "  mbarrier.try_wait.parity.shared::cta.b64 %p, [%bar], 0;", "  @!%p bra WAIT;",
        "  shl.b32 %i, %t, 4;",
        "COPY:", f"  setp.ge.u32 %p, %i, {tile.nbytes};", "  @%p bra DONE;",
        "  add.u32 %x, %s, %i;", "  ld.shared.v4.u32 {%v0, %v1, %v2, %v3}, [%x];",
        "  cvt.u64.u32 %o, %i;", "  add.u64 %g, %out, %o;", "  st.global.v4.u32 [%g], {%v0, %v1, %v2, %v3};",
        "  add.u32 %i, %i, 2048;", "  bra COPY;", "DONE:", "  ret;", "}", "",
    ]
    return "\n".join(lines)


@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", ["128B", "64B", "32B", "none"])
@pytest.mark.parametrize("rows, k_elems, dtype", [(128, 64, "bf16"), (64, 128, "f8e4m3"), (256, 64, "f16")])
def test_tma_writes_the_packed_layout(tmp_path, swizzle, rows, k_elems, dtype):
    """A row-major [rows, K] global tensor loaded by TMA in boxes of [rows, W / dtype_bytes] with
    the tile's swizzle lands in shared memory exactly as KMajorTile.pack places it: the layout
    the wgmma test above feeds the instruction."""
    import struct

    from tmalang.runtime import driver

    tile = w.KMajorTile(rows, k_elems, dtype, swizzle)
    _, function = _load(_tma_probe_ptx(tile), tmp_path, "tma_probe")
    unsigned = np.uint16 if tile.dtype_bytes == 2 else np.uint8
    matrix = np.random.default_rng(rows + k_elems).integers(0, 1 << (8 * tile.dtype_bytes), (rows, k_elems)).astype(unsigned)
    cu = driver.api()
    ptr = driver.alloc(matrix.nbytes)
    try:
        driver.call("cuMemcpyHtoD", ptr, matrix.ctypes.data, matrix.nbytes)
        tensor_map = driver.call(
            "cuTensorMapEncodeTiled",
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16 if tile.dtype_bytes == 2
            else cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
            2, ptr,
            [cu.cuuint64_t(k_elems), cu.cuuint64_t(rows)],     # innermost first
            [cu.cuuint64_t(tile.k_bytes)],                      # row pitch in bytes
            [cu.cuuint32_t(tile.box_k_elems), cu.cuuint32_t(rows)],
            [cu.cuuint32_t(1), cu.cuuint32_t(1)],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + ("NONE" if swizzle == "none" else swizzle)),
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        blob = struct.pack("<16Q", *(int(word) for word in tensor_map.opaque))
        got = _launch(function, tile.nbytes + 8 + 2048, [blob], tile.nbytes)
    finally:
        driver.free(ptr)
    np.testing.assert_array_equal(got, tile.pack(matrix))


# ---------------------------------------------------------------------------------------------
# MN-major B (imm-trans-b = 1): ISA 9.7.15.5.1.2.1.3 canonical layout, MN-major 128B swizzle,
# ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)) in elements with T = 128 bits / 16 bits = 8:
# 64 contiguous N elements (one 128-byte swizzle row), K rows 8T = 64 elements = 128 bytes
# apart, the next 8 K rows SBO bytes on, the next 64 N elements LBO bytes on.
# ---------------------------------------------------------------------------------------------


def test_descriptor_128B_mnmajor_bf16():
    # V tile [K = 64, N = 64] bf16 at 0x6000: SBO = 8 K rows x 128 B, LBO = one [64, 64] box
    t = w.MNMajorTile(k_rows=64, n_elems=64, dtype="bf16")
    expected = (
        (0x6000 >> 4) << 0       # start address
        | (8192 >> 4) << 16      # LBO: the next 64-element N column = 64 K rows x 128 B
        | (1024 >> 4) << 32      # SBO: the next 8 K rows
        | 0 << 49                # base offset: 1024-aligned, slices move in whole 2048 B
        | MODE_128B << 62
    )
    assert (t.lbo, t.sbo, t.alignment, t.k_steps, t.nbytes) == (8192, 1024, 1024, 4, 8192)
    assert t.descriptor(0x6000) == expected == 0x4000004002000600
    d = w.decode_descriptor(t.descriptor(0x6000, t.k_step_offset(3)))
    assert (d.address, d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle) == \
        (0x6000 + 3 * 2048, 8192, 1024, 0, "128B")


def test_mnmajor_k_slices_are_16_rows():
    # one k16 instruction reads K rows 16k .. 16k + 15: two 8-row atoms, 2048 bytes per slice
    t = w.MNMajorTile(k_rows=128, n_elems=64, dtype="f16")
    assert [t.k_step_offset(k) for k in range(8)] == [2048 * k for k in range(8)]
    assert all(t.k_step_offset(k) % t.alignment == 0 for k in range(8))   # base offset stays 0
    with pytest.raises(ValueError):
        t.k_step_offset(8)


def test_mnmajor_element_placement():
    t = w.MNMajorTile(k_rows=16, n_elems=128, dtype="bf16")   # two [16, 64] boxes along N
    assert t.column_bytes == 2048 and t.lbo == 2048
    assert t.byte_offset(0, 0) == 0 and t.byte_offset(0, 1) == 2      # N is innermost
    assert t.byte_offset(1, 0) == 128 ^ (1 << 4)                      # row 1: chunk 0 -> 1
    assert t.byte_offset(7, 8) == (7 * 128 + 16) ^ (7 << 4)           # Swizzle<3,4,3>
    assert t.byte_offset(8, 0) == 1024                                # the next atom: SBO
    assert t.byte_offset(0, 64) == 2048                               # the next N column: LBO
    image = t.pack(np.arange(16 * 128, dtype=np.uint16).reshape(16, 128))
    assert sorted(image.view(np.uint16)) == list(range(16 * 128))     # a permutation


@pytest.mark.parametrize("kwargs", [
    dict(k_rows=64, n_elems=64, dtype="f8e4m3"),       # no imm-trans for FP8
    dict(k_rows=64, n_elems=64, dtype="tf32"),
    dict(k_rows=64, n_elems=32, dtype="bf16"),         # rows not one 128 B span
    dict(k_rows=64, n_elems=32, dtype="bf16", swizzle="64B"),   # only 128B is encoded
    dict(k_rows=24, n_elems=64, dtype="bf16"),         # K not whole k16 slices
])
def test_mnmajor_rejects(kwargs):
    with pytest.raises(ValueError):
        w.MNMajorTile(**kwargs)


def test_inline_asm_trans_b_ss_form():
    template, _ = w.inline_asm(64, 64, 16, "f16", "f16", "f32", trans_b=True)
    assert "m64n64k16.f32.f16.f16" in template and "$32, $33, p, 1, 1, 0, 1;" in template
    with pytest.raises(ValueError, match="no transpose"):
        w.inline_asm(64, 64, 32, "f8e4m3", "f8e4m3", "f32", trans_b=True)
