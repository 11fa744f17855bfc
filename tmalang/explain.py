"""`--explain`: the schedule the passes derived, as tables a person can check.

Barrier table (name, stages, arrivals per phase, tx bytes, who waits with which parity, who
arrives), the smem map, and roles → warps/threads/register budget; where a kernel has them, L2
prefetches, peer pushes, im2col walks, panelled boxes (each copy's panels) and the named
barriers of the roles whose warpgroups take turns, a dynamic tile loop's claims, and the
assumptions every launch must satisfy.
"""

from __future__ import annotations

from collections import defaultdict

from .contract.manifest import GridSpec
from .ir import ops
from .passes.plan_smem import smem_map
from .targets import tma
from .targets.arch import Target
from .targets.dtypes import itemsize


def explain(kernel: ops.KernelOp, target: Target, grid: GridSpec | None = None) -> str:
    rows, cols = kernel.cluster_shape()
    cluster = f", clusters of {kernel.cluster}" if kernel.cluster > 1 else ""
    cluster += f" ({rows}x{cols} tiles)" if cols > 1 else ""
    pairs = (", CTA pairs (cta_group 2): the MMA role runs in each pair's leader (even rank)"
             if kernel.cta_group == 2 else "")
    header = (f"kernel {kernel.symbol}: grid {kernel.grid}{cluster}{pairs}, {kernel.threads} threads, "
              f"{kernel.smem_bytes} bytes dynamic smem")
    lines = [header, *_split(grid), ""]
    lines += _table(["role", "warps", "threads", "regs"], _roles(kernel))
    lines += [""] + _table(["barrier", "stages", "count", "tx bytes", "waits (parity)", "arrives"], _barriers(kernel))
    lines += ["", "smem map (offset +bytes name):", *("  " + row for row in smem_map(kernel))]
    lines += _tmem_map(kernel, target)
    lines += _turns(kernel)
    lines += _l2(kernel)
    lines += _pushes(kernel)
    lines += _im2col(kernel)
    lines += _panels(kernel)
    lines += _claims(kernel)
    lines += _assumptions(kernel)
    return "\n".join(lines) + "\n"


def _assumptions(kernel: ops.KernelOp) -> list[str]:
    """The kernel's `assume` lines (§2b): the launch refuses arguments that break one (E219)."""
    rows = [f"  {o.text}" for o in kernel.body if isinstance(o, ops.AssumeDecl)]
    return ["", "assumptions (every launch must satisfy them, or it is refused: E219):", *rows] if rows else []


def _split(grid: GridSpec | None) -> list[str]:
    """A split or stream-K tile walk: how many times each tile runs, or how its steps are cut
    among the CTAs, and in which order (it sizes the grid)."""
    tiles = " x ".join(f"ceil({d}/{b})" for d, b in grid.tile_dims) if grid else ""
    if grid is not None and grid.stream:
        extent, chunk = grid.stream
        return [f"tile walk: {tiles} tiles x ceil({extent}/{chunk}) K steps each (stream-K): the grid's CTAs "
                "take equal contiguous ranges of these (tile, step) units, visiting only the tiles their range "
                "touches; a tile split between CTAs is finished by each adding its partial sum (reduce add)"]
    if grid is None or grid.split == 1:
        return []
    return [f"tile walk: {tiles} tiles, each split into {grid.split} parts of its K steps ({grid.split} x "
            "the tiles in all, the part slowest: CTAs running together work on the same part)"]


def _claims(kernel: ops.KernelOp) -> list[str]:
    """A dynamic tile loop (passes/claim_tiles.py): who claims, through which queue, who reads."""
    queue = ops.decls(kernel, ops.TileQueueDecl).get("claims.queue")
    if queue is None:
        return []
    roles = [r.symbol for r in ops.roles(kernel) if any(isinstance(o, ops.TileTake) for o in ops.walk(r.body))]
    claims = (ops.TileClaim, ops.ClcQuery)
    claimer = next(r.symbol for r in ops.roles(kernel) if any(isinstance(o, claims) for o in ops.walk(r.body)))
    if kernel.grid == "tiles":
        how = ["", f"dynamic tile walk (cluster launch control): role {claimer}'s elected thread claims the CTA's "
               "own tile (ctaid.x) first, then the tile of each CTA not yet started that it cancels "
               "(clusterlaunchcontrol.try_cancel into @claims.response, 16 bytes on claims.cancel), and puts "
               f"it in @{queue.symbol} ({queue.stages} u32 slots, offset {queue.offset});"]
        end = "  a failed cancel (no CTA left waiting) publishes the tile count and ends every role's walk; no counter"
    else:
        how = ["", f"dynamic tile walk: role {claimer}'s elected thread claims each tile (atom.global.add.u32 "
               f"on the hidden tile counter) and puts it in @{queue.symbol} ({queue.stages} u32 slots, "
               f"offset {queue.offset});"]
        end = ("  a claim >= the tile count ends every role's walk; the launch's last claim (tiles + CTAs - 1) puts "
               "the counter back to 0")
    return how + [f"  claims.full (count 1) tells {', '.join(roles)} a claim is there; each role reads it, syncs, "
                  "and its elected thread arrives on claims.empty, which the claimer waits on before reusing the "
                  "slot;", end]


