"""The sm_90 wgmma shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor
Format"): its bit fields, the swizzle modes and their spellings, `smem_descriptor` and its
compile-time part `descriptor_base`, `with_address` and `advance` (the start-address field the
backend fills in and steps on), and `decode_descriptor`. Plain integers; which LBO and SBO an
operand tile needs is the tiles' business (targets/wgmma/tiles.py)."""

from __future__ import annotations

import numbers
from typing import NamedTuple

# ---------------------------------------------------------------------------------------------
# Shared-memory matrix descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format")
#
#   bits 13-0   matrix-descriptor-encode(matrix start address)
#   bits 29-16  matrix-descriptor-encode(leading dimension byte offset, LBO)
#   bits 45-32  matrix-descriptor-encode(stride dimension byte offset, SBO)
#   bits 51-49  matrix base offset ("valid for all swizzling modes except the no-swizzle mode")
#   bits 63-62  swizzling mode: 0 = no swizzle, 1 = 128-Byte, 2 = 64-Byte, 3 = 32-Byte swizzle
#   where matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4
#
# Bits 14-15, 30-31, 46-48 and 52-61 are not fields of the sm_90 descriptor and are left 0.
# (The sm_100 tcgen05 descriptor is a different table: 3-bit swizzle field at 61-63 with other
# codes, and a fixed 0b001 at 46-48. Nothing here applies to it.)
# ---------------------------------------------------------------------------------------------

ADDRESS_SHIFT = 0
LBO_SHIFT = 16
SBO_SHIFT = 32
BASE_OFFSET_SHIFT = 49
SWIZZLE_SHIFT = 62

FIELD_MASK = 0x3FFF  # the three encoded byte fields are 14 bits wide
ENCODE_MASK = 0x3FFFF  # matrix-descriptor-encode keeps 18 address bits, then drops the low 4

SWIZZLE_MODE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
"""Descriptor bits 63-62 for each swizzle (ISA 9.7.15.5.1.2.2)."""

SWIZZLE_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
"""Width of one swizzle atom's row in bytes: Table 38 gives K-major atoms of 8x1, 8x2, 8x4 and
8x8 128-bit elements for none / 32B / 64B / 128B, i.e. rows of 16, 32, 64 and 128 bytes."""

_SWIZZLE_ALIASES = {"none": "none", "interleave": "none", "0": "none",
                    "32b": "32B", "64b": "64B", "128b": "128B"}


def swizzle_name(swizzle: str) -> str:
    """The canonical name ("none", "32B", "64B", "128B") of a swizzle spelling; ValueError else."""
    key = str(swizzle).strip().lower()
    for prefix in ("swizzle_", "swizzle"):
        key = key.removeprefix(prefix)
    if key not in _SWIZZLE_ALIASES:
        raise ValueError(f"unknown swizzle {swizzle!r}: expected one of 'none', '32B', '64B', '128B'")
    return _SWIZZLE_ALIASES[key]


def encode(x: int) -> int:
    """matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (ISA 9.7.15.5.1.2.2)."""
    return (x & ENCODE_MASK) >> 4


def _check_bytes(name: str, value: int) -> None:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer number of bytes, got {value!r}")  # noqa: TRY004 (one error type)
    if not 0 <= value <= ENCODE_MASK:
        raise ValueError(f"{name} = {value} is outside the descriptor's 18-bit byte range [0, {ENCODE_MASK}]")
    if value % 16:
        # the field holds value >> 4: a value that is not 16-byte aligned cannot be represented
        # (and ISA 9.7.15.5.1 requires shared-memory matrices to start 16-byte aligned)
        raise ValueError(f"{name} = {value} is not a multiple of 16 bytes")


