"""The launch contract of a kernel, derived from its final IR: what a host passes (the PTX
parameters, in order), the grid it launches, the manifest that carries both with the tensors,
scalars and assumptions, and the site lists of the watchdog (every mbarrier wait) and the timeline
(every stamped op).

It stands below both the backend, which names the parameters and emits code at the sites, and
the runtime and the C++ header, which read the manifest; so a compile reaches the backend only to
generate code, and `import tmalang` followed by interpreting a kernel loads no LLVM.

Requires: a kernel the passes have finished (grid_spec alone reads the tile loop, before
lower_tile_walk writes it out as arithmetic). Guarantees: the manifest's `ptx_params` is exactly
the order of the kernel's PTX parameters; each wait or event site's index is its op's position in
emission order.
"""

from __future__ import annotations

from ..ir import exprs as ex
from ..ir import ops
from . import assumptions as checks
from .manifest import (Assumption, BulkParam, BulkStrideParam, CounterParam, DimParam, EventSite, GridSpec,
                       IndexParam, Manifest, ScalarArg, ScalarParam, TensorArg, TensorMapParam, WaitSite)

COUNTER = "tile_counter"   # the parameter of a dynamic tile loop's counter (backend/claim_codegen.py)


def derive_manifest(kernel: ops.KernelOp, arch: str, grid: GridSpec, source: str, watchdog: bool,
                    timeline: bool) -> tuple[Manifest, list, list]:
    """The manifest of a finished kernel, with the (op, site) lists of the watchdog's waits and the
    timeline's events when they are on (empty otherwise)."""
    waits = wait_sites(kernel, source) if watchdog else []
    events = event_sites(kernel) if timeline else []
    return build_manifest(kernel, arch, grid, waits, events), waits, events


def build_manifest(kernel: ops.KernelOp, arch: str, grid: GridSpec, waits=(), events=()) -> Manifest:
    boxes = ops.decls(kernel, ops.BoxDecl)
    stored = {boxes[o.box].tensor for o in ops.walk(kernel.body) if isinstance(o, ops.TensorStore)}
    loaded = {boxes[o.box].tensor for o in ops.walk(kernel.body) if isinstance(o, ops.TensorLoad)}
    args = []
    for o in kernel.body:
        if isinstance(o, ops.TensorDecl):
            args.append(TensorArg(o.symbol, o.dtype, tuple(o.shape), o.symbol in stored, o.symbol in loaded))
        elif isinstance(o, ops.ScalarDecl):
            args.append(ScalarArg(o.symbol, o.dtype))
    return Manifest(kernel.symbol, arch, tuple(args), tuple(ptx_params(kernel)), kernel.threads,
                    kernel.smem_bytes, grid, cluster=(kernel.cluster, 1, 1),
                    assumptions=manifest_assumptions(kernel), waits=tuple(site for _, site in waits),
                    events=tuple(site for _, site in events), overlaps_prior=True)


def grid_spec(kernel: ops.KernelOp) -> GridSpec:
    """The launch grid: the tiles of the kernel's tile loops (sema makes them all walk one space)."""
    loop = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.ForTiles))
    tensor = ops.decls(kernel, ops.TensorDecl)[loop.tensor]
    split = loop.split.value if isinstance(loop.split, ex.Const) else loop.split.name
    stream = ()
    if loop.stream:   # its extent is a literal or launch-bound (sema)
        stream = (loop.extent.value if isinstance(loop.extent, ex.Const) else loop.extent.name, loop.chunk)
    return GridSpec(kernel.grid, tuple(zip(tensor.shape, ops.decls(kernel, ops.BoxDecl)[loop.box].shape)), split,
                    stream)


