"""AST + KernelInfo → high-level IR (pipelines and roles still implicit).

Lowering is a direct translation: sema already resolved every name, so nothing here can fail on
user input. Spans travel with every op.
"""

from __future__ import annotations

from ..sema.declarations import (
    Box,
    KernelInfo,
    Mbarrier,
    Pipeline,
    Scalar,
    SmemBuffer,
    TmemTile,
)
from ..ir import exprs as ex
from ..ir import ops
from ..sema.rows import per_row_limit
from ..sema.scope import CLUSTER
from ..syntax import ast
from ..targets import cluster, tma


def lower_kernel(info: KernelInfo) -> ops.KernelOp:
    body: list[ops.Op] = [_param(info.symbols[p.name]) for p in info.node.params]
    body += _assumptions(info)
    copies = _warpgroup_buffers(info)
    for sym in info.symbols.values():
        for name in copies.get(getattr(sym, "name", None), [None]):
            decl = _declaration(sym, _slices(info, getattr(sym, "name", "")))
            if decl is not None and name is not None:
                decl.symbol = name
            if decl is not None:
                body.append(decl)
    if info.prefetch_maps is not None:   # one thread, before anything else: the maps are in cache for every role
        maps = [ops.TensorMapPrefetch(b.name, span=info.prefetch_maps.span)
                for b in info.symbols.values() if isinstance(b, Box) and not b.bulk]
        body.append(ops.Elect("block", maps, span=info.prefetch_maps.span))
    lowerer = _Statements(info)
    for role in info.roles:
        for g, (name, first, last) in enumerate(_warpgroup_roles(role)):
            lowerer.accs = {name for (owner, name) in info.accumulators if owner == role.name}
            lowerer.acc_parts = {name: acc.parts for (owner, name), acc in info.accumulators.items() if owner == role.name}
            lowerer.rows = set()
            lowerer.warpgroup = (g, (role.warps // 4) if role.by_warpgroup else 1)
            lowerer.buffers = {b: names[g] for b, names in copies.items() if role.name in info.symbols[b].users}
            body.append(ops.RoleOp(name, first, last, role.regs or 0, lowerer.block(role.decl.body),
                                   group=role.name if role.by_warpgroup else "", span=role.decl.span))
    return ops.KernelOp(info.node.name, info.grid, info.cluster, info.cta_group, 0, 0, body,
                        cluster_cols=info.cluster_cols, occupancy=info.occupancy, span=info.node.span)


def _warpgroup_roles(role) -> list[tuple[str, int, int]]:
    """(name, first warp, last warp) of the IR roles a role becomes: itself, or with `by warpgroup`
    (§15f) one role per warpgroup, each walking its share of the tiles with its own registers,
    syncs and buffers; `group` names the role they came from (order_turns chains their turns)."""
    if not role.by_warpgroup:
        return [(role.name, role.first_warp, role.last_warp)]
    return [(f"{role.name}.wg{g}", role.first_warp + 4 * g, role.first_warp + 4 * g + 3)
            for g in range(role.warps // 4)]


def _warpgroup_buffers(info: KernelInfo) -> dict[str, list[str]]:
    """smem buffer -> its per-warpgroup copies, for the buffers of `by warpgroup` roles: each
    warpgroup stages its own tiles (sema: such a buffer has no other user)."""
    taken = set(info.symbols) | set(info.dims)
    copies = {}
    for role in info.roles:
        if not role.by_warpgroup:
            continue
        for b in info.symbols.values():
            if isinstance(b, SmemBuffer) and role.name in b.users:
                names = []
                for g in range(role.warps // 4):
                    name = f"{b.name}_wg{g}"
                    while name in taken:
                        name += "_"
                    taken.add(name)
                    names.append(name)
                copies[b.name] = names
    return copies


def _shape(info: KernelInfo) -> tuple[int, int]:
    return info.cluster // info.cluster_cols, info.cluster_cols


def _slices(info: KernelInfo, box: str) -> int:
    """Into how many slices a multicast box splits: the size of the CTA set it is multicast to."""
    if not info.multicast_boxes.get(box):
        return 1
    return cluster.size(_shape(info), info.multicast_sets[box])


def _assumptions(info: KernelInfo) -> list[ops.Op]:
    """The kernel's `assume` lines, beside its parameters: the host checks them at launch (§2b)."""
    exprs = _Statements(info)
    return [ops.AssumeDecl(a.text, exprs.int_expr(a.lhs), a.op, exprs.int_expr(a.rhs), span=a.span)
            for a in info.assumptions]


def _param(sym) -> ops.Op:
    if isinstance(sym, Scalar):
        return ops.ScalarDecl(sym.name, sym.dtype.name, span=sym.span)
    return ops.TensorDecl(sym.name, sym.dtype.name, list(sym.shape), span=sym.span)


def _declaration(sym, multicast: int) -> ops.Op | None:
    if isinstance(sym, Box):
        return ops.BoxDecl(sym.name, sym.tensor.name, sym.dtype.name, list(sym.shape), list(sym.strides),
                           sym.swizzle, sym.oob, sym.l2, multicast, sym.pair, sym.cache, sym.mode, sym.interleave,
                           sym.im2col, span=sym.span)
    if isinstance(sym, Pipeline):
        fields = [f"{name}:{box.name}" for name, box in sym.fields.items()]
        fields += [f"{name}:tmem:{m}x{n}" for name, (m, n) in sym.tmem_fields.items()]
        return ops.PipelineDecl(sym.name, sym.stages, fields, sym.peer, span=sym.span)
    if isinstance(sym, SmemBuffer):
        return ops.BufferDecl(sym.name, sym.box.name, sym.stages or 1, sym.box.bytes, tma.SWIZZLES[sym.box.swizzle].tile_alignment, -1,
                              span=sym.span)
    if isinstance(sym, Mbarrier):
        return ops.MbarrierDecl(sym.name, 1, sym.count, 0, -1, span=sym.span)
    if isinstance(sym, TmemTile):
        return ops.TmemDecl(sym.name, sym.stages, list(sym.shape), -1, span=sym.span)
    return None


class _Statements:
    def __init__(self, info: KernelInfo):
        self.info = info
        self.slots: dict[str, str] = {}   # slot name -> pipeline name, inside produce/consume
        self.loops = 0
        self.elected = False               # inside `elect`
        self.warpgroup = (0, 1)            # (g, n): warpgroup g of n walking tiles by warpgroup
        self.buffers: dict[str, str] = {}  # an smem buffer -> this warpgroup's copy of it
        self.accs: set[str] = set()        # accumulators of the role being lowered
        self.split: ex.Expr = ex.Const(1)  # the enclosing tile loop's parts per tile
        self.renamed: dict[str, ex.Expr] = {}   # a `part` steps loop's index: its first step + the count
        self.stream: list[str] = []        # a stream tile loop's names: this CTA's first step of the tile, count

    def block(self, stmts: list) -> list[ops.Op]:
        out: list[ops.Op] = []
        for s in stmts:
            lowered = self.stmt(s)
            out += lowered if isinstance(lowered, list) else [lowered]
        return out

    def stmt(self, s) -> ops.Op | list[ops.Op]:
        return getattr(self, "_" + type(s).__name__)(s)

    def _ForTiles(self, s: ast.ForTiles):
        self.loops += 1
        index = s.index or f"tile{self.loops}"
        box = self.info.box_for(s.box)
        if s.stream is not None:
            return self._stream_tiles(s, index, box)
        if s.split is None:
            g, n = self.warpgroup
            return ops.ForTiles(list(s.vars), box.tensor.name, box.name, index, s.group or 0,
                                self.block(s.body), dynamic=s.dynamic, every=n, offset=g, reverse=s.reverse,
                                span=s.span)
        self.split = self.int_expr(s.split)
        body = self.block(s.body)
        loop = ops.ForTiles(list(s.vars[1:]), box.tensor.name, box.name, index, s.group or 0, body,
                            self.split, s.vars[0], s.dynamic, reverse=s.reverse, span=s.span)
        self.split = ex.Const(1)
        return loop

    def _stream_tiles(self, s: ast.ForTiles, index: str, box) -> ops.ForTiles:
        """A stream walk carries its stream loops' steps(extent, chunk) (sema: every stream loop
        cuts the same, its extent launch-bound) and names the two values it binds per tile."""
        cut = next(x for x in ast.statements(s.body) if isinstance(x, ast.ForSteps) and x.stream)
        self.stream = [f"{index}.step0", f"{index}.nsteps"]
        loop = ops.ForTiles(list(s.vars), box.tensor.name, box.name, index, s.group or 0, self.block(s.body),
                            extent=self.int_expr(cut.extent), chunk=cut.chunk, stream=list(self.stream),
                            reverse=s.reverse, span=s.span)
        self.stream = []
        return loop

    def _ForSteps(self, s: ast.ForSteps):
        if s.stream is not None:
            return self._stream_steps(s)
        count = ex.step_count(self.int_expr(s.extent), s.chunk)
        if s.part is None:
            return ops.ForRange(s.var, count, self.block(s.body), span=s.span)
        return self._part(s, count)

    def _stream_steps(self, s: ast.ForSteps) -> ops.ForRange:
        """This CTA's steps of the tile: the tile walk binds the first and the count (passes/
        stream_walk.py); as with `part`, the loop counts from 0 and the body reads first + count."""
        first, count = self.stream
        self.renamed[s.var] = ex.add(ex.Var(first), ex.Var(f"{s.var}.i"))
        body = self.block(s.body)
        del self.renamed[s.var]
        return ops.ForRange(f"{s.var}.i", ex.Var(count), body, span=s.span)

    def _part(self, s: ast.ForSteps, count: ex.Expr) -> list[ops.Op]:
        """Part p of S of the steps 0 .. n - 1: q = n / S steps each, and the first n % S parts one
        more, so that parts differ by at most one step and no product can wrap (all stay <= n). The
        loop counts from 0 and the index `k` is first + count wherever the body reads it, which
        keeps the loop body what it is without a part (the passes match on it)."""
        name = lambda suffix: f"{s.var}.{suffix}"   # noqa: E731
        steps, part = ex.Var(name("steps")), ex.Var(s.part.name)
        share, rest = ex.Bin("udiv", steps, self.split), ex.Bin("urem", steps, self.split)
        first = ex.add(ex.Bin("*", part, share), ex.Bin("umin", part, rest))
        vals = [ops.Val(steps.name, ex.Bin("max", count, ex.Const(0)), span=s.span),
                ops.Val(name("first"), first, span=s.span)]
        self.renamed[s.var] = ex.add(ex.Var(name("first")), ex.Var(name("i")))
        body = self.block(s.body)
        del self.renamed[s.var]
        trips = ex.add(share, ex.Bin(">", rest, part))
        return vals + [ops.ForRange(name("i"), trips, body, span=s.span)]

    def _pipeline_block(self, cls, s):
        self.slots[s.slot] = s.pipeline.name
        body = self.block(s.body)
        del self.slots[s.slot]
        return cls(s.pipeline.name, s.slot, body, span=s.span)

    def _Produce(self, s):
        return self._pipeline_block(ops.Produce, s)

    def _Consume(self, s):
        return self._pipeline_block(ops.Consume, s)

    def _Load(self, s: ast.Load):
        """One op per TMA mode (ops/copies.py): each takes only its own operands."""
        barrier = ex.BufferRef(s.barrier.name, ex.Const(0)) if s.barrier else None
        box = self.info.box_for(s.source)
        head = (box.name, self.copy_coords(s), self.tile(s.dest), barrier)
        if box.mode in ("im2col", "im2col_wide"):
            return ops.Im2colLoad(*head, self.im2col_offsets(box, s), span=s.span)
        if box.mode == "gather4":
            return ops.GatherLoad(*head, s.gather, span=s.span)
        if box.mode == "bulk":
            return ops.BulkLoad(*head, span=s.span)
        ctas = self.info.multicast_sets.get(box.name, "cluster")
        return ops.TmaLoad(*head, s.multicast, False, elements=s.elements, ctas=ctas, span=s.span)

    def _Store(self, s: ast.Store):
        if s.through is not None:
            return self._staged_store(s)
        box = self.info.box_for(s.target)
        head = (box.name, self.copy_coords(s), self.tile(s.source))
        if box.mode == "gather4":
            return ops.ScatterStore(*head, s.gather, span=s.span)
        if box.mode == "bulk":
            return ops.BulkStore(*head, s.reduce, span=s.span)
        return ops.TmaStore(*head, s.reduce, elements=s.elements, span=s.span)

    def _staged_store(self, s: ast.Store) -> ops.StagedStore:
        """Block 0's coordinates in units of the staging box: its columns are the tile's / blocks."""
        staging = self.info.symbols[s.through.name]
        coords = [self.int_expr(c) for c in s.coords]
        if not s.elements:
            coords[-1] = ex.Bin("*", coords[-1], ex.Const(s.blocks))
        self.block_cols = staging.box.shape[-1]
        return ops.StagedStore(staging.box.name, coords, self.tile_expr(s.source),
                               self.buffers.get(staging.name, staging.name), s.blocks,
                               s.reduce, s.elements, span=s.span)

    def im2col_offsets(self, box, s) -> list[ex.Expr]:
        """An im2col copy's filter position; without `offsets`, 0 along every spatial dim (a wide
        box's one wOffset)."""
        offsets = [self.int_expr(c) for c in s.offsets or []]
        if not offsets:
            offsets = [ex.Const(0)] * (1 if box.im2col.wide else len(box.im2col.lower))
        return offsets

    def copy_coords(self, s) -> list[ex.Expr]:
        """A copy's tile coordinates; a gathered row `idx[p]` becomes its position p (the op names idx)."""
        coords = [s.coords[0].block[0], *s.coords[1:]] if s.gather else s.coords
        return [self.int_expr(c) for c in coords]

    def _Prefetch(self, s: ast.Prefetch):
        box = self.info.box_for(s.box)
        head = (box.name, self.copy_coords(s))
        if box.mode in ("im2col", "im2col_wide"):
            prefetch = ops.Im2colPrefetch(*head, self.im2col_offsets(box, s), span=s.span)
        elif box.mode == "gather4":
            prefetch = ops.GatherPrefetch(*head, s.gather, span=s.span)
        elif box.mode == "bulk":
            prefetch = ops.BulkPrefetch(*head, span=s.span)
        else:
            prefetch = ops.TmaPrefetch(*head, elements=s.elements, span=s.span)
        return prefetch if self.elected else ops.Elect("role", [prefetch], span=s.span)   # one thread issues it

    def _is_tmem(self, ref) -> bool:
        return (isinstance(ref, ast.Ref) and ref.field is not None and ref.name in self.slots
                and ref.field in self.info.symbols[self.slots[ref.name]].tmem_fields)

    def _Assign(self, s: ast.Assign):
        if s.target.field is None and s.target.name in self.accs and not s.row_math:
            return ops.AccZero(s.target.name, span=s.span)
        if s.row_math:
            return ops.RowAssign(self.row_operand(s.target), self.tile_expr(s.value), span=s.span)
        if self._is_tmem(s.target) and isinstance(s.value, ast.Ref):
            return ops.Tcgen05Cp(self.tile(s.target), s.tmem_column, self.tile(s.value), span=s.span)
        if self._is_tmem(s.target):
            return ops.TmemZero(self.tile(s.target), span=s.span)
        self.block_cols = self._tile_box(s.target).shape[-1]   # an `acc[0, j]` block's width
        value = self.tile_expr(s.value)
        if any(isinstance(e, ex.AccRef) for e in ex.walk(value)):
            return ops.AccStore(self.tile(s.target), value, span=s.span)
        if any(isinstance(e, ex.TmemRef) for e in ex.walk(value)):
            return ops.TmemEpilogue(self.tile(s.target), value, span=s.span)
        return ops.TileAssign(self.tile(s.target), value, span=s.span)

    def row_operand(self, ref: ast.Ref) -> ex.Expr:
        if ref.field is None and ref.name in self.rows:
            return ex.RowVar(ref.name)
        if ref.field is None and ref.name in self.accs:
            return ex.AccRef(ref.name)
        return self.tile(ref)

    def _RowDecl(self, s: ast.RowDecl):
        self.rows.add(s.name)
        return ops.RowDecl(s.name, s.cols or 0, span=s.span)

    def _AccumulatorDecl(self, s: ast.AccumulatorDecl):
        return ops.AccDecl(s.name, s.dtype.name, list(s.shape), self.acc_parts.get(s.name, 1), span=s.span)

    def _Mma(self, s: ast.Mma):
        if self._is_tmem(s.acc):
            return ops.Tcgen05Mma(self.tile(s.acc), self.tile(s.a), self.tile(s.b), span=s.span)
        if isinstance(s.a, ast.Call):
            a = ex.Cast(s.a.func, ex.AccRef(s.a.args[0].name))
        elif s.a.field is None and s.a.name in self.accs:
            a = ex.AccRef(s.a.name)        # a bf16/f16 accumulator: the A fragment as it lies
        else:
            a = self.tile(s.a)
        return ops.Wgmma(s.acc.name, a, self.tile(s.b), s.kn, s.km, span=s.span)

    def _Elect(self, s):
        self.elected = True
        body = self.block(s.body)
        self.elected = False
        return ops.Elect("role", body, span=s.span)

    def _Turn(self, s):
        return ops.Turn(self.block(s.body), span=s.span)

    def _ExpectTx(self, s):
        return ops.MbarExpectTx(_single(s.barrier), self.int_expr(s.bytes), span=s.span)

    def _Arrive(self, s):
        return ops.MbarArrive(_single(s.barrier), span=s.span)

    def _Wait(self, s):
        return ops.MbarWait(_single(s.barrier), self.int_expr(s.parity), span=s.span)

    def _Fence(self, s):
        return ops.Fence(s.kind.name, span=s.span)

    def _Sync(self, s):
        return ops.Sync("role", span=s.span)

    def _CommitGroup(self, s):
        return ops.BulkCommit(span=s.span)

    def _WaitGroup(self, s):
        return ops.BulkWait(s.pending, s.read, span=s.span)

    # ---- operands
    def tile(self, ref: ast.Ref) -> ex.BufferRef:
        if ref.field is not None:
            return ex.BufferRef(f"{self.slots[ref.name]}.{ref.field}", ex.Var(ref.name))
        return ex.BufferRef(self.buffers.get(ref.name, ref.name), ex.Const(0))

    def _tile_box(self, ref: ast.Ref) -> Box:
        if self._is_tmem(ref):
            raise AssertionError("a tmem tile is never an epilogue target (sema)")
        if ref.field is not None:
            return self.info.symbols[self.slots[ref.name]].fields[ref.field]
        return self.info.symbols[ref.name].box

    def _block_column(self, ref: ast.Ref) -> int:
        """The first accumulator column an epilogue reads: j × block width for `acc[0, j]`."""
        return 0 if ref.block is None else ref.block[1].value * self.block_cols

    def int_expr(self, e) -> ex.Expr:
        if isinstance(e, ast.Number):
            return ex.Const(e.value)
        if isinstance(e, ast.Ref) and e.name == CLUSTER and e.field is not None:
            return self._cluster_coordinate(e.field)
        if isinstance(e, ast.Ref) and e.block is not None:     # `t[i]`: an element read (sema)
            return ex.Elem(e.name, self.int_expr(e.block[0]))
        if isinstance(e, ast.Ref):
            # sema forbids locals that shadow kernel names, so a launch-bound name is never a local
            launch_bound = e.name in self.info.dims or isinstance(self.info.symbols.get(e.name), Scalar)
            return ex.Param(e.name) if launch_bound else self.renamed.get(e.name, ex.Var(e.name))
        if isinstance(e, ast.Neg):
            inner = self.int_expr(e.operand)
            return ex.Const(-inner.value) if isinstance(inner, ex.Const) else ex.Neg(inner)
        if isinstance(e, ast.Call):          # min / max (sema)
            return ex.Bin(e.func, self.int_expr(e.args[0]), self.int_expr(e.args[1]))
        return ex.Bin(e.op, self.int_expr(e.lhs), self.int_expr(e.rhs))

    def _cluster_coordinate(self, name: str) -> ex.Expr:
        """cluster.rank is %cluster_ctarank; x and y split it as targets/cluster.py does."""
        rows, cols = _shape(self.info)
        rank = ex.Sreg("cluster.ctarank")
        if name == "rank":
            return rank
        if name == "x":
            return ex.Bin("urem", rank, ex.Const(rows)) if rows > 1 else ex.Const(0)
        return ex.Bin("udiv", rank, ex.Const(rows)) if cols > 1 else ex.Const(0)

    def _mask_limit(self, limit) -> ex.Expr:
        """An integer expression, or a row register plus or minus one (sema/rows.py)."""
        per_row = per_row_limit(limit, self.rows)
        if per_row is None:
            return self.int_expr(limit)
        name, rest = per_row
        return ex.RowVar(name) if rest is None else ex.Bin(rest[0], ex.RowVar(name), self.int_expr(rest[1]))

    def tile_expr(self, e) -> ex.Expr:
        if isinstance(e, ast.Number):
            return ex.Const(e.value)
        if isinstance(e, ast.Ref):
            if e.field is None and isinstance(self.info.symbols.get(e.name), Scalar):
                return ex.Param(e.name)
            if e.field is None and e.name in self.accs:
                return ex.AccRef(e.name, self._block_column(e))
            if e.field is None and e.name in self.rows:
                return ex.RowVar(e.name)
            if self._is_tmem(e):
                return ex.TmemRef(self.tile(e), self._block_column(e))
            return self.tile(e)
        if isinstance(e, ast.Neg):
            inner = self.tile_expr(e.operand)
            return ex.Const(-inner.value) if isinstance(inner, ex.Const) else ex.Neg(inner)
        if isinstance(e, ast.Call) and e.func in ex.MASKS:
            return ex.Call(e.func, (self.tile_expr(e.args[0]), self._mask_limit(e.args[1])))
        if isinstance(e, ast.Call) and e.func in ex.ROW_FUNCTIONS:
            return ex.Call(e.func, tuple(self.tile_expr(a) for a in e.args))
        if isinstance(e, ast.Call):
            args = [self.tile_expr(a) for a in e.args]
            return ex.Bin(e.func, *args) if e.func in ("max", "min") else ex.Cast(e.func, args[0])
        return ex.Bin(e.op, self.tile_expr(e.lhs), self.tile_expr(e.rhs))


def _single(ref: ast.Ref) -> ex.BufferRef:
    return ex.BufferRef(ref.name, ex.Const(0))
