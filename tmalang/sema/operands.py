"""What the tensor cores read, shared by the wgmma (sema/mma.py) and tcgen05 (sema/tcgen05.py)
checks: accumulators, swizzled operand tiles, and block indices into an accumulator."""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Span, error
from ..syntax import ast
from ..targets import tma
from .declarations import Box, Role

MMA_INPUT_DTYPES = ("bf16", "f16", "f8e4m3", "f8e5m2")

@dataclass
class Accumulator:
    name: str
    dtype: str
    shape: list[int]
    role: Role
    span: Span
    parts: int = 1       # > 1: `by columns`, the role's warpgroups split the columns

    @property
    def warpgroups(self) -> int:
        return -(-self.shape[0] // 64) if self.parts == 1 else self.parts   # a short one's last is part-full


def check_operand(ref: ast.Ref, tile: Box, dtypes: tuple[str, ...] = MMA_INPUT_DTYPES,
                   what: str = "mma operand", panelled: bool = False) -> None:
    """A K-major operand: 2-D, swizzled, rows of one swizzle span, or with `panelled` (wgmma) of a whole
    number of spans, the panels of a panelled box (§4) that K steps walk one after the other."""
    if tile.dtype.name not in dtypes:
        raise error("E088", f"mma operands may be {', '.join(dtypes)}; '{ref.text()}' is "
                    f"{tile.dtype.name}", ref.span)
    span = tma.SWIZZLES[tile.swizzle].span
    row = tile.matrix[-1] * tile.dtype.itemsize
    fits = span is not None and (row == span or (panelled and row % span == 0))
    if len(tile.matrix) != 2 or not fits:
        rows = "one swizzle span or whole spans" if panelled else "one swizzle span"
        raise error("E089", f"{what} '{ref.text()}' must be a 2-D swizzled tile whose rows are {rows} "
                    "(32, 64 or 128 bytes)", ref.span,
                    f"e.g. box X = x[rows, {128 // tile.dtype.itemsize}] swizzle 128B (K-major)")


def block_index(ref: ast.Ref) -> tuple[int, ...]:
    return tuple(c.value for c in ref.block)
