"""Dynamic tile scheduling (passes/claim_tiles.py): the shared-memory tile queue, claims from a
global counter, a CTA publishing its own tile, cluster launch control (`clc_try_cancel`,
`clc_query`, sm_100a), and every role taking the claimed tile from the queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exprs import BufferRef, Expr
from .base import Op, op


@op("tile_queue")
@dataclass
class TileQueueDecl(Op):
    """Shared-memory words (u32, `words` per stage) through which a dynamic tile loop's claimer
    hands each claimed tile index to every role of its CTA (passes/claim_tiles.py); with
    `words` = 4, the 16-byte response a cluster launch control cancel writes (clc_try_cancel)."""

    symbol: str
    stages: int
    offset: int                     # -1 until placed in the smem plan
    words: int = 1

    @property
    def stage_bytes(self) -> int:
        return 4 * self.words


@op("tile_claim")
@dataclass
class TileClaim(Op):
    """One thread claims the next tile: t = atom.global.add.u32 [tile counter], 1 (relaxed), and
    stores t into `slot` (a tile_queue word). The claim that returns `tiles` + nctaid - 1, the
    last one of the launch, stores 0 back into the counter (passes/claim_tiles.py argues why)."""

    slot: BufferRef
    tiles: Expr


@op("tile_publish")
@dataclass
class TilePublish(Op):
    """One thread stores `value` into `slot` (a tile_queue word): a grid of tiles' CTA publishes
    its own tile, ctaid.x, as its first claim (passes/claim_tiles.py)."""

    slot: BufferRef
    value: Expr


@op("clc_try_cancel")
@dataclass
class ClcTryCancel(Op):
    """One thread asks to cancel a CTA of the launch that has not started yet (cluster launch
    control, sm_100a): the 16-byte answer lands in `response` (a 4-word tile_queue) and completes
    16 transaction bytes on `barrier`, whose expect_tx the thread has armed before."""

    response: BufferRef
    barrier: BufferRef


@op("clc_query")
@dataclass
class ClcQuery(Op):
    """One thread decodes `response` into `slot` (a tile_queue word): the canceled CTA's ctaid.x,
    the tile it would have run, or `tiles` (past the end) when nothing was left to cancel."""

    slot: BufferRef
    response: BufferRef
    tiles: Expr


@op("tile_take")
@dataclass
class TileTake(Op):
    """`var` = the tile index in `slot` (a tile_queue word), read by every thread."""

    var: str
    slot: BufferRef
