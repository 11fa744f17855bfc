"""tcgen05 encodings, bit by bit against the PTX ISA tables, and every instruction form through
ptxas -arch=sm_100a (no Blackwell GPU is available, so these are the checks we can make).

The expected values below are written from the tables themselves (PTX ISA 9.0, 9.7.16.4.1
Table 40, 9.7.16.4.2 Table 42, 9.7.16.2.1 Table 39), field by field with explicit bit positions,
independently of the encoder's own field table.
"""

from __future__ import annotations

import itertools
import re

import pytest

from tmalang.backend import ptxas
from tmalang.targets import wgmma
from tmalang.targets.tcgen05 import descriptors as d
from tmalang.targets.tcgen05 import instructions as ins
from tmalang.targets.tcgen05 import tmem

# Table 42, type codes per kind
A_B_CODES = {"f16": 0, "bf16": 1, "f8e4m3": 0, "f8e5m2": 1}
KIND_TYPES = {"f16": ["f16", "bf16"], "f8f6f4": ["f8e4m3", "f8e5m2"]}
# Table 39, dense shapes
SHAPES = [(1, m, n) for m in (64, 128) for n in (8, 16, 64, 120, 248, 256)] + \
         [(2, m, n) for m in (128, 256) for n in (16, 32, 112, 240, 256)]


def bits(value: int, first: int, width: int) -> int:
    return (value >> first) & ((1 << width) - 1)


CASES = [(kind, a, b, dt, g, m, n) for kind, types in KIND_TYPES.items() for a, b in itertools.product(types, types)
         for dt in ("f32", "f16") for g, m, n in SHAPES
         if not (dt == "f16" and "bf16" in (a, b))]


@pytest.mark.parametrize("kind,a,b,d_type,group,m,n", CASES)
def test_instruction_descriptor_fields(kind, a, b, d_type, group, m, n):
    idesc = d.instruction_descriptor(a, b, d_type, m, n, group)
    assert bits(idesc, 0, 2) == 0 and bits(idesc, 2, 1) == 0      # dense
    assert bits(idesc, 3, 1) == 0                                  # no saturate
    assert bits(idesc, 4, 2) == {"f16": 0, "f32": 1}[d_type]
    assert bits(idesc, 7, 3) == A_B_CODES[a] and bits(idesc, 10, 3) == A_B_CODES[b]
    assert bits(idesc, 13, 1) == bits(idesc, 14, 1) == 0           # no negation
    assert bits(idesc, 15, 1) == bits(idesc, 16, 1) == 0           # both K-major
    assert bits(idesc, 17, 6) == n >> 3 and bits(idesc, 24, 5) == m >> 4
    assert bits(idesc, 30, 2) == 0                                 # max shift: .ws only
    for reserved in d.RESERVED_IDESC_BITS:
        assert bits(idesc, reserved, 1) == 0
    assert idesc < 1 << 32
    decoded = d.decode_instruction_descriptor(idesc)
    assert (decoded["m"], decoded["n"]) == (m, n)


def test_instruction_descriptor_tf32_and_flags():
    idesc = d.instruction_descriptor("tf32", "tf32", "f32", 128, 128)
    assert bits(idesc, 7, 3) == bits(idesc, 10, 3) == 2 and bits(idesc, 4, 2) == 1
    flagged = d.instruction_descriptor("bf16", "bf16", "f32", 128, 64, transpose_a=True, transpose_b=True,
                                       negate_a=True, negate_b=True)
    assert [bits(flagged, i, 1) for i in (13, 14, 15, 16)] == [1, 1, 1, 1]


def test_instruction_descriptor_known_values():
    """Hand-assembled words: bf16 128x256 = d_type 1 <<4 | 1 <<7 | 1 <<10 | 32 <<17 | 8 <<24."""
    assert d.instruction_descriptor("bf16", "bf16", "f32", 128, 256) == (1 << 4 | 1 << 7 | 1 << 10 | 32 << 17 | 8 << 24)
    assert d.instruction_descriptor("f8e5m2", "f8e4m3", "f16", 64, 8) == (1 << 7 | 1 << 17 | 4 << 24)