def _turns(kernel: ops.KernelOp) -> list[str]:
    """Per chain of warpgroups with turns (a role's, or the roles a `by warpgroup` role became):
    the named barrier each warpgroup syncs on to enter a turn and the one it arrives on to leave
    it, the turn blocks, and who opens the first turn."""
    rows, chains = [], {}
    for role in ops.roles(kernel):
        chains.setdefault(role.group or role.symbol, []).append(role)
    for name, roles in chains.items():
        places, sites, opener = [], {}, None
        for role in roles:
            first = {}
            for o in ops.walk(role.body):
                if isinstance(o, ops.InWarpgroup) and isinstance(o.body[0], (ops.NamedBarSync, ops.NamedBarArrive)):
                    first.setdefault((o.group, type(o.body[0])), o.body[0])
                    if isinstance(o.body[0], ops.NamedBarSync):
                        sites[o.body[0].span.location() if o.body[0].span else "?"] = None
            start = next((o for o in role.body if isinstance(o, ops.InWarpgroup)
                          and isinstance(o.body[0], ops.NamedBarArrive)), None)
            opener = opener or (start and (role, start))
            leaves = {g: b for o in ops.walk(role.body) if isinstance(o, ops.InWarpgroup) and o is not start
                      for g, b in [(o.group, o.body[0])] if isinstance(b, ops.NamedBarArrive)}
            places += [(role, g, sync, leaves.get(g)) for (g, kind), sync in sorted(first.items(), key=lambda x: x[0][0])
                       if kind is ops.NamedBarSync]
        if not places:
            continue
        who = (f"{name}: warpgroups 0..{len(places) - 1}" if len(roles) == 1 else
               f"{name} (by warpgroup: {', '.join(r.symbol for r in roles)}): {len(places)} warpgroups")
        rows.append(f"  {who} issue each turn one at a time, round-robin "
                    f"({len(sites)} turn block(s) at {', '.join(sites)})")
        for role, g, sync, leave in places:
            where = f"warpgroup {g}" if len(roles) == 1 else f"{role.symbol} (warpgroup {g})"
            out = f"; leaves with bar.arrive {leave.id}, {leave.count}" if leave is not None else ""
            rows.append(f"    {where}: enters with bar.sync {sync.id}, {sync.count}{out} (after the turn's last "
                        "wgmma commit)")
        if opener is not None:
            role, o = opener
            where, first = ((f"warpgroup {o.group}", "warpgroup 0") if len(roles) == 1 else
                            (role.symbol, roles[0].symbol))
            rows.append(f"    {where} arrives on {o.body[0].id} at role start: {first} goes first")
    return ["", "turns (named barriers; 0 is the block's sync, 1..R the roles'):", *rows] if rows else []


def _l2(kernel: ops.KernelOp) -> list[str]:
    """Prefetches and cache policies, where the kernel has any: they change no barrier or smem."""
    maps = [o.box for o in ops.walk(kernel.body) if isinstance(o, ops.TensorMapPrefetch)]
    boxes = [o.box for o in ops.walk(kernel.body) if isinstance(o, ops.TensorPrefetch)]
    hints = [f"{b.symbol} {b.cache}" for b in ops.decls(kernel, ops.BoxDecl).values() if b.cache != "none"]
    rows = [f"  tensor maps prefetched at kernel start: {', '.join(maps)}"] if maps else []
    rows += [f"  boxes prefetched into L2: {', '.join(dict.fromkeys(boxes))}"] if boxes else []
    rows += [f"  L2 cache policies: {', '.join(hints)}"] if hints else []
    return ["", "L2:", *rows] if rows else []


def _pushes(kernel: ops.KernelOp) -> list[str]:
    """Peer pipelines: which slot each CTA pushes to which rank (distributed shared memory)."""
    rows = [f"  {o.source.name} -> {o.dest.name} of rank (r + {o.peer}) % {kernel.cluster}, {o.bytes} bytes on "
            f"{o.barrier.name} there" for o in ops.walk(kernel.body) if isinstance(o, ops.BulkPush)]
    return ["", "distributed shared memory (bulk pushes, CTA of rank r):", *dict.fromkeys(rows)] if rows else []


def _panels(kernel: ops.KernelOp) -> list[str]:
    """Panelled boxes (§4): how each copy splits. The barriers and smem above count whole tiles."""
    rows = []
    for box in (b for b in ops.decls(kernel, ops.BoxDecl).values() if b.panels() > 1):
        panel = [*tma.tile_shape(box.shape[:-1], box.strides[:-1]), box.panel_cols()]
        panel_bytes = box.bytes(itemsize(box.dtype)) // box.panels()
        rows.append(f"  {box.symbol}: {box.panels()} panels of {panel} ({panel_bytes} bytes), one TMA copy each, "
                    f"at inner coordinate + p x {box.panel_cols()}")
    return ["", "panelled boxes (panel p lands p x its bytes into the tile; the tensor map is one panel):",
            *rows] if rows else []


