"""Hopper warpgroup MMA (wgmma): the encoding layer, with no IR or LLVM in it.

Everything the backend (and the interpreter) needs to emit or model `wgmma.mma_async` lives here,
as plain integers and strings:

* `smem_descriptor` / `descriptor_base` / `with_address` / `advance` / `decode_descriptor`: the
  64-bit shared-memory matrix descriptor;
* `KMajorTile`: where every element of a K-major operand tile sits in shared memory (the layout a
  TMA box with the same swizzle writes), the descriptor's LBO/SBO for it, and the byte offsets
  that select one K slice of an instruction or one 64-row block;
* `MNMajorTile`: the same for an MN-major B operand [K, N] (imm-trans-b = 1, 128B swizzle);
* `instruction` / `inline_asm`: the PTX mnemonic with its validity checks, and the full LLVM
  inline-asm template and constraint string of one `wgmma.mma_async`;
* `accumulator_coord` / `accumulator_layout` / `accumulator_owner`: which (row, col) of the
  64xN result each thread's accumulator register holds;
* `FENCE`, `COMMIT_GROUP`, `wait_group(n)`: the ordering instructions.

Sources. Section numbers are those of the PTX ISA for CUDA 13 ("Parallel Thread Execution ISA",
chapter 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"):

* 9.7.15.5.1.2.2 "Matrix Descriptor Format"     -> the descriptor bit fields;
* 9.7.15.5.1.2   "Shared Memory Matrix Layout"  -> Table 38 (swizzle atoms), K-major vs MN-major;
* 9.7.15.5.1.2.1 "Major-ness supported by Strides" (LBO, SBO, canonical layouts);
* 9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16" (Figure 149, accumulator D);
* 9.7.15.5.2     "wgmma.mma_async" (syntax, operand order, valid shapes and types);
* 9.7.15.4       "Async Proxy" (wgmma reads shared memory through the async proxy);
* 9.7.15.7.1 / .2 / .3  wgmma.fence / wgmma.commit_group / wgmma.wait_group.

Every layout fact here is also checked on an H100 by tests/test_wgmma_encoding.py (the GPU test
builds operand tiles with `KMajorTile.pack`, runs real wgmma instructions made from
`inline_asm`, and maps the registers back with `accumulator_layout`).

The compiler uses only the integer parts; the array helpers (pack/unpack, the accumulator
layouts the interpreter and the tests use) import NumPy when called, so compiling a kernel never
loads it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

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


# ---------------------------------------------------------------------------------------------
# Data types
# ---------------------------------------------------------------------------------------------

# tmalang names and PTX names of the wgmma multiplicand types -> (PTX type, bytes per element)
_OPERAND_TYPES = {
    "f16": ("f16", 2), "bf16": ("bf16", 2), "tf32": ("tf32", 4),
    "f8e4m3": ("e4m3", 1), "e4m3": ("e4m3", 1),
    "f8e5m2": ("e5m2", 1), "e5m2": ("e5m2", 1),
}
# accumulator types each multiplicand family allows (ISA 9.7.15.5.2 syntax: .f16 -> .dtype
# {.f16, .f32}; .bf16 -> {.f32}; .tf32 -> {.f32}; FP8 -> {.f16, .f32})
_ACC_TYPES = {"f16": ("f16", "f32"), "bf16": ("f32",), "tf32": ("f32",), "e4m3": ("f16", "f32"), "e5m2": ("f16", "f32")}

INSTRUCTION_K_BYTES = 32
"""Every dense floating-point wgmma consumes 32 bytes of K per row: k16 for f16/bf16, k8 for
tf32, k32 for e4m3/e5m2 (ISA 9.7.15.5.2 shapes)."""


def ptx_type(dtype: str) -> str:
    """The PTX spelling of a multiplicand type ('bf16', 'e4m3', ...); ValueError if unsupported."""
    try:
        return _OPERAND_TYPES[dtype][0]
    except KeyError:
        raise ValueError(f"wgmma has no multiplicand type {dtype!r}: expected one of "
                         f"{', '.join(sorted(_OPERAND_TYPES))}") from None


def dtype_bytes(dtype: str) -> int:
    ptx_type(dtype)
    return _OPERAND_TYPES[dtype][1]


def instruction_k(dtype: str) -> int:
    """K of one wgmma for this multiplicand type: 16 (f16/bf16), 8 (tf32), 32 (e4m3/e5m2)."""
    return INSTRUCTION_K_BYTES // dtype_bytes(dtype)


# ---------------------------------------------------------------------------------------------
# K-major operand tiles in shared memory
# ---------------------------------------------------------------------------------------------


class _Described:
    """What a K-major and an MN-major operand tile share: the stride between 8-row groups of
    swizzle atoms (SBO) and the descriptor built from it and the tile's own LBO."""

    @property
    def sbo(self) -> int:
        return 8 * self.atom_bytes

    def descriptor_base(self) -> int:
        return descriptor_base(self.lbo, self.sbo, self.swizzle)

    def descriptor(self, address: int, byte_offset: int = 0) -> int:
        """The full descriptor of this tile at shared `address`, moved on `byte_offset` bytes."""
        if address % self.alignment:
            raise ValueError(f"{self.swizzle} tile at {address:#x} is not {self.alignment}-byte aligned")
        return advance(with_address(self.descriptor_base(), address), byte_offset)


