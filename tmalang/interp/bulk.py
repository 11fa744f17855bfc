"""Semantics of TMA stores and their bulk async-groups: commit_group, wait_group [read] N.

A store is one agent of the race detector: its reads of the shared source are its epoch 1, its
writes to global memory (interp/globalmem.py) its epoch 2. A TMA reduce is a store whose writes
combine each element with the one in global memory (interp/reduce.py), at the same moment. Its thread commits stores into groups; `wait_group read N`
orders the source reads of every group but the N newest before the thread, and `wait_group N`
orders their global writes too. The N newest groups count as in flight whatever this run's
latency did with them: a race is judged against the protocol, not the timing of one run.
"""

from __future__ import annotations

from ..ir import ops
from . import gather, reduce
from .state import Blocked, BulkGroup, Transfer
from .tiles import box_region, check_bulk_inside, check_element_start, write_box


def tma_store(m, w, o: ops.TensorStore) -> None:
    """A store or reduce of any mode (tiled, scatter4, bulk) joins the thread's open bulk group; its
    global writes land when the transfer does."""
    box = m.boxes[o.box]
    coords = [m.value(w, c) for c in o.coords]
    source = m.tile(w, o.source)
    target = m.launch.arrays[box.tensor]
    scattered = isinstance(o, ops.ScatterStore)
    elements = isinstance(o, ops.TmaStore) and o.elements
    operation = o.reduce
    if isinstance(o, ops.BulkStore):
        check_bulk_inside(target.shape, box, coords, o, m.who(w))
    if elements:
        check_element_start(box, coords, o, m.who(w))
    if w.open_group is None:
        w.open_group = BulkGroup()
    what = f"TMA reduce '{operation}'" if operation else "TMA store"
    key, who = m.tile_key(w, o.source), f"the {what} issued by {m.who(w)}"
    combine = (lambda old, new: reduce.combine(operation, old, new)) if operation else None
    agent, tile = m.races.issue(w.agent), w.current_tile   # the tile it was issued for, whenever it lands
    if scattered:   # tile rows to the rows an index tensor names (interp/gather.py)
        picked = gather.rows(m, w, o, box)
        gather.check_distinct(m, w, o, box, picked)
        regions = gather.regions(target.shape, box, picked, coords[1])
    else:
        regions = [r for r in [box_region(target.shape, box, coords, elements)] if r is not None]

    def apply():
        m.races.access(key, agent, False, None, o.span, who)
        m.races.tick(agent)     # epoch 2: the global writes, which only a full wait_group acquires
        for region in regions:
            m.launch.memory.access(m.races, m.cluster_id, box.tensor, region, agent, True, o.span,
                                   f"{who} in CTA {m.cta}", reduce=operation, steps=box.strides, tile=tile)
        if scattered:
            gather.write_rows(target, box, picked, coords[1], source.copy())
        else:
            write_box(target, box, coords, source.copy(), combine, elements)

    transfer = Transfer("store", w.index, o.span, apply, nbytes=source.nbytes, due=m.launch.due(m.step),
                        issued=m.step)
    transfer.agent = agent
    w.open_group.transfers.append(transfer)
    m.put_in_flight(transfer)


def bulk_commit(m, w, o: ops.BulkCommit) -> None:
    w.groups.append(w.open_group or BulkGroup())
    w.open_group = None


def bulk_wait(m, w, o: ops.BulkWait):
    """Wait until every group but the N newest has finished, then learn what they did: their
    reads of shared memory, and with a full wait (no `read`) their writes to global memory."""
    pending = w.groups if o.read else w.unwritten + w.groups

    def retired() -> list[BulkGroup]:
        return pending[: max(0, len(pending) - o.pending)]

    def ready() -> bool:
        return all(g.done() for g in retired())

    while not ready():
        busy = sum(not g.done() for g in pending)
        yield Blocked(o, f"bulk async-groups ({busy} pending, waiting for all but the {o.pending} newest)", ready)
    done = retired()
    for g in done:
        for t in g.transfers:
            m.races.acquire_transfer(w.agent, t.agent, 1 if o.read else None)
    if o.read:     # their global writes are still owed to a full wait
        w.unwritten += done
        w.groups = w.groups[len(done):]
    else:
        w.groups = w.groups[max(0, len(done) - len(w.unwritten)):]
        w.unwritten = w.unwritten[len(done):]