def _im2col(kernel: ops.KernelOp) -> list[str]:
    """Each im2col box's gather: what one load brings and the pixel box its walk stays in (where
    each filter corner may sit), per spatial dim of the tensor, outermost first."""
    tensors = ops.decls(kernel, ops.TensorDecl)
    rows = []
    for box in (b for b in ops.decls(kernel, ops.BoxDecl).values() if b.im2col):
        dims = tensors[box.tensor].shape[1:-1]
        if box.wide:   # the walk moves along W only (sm_100a): D and H stay at the load's coordinates
            rows.append(f"  {box.symbol}: {box.shape[0] - box.halo} pixels + {box.halo} halo x {box.shape[1]} channels "
                        f"of {box.tensor}, along W only ({box.wide}); bounding box {box.im2col.lower[-1]} .. "
                        f"{_last(dims[-1], box.im2col.upper[-1])} by {box.im2col.strides[-1]}, shifted by each load's wOffset")
            continue
        spans = [f"{lo} .. {_last(dim, hi)} by {step}" for dim, lo, hi, step in zip(dims, box.im2col.lower, box.im2col.upper, box.im2col.strides)]
        rows.append(f"  {box.symbol}: {box.shape[0]} pixels x {box.shape[1]} channels of {box.tensor}; "
                    f"pixel box {' x '.join(spans)}")
    return ["", "im2col (a load walks the pixel box from its coordinates, reading each pixel at its offsets):",
            *rows] if rows else []


def _last(dim, upper: int) -> str:
    """dim - 1 + upper, folded when the dim is a literal."""
    shift = upper - 1
    if isinstance(dim, int):
        return str(dim + shift)
    return dim if shift == 0 else f"{dim} - {-shift}" if shift < 0 else f"{dim} + {shift}"


def _tmem_map(kernel: ops.KernelOp, target: Target) -> list[str]:
    alloc = next((o for o in kernel.body if isinstance(o, ops.TmemAlloc)), None)
    if alloc is None:
        return []
    rows = [f"{t.column:>7} +{t.stages * t.pitch():<7} {t.symbol} ({t.stages} x [{t.shape[0]}, {t.shape[1]}])"
            for t in ops.decls(kernel, ops.TmemDecl).values()]
    return ["", f"tmem map (first column +columns name), {alloc.columns} of {target.tensor_memory.columns} columns allocated:",
            *("  " + row for row in rows)]


def _roles(kernel: ops.KernelOp) -> list[list[str]]:
    rows = []
    for r in ops.roles(kernel):
        warps = f"{r.first_warp}" if r.first_warp == r.last_warp else f"{r.first_warp}..{r.last_warp}"
        rows.append([r.symbol, warps, str(32 * (r.last_warp - r.first_warp + 1)), str(r.regs or "-")])
    return rows


def _barriers(kernel: ops.KernelOp) -> list[list[str]]:
    waits, arrives = defaultdict(list), defaultdict(list)
    both = " in both CTAs of the pair" if kernel.cta_group == 2 else ""
    for role in ops.roles(kernel):
        for o, leader in _walk(role.body, False):
            where = " (in the pair's leader)" if leader else ""
            if isinstance(o, ops.MbarWait):
                waits[o.barrier.name].append(f"{role.symbol} {o.parity}")
            elif isinstance(o, ops.MbarArriveLeader):
                arrives[o.barrier.name].append(f"{role.symbol} (on the pair's leader, from both CTAs)")
            elif isinstance(o, (ops.MbarArrive, ops.MbarArriveExpectTx)) and o.peer:
                arrives[o.barrier.name].append(f"{role.symbol} of rank (r - {o.peer}) % {kernel.cluster}")
            elif isinstance(o, ops.MbarArriveCluster) and o.ctas != "cluster":
                arrives[o.barrier.name].append(f"{role.symbol} (in every CTA of its cluster {o.ctas})")
            elif isinstance(o, (ops.MbarArrive, ops.MbarArriveExpectTx, ops.MbarArriveCluster)):
                arrives[o.barrier.name].append(role.symbol + where)
            elif isinstance(o, ops.Tcgen05CommitCluster):
                to = "the cluster" if o.ctas == "cluster" else f"its cluster {o.ctas}"
                arrives[o.barrier.name].append(f"{role.symbol} (tcgen05.commit in every CTA of {to})")
            elif isinstance(o, ops.Tcgen05Commit):
                arrives[o.barrier.name].append(f"{role.symbol} (tcgen05.commit{both})")
    rows = []
    for m in ops.decls(kernel, ops.MbarrierDecl).values():
        rows.append([m.symbol, str(m.stages), str(m.count), str(m.tx_bytes or "-"),
                     "; ".join(dict.fromkeys(waits[m.symbol])) or "-", ", ".join(sorted(set(arrives[m.symbol]))) or "-"])
    return rows


def _walk(region: list[ops.Op], leader: bool):
    """(op, whether it runs in a CTA pair's leader only) for every op of a region."""
    for o in region:
        yield o, leader
        for r in o.regions():
            yield from _walk(r, leader or isinstance(o, ops.InPairLeader))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths))] + [
        fmt.format(*r).rstrip() for r in rows
    ]
