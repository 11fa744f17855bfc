"""order_slot_release: a pipeline slot is released only when nothing can still read it.

Requires: expanded pipelines, fenced proxy writes.
Guarantees, before a store that may write elements an earlier store of the same region (a loop
body, a block) wrote: the same tensor through a box of the same shape and strides at the same
coordinates, or through a box of another shape or strides at any coordinates (not compared, so
taken to overlap), or any store to the tensor when either store is at element coordinates (its
box may lie anywhere) or takes its rows from an index tensor (a scatter writes whatever rows its
indices name): the elected thread waits `bulk_wait read=false pending=0`, so the two stores'
writes to global memory are ordered. A reduce counts as a store, except after reduces of its
own operation alone (they commute: no wait); after a reduce of another operation it waits.
Before tile math, an epilogue or row math rewrites a slot that a TMA store of the
role issued since the last release read from: the elected thread waits `bulk_wait read=false
pending=0` and the role syncs, so the store has read the slot before any thread overwrites it,
and has written global memory before the rewritten slot is stored to the same tile again.
And for every elected arrive on a pipeline's `empty` barrier:
  - the elected thread's TMA stores from the slot are committed as a bulk group right after they
    are issued, and the release first waits `bulk_wait read=true pending=0`: the TMA engine has
    finished reading the slot (the PTX rule for reusing a store's source);
  - if the role's threads touched the slot with ordinary accesses since their last `sync`, a
    `sync scope=role` precedes the release, so no thread still reads a slot the producer refills;
    if only wgmma (and row math on registers) touched it, each warpgroup releases for itself instead (`elect
    scope=warpgroup`: its wgmma wait already covers its four warps), with no role-wide sync.
    This holds for every slot the wgmmas read: the release of an outer consume block after an
    inner one's (`consume ra as s { consume rb as t { mma acc, s.a, t.b } }`) is per warpgroup
    too, not one thread's arrive that the other warpgroups' MMAs are unordered with. What counts
    is what touched *that* pipeline's slots: row math reading another slot (a row vector) leaves
    this one to the MMAs. And all releases of a pipeline in a role arrive alike (per warpgroup if
    any is), since its empty barrier expects one count per phase;
and every role that issues TMA stores ends with `bulk_wait read=false pending=0`, so no copy is in
flight when its CTA exits.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from ..targets.arch import Target


def run(kernel: ops.KernelOp, target: Target) -> None:
    boxes = ops.decls(kernel, ops.BoxDecl)
    for role in ops.roles(kernel):
        role.body = _region(role.body, boxes)
        _one_release_scope(role.body)
        if any(isinstance(o, ops.TensorStore) and _pipelined(o.source.name) for o in ops.walk(role.body)) \
                and not _ends_waiting(role.body):
            role.body.append(ops.Elect("role", [ops.BulkWait(0, False, span=role.span)], span=role.span))


def _ends_waiting(body: list[ops.Op]) -> bool:
    """The role already ends with the full wait (stage_stores put it there)."""
    last = body[-1] if body else None
    return (isinstance(last, ops.Elect) and len(last.body) == 1 and isinstance(last.body[0], ops.BulkWait)
            and last.body[0].pending == 0 and not last.body[0].read)


_pipelined = ops.is_pipeline_buffer   # a slot of a pipeline (PIPELINE.FIELD), not a user's smem buffer


def _region(region: list[ops.Op], boxes: dict) -> list[ops.Op]:
    out: list[ops.Op] = []
    stored: set[str] = set()
    targets: set = set()   # (tile, reduce op or "") this region's stores wrote since its last full wait
    touched: dict[str, str] = {}   # pipeline -> "generic" (ordinary access) or "mma" (wgmma only) since the last sync
    for o in region:
        if isinstance(o, (ops.TileAssign, ops.TmemEpilogue, ops.RowAssign)) and _touches_memory(o):
            if _written(o) in stored:    # a store issued from the slot may still be reading it; the
                # rewritten slot is usually stored again, to the same tile, and two stores to the same
                # elements are ordered only by a full wait (the interpreter's E421), so wait for all of it
                out += [ops.Elect("role", [ops.BulkWait(0, False, span=o.span)], span=o.span),
                        ops.Sync("role", span=o.span)]
                stored, targets = set(), set()
                touched = {}
            _touch(touched, o)    # every warp must be done with the slot before one thread frees it
        elif isinstance(o, ops.Wgmma):
            _touch(touched, o)
        elif isinstance(o, ops.Sync):
            touched = {}
        elif isinstance(o, ops.Elect):
            stores = [s for s in o.body if isinstance(s, ops.TensorStore) and _pipelined(s.source.name)]
            targets = _order_repeated_stores(o, stores, targets, boxes)
            if stores:
                last = _position(o.body, stores[-1])
                o.body.insert(last + 1, ops.BulkCommit(span=stores[-1].span))
                stored |= {s.source.name for s in stores}
            pipeline = _released_pipeline(o)
            if pipeline is not None:
                if any(b.startswith(pipeline + ".") for b in stored):
                    o.body.insert(0, ops.BulkWait(0, True, span=o.span))
                if touched.get(pipeline) == "mma" and len(o.body) == 1:
                    o.scope = "warpgroup"   # `touched` stays: an enclosing slot's MMAs are the same groups
                elif touched.get(pipeline):
                    out.append(ops.Sync("role", span=o.span))
                    touched = {}
                stored = {b for b in stored if not b.startswith(pipeline + ".")}
        else:
            for r in o.regions():
                r[:] = _region(r, boxes)
            for x in (x for r in o.regions() for x in ops.walk(r)):   # what a loop or block did to the
                # slots of an enclosing consume counts as if it stood here (its own syncs are not assumed
                # to end it: the enclosing release still needs a role sync, or each warpgroup's own wait)
                if isinstance(x, (ops.TileAssign, ops.TmemEpilogue, ops.RowAssign)) and _touches_memory(x) \
                        or isinstance(x, ops.Wgmma):
                    _touch(touched, x)
        out.append(o)
    return out


def _one_release_scope(body: list[ops.Op]) -> None:
    """Every release of a pipeline in a role arrives alike: the empty barrier's count is one per
    phase, so a release by one thread where others arrive once per warpgroup would leave a phase
    one arrival short, and the producer waiting forever. Where some release of a pipeline is per
    warpgroup, all of the role's are: after a role sync (or with the slot untouched) each
    warpgroup's elected thread may arrive as well as one thread for all."""
    releases = [o for o in ops.walk(body) if isinstance(o, ops.Elect) and _released_pipeline(o) is not None]
    split = {_released_pipeline(o) for o in releases if o.scope == "warpgroup"}
    for o in releases:
        if _released_pipeline(o) in split and len(o.body) == 1:
            o.scope = "warpgroup"