@dataclass(frozen=True)
class KMajorTile(_Described):
    """A K-major wgmma operand tile: A as [M, K] or B as [N, K], rows contiguous along K.

    This is the "TN" GEMM case (imm-trans-a = imm-trans-b = 0): what TMA writes for a
    row-major global tensor loaded in boxes of [rows, W / dtype_bytes] elements with the
    matching swizzle, where W is the swizzle width (128, 64, 32 bytes; 16 for "none").

    Layout (bytes from a tile base aligned to `alignment`):

    * The K extent (k_bytes = k_elems * dtype_bytes) is cut into `atom_columns` columns of W
      bytes. Column c occupies [c * rows * W, (c + 1) * rows * W): one TMA box each, or one
      panel of a panelled box (language.md §4), whose P copies lay the columns out this way.
    * Inside a column, row r starts at r * W. Its 16-byte chunks are swizzled: the address bits
      4..4+b-1 are XORed with bits 7..7+b-1 (b = 3, 2, 1, 0 for 128B, 64B, 32B, none). That is
      Swizzle<3,4,3> / <2,4,3> / <1,4,3> / <0,4,3> of the ISA's canonical-layout table
      (9.7.15.5.1.2.1.3), applied to shared addresses, which is why the tile base must sit on a
      1024 / 512 / 256-byte boundary for the descriptor's base offset to be 0
      (9.7.15.5.1.2.2 table "Starting address of the repeating pattern").
    * Eight consecutive rows of one column form a swizzle atom (Table 38: K-major atoms are
      8 rows x W bytes). The descriptor sees the tile through:
        - SBO (stride dimension byte offset) = "the offset from the first 8 rows to the next 8
          rows" (9.7.15.5.1.2.1.2) = 8 * W: 1024 / 512 / 256 / 128 bytes.
        - LBO (leading dimension byte offset) = for swizzled K-major layouts "not used, assumed
          to be 1" (9.7.15.5.1.2.1.1; the 32B tf32 example encodes LBO as 1), so we put
          encode(16) = 1 in the field. With no swizzle it is "the offset from the first column
          to the second column of the 8x2 tile" of 16-byte core matrices, i.e. between the two
          16-byte K chunks an instruction reads: one column here, rows * 16 bytes.
    * One instruction reads 32 bytes of K per row (k16 bf16/f16, k32 fp8, k8 tf32). K slice k
      (0 <= k < k_steps) starts `k_step_offset(k)` bytes after the tile base: inside a 64B or
      128B column the start address just moves 32 bytes on (the hardware applies the XOR to
      the final address, so an unswizzled +32 is right), i.e. +2 in the encoded address field;
      when the slice leaves the column it jumps to the next column. The swizzle of a 32B
      column, or a pair of 16-byte columns with no swizzle, holds exactly one K slice.
    * The instruction covers 64 rows of A (m64) or N rows of B; `row_block_offset(i)` is where
      64-row block i starts (8 atoms of SBO bytes each), `row_offset(r)` any 8-aligned row.
    """

    rows: int
    k_elems: int
    dtype: str
    swizzle: str = "128B"

    def __post_init__(self) -> None:
        object.__setattr__(self, "swizzle", swizzle_name(self.swizzle))
        ptx_type(self.dtype)
        if not isinstance(self.rows, int) or self.rows <= 0 or self.rows % 8:
            raise ValueError(f"rows must be a positive multiple of 8 (swizzle atoms are 8 rows), got {self.rows!r}")
        if not isinstance(self.k_elems, int) or self.k_elems <= 0:
            raise ValueError(f"k_elems must be a positive integer, got {self.k_elems!r}")
        if self.k_bytes % INSTRUCTION_K_BYTES:
            raise ValueError(f"K extent of {self.k_elems} {self.dtype} = {self.k_bytes} bytes is not a whole number "
                             f"of {instruction_k(self.dtype)}-element instruction slices ({INSTRUCTION_K_BYTES} bytes)")
        if self.k_bytes % self.atom_bytes:
            raise ValueError(f"K extent of {self.k_bytes} bytes does not fill whole {self.swizzle} swizzle columns "
                             f"of {self.atom_bytes} bytes")

    # -- shape
    @property
    def dtype_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    @property
    def k_bytes(self) -> int:
        return self.k_elems * self.dtype_bytes

    @property
    def atom_bytes(self) -> int:
        """W: bytes of one row of a swizzle atom (= the TMA box's inner extent in bytes)."""
        return SWIZZLE_BYTES[self.swizzle]

    @property
    def box_k_elems(self) -> int:
        """Inner extent, in elements, of the TMA box that writes one column."""
        return self.atom_bytes // self.dtype_bytes

    @property
    def atom_columns(self) -> int:
        return self.k_bytes // self.atom_bytes

    @property
    def column_bytes(self) -> int:
        return self.rows * self.atom_bytes

    @property
    def nbytes(self) -> int:
        return self.rows * self.k_bytes

    @property
    def alignment(self) -> int:
        """Alignment of the tile base for base offset 0: where the swizzle pattern repeats."""
        return 8 * self.atom_bytes if self.swizzle != "none" else 16

    @property
    def instruction_k(self) -> int:
        return instruction_k(self.dtype)

    @property
    def k_steps(self) -> int:
        """Instructions needed to consume the tile's K extent."""
        return self.k_bytes // INSTRUCTION_K_BYTES

    # -- descriptor
    @property
    def lbo(self) -> int:
        return 16 if self.swizzle != "none" else self.column_bytes

    def k_step_offset(self, k_index: int) -> int:
        """Bytes from the tile base to the start of K slice `k_index` (one instruction's K)."""
        if not 0 <= k_index < self.k_steps:
            raise ValueError(f"k_index {k_index} out of range: the tile has {self.k_steps} K slices")
        start = k_index * INSTRUCTION_K_BYTES
        column, inside = divmod(start, self.atom_bytes)
        return column * self.column_bytes + inside

    def row_offset(self, row: int) -> int:
        """Bytes from the tile base to row `row` (a multiple of 8) of the first column."""
        if row % 8 or not 0 <= row < self.rows:
            raise ValueError(f"row {row} is not a multiple of 8 inside the tile's {self.rows} rows")
        return (row // 8) * self.sbo

    def row_block_offset(self, block: int, block_rows: int = 64) -> int:
        """Bytes from the tile base to the 64-row (or `block_rows`-row) block `block`."""
        if block_rows <= 0 or block_rows % 8 or block < 0 or (block + 1) * block_rows > self.rows:
            raise ValueError(f"block {block} of {block_rows} rows is outside the tile's {self.rows} rows")
        return self.row_offset(block * block_rows)

    # -- element placement (what TMA writes; what the interpreter reads)
    def byte_offset(self, row: int, k: int) -> int:
        """Byte offset, from an aligned tile base, of element (row, k)."""
        if not (0 <= row < self.rows and 0 <= k < self.k_elems):
            raise ValueError(f"element ({row}, {k}) is outside the {self.rows}x{self.k_elems} tile")
        return int(self._offsets(row, k))

    def _offsets(self, row: np.ndarray, k: np.ndarray) -> np.ndarray:
        kb = k * self.dtype_bytes
        column, inside = kb // self.atom_bytes, kb % self.atom_bytes
        linear = row * self.atom_bytes + inside
        bits = (SWIZZLE_BYTES[self.swizzle] // 16).bit_length() - 1   # XOR 0 / 1 / 2 / 3 bits of the row
        swizzled = linear ^ (((linear >> 7) & ((1 << bits) - 1)) << 4)
        return column * self.column_bytes + swizzled

    def pack(self, matrix: np.ndarray) -> np.ndarray:
        """The tile's shared-memory bytes (uint8, `nbytes` long) holding `matrix` [rows, k_elems]."""
        import numpy as np

        matrix = np.asarray(matrix)
        if matrix.shape != (self.rows, self.k_elems) or matrix.dtype.itemsize != self.dtype_bytes:
            raise ValueError(f"expected a {self.rows}x{self.k_elems} array of {self.dtype_bytes}-byte elements, "
                             f"got {matrix.shape} {matrix.dtype}")
        r, k = np.meshgrid(np.arange(self.rows), np.arange(self.k_elems), indexing="ij")
        offsets = self._offsets(r, k)
        raw = np.ascontiguousarray(matrix).view(np.uint8).reshape(self.rows, self.k_elems, self.dtype_bytes)
        image = np.zeros(self.nbytes, dtype=np.uint8)
        for b in range(self.dtype_bytes):
            image[offsets + b] = raw[:, :, b]
        return image

    def unpack(self, image: np.ndarray, dtype) -> np.ndarray:
        """The [rows, k_elems] matrix held by the tile's shared-memory bytes `image`."""
        import numpy as np

        image = np.asarray(image, dtype=np.uint8).reshape(-1)
        if image.size < self.nbytes:
            raise ValueError(f"image has {image.size} bytes, the tile needs {self.nbytes}")
        r, k = np.meshgrid(np.arange(self.rows), np.arange(self.k_elems), indexing="ij")
        offsets = self._offsets(r, k)
        raw = np.stack([image[offsets + b] for b in range(self.dtype_bytes)], axis=-1)
        return np.ascontiguousarray(raw).view(np.dtype(dtype)).reshape(self.rows, self.k_elems)


@dataclass(frozen=True)
class MNMajorTile(_Described):
    """An MN-major wgmma B operand: B as [K, N], rows contiguous along N (imm-trans-b = 1).

    This is V of attention as it lies in memory ([seq, head_dim]): what TMA writes for a
    row-major [K, N] global tensor loaded in boxes of [k_rows, 128 / dtype_bytes] with
    `swizzle 128B`. Only 16-bit types (f16, bf16) have imm-trans (ISA 9.7.15.5.2) and only the
    128B swizzle is supported.

    Layout (bytes from a 1024-byte aligned tile base), the canonical MN-major 128B layout of
    9.7.15.5.1.2.1.3, ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)) in elements, T = 8:

    * The N extent is cut into columns of 64 elements (128 bytes, one swizzle span); column c
      occupies [c * k_rows * 128, (c + 1) * k_rows * 128): one TMA box each.
    * Inside a column, K row k starts at k * 128 and its 16-byte chunks are XORed with k mod 8
      (Swizzle<3,4,3>, the same address function as a K-major 128B tile).
    * A swizzle atom is 8 K rows x 64 N elements (Table 38, MN-major 128B: 64x8 elements).
      SBO = "the offset from the first 8 K rows to the next 8" = 8 * 128 = 1024 bytes;
      LBO = "the offset from one 64-element MN column to the next" = k_rows * 128 bytes
      (the next TMA box, or the next panel of a panelled box: with N = 64·P the one descriptor
      per K slice spans all P columns; unused by the hardware while N is one column).
    * One instruction reads `instruction_k` = 16 K rows: K slice k starts at k * 16 * 128 bytes,
      two atoms on, which keeps the base on the swizzle's 1024-byte repeat (base offset 0).
    """

    k_rows: int
    n_elems: int
    dtype: str
    swizzle: str = "128B"

    def __post_init__(self) -> None:
        object.__setattr__(self, "swizzle", swizzle_name(self.swizzle))
        ptx_type(self.dtype)
        if self.dtype not in ("f16", "bf16"):
            raise ValueError(f"an MN-major operand must be f16 or bf16 (imm-trans exists for them only), got {self.dtype}")
        if self.swizzle != "128B":
            raise ValueError(f"MN-major operands are supported with the 128B swizzle only, got {self.swizzle}")
        if not isinstance(self.k_rows, int) or self.k_rows <= 0 or self.k_rows % self.instruction_k:
            raise ValueError(f"k_rows must be a positive multiple of {self.instruction_k}, got {self.k_rows!r}")
        if not isinstance(self.n_elems, int) or self.n_elems <= 0 or self.n_bytes % self.atom_bytes:
            raise ValueError(f"N extent {self.n_elems!r} is not whole {self.atom_bytes}-byte swizzle columns")

    @property
    def dtype_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    @property
    def instruction_k(self) -> int:
        return instruction_k(self.dtype)

    @property
    def n_bytes(self) -> int:
        return self.n_elems * self.dtype_bytes

    @property
    def atom_bytes(self) -> int:
        return SWIZZLE_BYTES[self.swizzle]

    @property
    def column_bytes(self) -> int:
        return self.k_rows * self.atom_bytes

    @property
    def nbytes(self) -> int:
        return self.k_rows * self.n_bytes

    @property
    def alignment(self) -> int:
        return 8 * self.atom_bytes

    @property
    def k_steps(self) -> int:
        return self.k_rows // self.instruction_k

    @property
    def lbo(self) -> int:
        return self.column_bytes

    def k_step_offset(self, k_index: int) -> int:
        """Bytes from the tile base to K slice `k_index`: `instruction_k` rows of 128 bytes each."""
        if not 0 <= k_index < self.k_steps:
            raise ValueError(f"k_index {k_index} out of range: the tile has {self.k_steps} K slices")
        return k_index * self.instruction_k * self.atom_bytes

    def byte_offset(self, k: int, n: int) -> int:
        if not (0 <= k < self.k_rows and 0 <= n < self.n_elems):
            raise ValueError(f"element ({k}, {n}) is outside the {self.k_rows}x{self.n_elems} tile")
        return int(self._offsets(k, n))

    def _offsets(self, k: np.ndarray, n: np.ndarray) -> np.ndarray:
        nb = n * self.dtype_bytes
        column, inside = nb // self.atom_bytes, nb % self.atom_bytes
        linear = k * self.atom_bytes + inside
        return column * self.column_bytes + (linear ^ (((linear >> 7) & 7) << 4))

    def pack(self, matrix: np.ndarray) -> np.ndarray:
        """The tile's shared-memory bytes holding `matrix` [k_rows, n_elems]."""
        import numpy as np

        matrix = np.asarray(matrix)
        if matrix.shape != (self.k_rows, self.n_elems) or matrix.dtype.itemsize != self.dtype_bytes:
            raise ValueError(f"expected a {self.k_rows}x{self.n_elems} array of {self.dtype_bytes}-byte elements, "
                             f"got {matrix.shape} {matrix.dtype}")
        k, n = np.meshgrid(np.arange(self.k_rows), np.arange(self.n_elems), indexing="ij")
        offsets = self._offsets(k, n)
        raw = np.ascontiguousarray(matrix).view(np.uint8).reshape(self.k_rows, self.n_elems, self.dtype_bytes)
        image = np.zeros(self.nbytes, dtype=np.uint8)
        for b in range(self.dtype_bytes):
            image[offsets + b] = raw[:, :, b]
        return image


# ---------------------------------------------------------------------------------------------
# The instruction (ISA 9.7.15.5.2 wgmma.mma_async)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WgmmaShape:
    """A checked wgmma.mma_async variant (see `check`)."""

    m: int
    n: int
    k: int
    a_type: str    # PTX spelling
    b_type: str
    acc_type: str  # "f32" or "f16"
    a_from_registers: bool
    trans_a: bool
    trans_b: bool

    @property
    def has_transpose_operands(self) -> bool:
        """imm-trans-a/b exist only in the .f16 / .bf16 forms (ISA 9.7.15.5.2 syntax)."""
        return self.a_type in ("f16", "bf16")

    @property
    def accumulator_registers(self) -> int:
        """Per thread: N/2 .f32 registers, or N/4 .f16x2 registers (ISA 9.7.15.5.1.1.1)."""
        return self.n // 2 if self.acc_type == "f32" else self.n // 4

    @property
    def mnemonic(self) -> str:
        return f"wgmma.mma_async.sync.aligned.m{self.m}n{self.n}k{self.k}.{self.acc_type}.{self.a_type}.{self.b_type}"


def check(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
          *, trans_a: bool = False, trans_b: bool = False) -> WgmmaShape:
    """Validate a dense floating-point wgmma variant against ISA 9.7.15.5.2; ValueError if invalid."""
    a, b = ptx_type(a_dtype), ptx_type(b_dtype)
    fp8 = ("e4m3", "e5m2")
    if a != b and not (a in fp8 and b in fp8):
        raise ValueError(f"wgmma needs A and B of the same type except for FP8 (e4m3/e5m2 mixes), got {a_dtype} and {b_dtype}")
    acc = {"f32": "f32", "f16": "f16"}.get(acc_dtype)
    if acc is None or acc not in _ACC_TYPES[a]:
        raise ValueError(f"accumulator type {acc_dtype!r} is not allowed with {a} inputs: "
                         f"allowed {', '.join(_ACC_TYPES[a])}")
    if m != 64:
        raise ValueError(f"wgmma has M = 64 only, got m = {m}")
    want_k = instruction_k(a_dtype)
    if k != want_k:
        raise ValueError(f"{a} wgmma has K = {want_k}, got k = {k}")
    if not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got n = {n}")
    if (trans_a or trans_b) and a not in ("f16", "bf16"):
        raise ValueError(f"{a} wgmma has no transpose: its operands must be K-major (imm-trans exists for f16/bf16 only)")
    if trans_a and a_from_registers:
        raise ValueError("A from registers cannot be transposed (imm-trans-a exists only with an A descriptor)")
    return WgmmaShape(m, n, k, a, b, acc, bool(a_from_registers), bool(trans_a), bool(trans_b))


def instruction(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
                *, trans_a: bool = False, trans_b: bool = False) -> str:
    """The PTX mnemonic, e.g. 'wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16'.

    The mnemonic is the same whether A comes from registers or shared memory; the flag only
    changes which variants are legal (no transposed A from registers).
    """
    return check(m, n, k, a_dtype, b_dtype, acc_dtype, a_from_registers, trans_a=trans_a, trans_b=trans_b).mnemonic


class InlineAsm(NamedTuple):
    template: str
    constraints: str


def inline_asm(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc_dtype: str, a_from_registers: bool = False,
               *, trans_a: bool = False, trans_b: bool = False, scale_a: int = 1, scale_b: int = 1) -> InlineAsm:
    """(template, constraints) of one wgmma.mma_async as an LLVM inline-asm call.

    PTX operand order (ISA 9.7.15.5.2):
        f16/bf16, A in smem:  d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b;
        f16/bf16, A in regs:  d, a,      b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b;
        tf32 / fp8:           d, a-desc | a, b-desc, scale-d, imm-scale-a, imm-scale-b;
    scale-d is a predicate: false computes D = A*B (so the first K slice needs no zeroed
    accumulator), true D = A*B + D. We take it as an i32 and set a local predicate from it.

    LLVM operands, in order (R = accumulator registers per thread, `WgmmaShape.accumulator_registers`):
        $0 .. $R-1    outputs: the accumulators, "=f" (f32) or "=r" (f16: i32 holding .f16x2)
        SS form:  $R = A descriptor ("l", i64), $R+1 = B descriptor ("l", i64), $R+2 = scale-d ("r", i32)
        RS form:  $R..$R+3 = A fragment ("r", i32 each), $R+4 = B descriptor ("l"), $R+5 = scale-d ("r")
        then R inputs tied to the outputs ("0" .. "R-1"): the accumulators' incoming values.
    The call returns a struct of R floats (or i32s). The constraint string carries no clobber;
    the backend's asm helper appends ~{memory} (wgmma reads shared memory) and marks it
    side-effecting. imm-scale-a/b are 1 (or -1 to negate), imm-trans 0 for K-major operands,
    1 for MN-major ones (`MNMajorTile`).
    """
    shape = check(m, n, k, a_dtype, b_dtype, acc_dtype, a_from_registers, trans_a=trans_a, trans_b=trans_b)
    if scale_a not in (1, -1) or scale_b not in (1, -1):
        raise ValueError(f"imm-scale-a/b must be 1 or -1, got {scale_a}, {scale_b}")
    r = shape.accumulator_registers
    out = "f" if shape.acc_type == "f32" else "r"
    d = ", ".join(f"${i}" for i in range(r))
    if a_from_registers:
        a = "{" + ", ".join(f"${r + i}" for i in range(4)) + "}"
        b, scale_d = f"${r + 4}", f"${r + 5}"
        inputs = ["r"] * 4 + ["l", "r"]
    else:
        a, b, scale_d = f"${r}", f"${r + 1}", f"${r + 2}"
        inputs = ["l", "l", "r"]
    immediates = [str(scale_a), str(scale_b)]
    if shape.has_transpose_operands:
        if not a_from_registers:
            immediates.append(str(int(shape.trans_a)))
        immediates.append(str(int(shape.trans_b)))
    template = (
        "{\n"
        ".reg .pred p;\n"
        f"setp.ne.b32 p, {scale_d}, 0;\n"
        f"{shape.mnemonic} {{{d}}}, {a}, {b}, p, {', '.join(immediates)};\n"
        "}"
    )
    constraints = ",".join([f"={out}"] * r + inputs + [str(i) for i in range(r)])
    return InlineAsm(template, constraints)


# ---------------------------------------------------------------------------------------------
# Ordering instructions (ISA 9.7.15.7.1 wgmma.fence, 9.7.15.7.2 wgmma.commit_group,
# 9.7.15.7.3 wgmma.wait_group; 9.7.15.4 "Async Proxy")
#
# wgmma reads its shared-memory operands through the async proxy: operands written by TMA need
# only the mbarrier wait, but operands written with st.shared need `fence.proxy.async.shared::cta`
# (and a barrier) before the wgmma.
# ---------------------------------------------------------------------------------------------

FENCE = "wgmma.fence.sync.aligned;"
"""Issued by all warps of the warpgroup before the first wgmma.mma_async, and between any other
register access to an accumulator or A fragment and a wgmma that uses it; back-to-back wgmmas
of the same shape on the same accumulators are ordered without it (ISA 9.7.15.7.1)."""

COMMIT_GROUP = "wgmma.commit_group.sync.aligned;"
"""Close the current wgmma-group: every uncommitted wgmma.mma_async of this warpgroup."""


def wait_group(n: int) -> str:
    """'wgmma.wait_group.sync.aligned N;': wait until at most N wgmma-groups are pending
    (0: all done; only then may the accumulators be read)."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
        raise ValueError(f"wgmma.wait_group takes a non-negative integer constant, got {n!r}")
    return f"wgmma.wait_group.sync.aligned {int(n)};"


# ---------------------------------------------------------------------------------------------
# Accumulator fragment (ISA 9.7.15.5.1.1.1, Figure 149 "WGMMA .m64nNk16 register fragment layout
# for accumulator matrix D"; the m64nNk8 and m64nNk32 figures 151 and 153 are the same picture)
#
# Derivation. Figure 149 draws the 64xN tile as four 16-row bands, one per warp of the
# warpgroup (warp w = thread // 32 owns rows 16w..16w+15), and each band as N/8 blocks of 8
# columns. Inside a band the picture is the mma.m16n8 accumulator layout repeated along N:
# lane l sits in row group g = l // 4 and column pair q = l % 4 ("T0: d0,d1 | T1: d0,d1 | ..."
# across a row, T0, T4, T8, .. down the rows), holding, in block j,
#     d[4j+0] = (16w + g,     8j + 2q)      d[4j+1] = (16w + g,     8j + 2q + 1)
#     d[4j+2] = (16w + g + 8, 8j + 2q)      d[4j+3] = (16w + g + 8, 8j + 2q + 1)
# So thread 0 holds (0,0), (0,1), (8,0), (8,1), then (0,8), ...; thread 1 starts at (0,2);
# thread 4 at (1,0); thread 32 at (16,0). Index i counts accumulator *elements* d0, d1, ...: for
# f32 that is the register number; for an f16 accumulator, register r packs d[2r] (low half) and
# d[2r+1] (high half). The GPU test in tests/test_wgmma_encoding.py checks this on hardware.
# ---------------------------------------------------------------------------------------------

WARPGROUP_THREADS = 128


def accumulator_coord(thread: int, index: int) -> tuple[int, int]:
    """(row, col) in the 64xN tile of accumulator element `index` of warpgroup thread `thread`."""
    if not 0 <= thread < WARPGROUP_THREADS:
        raise ValueError(f"thread {thread} is not in a warpgroup (0..127)")
    if index < 0:
        raise ValueError(f"accumulator index {index} is negative")
    warp, lane = divmod(thread, 32)
    block, within = divmod(index, 4)
    row = 16 * warp + lane // 4 + 8 * (within // 2)
    col = 8 * block + 2 * (lane % 4) + within % 2
    return row, col


def accumulator_layout(n: int) -> np.ndarray:
    """int array [128, N/2, 2]: [t, i] = (row, col) of accumulator element i of thread t."""
    import numpy as np

    if not isinstance(n, numbers.Integral) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got n = {n}")
    t = np.arange(WARPGROUP_THREADS)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, lane = t // 32, t % 32
    block, within = i // 4, i % 4
    row = 16 * warp + lane // 4 + 8 * (within // 2)
    col = 8 * block + 2 * (lane % 4) + within % 2
    return np.stack(np.broadcast_arrays(row, col), axis=-1).astype(np.int64)


def accumulator_owner(row: int, col: int) -> tuple[int, int]:
    """(thread, index) holding element (row, col) of the 64xN accumulator tile; inverse of
    `accumulator_coord`."""
    if not 0 <= row < 64 or col < 0:
        raise ValueError(f"({row}, {col}) is outside a 64xN accumulator tile")
    warp, r = divmod(row, 16)
    half, g = divmod(r, 8)
    block, c = divmod(col, 8)
    q, low = divmod(c, 2)
    return 32 * warp + 4 * g + q, 4 * block + 2 * half + low


def gather_accumulators(fragments: np.ndarray) -> np.ndarray:
    """The 64xN matrix from per-thread accumulators `fragments` [128, N/2]."""
    import numpy as np

    fragments = np.asarray(fragments)
    n = 2 * fragments.shape[1]
    layout = accumulator_layout(n)
    out = np.empty((64, n), dtype=fragments.dtype)
    out[layout[..., 0], layout[..., 1]] = fragments
    return out


def scatter_accumulators(matrix: np.ndarray) -> np.ndarray:
    """Per-thread accumulators [128, N/2] of a 64xN matrix (inverse of `gather_accumulators`)."""
    import numpy as np

    matrix = np.asarray(matrix)
    layout = accumulator_layout(matrix.shape[1])
    return matrix[layout[..., 0], layout[..., 1]]
