"""The tensor-memory-accelerator facts that sema, the passes, the interpreter, the launch header
and the runtime all read: box options with their driver spellings, alignment, tile bytes.

Sources: CUDA Driver API, cuTensorMapEncodeTiled (boxDim, elementStrides, swizzle and
interleave rules, CUtensorMap* enums); PTX ISA 9.7.9.25 (cp.async.bulk.tensor) and 5.5.8
(tensor swizzling modes: a pattern repeats every 8 rows of its span, so a tile must be aligned to
8 x span bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class Swizzle:
    name: str
    span: int | None       # bytes a swizzled row may span (the innermost box extent's bound)
    tile_alignment: int    # smem alignment of a tile: 8 rows of the span (128 B without swizzle)
    tensor_map: str        # CU_TENSOR_MAP_SWIZZLE_*


SWIZZLES = {s.name: s for s in (
    Swizzle("none", None, 128, "CU_TENSOR_MAP_SWIZZLE_NONE"),
    Swizzle("32B", 32, 256, "CU_TENSOR_MAP_SWIZZLE_32B"),
    Swizzle("64B", 64, 512, "CU_TENSOR_MAP_SWIZZLE_64B"),
    Swizzle("128B", 128, 1024, "CU_TENSOR_MAP_SWIZZLE_128B"),
)}

@dataclass(frozen=True)
class Interleave:
    name: str
    slice_bytes: int | None   # bytes of one C slice: the tensor's innermost dim (NC/8HWC8: 8 x f16)
    tensor_map: str           # CU_TENSOR_MAP_INTERLEAVE_*


# cuTensorMapEncodeTiled with interleave: rank 3..5; with 32B, swizzle 32B only, and the base
# address and every outer stride 32-byte aligned (sema/interleave.py, contract/binding.py)
INTERLEAVES = {i.name: i for i in (
    Interleave("none", None, "CU_TENSOR_MAP_INTERLEAVE_NONE"),
    Interleave("16B", 16, "CU_TENSOR_MAP_INTERLEAVE_16B"),
    Interleave("32B", 32, "CU_TENSOR_MAP_INTERLEAVE_32B"),
)}
INTERLEAVE_MIN_RANK = 3
INTERLEAVE_32B_ALIGNMENT = 32   # bytes: base address and outer strides under interleave 32B


def interleave_alignment(interleave: str) -> int:
    """The alignment of a tensor's base address and outer strides under a box's interleave."""
    return INTERLEAVE_32B_ALIGNMENT if interleave == "32B" else GLOBAL_ALIGNMENT


# "zero" is the hardware default (OOB_FILL_NONE fills zeros); "nan" asks for the special NaN.
OOB_FILLS = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}
L2_PROMOTIONS = {
    "none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}
DATA_TYPE_PREFIX = "CU_TENSOR_MAP_DATA_TYPE_"
# L2 eviction priorities a copy may carry (PTX ISA createpolicy: .L2::evict_last / evict_normal /
# evict_first, applied to the copy through the .L2::cache_hint qualifier); "none": no hint.
CACHE_POLICIES = ("none", "evict_first", "evict_normal", "evict_last")
TMA_COORDINATE_RANGE = (-(1 << 31), (1 << 31) - 1)   # tensor coordinates are signed 32-bit

GLOBAL_ALIGNMENT = 16      # bytes: a tensor's base address and every outer stride
# Measured on the H100 (tests/sema/test_offsets.py, hand-written PTX): a tensor copy whose innermost
# start coordinate is not a multiple of 16 bytes faults (CUDA_ERROR_ILLEGAL_INSTRUCTION), as does
# a tensor store at any negative coordinate; a load at negative coordinates is filled like any
# other part outside the tensor.
INNER_START_ALIGNMENT = 16
BULK_ALIGNMENT = 16        # bytes: cp.async.bulk's size and both addresses (PTX ISA)
MAX_BOX_EXTENT = 256       # elements per box dimension
MAX_ELEMENT_STRIDE = 8
MAX_RANK = 5
TENSOR_MAP_BYTES = 128
# .tile::gather4 / .tile::scatter4 (PTX ISA 5.5.3.4): four rows of a 2-D tensor per copy, each a
# bounding box of one row, at coordinates {column, row0, row1, row2, row3}
GATHER_ROWS = 4
GATHER_RANK = 2
SMEM_COPY_ALIGNMENT = 128  # bytes: a tensor copy's shared-memory address (each four-row copy's too)


# Panelled boxes (docs §4): a swizzled box whose rows are P > 1 swizzle spans is moved as P
# TMA copies of one span each, side by side in global memory and one after the other in shared
# memory. The tensor map describes one panel; a copy issues P instructions.
MAX_PANELS = 8


def panels(itemsize: int, inner_extent: int, swizzle: str) -> int:
    """How many swizzle-span panels a box's rows are cut into: 1 for a box whose rows fit the span
    (or with no swizzle), else inner bytes / span (sema makes that whole and at most MAX_PANELS)."""
    span = SWIZZLES[swizzle].span if swizzle in SWIZZLES else None
    inner = inner_extent * itemsize
    return 1 if span is None or inner <= span else inner // span


def tile_shape(box_shape, element_strides) -> list[int]:
    """The smem tile a load of the box fills: every stride-th element of each extent, packed."""
    return [-(-extent // stride) for extent, stride in zip(box_shape, element_strides)]


def matrix_shape(shape) -> list[int]:
    """A tile as the tensor cores, epilogues and row math see it: extents of 1 dropped down to two
    dims, outermost first, never the innermost. The [1, 128, 64] tile of a box over [heads, seq,
    dim] and the [128, 1, 64] tile of one over [seq, heads, dim] (FlashAttention's packed layout)
    are both a [128, 64] matrix: a dense tile's bytes do not depend on where its 1s stand."""
    shape = list(shape)
    while len(shape) > 2 and 1 in shape[:-1]:
        shape.pop(shape.index(1))
    return shape


def tile_bytes(itemsize: int, box_shape, element_strides) -> int:
    """The bytes one load of the box writes into shared memory."""
    return itemsize * prod(tile_shape(box_shape, element_strides))


# im2col mode (CUDA Driver API cuTensorMapEncodeIm2col; PTX ISA "im2col mode" and
# cp.async.bulk.tensor's im2colOffsets): a tensor of rank 3..5 laid out N, spatial dims, C
# (outermost first). The pixel box's corners are signed and narrower the more spatial dims there
# are; the offsets a load adds (the filter position) are unsigned, as wide as the corners.
IM2COL_RANKS = (3, 4, 5)
IM2COL_CORNER_BITS = {3: 16, 4: 8, 5: 5}     # signed: [-2^(b-1), 2^(b-1) - 1]
IM2COL_OFFSET_BITS = {3: 16, 4: 8, 5: 5}     # unsigned: [0, 2^b - 1]
IM2COL_MAX_CHANNELS = 256                    # channelsPerPixel
IM2COL_MAX_PIXELS = 1024                     # pixelsPerColumn


# the sm_100a W-only im2col modes (cuTensorMapEncodeIm2colWide; PTX ISA 5.5.5 and
# cp.async.bulk.tensor's {wHalo, wOffset}): one corner per side along W, 16-bit signed at every
# rank; im2col::w::128 always loads 128 pixels; halo and wOffset are 16-bit unsigned operands
# (the modes themselves, w and w128, with their qualifiers and enums: tma_modes.py)
IM2COL_WIDE_CORNER = (-32768, 32767)
IM2COL_W128_PIXELS = 128
IM2COL_WIDE_HALO = {"w": 512, "w128": 32}    # wHalo lies in [0, this)
IM2COL_WIDE_OFFSET = 32                      # wOffset lies in [0, 32)
IM2COL_WIDE_SWIZZLES = ("64B", "128B")       # PTX 5.5.5: never no swizzle (nor 128B 32B-atom 8B-flip)


def im2col_corner_range(rank: int) -> tuple[int, int]:
    bits = IM2COL_CORNER_BITS[rank]
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def im2col_offset_range(rank: int) -> tuple[int, int]:
    return 0, (1 << IM2COL_OFFSET_BITS[rank]) - 1
