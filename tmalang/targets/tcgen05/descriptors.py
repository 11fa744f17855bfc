"""The tcgen05.mma instruction descriptor and the sm_100 shared-memory matrix descriptor.

Sources (PTX ISA 9.0 numbering, chapter 9.7.16 "Tensorcore 5th Generation Family Instructions"):

* 9.7.16.4.2, Table 42 "Instruction descriptor format for .kind::f16, .kind::tf32, .kind::f8f6f4";
* 9.7.16.4.1, Table 40 "Shared memory descriptor layout";
* 9.7.16.2.1, Table 39 "Various combinations of .kind and shapes" (valid M, N, K).

Instruction descriptor (32 bits):

    bits 0-1   sparsity selector (0: dense)        bit 2   sparsity flag (0: dense)
    bit  3     saturate (i8 only: 0)                bits 4-5 D type: f16 = 0, f32 = 1
    bits 7-9   A type    bits 10-12 B type          (f16: f16 = 0, bf16 = 1; tf32: 2;
                                                     f8f6f4: e4m3 = 0, e5m2 = 1)
    bit  13/14 negate A / B                         bit 15/16 transpose A / B (0: K-major)
    bits 17-22 N >> 3                               bits 24-28 M >> 4
    bits 30-31 max shift (.ws only: 0)              bits 6, 23, 29: reserved, 0

Shared-memory descriptor (64 bits):

    bits 0-13  start address >> 4                   bits 16-29 leading byte offset >> 4
    bits 32-45 stride byte offset >> 4              bits 46-48 fixed 0b001
    bits 49-51 base offset                          bit  52    LBO mode (0: relative)
    bits 61-63 layout: none = 0, 128B with 32B atoms = 1, 128B = 2, 64B = 4, 32B = 6

Compared with Hopper's wgmma descriptor, the swizzle field is 3 bits wide with other codes, and
bit 46 is set. The shared-memory layout of a K-major tile is the same one TMA writes for Hopper,
so `wgmma.KMajorTile` gives SBO and the K-slice offsets here too.
"""

from __future__ import annotations

from typing import NamedTuple

# -- instruction descriptor -------------------------------------------------------------------

KINDS = {   # kind -> (operand dtype -> type code, K elements per instruction, allowed D types)
    "f16": ({"f16": 0, "bf16": 1}, 16, ("f16", "f32")),
    "tf32": ({"tf32": 2}, 8, ("f32",)),
    "f8f6f4": ({"f8e4m3": 0, "f8e5m2": 1}, 32, ("f16", "f32")),
}
D_TYPE = {"f16": 0, "f32": 1}
CTA_GROUP_M = {1: (64, 128), 2: (128, 256)}   # cta_group -> allowed M
CTA_GROUP_N_STEP = {1: 8, 2: 16}              # N in step..256, a multiple of step

_FIELDS = {   # name -> (first bit, width)
    "sparse_selector": (0, 2), "sparse": (2, 1), "saturate": (3, 1), "d_type": (4, 2),
    "a_type": (7, 3), "b_type": (10, 3), "negate_a": (13, 1), "negate_b": (14, 1),
    "transpose_a": (15, 1), "transpose_b": (16, 1), "n_shr3": (17, 6), "m_shr4": (24, 5),
    "max_shift": (30, 2),
}


def kind_of(dtype: str) -> str:
    """The .kind that multiplies operands of `dtype`."""
    for kind, (types, _, _) in KINDS.items():
        if dtype in types:
            return kind
    raise ValueError(f"tcgen05.mma has no kind for operands of type {dtype}")


def instruction_k(dtype: str) -> int:
    return KINDS[kind_of(dtype)][1]


def check_shape(kind: str, cta_group: int, m: int, n: int) -> None:
    """Raise ValueError naming the rule when (M, N) is not a dense shape of `kind` (Table 39)."""
    if kind not in KINDS:
        raise ValueError(f"unknown tcgen05.mma kind {kind!r} (known: {', '.join(KINDS)})")
    if cta_group not in CTA_GROUP_M:
        raise ValueError(f"cta_group must be 1 or 2, got {cta_group}")
    if m not in CTA_GROUP_M[cta_group]:
        raise ValueError(f"M = {m} is not allowed with cta_group::{cta_group} "
                         f"(allowed: {' or '.join(map(str, CTA_GROUP_M[cta_group]))})")
    step = CTA_GROUP_N_STEP[cta_group]
    if not step <= n <= 256 or n % step:
        raise ValueError(f"N = {n} is not allowed with cta_group::{cta_group} (a multiple of {step} in {step}..256)")


