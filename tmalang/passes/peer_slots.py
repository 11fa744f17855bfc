"""What expand_pipelines makes of a peer pipeline (`pipeline P[S] { f: Box } peer +K`), the ring
across a cluster in which the CTA of rank r produces into the CTA of rank (r + K) % N.

Each CTA holds S receive slots per field (`@P.f`, what its consume blocks read) and S send slots
(`@P.f.send`, what its produce blocks write). A produce block: every thread waits `empty[s]`
(this CTA's, released by the peer's consumer), writes the send slot with tile math, fences its
shared-memory writes to the async proxy and syncs the role; one thread then arms the peer's
`full[s]` for the bytes (mbarrier.arrive.expect_tx on the mapa'd address) and pushes each field
into the peer's receive slot, completing on that `full[s]` (cp.async.bulk.shared::cluster
.shared::cta). A consume block waits its own `full[s]` and releases by arriving on `empty[s]`
of the CTA that pushed it, K ranks back.

Why nothing races or hangs: a send slot is rewritten only after the next `empty[s]` wait, which
completes only when the peer's consumer released the receive slot, which it does only after its
`full[s]` completed, which needs the push's bytes landed, so the push had finished reading the
send slot; the receive slot is refilled only after that same release. Both barriers count one
arrival per phase (one elected thread, one CTA), and the bytes armed are the bytes pushed.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops

SEND = ".send"


def send_buffers(p: ops.PipelineDecl, receive: list[ops.BufferDecl]) -> list[ops.BufferDecl]:
    return [ops.BufferDecl(b.symbol + SEND, b.box, b.stages, b.bytes, b.align, -1, span=b.span) for b in receive]


def produce(o: ops.Produce, p: ops.PipelineDecl, slot: list[ops.Op], advance: ops.Op,
            buffers: dict[str, ops.BufferDecl]) -> list[ops.Op]:
    """`slot` = the stage let and the `empty` wait of an ordinary produce block."""
    stage = ex.Var(o.slot)
    fields = [f"{p.symbol}.{entry.split(':', 1)[0]}" for entry in p.fields]
    body = [_to_send(x, set(fields)) for x in o.body]
    full = ex.BufferRef(f"{p.symbol}.full", stage)
    nbytes = sum(buffers[f].bytes for f in fields)
    pushes = [ops.BulkPush(ex.BufferRef(f + SEND, stage), ex.BufferRef(f, stage), full, buffers[f].bytes, p.peer,
                           span=o.span) for f in fields]
    issue = ops.Elect("role", [ops.MbarArriveExpectTx(full, ex.Const(nbytes), p.peer, span=o.span), *pushes],
                      span=o.span)
    return [*slot, *body, ops.Fence("proxy_async", span=o.span), ops.Sync("role", span=o.span), issue, advance]


def release(p: ops.PipelineDecl, stage: ex.Var, cluster: int, span) -> ops.Op:
    """The consumer's release, on `empty` of the CTA that pushed the slot: K ranks back."""
    back = (cluster - p.peer % cluster) % cluster
    return ops.Elect("role", [ops.MbarArrive(ex.BufferRef(f"{p.symbol}.empty", stage), back, span=span)], span=span)


def _to_send(o: ops.Op, fields: set[str]) -> ops.Op:
    """Tile math of a produce block writes (and may read) the send slots."""
    if isinstance(o, ops.TileAssign):
        return ops.TileAssign(_rename(o.dest, fields), _rename(o.value, fields), span=o.span)
    return o


def _rename(e: ex.Expr, fields: set[str]) -> ex.Expr:
    if isinstance(e, ex.BufferRef):
        return ex.BufferRef(e.name + SEND, e.index) if e.name in fields else e
    if isinstance(e, ex.Bin):
        return ex.Bin(e.op, _rename(e.lhs, fields), _rename(e.rhs, fields))
    if isinstance(e, ex.Neg):
        return ex.Neg(_rename(e.operand, fields))
    if isinstance(e, ex.Cast):
        return ex.Cast(e.dtype, _rename(e.operand, fields))
    return e
