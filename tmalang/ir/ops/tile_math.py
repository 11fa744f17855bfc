"""Math over tiles and rows: elementwise `tile_assign` over whole smem tiles, and the row registers
(`row_decl`) and row math (`row_assign`) of a one-warpgroup role, which may read and write Tensor
Memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exprs import BufferRef, Expr, TmemRef
from ..exprs import walk as walk_expr
from .base import Op, op


@op("tile_assign")
@dataclass
class TileAssign(Op):
    """Elementwise math over whole tiles: dest[k] = value(k) for every element k."""

    dest: BufferRef
    value: Expr


@op("row_decl")
@dataclass
class RowDecl(Op):
    """Row registers of a one-warpgroup role: thread t holds row t (warp w: rows 32·(w % 4) ..),
    `cols` f32 values of it, or one value when `cols` is 0."""

    symbol: str
    cols: int


@op("row_assign")
@dataclass
class RowAssign(Op):
    """Row math: every thread computes `value` over its own row and writes it to `dest` — a row
    register (`^m`), a Tensor Memory tile (tcgen05.st into its lane, then tcgen05.wait::st) or
    an smem tile (its row). Tensor Memory operands are read with tcgen05.ld.32x32b."""

    dest: Expr
    value: Expr

    def stores_tmem(self, tmem_tiles) -> bool:
        return isinstance(self.dest, BufferRef) and self.dest.name in tmem_tiles

    def touches_tmem(self, tmem_tiles) -> bool:
        """Loads from or stores to Tensor Memory (tcgen05.ld / tcgen05.st): a tcgen05 access."""
        return self.stores_tmem(tmem_tiles) or any(isinstance(e, TmemRef) for e in walk_expr(self.value))