@pytest.mark.parametrize("args,message", [
    (("bf16", "bf16", "f32", 256, 128, 1), "M = 256"),
    (("bf16", "bf16", "f32", 64, 128, 2), "M = 64"),
    (("bf16", "bf16", "f32", 128, 4, 1), "N = 4"),
    (("bf16", "bf16", "f32", 128, 264, 1), "N = 264"),
    (("bf16", "bf16", "f32", 128, 24, 2), "N = 24"),
    (("bf16", "bf16", "f16", 128, 128, 1), "cannot accumulate"),
    (("tf32", "tf32", "f16", 128, 128, 1), "cannot accumulate"),
    (("bf16", "f8e4m3", "f32", 128, 128, 1), "B is f8e4m3"),
    (("f32", "f32", "f32", 128, 128, 1), "no kind"),
])
def test_instruction_descriptor_rejects(args, message):
    with pytest.raises(ValueError, match=message):
        d.instruction_descriptor(*args)


@pytest.mark.parametrize("swizzle,code", [("none", 0), ("128B_base32B", 1), ("128B", 2), ("64B", 4), ("32B", 6)])
@pytest.mark.parametrize("address", [0, 0x400, 0x1F3F0, 0x3FFF0])
def test_smem_descriptor_fields(swizzle, code, address):
    sbo = {"none": 128, "32B": 256, "64B": 512}.get(swizzle, 1024)
    lbo = 16   # swizzled: unused, "assumed 1"; given explicitly for "none" (which has no default)
    desc = d.smem_descriptor(address, swizzle, sbo, lbo if swizzle == "none" else None)
    assert bits(desc, 0, 14) == address >> 4
    assert bits(desc, 16, 14) == 1
    assert bits(desc, 32, 14) == sbo >> 4
    assert bits(desc, 46, 3) == 0b001              # the fixed sm_100 constant: bit 46 set
    assert bits(desc, 49, 3) == 0 and bits(desc, 52, 1) == 0
    assert bits(desc, 61, 3) == code
    for reserved in d.RESERVED_SMEM_DESC_BITS:
        assert bits(desc, reserved, 1) == 0
    assert d.decode_smem_descriptor(desc) == (address, 16, sbo, 1, 0, 0, swizzle)


def test_smem_descriptor_known_value():
    assert d.smem_descriptor(0x400, "128B", 1024) == (0x40 | 1 << 16 | 64 << 32 | 1 << 46 | 2 << 61)


