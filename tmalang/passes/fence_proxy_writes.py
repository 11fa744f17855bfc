"""fence_proxy_writes: ordinary smem writes reach the async proxy before a TMA store reads them.

Requires: expanded pipelines (stores sit in `elect` blocks).
Guarantees: between a `tile_assign` or `acc_store` to a buffer and the next elected `tma_store` from that
buffer in the same region there is `fence kind=proxy_async` (run by every writing thread)
followed by `sync scope=role` (so the electing thread sees every thread's fenced writes).
Without the fence the TMA engine may read stale smem; without the sync it may read a part of the
tile another warp has not written yet.
"""

from __future__ import annotations

from ..ir import ops


def run(kernel: ops.KernelOp) -> None:
    for role in ops.roles(kernel):
        role.body = _region(role.body)


def _region(region: list[ops.Op]) -> list[ops.Op]:
    out: list[ops.Op] = []
    dirty: set[str] = set()
    for o in region:
        if isinstance(o, (ops.TileAssign, ops.AccStore, ops.TmemEpilogue)):
            dirty.add(o.dest.name)
        elif isinstance(o, (ops.Fence,)) and o.kind == "proxy_async":
            dirty.clear()
        elif dirty & _stored_buffers(o):
            out += [ops.Fence("proxy_async", span=o.span), ops.Sync("role", span=o.span)]
            dirty.clear()
        for r in o.regions():
            if not isinstance(o, ops.Elect):
                r[:] = _region(r)
        out.append(o)
    return out


def _stored_buffers(o: ops.Op) -> set[str]:
    return {s.source.name for s in ops.walk([o]) if isinstance(s, ops.TmaStore)}
