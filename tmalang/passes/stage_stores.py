"""stage_stores: every staged store becomes the epilogues, TMA stores and bulk groups it needs.

Requires: lowered IR (a `staged_store` owns its staging buffer: sema gives each staging buffer one
store statement, §13h).
Guarantees, for a staged store of B blocks through S staging tiles, block j of every run of the
statement, in order:
  - `elect { bulk_wait read=true pending=d-1 }` and `sync scope=role`: the store that last read
    staging tile j mod S, d groups ago, has finished reading it before any thread overwrites it
    (each block commits one group, and groups complete in order, so at most d-1 newer groups may
    stay in flight; the previous run of the statement is the tile's, or the last tile's, blocks);
  - the block's epilogue (`acc_store`, or `tmem_epilogue` inside a tmem consume) into staging tile
    j mod S, with the accumulator read j blocks to the right;
  - `elect { tma_store ...; bulk_commit }` of the block's box, one group per block.
fence_proxy_writes later puts the proxy fence and role sync between the epilogue and the store.
A store of an smem tile outside pipelines and `elect` (a bare store, §13), or of an smem
buffer (not a slot) inside a consume block, becomes
`elect { tma_store; bulk_commit }`, and before the first later thread write into that tile (along
every path, around loops: the next iteration's rewrite too) come `elect { bulk_wait read=true
pending=0 }` and `sync scope=role`, so the store has read the tile before any thread rewrites it.
Every role with a staged or bare store ends with `elect { bulk_wait read=false pending=0 }`, so no store is
in flight when the CTA exits. Block j's store overlaps the conversion of the blocks after it (up
to S-1 of them), and the last S-1 stores of a tile overlap the next tile's mainloop.
"""

from __future__ import annotations

import dataclasses

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target


def run(kernel: ops.KernelOp, target: Target) -> None:
    buffers = ops.decls(kernel, ops.BufferDecl)
    boxes = ops.decls(kernel, ops.BoxDecl)
    for role in ops.roles(kernel):
        derived = _Derived(buffers, boxes)
        role.body, _ = derived.region(role.body, in_block=False)
        if derived.stored:
            role.body.append(ops.Elect("role", [ops.BulkWait(0, False, span=role.span)], span=role.span))


class _Derived:
    """One role's walk: staged stores and bare stores outside pipelines become their protocol.

    A bare store leaves its source tile `pending` (the TMA engine may still read it) until a
    `bulk_wait read` covers it; the walk carries that set forward, around loops to a fixpoint
    (a store at the end of an iteration is pending at the next one's start), and puts the wait
    and a role sync before the first thread write into a pending tile."""

    def __init__(self, buffers: dict, boxes: dict):
        self.buffers, self.boxes = buffers, boxes
        self.stored = False      # the role issues a store this pass derived

    def region(self, region: list[ops.Op], in_block: bool, pending: frozenset = frozenset(),
               emit: bool = True) -> tuple[list[ops.Op], frozenset]:
        out: list[ops.Op] = []
        for o in region:
            if _written(o) in pending:
                out += [ops.Elect("role", [ops.BulkWait(0, True, span=o.span)], span=o.span), ops.Sync("role", span=o.span)]
                pending = frozenset()
            if isinstance(o, ops.Elect) and any(isinstance(x, ops.BulkWait) and x.pending == 0 for x in o.body):
                pending = frozenset()      # the user's own wait (explicit layer) covers every store
            pending = self.nested(o, _inside(o, in_block), pending, emit)
            derived = isinstance(o, ops.StagedStore) or (isinstance(o, ops.TensorStore) and _derived_here(o, in_block))
            self.stored |= derived
            if not emit or not derived:
                out.append(o)
            elif isinstance(o, ops.StagedStore):
                out += _expand(o, self.buffers, self.boxes)
            else:
                out.append(ops.Elect("role", [o, ops.BulkCommit(span=o.span)], span=o.span))
            if derived and isinstance(o, ops.TensorStore):
                pending |= {o.source.name}
        return out, pending

    def nested(self, o: ops.Op, in_block: bool, pending: frozenset, emit: bool) -> frozenset:
        """The pending set after `o`'s regions, rewriting them when `emit`; a loop's body starts
        with what is pending before the loop or at the end of an iteration, and may run no time."""
        for r in o.regions():
            head = pending
            if isinstance(o, _LOOPS):
                while True:
                    _, end = self.region(list(r), in_block, head, emit=False)
                    if end <= head:
                        break
                    head = head | end
            body, end = self.region(r, in_block, head, emit)
            if emit:
                r[:] = body
            pending = head | end if isinstance(o, (*_LOOPS, ops.If)) else end
        return pending