@pytest.mark.parametrize("swizzle", ["128B", "64B", "32B"])
def test_sbo_of_a_tma_tile_matches_the_hopper_layout(swizzle):
    """A K-major tile TMA writes has the same layout on sm_100: 8 rows of one swizzle span."""
    span = int(swizzle[:-1])
    tile = wgmma.KMajorTile(128, span // 2, "bf16", swizzle)
    desc = d.smem_descriptor(0, swizzle, tile.sbo)
    assert d.decode_smem_descriptor(desc).stride_byte_offset == 8 * span


@pytest.mark.parametrize("kwargs,message", [({"address": 8}, "multiple of 16"), ({"swizzle": "16B"}, "unknown layout"),
                                            ({"base_offset": 8}, "3 bits"), ({"stride_byte_offset": 1 << 18}, "SBO")])
def test_smem_descriptor_rejects(kwargs, message):
    args = {"address": 0, "swizzle": "128B", "stride_byte_offset": 1024, **kwargs}
    with pytest.raises(ValueError, match=message):
        d.smem_descriptor(**args)


def test_tmem_addresses_and_allocation():
    assert tmem.address(5, 300) == 5 << 16 | 300 and tmem.split_address(tmem.address(127, 511)) == (127, 511)
    assert [tmem.allocation_columns(c) for c in (1, 32, 33, 256, 257, 512)] == [32, 32, 64, 256, 512, 512]
    with pytest.raises(ValueError, match="512 columns"):
        tmem.allocation_columns(513)
    assert [tmem.accumulator_lane(r, 64) for r in (0, 15, 16, 63)] == [0, 15, 32, 111]
    assert tmem.accumulator_lane(17, 64, 16) == 49 and tmem.accumulator_lane(100, 128) == 100
    assert list(tmem.warp_lanes(6)) == list(range(64, 96))


@pytest.mark.parametrize("shape,num,count", [("32x32b", 1, 1), ("32x32b", 128, 128), ("16x64b", 64, 64),
                                             ("16x128b", 64, 128), ("16x256b", 32, 128), ("16x32bx2", 8, 8)])
def test_ld_register_counts(shape, num, count):
    assert tmem.ld_registers(shape, num) == count


@pytest.mark.parametrize("shape,num", [("16x128b", 128), ("16x256b", 64), ("32x32b", 3), ("8x32b", 1)])
def test_ld_rejects(shape, num):
    with pytest.raises(ValueError):
        tmem.ld_registers(shape, num)


def _kernel(group: int) -> str:
    """A kernel using every tcgen05 form with one cta_group, for ptxas to judge."""
    regs = {shape: [f"%v{i}" for i in range(tmem.ld_registers(shape, 4))]
            for shape in ("32x32b", "16x64b", "16x128b", "16x256b", "16x32bx2")}
    body = [ins.alloc("%sa", 512, group), ins.relinquish_alloc_permit(group), "ld.shared.b32 %t, [%sa];"]
    for dtype in ("bf16", "f16", "f8e4m3", "f8e5m2"):
        m = 128 if group == 1 else 256
        body += [f"mov.b32 %id, {d.instruction_descriptor(dtype, dtype, 'f32', m, 256, group)};",
                 ins.mma("%t", "%da", "%db", "%id", "%en", dtype, group),
                 ins.mma("%t", "%t", "%db", "%id", "%en", dtype, group, a_from_tmem=True)]
    body += [ins.commit("%mb", group), ins.commit("%mb", group, "%mask")]
    for shape, registers in regs.items():
        split = 16 if shape in ins.HALF_SPLIT_SHAPES else None
        body += [ins.ld(registers, "%t", shape, 4, split), ins.WAIT_LD, ins.st("%t", registers, shape, 4, split),
                 ins.WAIT_ST]
    body += [ins.cp("%t", "%da", "128x256b", cta_group=group), ins.cp("%t", "%da", "64x128b", "warpx2::02_13", group),
             ins.cp("%t", "%da", "32x128b", "warpx4", group),
             ins.FENCE_BEFORE_THREAD_SYNC, "bar.sync 0;", ins.FENCE_AFTER_THREAD_SYNC, ins.dealloc("%t", 512, group)]
    return "\n".join([
        f".version {ins.PTX_VERSION[0]}.{ins.PTX_VERSION[1]}", ".target sm_100a", ".address_size 64",
        ".visible .entry k(.param .u64 p)", "{",
        "  .reg .b32 %sa, %t, %id, %en, %mb, %v<16>;", "  .reg .b16 %mask;", "  .reg .b64 %da, %db;",
        "  .shared .align 16 .b8 slot[16];", "  mov.u32 %sa, slot;", "  mov.u32 %mb, slot;",
        "  mov.b32 %en, 1;", "  mov.b16 %mask, 3;",
        f"  mov.b64 %da, {d.smem_descriptor(0, '128B', 1024)};", f"  mov.b64 %db, {d.smem_descriptor(0, '128B', 1024)};",
        *("  " + line for line in "\n".join(body).splitlines()), "  ret;", "}", ""])


@pytest.mark.parametrize("group", [1, 2])
def test_ptxas_accepts_every_form_for_sm100a(group):
    cubin, _ = ptxas.assemble(_kernel(group), "sm_100a")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("call,message", [
    (lambda: ins.alloc("%r", 48), "power of two"), (lambda: ins.alloc("%r", 1024), "power of two"),
    (lambda: ins.ld(["%r"], "%t", "32x32b", 2), "2 registers"),
    (lambda: ins.cp("%t", "%d", "64x128b"), "warpx2"), (lambda: ins.cp("%t", "%d", "128x256b", "warpx4"), "no multicast"),
    (lambda: ins.mma_k_steps(40, "bf16"), "multiple of the 16"), (lambda: ins.commit("%m", 3), "cta_group"),
    (lambda: ins.ld(["%r"], "%t", "16x32bx2"), "half-split"), (lambda: ins.st("%t", ["%r"], "16x32bx2", 1, 512), "half-split"),
    (lambda: ins.ld(["%r"], "%t", "32x32b", 1, 16), "no half-split")])
def test_instruction_builders_reject_misuse(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_16x32bx2_carries_its_half_split_offset():
    """`.16x32bx2` is two `.16x32b` accesses, the second `immHalfSplitoff` columns on: the
    immediate follows [taddr] in both ld and st (ptxas rejects the shape without it)."""
    assert ins.ld(["%r0", "%r1"], "%t", "16x32bx2", 2, 64) == \
        "tcgen05.ld.sync.aligned.16x32bx2.x2.b32 {%r0, %r1}, [%t], 64;"
    assert ins.st("%t", ["%r0"], "16x32bx2", 1, 0) == "tcgen05.st.sync.aligned.16x32bx2.x1.b32 [%t], 0, {%r0};"
    assert ins.ld(["%r0"], "%t") == "tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r0}, [%t];"


@pytest.mark.parametrize("rows,k_elems,dtype", [(128, 64, "bf16"), (64, 32, "f16"), (256, 128, "f8e4m3"),
                                                (128, 16, "tf32")])
def test_unswizzled_kmajor_descriptor_strides_are_the_core_matrix_distances(rows, k_elems, dtype):
    """SWIZZLE_NONE, K-major: the tile is 16-byte columns of `rows` x 16 bytes (what TMA writes
    with [rows, 16 B] boxes); a core matrix is 8 rows x 16 bytes = 128 contiguous bytes. LBO is
    the distance between core matrices adjacent in K (one column: rows x 16 bytes), SBO between
    those adjacent in M/N (8 rows x 16 bytes = 128). It used to get LBO 16 (encoded 1)."""
    tile = wgmma.KMajorTile(rows, k_elems, dtype, "none")
    desc = d.kmajor_descriptor(tile, 0x2400)
    assert bits(desc, 0, 14) == 0x2400 >> 4
    assert bits(desc, 16, 14) == rows * 16 >> 4                    # LBO: next core matrix along K
    assert bits(desc, 32, 14) == 128 >> 4                          # SBO: next 8 rows
    assert bits(desc, 46, 3) == 0b001 and bits(desc, 49, 3) == 0 and bits(desc, 52, 1) == 0
    assert bits(desc, 61, 3) == 0                                  # no swizzle
    for reserved in d.RESERVED_SMEM_DESC_BITS:
        assert bits(desc, reserved, 1) == 0
    # the placement model agrees: element (0, k) of the second 16-byte column is LBO bytes on,
    # element (8, 0) SBO bytes on
    per_column = 16 // wgmma.dtype_bytes("tf32" if dtype == "tf32" else dtype)
    assert tile.byte_offset(0, per_column) == rows * 16 and tile.byte_offset(8, 0) == 128


@pytest.mark.parametrize("swizzle,span", [("128B", 128), ("64B", 64), ("32B", 32)])
def test_swizzled_kmajor_descriptor_keeps_lbo_assumed_1(swizzle, span):
    tile = wgmma.KMajorTile(128, span // 2, "bf16", swizzle)
    desc = d.kmajor_descriptor(tile)
    assert bits(desc, 16, 14) == 1 and bits(desc, 32, 14) == 8 * span >> 4
    assert bits(desc, 61, 3) == {"128B": 2, "64B": 4, "32B": 6}[swizzle]


def test_unswizzled_descriptor_has_no_default_lbo():
    with pytest.raises(ValueError, match="LBO"):
        d.smem_descriptor(0, "none", 128)


def test_backend_encodes_an_unswizzled_operand_with_its_core_matrix_strides():
    """gemm_sm100's IR with A and B made unswizzled (the language refuses that, E089, but the
    backend is a table from IR): the MMA descriptors' constant part has LBO = 128 rows x 16 B."""
    from conftest import ROOT

    from tmalang.compiler import Options, compile_source, make_llir
    from tmalang.ir import ops

    path = ROOT / "examples" / "gemm_sm100.tma"
    c = compile_source(path.read_text(), str(path), Options(arch="sm_100a"), until="ir")
    boxes = ops.decls(c.ir, ops.BoxDecl)
    boxes["A"].swizzle = boxes["B"].swizzle = "none"
    make_llir(c)
    a = d.kmajor_descriptor(wgmma.KMajorTile(128, 64, "bf16", "none"))
    b = d.kmajor_descriptor(wgmma.KMajorTile(256, 64, "bf16", "none"))
    assert d.decode_smem_descriptor(a).leading_byte_offset == 2048
    bases = {int(v) for v in re.findall(r"or i64 %\"[^\"]+\", (\d+)", c.llvm_ir)}
    assert bases == {a, b}                          # before: LBO 16 (encoded 1) in both