def smem_descriptor(address: int, leading_byte_offset: int, stride_byte_offset: int, swizzle: str,
                    base_offset: int = 0) -> int:
    """The 64-bit sm_90 wgmma shared-memory matrix descriptor (ISA 9.7.15.5.1.2.2).

    `address` is the matrix's start address in the shared state space (a 32-bit shared address,
    not a generic pointer); `leading_byte_offset` and `stride_byte_offset` are in bytes (LBO and
    SBO, see `KMajorTile` for what they mean); all three must be multiples of 16 below 2**18.
    `base_offset` (bits 49-51) is 0 whenever the operand's swizzle pattern starts on its repeat
    boundary (1024 / 512 / 256 bytes for 128B / 64B / 32B), which `KMajorTile.alignment` gives.
    """
    mode = SWIZZLE_MODE[swizzle_name(swizzle)]
    _check_bytes("address", address)
    _check_bytes("leading_byte_offset", leading_byte_offset)
    _check_bytes("stride_byte_offset", stride_byte_offset)
    if not isinstance(base_offset, numbers.Integral) or not 0 <= base_offset <= 7:
        raise ValueError(f"base_offset must be in 0..7 (a 3-bit field), got {base_offset!r}")
    return int(
        (encode(address) << ADDRESS_SHIFT)
        | (encode(leading_byte_offset) << LBO_SHIFT)
        | (encode(stride_byte_offset) << SBO_SHIFT)
        | (int(base_offset) << BASE_OFFSET_SHIFT)
        | (mode << SWIZZLE_SHIFT)
    )


def descriptor_base(lbo: int, sbo: int, swizzle: str, base_offset: int = 0) -> int:
    """The descriptor with start address 0: the compile-time constant part.

    The backend adds the runtime shared address as

        desc = descriptor_base(...) | ((addr & 0x3FFFF) >> 4)

    (the address field, bits 0-13, is zero in the base, so `|` and `+` agree); in LLVM IR that is
    `or i64 BASE, zext(lshr(and(addr, 0x3FFFF), 4))`. `with_address` does the same on integers.
    """
    return smem_descriptor(0, lbo, sbo, swizzle, base_offset)


def with_address(base: int, address: int) -> int:
    """`base | encode(address)`: the full descriptor of a matrix starting at shared `address`."""
    if base & FIELD_MASK:
        raise ValueError(f"descriptor base {base:#x} already has a start address")
    _check_bytes("address", address)
    return base | encode(address)


def advance(descriptor: int, byte_offset: int) -> int:
    """The descriptor of the same matrix moved `byte_offset` bytes on in shared memory.

    Only the 14-bit start-address field changes: the descriptor grows by `byte_offset >> 4`.
    This is how the next K slice (`KMajorTile.k_step_offset`) or the next 64-row block
    (`KMajorTile.row_block_offset`) is selected; in the backend it is one 64-bit add of a
    constant. Raises if the address field would leave 0..0x3FFF (a carry into bits 14-15).
    """
    if byte_offset % 16:
        raise ValueError(f"byte_offset {byte_offset} is not a multiple of 16")
    field = (descriptor & FIELD_MASK) + (byte_offset >> 4)
    if not 0 <= field <= FIELD_MASK:
        raise ValueError(f"advancing by {byte_offset} bytes moves the start address out of the 14-bit field")
    return descriptor + (byte_offset >> 4)


class DescriptorFields(NamedTuple):
    address: int              # bytes: the encoded field << 4
    leading_byte_offset: int  # bytes
    stride_byte_offset: int   # bytes
    base_offset: int
    swizzle: str


def decode_descriptor(descriptor: int) -> DescriptorFields:
    """The fields of a descriptor (byte values are the encoded fields << 4); ValueError if any
    bit outside the five fields of ISA 9.7.15.5.1.2.2 is set."""
    if not 0 <= descriptor < 1 << 64:
        raise ValueError(f"{descriptor!r} is not a 64-bit value")
    fields = ((FIELD_MASK << ADDRESS_SHIFT) | (FIELD_MASK << LBO_SHIFT) | (FIELD_MASK << SBO_SHIFT)
              | (0x7 << BASE_OFFSET_SHIFT) | (0x3 << SWIZZLE_SHIFT))
    if descriptor & ~fields:
        raise ValueError(f"descriptor {descriptor:#018x} sets bits outside its fields: {descriptor & ~fields:#x}")
    mode = descriptor >> SWIZZLE_SHIFT
    return DescriptorFields(
        address=((descriptor >> ADDRESS_SHIFT) & FIELD_MASK) << 4,
        leading_byte_offset=((descriptor >> LBO_SHIFT) & FIELD_MASK) << 4,
        stride_byte_offset=((descriptor >> SBO_SHIFT) & FIELD_MASK) << 4,
        base_offset=(descriptor >> BASE_OFFSET_SHIFT) & 0x7,
        swizzle={v: k for k, v in SWIZZLE_MODE.items()}[mode],
    )
