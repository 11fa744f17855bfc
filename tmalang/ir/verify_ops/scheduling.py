"""Verify hooks of dynamic tile scheduling (ops/scheduling.py): the tile queue, claims and
publishes by one thread, cluster launch control's cancel and query with their 16-byte response,
and every thread's take from the queue.
"""

from __future__ import annotations

from .. import ops
from .scope import Hook, Scope, one_thread


def _tile_queue(v: Scope, o: ops.TileQueueDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "not a positive count")
    v.check(o, "offset", o.offset == -1 or o.offset % o.stage_bytes == 0, f"not {o.stage_bytes}-byte aligned")
    v.check(o, "words", o.words in (1, 4), "neither a tile word (1) nor a cancel response (4)")


def _tile_claim(v: Scope, o: ops.TileClaim) -> None:
    v.in_role(o)
    one_thread(v, o)
    v.tile(o, "slot", "queue")


def _tile_publish(v: Scope, o: ops.TilePublish) -> None:
    v.in_role(o)
    one_thread(v, o)
    v.tile(o, "slot", "queue")


def _clc_try_cancel(v: Scope, o: ops.ClcTryCancel) -> None:
    v.in_role(o)
    one_thread(v, o)
    v.check(o, "response", v.kernel.grid == "tiles", "a cancel on a persistent grid (no CTA waits to start)")
    _response(v, o)
    v.tile(o, "barrier", "mbarrier")


def _clc_query(v: Scope, o: ops.ClcQuery) -> None:
    v.in_role(o)
    one_thread(v, o)
    v.tile(o, "slot", "queue")
    _response(v, o)


def _response(v: Scope, o: ops.ClcTryCancel | ops.ClcQuery) -> None:
    v.tile(o, "response", "queue")
    decl = v.symbols.get(o.response.name)
    v.check(o, "response", decl.words == 4, "not a 16-byte (4-word) response")


def _tile_take(v: Scope, o: ops.TileTake) -> None:
    v.in_role(o)
    v.tile(o, "slot", "queue")


HOOKS: dict[type[ops.Op], Hook] = {
    ops.TileQueueDecl: _tile_queue, ops.TileClaim: _tile_claim, ops.TilePublish: _tile_publish,
    ops.ClcTryCancel: _clc_try_cancel, ops.ClcQuery: _clc_query, ops.TileTake: _tile_take,
}