def _inside(o: ops.Op, where):
    """Where `o`'s regions stand: False (the role's own code), "consume" (a consume block, whose
    stores of its slots are the pipeline's: expand_pipelines, order_slot_release) or True (elect,
    whose stores are the user's, or a produce block)."""
    if where is True or isinstance(o, (ops.Elect, ops.Produce)):
        return True
    return "consume" if isinstance(o, ops.Consume) else where


def _derived_here(o: ops.TensorStore, where) -> bool:
    """A bare store this pass derives: outside elect and produce blocks, and in a consume block
    only from a tile that is not a slot (a slot's store is released with the slot)."""
    return where is False or (where == "consume" and not ops.is_pipeline_buffer(o.source.name))


_LOOPS = (ops.ForRange, ops.ForTiles, ops.ForStep, ops.Loop)
_WRITES = (ops.TileAssign, ops.AccStore, ops.TmemEpilogue, ops.RowAssign)


def _written(o: ops.Op) -> str | None:
    """The smem tile a thread op writes, if any."""
    dest = getattr(o, "dest", None) if isinstance(o, _WRITES) else None
    return dest.name if isinstance(dest, ex.BufferRef) else None


def _expand(o: ops.StagedStore, buffers: dict, boxes: dict) -> list[ops.Op]:
    stages = buffers[o.staging].stages
    columns = boxes[o.box].shape[-1]
    out: list[ops.Op] = []
    for j in range(o.blocks):
        tile = ex.BufferRef(o.staging, ex.Const(j % stages))
        value = _shifted(o.value, j * columns)
        epilogue = (ops.TmemEpilogue if _reads_tmem(value) else ops.AccStore)(tile, value, span=o.span)
        store = ops.TmaStore(o.box, _block_coords(o, j, columns), tile, o.reduce, o.elements, span=o.span)
        out += [ops.Elect("role", [ops.BulkWait(reuse_distance(j, o.blocks, stages) - 1, True, span=o.span)],
                          span=o.span),
                ops.Sync("role", span=o.span),
                epilogue,
                ops.Elect("role", [store, ops.BulkCommit(span=o.span)], span=o.span)]
    return out


def reuse_distance(j: int, blocks: int, stages: int) -> int:
    """How many blocks (bulk groups) ago staging tile j mod S was last stored from: S inside one
    run of the statement; for its first S blocks, the same tile's last block of the previous run."""
    if j >= stages:
        return stages
    last = max(b for b in range(blocks) if b % stages == j % stages)   # in the previous run
    return blocks - last + j


def _block_coords(o: ops.StagedStore, j: int, columns: int) -> list[ex.Expr]:
    step = j * columns if o.elements else j
    return [*o.coords[:-1], o.coords[-1] if step == 0 else ex.add(o.coords[-1], ex.Const(step))]


def _reads_tmem(value: ex.Expr) -> bool:
    return any(isinstance(e, ex.TmemRef) for e in ex.walk(value))


def _shifted(value, cols: int):
    """`value` with its accumulator (register or Tensor Memory) read `cols` columns to the right."""
    if isinstance(value, (ex.AccRef, ex.TmemRef)):
        return dataclasses.replace(value, col=value.col + cols)
    if not dataclasses.is_dataclass(value):
        return value
    changes = {f.name: _shifted_field(getattr(value, f.name), cols) for f in dataclasses.fields(value)}
    return dataclasses.replace(value, **changes)


def _shifted_field(v, cols: int):
    if isinstance(v, tuple):
        return tuple(_shifted(x, cols) for x in v)
    if isinstance(v, list):
        return [_shifted(x, cols) for x in v]
    return _shifted(v, cols)