def instruction_descriptor(a_dtype: str, b_dtype: str, d_dtype: str, m: int, n: int, cta_group: int = 1, *,
                           transpose_a: bool = False, transpose_b: bool = False,
                           negate_a: bool = False, negate_b: bool = False) -> int:
    """The 32-bit idesc of a dense tcgen05.mma (Table 42), after checking kind, types and shape."""
    kind = kind_of(a_dtype)
    types, _, d_types = KINDS[kind]
    if b_dtype not in types:
        raise ValueError(f"A is {a_dtype} (kind::{kind}) but B is {b_dtype}")
    if d_dtype not in d_types or (kind == "f16" and d_dtype == "f16" and "bf16" in (a_dtype, b_dtype)):
        raise ValueError(f"kind::{kind} with {a_dtype} x {b_dtype} cannot accumulate into {d_dtype}")
    check_shape(kind, cta_group, m, n)
    values = {"d_type": D_TYPE[d_dtype], "a_type": types[a_dtype], "b_type": types[b_dtype],
              "negate_a": int(negate_a), "negate_b": int(negate_b),
              "transpose_a": int(transpose_a), "transpose_b": int(transpose_b),
              "n_shr3": n >> 3, "m_shr4": m >> 4}
    return sum(value << _FIELDS[name][0] for name, value in values.items())


def decode_instruction_descriptor(idesc: int) -> dict[str, int]:
    """Every named field of an idesc (N and M already shifted back), for tests and --explain."""
    fields = {name: (idesc >> first) & ((1 << width) - 1) for name, (first, width) in _FIELDS.items()}
    fields["n"], fields["m"] = fields.pop("n_shr3") << 3, fields.pop("m_shr4") << 4
    return fields


RESERVED_IDESC_BITS = (6, 23, 29)

# -- shared-memory matrix descriptor ----------------------------------------------------------

LAYOUT_TYPE = {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}
VERSION = 0b001   # bits 46-48
_ENCODE_MASK = 0x3FFFF


def _encode(name: str, value: int) -> int:
    if value < 0 or value % 16 or value > _ENCODE_MASK:
        raise ValueError(f"{name} = {value} must be a multiple of 16 in 0..{_ENCODE_MASK - 15}")
    return (value & _ENCODE_MASK) >> 4


def smem_descriptor(address: int, swizzle: str, stride_byte_offset: int, leading_byte_offset: int | None = None,
                    base_offset: int = 0) -> int:
    """The 64-bit descriptor of Table 40. For K-major swizzled tiles LBO is unused ("assumed 1"):
    left out, it is 16, encoded as 1, as CUTLASS does. An unswizzled tile has no default: its LBO
    is the byte distance between core matrices adjacent in K (see `kmajor_descriptor`)."""
    if swizzle not in LAYOUT_TYPE:
        raise ValueError(f"unknown layout {swizzle!r} (known: {', '.join(LAYOUT_TYPE)})")
    if leading_byte_offset is None:
        if swizzle == "none":
            raise ValueError("an unswizzled (SWIZZLE_NONE) operand needs its LBO: the byte distance between "
                             "core matrices adjacent in K")
        leading_byte_offset = 16
    if not 0 <= base_offset < 8:
        raise ValueError(f"base offset {base_offset} does not fit 3 bits")
    return (_encode("address", address) | _encode("LBO", leading_byte_offset) << 16
            | _encode("SBO", stride_byte_offset) << 32 | VERSION << 46 | base_offset << 49
            | LAYOUT_TYPE[swizzle] << 61)


def kmajor_descriptor(tile, address: int = 0) -> int:
    """The descriptor of a K-major operand tile (`wgmma.KMajorTile`: the layout TMA writes) at
    shared `address`, per the PTX ISA's canonical K-major layouts for tcgen05 (the matrix
    descriptor section, beside Table 40): SBO is the byte distance between core matrices adjacent in M/N, 8 rows of one swizzle
    span; LBO, for SWIZZLE_NONE, between core matrices adjacent in K, i.e. one 16-byte column of
    `rows` x 16 bytes; swizzled layouts ignore it ("assumed 1")."""
    lbo = tile.lbo if tile.swizzle == "none" else None
    return smem_descriptor(address, tile.swizzle, tile.sbo, lbo)


class SmemDescriptorFields(NamedTuple):
    address: int
    leading_byte_offset: int
    stride_byte_offset: int
    version: int
    base_offset: int
    lbo_mode: int
    swizzle: str


def decode_smem_descriptor(desc: int) -> SmemDescriptorFields:
    layout = (desc >> 61) & 7
    names = {code: name for name, code in LAYOUT_TYPE.items()}
    if layout not in names:
        raise ValueError(f"layout type {layout} is not defined")
    return SmemDescriptorFields((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
                                (desc >> 46) & 7, (desc >> 49) & 7, (desc >> 52) & 1, names[layout])


RESERVED_SMEM_DESC_BITS = (14, 15, 30, 31, *range(53, 61))