def ptx_params(kernel: ops.KernelOp) -> list:
    """Kernel parameters in PTX order: tensor maps, then symbolic dims, then scalars, then (only in
    kernels with bulk boxes) each bulk box's tensor address and outer byte strides, then (only in
    kernels with gathered copies or element reads `t[i]`) each index tensor's address, then (only in kernels with a dynamic
    tile loop) the tile counter's address."""
    tensors = ops.decls(kernel, ops.TensorDecl)
    boxes = ops.decls(kernel, ops.BoxDecl).values()
    params: list = []
    for box in (b for b in boxes if not b.bulk):
        shape = tuple(box.map_shape())   # a CTA's slice of a split box; one row of a gathered one
        if box.im2col:   # the traversal strides of the spatial dims; N and C are walked one by one
            if box.wide:   # the tensor map's pixels per column leave out the halo rows
                shape = (shape[0] - box.halo, shape[1])
            pixels = box.im2col
            params.append(TensorMapParam(box.symbol, box.tensor, box.dtype, shape, (1, *pixels.strides, 1),
                                         box.swizzle, box.oob, box.l2, lower=tuple(pixels.lower),
                                         upper=tuple(pixels.upper), wide=box.wide))
            continue
        params.append(TensorMapParam(box.symbol, box.tensor, box.dtype, shape, tuple(box.strides),
                                     box.swizzle, box.oob, box.l2, box.interleave))
    symbols = dict.fromkeys(d for t in tensors.values() for d in t.shape if isinstance(d, str))
    params += [DimParam(s) for s in symbols]
    params += [ScalarParam(s.symbol, s.dtype) for s in ops.decls(kernel, ops.ScalarDecl).values()]
    for box in (b for b in boxes if b.bulk):
        params.append(BulkParam(box.symbol, box.tensor, box.dtype, box.shape[-1]))
        params += [BulkStrideParam(box.symbol, box.tensor, axis) for axis in range(len(box.shape) - 1)]
    by_name = ops.decls(kernel, ops.BoxDecl)
    gathered: dict[str, dict] = {}   # index tensor -> the tensors whose rows it names (ordered set)
    for o in ops.walk(kernel.body):
        if isinstance(o, (ops.GatherLoad, ops.ScatterStore, ops.GatherPrefetch)):
            gathered.setdefault(o.gather, {})[by_name[o.box].tensor] = None
    for e in (e for o in ops.walk(kernel.body) for top in o.expressions() for e in ex.walk(top)):
        if isinstance(e, ex.Elem):   # `t[i]` in an index expression: t's address, like an index tensor's
            gathered.setdefault(e.tensor, {})
    params += [IndexParam(t, tuple(names)) for t, names in gathered.items()]
    counted = kernel.grid == "persistent"   # a grid of tiles claims by cancelling CTAs: no counter
    if any(isinstance(o, ops.TileClaim) or counted and isinstance(o, ops.ForTiles) and o.dynamic
           for o in ops.walk(kernel.body)):
        params.append(CounterParam(COUNTER))   # last: a dynamic tile loop's counter 
    return params


def wait_sites(kernel: ops.KernelOp, source: str) -> list[tuple[ops.MbarWait, WaitSite]]:
    """Every mbarrier wait of the final IR in emission order, with the facts the runtime reports;
    a wait a pass made without a span gets the span of the statement around it."""
    barriers = ops.decls(kernel, ops.MbarrierDecl)
    found: list[tuple[ops.MbarWait, WaitSite]] = []

    def visit(region, role: str, span) -> None:
        for o in region:
            here = o.span or span
            if isinstance(o, ops.MbarWait):
                decl = barriers[o.barrier.name]
                found.append((o, WaitSite(role, decl.symbol, decl.offset, decl.stages, *_place(here, "?"))))
            for r in o.regions():
                visit(r, o.symbol if isinstance(o, ops.RoleOp) else role, here)

    visit(kernel.body, "-", kernel.span)
    return found


def _place(span, unknown: str) -> tuple:
    """(file, line, col, end col, the line's text) of a span; a span over several lines ends at its
    first line's end. Without a span: the file `unknown` and zeros."""
    if span is None:
        return unknown, 0, 0, 0, ""
    text = span.source.line(span.line)
    end = span.end_col if span.end_line == span.line else len(text) + 1
    return span.source.name, span.line, span.col, end, text


# op class -> the kind of event; a wait or sync spans its blocking, the rest are instants
TRACED = {
    ops.MbarWait: "wait",
    ops.Sync: "sync",
    ops.MbarArrive: "arrive",
    ops.MbarArriveCluster: "arrive",
    ops.MbarArriveExpectTx: "arrive",
    **dict.fromkeys((ops.TmaLoad, ops.Im2colLoad, ops.GatherLoad, ops.BulkLoad), "tma load"),
    **dict.fromkeys((ops.TmaStore, ops.ScatterStore, ops.BulkStore), "tma store"),
    ops.WgmmaCommit: "mma commit",
}
SPANS = {"wait", "sync"}


def event_sites(kernel: ops.KernelOp) -> list[tuple[ops.Op, EventSite]]:
    """Every op the timeline stamps, in emission order, with its name and place."""
    found: list[tuple[ops.Op, EventSite]] = []

    def visit(region, role: str, span) -> None:
        for o in region:
            here = o.span or span
            kind = TRACED.get(type(o))
            if kind is not None and role != "-" and not (kind == "sync" and o.scope != "role"):
                where = here.location() if here else "?"
                found.append((o, EventSite(kind, role, _name(o, kind), where)))
            for r in o.regions():
                visit(r, o.symbol if isinstance(o, ops.RoleOp) else role, here)

    visit(kernel.body, "-", kernel.span)
    return found


def _name(o: ops.Op, kind: str) -> str:
    if kind in ("tma load", "tma store"):
        return f"{kind} {o.box}"
    if kind in ("wait", "arrive"):
        return f"{kind} {o.barrier.name}"
    return kind


def manifest_assumptions(kernel: ops.KernelOp) -> tuple[Assumption, ...]:
    """The kernel's `assume` ops that some launch could break (one with no launch-bound name was
    proven at compile time), with their places in the source."""
    found = [Assumption(o.text, _tree(o.lhs), o.compare, _tree(o.rhs), *_place(o.span, ""))
             for o in kernel.body if isinstance(o, ops.AssumeDecl)]
    return tuple(a for a in found if checks.names(a))


def _tree(e: ex.Expr):
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Param):
        return e.name
    if isinstance(e, ex.Neg):
        return ("neg", _tree(e.operand))
    return (e.op, _tree(e.lhs), _tree(e.rhs))
