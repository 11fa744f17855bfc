"""Tensor Memory: addresses, allocation, and where an accumulator sits in it.

Sources (PTX ISA 9.0): 9.7.16.1.1 (TMEM address: lane in bits 31-16, column in 15-0; 128 lanes x
512 columns of 32 bits per CTA), 9.7.16.7.1 (tcgen05.alloc: a power of two of columns in
32..512), 9.7.16.8.1 (a warp reaches only lanes 32*(warp % 4) .. +31), 9.7.16.8.3 (the register
counts of tcgen05.ld/st per shape and .num), 9.7.16.10.5 (data-path layouts: with cta_group::1
and M = 128, row i of D is lane i and column j is column j; D elements are not packed, one per
32-bit column even for f16).
"""

from __future__ import annotations

LANES = 128
COLUMNS = 512
MIN_ALLOCATION = 32


def address(lane: int, column: int) -> int:
    if not (0 <= lane < LANES and 0 <= column < COLUMNS):
        raise ValueError(f"TMEM has lanes 0..{LANES - 1} and columns 0..{COLUMNS - 1}, got ({lane}, {column})")
    return lane << 16 | column


def split_address(taddr: int) -> tuple[int, int]:
    return taddr >> 16, taddr & 0xFFFF


def allocation_columns(columns: int) -> int:
    """What tcgen05.alloc takes for `columns` live columns: the next power of two, at least 32."""
    if not 0 < columns <= COLUMNS:
        raise ValueError(f"{columns} columns do not fit the {COLUMNS} columns of Tensor Memory")
    size = MIN_ALLOCATION
    while size < columns:
        size *= 2
    return size


def accumulator_columns(n: int, d_dtype: str = "f32") -> int:
    """TMEM columns an [M, N] accumulator takes: one 32-bit column per element, f16 included."""
    if d_dtype not in ("f32", "f16"):
        raise ValueError(f"a TMEM accumulator is f32 or f16, not {d_dtype}")
    return n


def accumulator_lane(row: int, m: int, lane_offset: int = 0) -> int:
    """The lane of row `row` of an [M, N] cta_group::1 accumulator: row i for M = 128; for M = 64,
    rows 16q .. 16q+15 sit in lanes 32q .. 32q+15 (+16 with lane offset 16)."""
    if m == 128:
        return row
    if m == 64 and lane_offset in (0, 16):
        return row % 16 + 32 * (row // 16) + lane_offset
    raise ValueError(f"no cta_group::1 layout for M = {m} with lane offset {lane_offset}")


def warp_lanes(warp: int) -> range:
    """The 32 lanes a warp may load or store: its sub-partition, warp % 4."""
    quarter = warp % 4
    return range(32 * quarter, 32 * quarter + 32)


# registers per thread of tcgen05.ld/st for .num = x1; doubling with each step of .num up to 128
_X1_REGISTERS = {"32x32b": 1, "16x64b": 1, "16x32bx2": 1, "16x128b": 2, "16x256b": 4}
NUMS = (1, 2, 4, 8, 16, 32, 64, 128)


def ld_registers(shape: str, num: int) -> int:
    """32-bit registers per thread of tcgen05.ld/st .shape.x<num> (at most 128)."""
    if shape not in _X1_REGISTERS:
        raise ValueError(f"unknown tcgen05.ld/st shape {shape!r} (known: {', '.join(_X1_REGISTERS)})")
    if num not in NUMS:
        raise ValueError(f".num must be one of x{', x'.join(map(str, NUMS))}, got x{num}")
    count = _X1_REGISTERS[shape] * num
    if count > 128:
        raise ValueError(f"tcgen05.ld.{shape}.x{num} would need {count} registers per thread (at most 128)")
    return count