def _touch(touched: dict[str, str], o: ops.Op) -> None:
    """Record the pipelines whose slots `o` reads or writes: by wgmma alone ("mma": each
    warpgroup's wgmma wait covers its warps), or by the threads ("generic": a role sync first)."""
    how = "mma" if isinstance(o, ops.Wgmma) else "generic"
    refs = [e for top in (*o.expressions(), getattr(o, "dest", None)) if top is not None for e in ex.walk(top)
            if isinstance(e, ex.BufferRef)]
    for ref in refs:
        if _pipelined(ref.name):
            pipeline = ref.name.split(".")[0]
            touched[pipeline] = "generic" if how == "generic" else touched.get(pipeline, "mma")


def _order_repeated_stores(o: ops.Elect, stores: list[ops.TensorStore], targets: set, boxes: dict) -> set:
    """A store that may write what an earlier store of the region wrote waits for that store's
    writes (`bulk_wait read=false`): two unordered stores to the same elements race (E421), also
    through two boxes of one tensor. Reduces of one operation are atomic per element and commute,
    so a reduce after only reduces of its operation to the tile needs no wait; after a reduce of
    another operation it waits as after a store (which lands first would decide the result)."""
    for store in stores:
        target = _target(store, boxes)
        if any(_may_overlap(t, target) and not (op and op == store.reduce) for t, op in targets):
            at = _position(o.body, store)
            earlier = any(isinstance(x, ops.TensorStore) for x in o.body[:at])
            o.body[at:at] = [ops.BulkCommit(span=store.span)] * earlier + [ops.BulkWait(0, False, span=store.span)]
            targets = set()
        targets.add((target, store.reduce))
    return targets


def _position(body: list[ops.Op], o: ops.Op) -> int:
    """Where `o` itself stands in `body` (ops compare by value: two stores alike are two ops)."""
    return next(i for i, x in enumerate(body) if x is o)


def _target(store: ops.TensorStore, boxes: dict) -> tuple:
    """What a store writes, as far as this pass compares it: tensor, box geometry, coordinates
    (None for a store at element coordinates or a scattered store: its box may lie anywhere in the
    tensor, or its rows are whatever its indices name)."""
    box = boxes[store.box]
    by_box = isinstance(store, ops.BulkStore) or isinstance(store, ops.TmaStore) and not store.elements
    coords = tuple(map(str, store.coords)) if by_box else None
    return box.tensor, tuple(box.shape), tuple(box.strides), coords


def _may_overlap(a: tuple, b: tuple) -> bool:
    """Same tensor, and the same geometry at the same coordinates or another geometry (whose
    regions this pass does not intersect, so it takes them to overlap). A store at element
    coordinates or a scattered store may overlap any store to the tensor."""
    return a[0] == b[0] and (a[3] is None or b[3] is None or a[1:3] != b[1:3] or a[3] == b[3])


def _touches_memory(o: ops.Op) -> bool:
    """Whether a thread op reads or writes shared or tensor memory; row math on accumulators and
    row registers (sm_90a) stays in registers and leaves the slot to the MMAs."""
    if not isinstance(o, ops.RowAssign):
        return True
    return any(isinstance(e, (ex.BufferRef, ex.TmemRef)) for e in (o.dest, *ex.walk(o.value)))


def _written(o: ops.Op) -> str | None:
    """The smem or tmem buffer a tile-math, epilogue or row-math op writes (None: a register)."""
    return o.dest.name if isinstance(o.dest, ops.BufferRef) else None


def _released_pipeline(o: ops.Elect) -> str | None:
    for s in o.body:
        if isinstance(s, (ops.MbarArrive, ops.MbarArriveCluster)):
            pipeline = ops.pipeline_of(s.barrier.name, (".empty",))
            if pipeline is not None:
                return pipeline
    return None
