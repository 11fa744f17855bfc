"""Where every element of a wgmma operand tile sits in shared memory (the layout a TMA box with the
same swizzle writes), and what the descriptor needs to read it: `KMajorTile` for A as [M, K] or B
as [N, K] (rows contiguous along K, any swizzle), `MNMajorTile` for B as [K, N] (imm-trans-b = 1,
128B swizzle), each with its LBO/SBO, alignment, the byte offsets of one instruction's K slice or
one 64-row block, and NumPy pack/unpack helpers (NumPy is imported only when they are called)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .descriptors import SWIZZLE_BYTES, advance, descriptor_base, swizzle_name, with_address
from .instructions import INSTRUCTION_K_BYTES, dtype_bytes, instruction_k, ptx_type

if TYPE_CHECKING:
    import numpy as np

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
