"""Final IR → LLVM IR (llvmlite). The backend is a table: one emitter per op class.

Variables become allocas (LLVM's mem2reg turns them into registers); async instructions are
inline PTX from ptx_asm.py; the kernel signature (tensor maps as __grid_constant__ byval
parameters, dims, scalars) follows the manifest's `ptx_params` order.
"""

from __future__ import annotations

import contextlib
import gc

from llvmlite import ir

from ..contract.manifest import BulkParam, BulkStrideParam, CounterParam, DimParam, IndexParam, TensorMapParam
from ..ir import exprs as ex
from ..ir import ops
from ..passes.dispatch_roles import register_limit
from ..targets import dtypes
from ..targets.tcgen05 import instructions as tcgen05
from . import (cluster_codegen, emit, line_info, pair_codegen, panel_codegen, prior_grid, ptx_asm,
               tcgen05_codegen, timeline_codegen, watchdog_codegen)
from .bulk_codegen import BULK_EMITTERS
from .claim_codegen import CLAIM_EMITTERS
from .gather_codegen import GATHER_EMITTERS
from .im2col_codegen import IM2COL_EMITTERS
from .builder import KernelBuilder
from .mma_codegen import MMA_EMITTERS
from .pair_codegen import PAIR_EMITTERS
from .row_codegen import ROW_EMITTERS
from .tcgen05_codegen import TCGEN05_EMITTERS
from .tile_math import INT_BINARY, emit_tile_assign

I1, I16, I32, I64 = ir.IntType(1), ir.IntType(16), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()
TCGEN05_EXTRA_REGISTERS = 32
SCALAR_TYPES = {"f32": ir.FloatType(), "f64": ir.DoubleType(), "i32": I32, "u32": I32, "i64": I64, "u64": I64}


class KernelCodegen:
    def __init__(self, kernel: ops.KernelOp, params: list, module: ir.Module, watched: dict[int, int] | None = None,
                 traced: dict[int, int] | None = None):
        self.kernel, self.params, self.module = kernel, params, module
        self.watched = watched or {}   # id(mbar_wait op) -> its watchdog site; empty: no watchdog
        self.traced = traced or {}     # id(op) -> its timeline event site; empty: no timeline
        # Struct types named here print into this module only (llvmlite's default context is shared).
        module.context = ir.Context()
        self.boxes = ops.decls(kernel, ops.BoxDecl)
        self.buffers = ops.decls(kernel, ops.BufferDecl)
        self.short_operands = ops.short_a_operands(ops.roles(kernel))   # stages wider than their tiles
        self.barriers = ops.decls(kernel, ops.MbarrierDecl)
        self.queues = ops.decls(kernel, ops.TileQueueDecl)
        self.roles = ops.roles(kernel)
        self.vars: dict[str, ir.AllocaInstr] = {}           # let and loop variables: stack slots
        self.values: dict[str, ir.Value] = {}              # vals: SSA values
        self.slotted = {name for o in ops.walk(kernel.body) for name in _variables(o)}
        self.accumulators: dict[str, list[ir.AllocaInstr]] = {}   # per-thread registers of each accumulator
        self.accumulator_roles: dict[str, str] = {}                # accumulator -> the role holding it
        self.accumulator_parts: dict[str, int] = {}                # accumulator -> warpgroups splitting its columns
        self.accumulator_dtypes: dict[str, str] = {}               # accumulator -> f32, or bf16/f16 (packed pairs)
        self.tmem_tiles = ops.decls(kernel, ops.TmemDecl)
        self.tmem_flags: dict[str, ir.AllocaInstr] = {}           # tmem tile -> "the next mma accumulates"
        self.rows: dict[str, list[ir.AllocaInstr]] = {}           # row register -> one slot per column
        self.role: ops.RoleOp | None = None
        arg_types = [ir.PointerType() if isinstance(p, TensorMapParam) else self._scalar_type(p) for p in params]
        self.fn = ir.Function(module, ir.FunctionType(VOID, arg_types), kernel.symbol)
        self.args = dict(zip((self._param_key(p) for p in params), self.fn.args))
        self.entry = self.fn.append_basic_block("entry")
        self.b = KernelBuilder(self.entry)
        self.lines = line_info.LineTable(module, self.fn, kernel.span)
        self.b.debug_metadata = self.lines.entry   # the prologue belongs to the kernel's line

    @staticmethod
    def _param_key(p) -> str:
        return param_name(p).removeprefix("tm.")

    @staticmethod
    def _scalar_type(p) -> ir.Type:
        if isinstance(p, (BulkParam, BulkStrideParam, IndexParam, CounterParam)):
            return I64
        return I32 if isinstance(p, DimParam) else SCALAR_TYPES[p.dtype]

    # ---- entry point
    def emit(self) -> ir.Function:
        with _collector_paused():
            return self._emit()

    def _emit(self) -> ir.Function:
        self.tid = self._sreg("tid.x")
        self.warp = self.b.lshr(self.tid, I32(5), name="warp")
        self.smem_base = self._aligned_smem_base()
        waited = bool(self.traced)           # a traced build waits first: its stamps are global stores
        if self.traced:
            prior_grid.wait(self)
            timeline_codegen.prologue(self)
        for o in self.kernel.body:
            if isinstance(o, (ops.RoleOp, ops.Elect, ops.Sync, ops.WarpgroupBlock, ops.Fence, ops.TmemAlloc,
                              ops.TmemDealloc)):
                if not waited and not prior_grid.is_set_up(o):
                    prior_grid.wait(self)
                    waited = True
                self.op(o)
        if not waited:
            prior_grid.wait(self)            # a kernel of set-up only still ends after the one before
        if self.traced:
            timeline_codegen.epilogue(self)
        self.b.ret_void()
        return self.fn

    def _sreg(self, name: str) -> ir.Value:
        return emit.sreg(self.b, name, name.replace(".", "_"))

    def _aligned_smem_base(self) -> ir.Value:
        return self.aligned_smem_base(self.b, name="smem_base")

    def aligned_smem_base(self, b: ir.IRBuilder, name: str = "") -> ir.Value:
        """The shared address of the dynamic window, aligned up to the largest buffer alignment."""
        # A `$`, which PTX allows in names and no tmalang name can spell: a kernel named
        # `tmalang_smem` (or anything else) cannot collide with it.
        smem = self.module.globals.get("tmalang$smem")
        if smem is None:
            smem = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), 0), "tmalang$smem", addrspace=3)
            smem.linkage, smem.align = "external", 16
        align = max([buffer.align for buffer in self.buffers.values()] + [16])
        raw = b.trunc(b.ptrtoint(smem, I64), I32)
        return b.and_(b.add(raw, I32(align - 1)), I32(-align & 0xFFFFFFFF), name=name)

    # ---- helpers
    def alloca(self, name: str, typ: ir.Type = I32, init: ir.Value | None = None) -> ir.AllocaInstr:
        """A slot in the entry block, where mem2reg promotes it to a register; `init` is stored
        into it there, before anything else runs."""
        with self.b.goto_block(self.entry):
            self.b.position_at_start(self.entry)
            slot = self.b.alloca(typ, name=name)
            if init is not None:
                self.b.position_after(slot)
                self.b.store(init, slot)
            return slot

    def asm(self, template: str, constraints: str, args: list, ret: ir.Type = VOID) -> ir.Value:
        return emit.asm(self.b, template, constraints, args, ret, convergent=True)

    def here(self, value: ir.Value) -> ir.Value:
        """`value`, computed where it is used: what derives from it stays inside the loop around.
        A slot that stays put over a loop (K and V in attention's backward, held while the query
        blocks go by) would otherwise have LLVM hoist every value derived from its address out
        of the loop, each wgmma K step's descriptor and each epilogue store's address, and keep
        them in registers across it: in that kernel, tens of registers spilled for values one add
        rebuilds. A `mov` the optimiser cannot move or merge."""
        assert value.type == ir.IntType(32), value.type
        move = ir.InlineAsm(ir.FunctionType(value.type, [value.type]), "mov.b32 $0, $1;", "=r,r", side_effect=True)
        return self.b.call(move, [value])

    def registers(self, element: ir.Type, count: int) -> ir.Type:
        """The result type of an inline asm with `count` outputs of type `element`: a struct of
        them, named, so that the module spells it once and not in each extractvalue (a wgmma's
        128 floats made two thirds of the LLVM text, and of LLVM's parsing); one output is a plain
        value."""
        if count == 1:
            return element
        named = self.module.context.get_identified_type(f"{element}x{count}")
        if named.is_opaque:
            named.set_body(*[element] * count)
        return named

    def if_then(self, cond: ir.Value, body) -> None:
        with self.b.if_then(cond):
            body()

    def region(self, region: list[ops.Op]) -> None:
        for o in region:
            self.op(o)

    def op(self, o: ops.Op) -> None:
        """Emit one op; its instructions carry its source line (an op without a span, made by a
        pass, keeps the line of the op around it)."""
        location = self.lines.at(o.span)
        if location is None:
            self._emit_op(o)
            return
        outer, self.b.debug_metadata = self.b.debug_metadata, location
        self._emit_op(o)
        self.b.debug_metadata = outer

    def _emit_op(self, o: ops.Op) -> None:
        site = self.traced.get(id(o))
        if site is None:
            EMITTERS[type(o)](self, o)
        else:
            timeline_codegen.around(self, o, site, lambda: EMITTERS[type(o)](self, o))

    def tile_bytes(self, name: str) -> int:
        """The bytes of one tile of buffer `name`, which a copy into or out of it moves: a stage's,
        but for a short accumulator's A, whose stages span whole 64-row tiles (plan_smem): its box's."""
        if name not in self.short_operands:
            return self.buffers[name].bytes
        box = self.boxes[self.buffers[name].box]
        return box.bytes(dtypes.itemsize(box.dtype))

    def address(self, ref: ex.BufferRef) -> ir.Value:
        """The 32-bit shared address of stage `ref.index` of a buffer or mbarrier."""
        decl = self.buffers.get(ref.name) or self.barriers.get(ref.name) or self.queues[ref.name]
        size = (decl.bytes if isinstance(decl, ops.BufferDecl) else
                decl.stage_bytes if isinstance(decl, ops.TileQueueDecl) else 8)
        stage = self.b.mul(self.expr(ref.index), I32(size))
        return self.b.add(self.smem_base, self.b.add(stage, I32(decl.offset)))

    def expr(self, e: ex.Expr) -> ir.Value:
        """An integer expression (index math)."""
        if isinstance(e, ex.Const):
            return I32(int(e.value))
        if isinstance(e, ex.Var):
            value = self.values.get(e.name)
            return value if value is not None else self.b.load(self.vars[e.name], name=e.name)
        if isinstance(e, ex.Param):
            value = self.args[e.name]
            return value if value.type == I32 else self.b.trunc(value, I32)
        if isinstance(e, ex.Sreg):
            return self._sreg(e.name)
        if isinstance(e, ex.Elem):
            return self.element_read(e)
        if isinstance(e, ex.Neg):
            return self.b.neg(self.expr(e.operand))
        lhs, rhs = self.expr(e.lhs), self.expr(e.rhs)
        return INT_BINARY[e.op](self.b, lhs, rhs)

    def element_read(self, e: ex.Elem) -> ir.Value:
        """`t[i]` (§18): one guarded ld.global.nc.s32, 0 outside the tensor (sema/scope.py: the
        kernel does not write t, so the read-only path is coherent)."""
        length = ops.decls(self.kernel, ops.TensorDecl)[e.tensor].shape[0]
        length = self.args[length] if isinstance(length, str) else I32(length)
        at = self.expr(e.index)
        address = self.b.add(self.args[f"{e.tensor}.addr"], self.b.mul(self.b.zext(at, I64), I64(4)))
        return self.asm(ptx_asm.PTX["element_read"], "=r,r,r,l", [at, length, address], ret=I32)

    @property
    def ld_width(self) -> int:
        """The widest tcgen05.ld/st (registers, a power of two up to x128) the current role can issue:
        ptxas needs the whole destination plus about 18 registers at once (measured for x64; 32 kept
        here), or it stops with C7602, so a role on a large block gets narrower loads."""
        room = register_limit(self.kernel, self.role) - TCGEN05_EXTRA_REGISTERS
        return 1 << (max(1, min(tcgen05_codegen.LD_MAX, room)).bit_length() - 1)

    def role_threads(self) -> int:
        return 32 * (self.role.last_warp - self.role.first_warp + 1)

    def tensor_map(self, box: str) -> ir.Value:
        return self.b.ptrtoint(self.args[box], I64)

    def bulk_address(self, box: ops.BoxDecl, coords: list[ex.Expr]) -> ir.Value:
        """The global address of a bulk box's chunk at tile coordinates `coords` (outermost first):
        the tensor's address plus coordinate x byte stride per outer dim, plus chunk x chunk bytes."""
        *outer, inner = [self.b.zext(self.expr(c), I64) for c in coords]
        address = self.b.add(self.args[f"{box.symbol}.addr"],
                             self.b.mul(inner, I64(box.shape[-1] * dtypes.itemsize(box.dtype))))
        for axis, c in enumerate(outer):
            address = self.b.add(address, self.b.mul(c, self.args[f"{box.symbol}.stride{axis}"]))
        return address

    def bulk_guard(self, box: ops.BoxDecl, coords: list[ex.Expr]) -> None:
        """Trap unless the chunk at `coords` lies wholly inside the tensor: a bulk copy has no
        out-of-bounds handling, so the kernel stops rather than reach past the tensor. The
        binding makes the innermost dim whole chunks, so each bound is dim / extent exactly."""
        tensor = ops.decls(self.kernel, ops.TensorDecl)[box.tensor]
        outside = I1(0)
        for c, extent, dim in zip(coords, box.shape, tensor.shape):
            size = self.args[dim] if isinstance(dim, str) else I32(dim)
            bound = self.b.udiv(size, I32(extent)) if extent > 1 else size
            outside = self.b.or_(outside, self.b.icmp_unsigned(">=", self.expr(c), bound))
        self.if_then(outside, lambda: self.asm(ptx_asm.PTX["trap"], "", []))

    def element_coords(self, box: ops.BoxDecl, coords: list[ex.Expr], elements: bool = False) -> list[ir.Value]:
        """Tile indices (outermost first) → element coordinates, innermost first as TMA wants;
        element coordinates (`T@[r, c]`) go as they are."""
        if elements:
            values = [self.expr(c) for c in coords]
        else:
            values = [self.b.mul(self.expr(c), I32(extent)) for c, extent in zip(coords, box.shape)]
        if box.interleave != "none":   # the map has no slice dim: one index moves a whole slice
            values = values[:-1]
        return values[::-1]


@contextlib.contextmanager
def _collector_paused():
    """Codegen makes some 10^5 llvmlite objects, all alive until the module is printed: the cycle
    collector's full passes over the heap (the compiler's, lark's and NumPy's objects besides,
    ~20 ms each) free nothing then. Paused while emitting, and left as it was found."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _variables(o: ops.Op) -> list[str]:
    """The names an op binds to a stack slot: let and loop variables."""
    if isinstance(o, ops.ForStep):
        return [o.var, o.count]
    if isinstance(o, ops.Loop):
        return [o.count]
    return [o.var] if isinstance(o, (ops.Let, ops.ForRange, ops.TileTake)) else []


# ---- emitters: one per op ----------------------------------------------------------------------


def _role(g: KernelCodegen, o: ops.RoleOp) -> None:
    in_role = g.b.and_(g.b.icmp_unsigned(">=", g.warp, I32(o.first_warp)),
                       g.b.icmp_unsigned("<=", g.warp, I32(o.last_warp)))
    g.role = o

    def body():
        g.region(o.body)
    g.if_then(in_role, body)
    g.role = None


def _elect(g: KernelCodegen, o: ops.Elect) -> None:
    if o.scope == "warpgroup":
        lane_in_group = g.b.and_(g.b.sub(g.tid, I32(32 * g.role.first_warp)), I32(127))
        chosen = g.b.icmp_unsigned("==", lane_in_group, I32(0))
    else:
        first = 0 if o.scope == "block" else 32 * g.role.first_warp
        chosen = g.b.icmp_unsigned("==", g.tid, I32(first))
    g.if_then(chosen, lambda: g.region(o.body))


def _in_warpgroup(g: KernelCodegen, o: ops.InWarpgroup) -> None:
    group = g.b.lshr(g.b.sub(g.warp, I32(g.role.first_warp)), I32(2))
    g.if_then(g.b.icmp_unsigned("==", group, I32(o.group)), lambda: g.region(o.body))


def _let(g: KernelCodegen, o: ops.Let | ops.Val) -> None:
    value = g.expr(o.value)
    if o.var not in g.vars:
        g.vars[o.var] = g.alloca(o.var)
    g.b.store(value, g.vars[o.var])


def _val(g: KernelCodegen, o: ops.Val) -> None:
    if o.var in g.slotted:    # a let or a loop binds the name too: share its slot
        _let(g, o)
    else:                     # the verifier's scoping makes this value dominate every use
        g.values[o.var] = g.expr(o.value)


def _for_range(g: KernelCodegen, o: ops.ForRange) -> None:
    count = g.expr(o.count)
    g.vars.setdefault(o.var, g.alloca(o.var))
    g.b.store(I32(0), g.vars[o.var])
    cond_bb, body_bb, exit_bb = (g.fn.append_basic_block(f"{o.var}.{n}") for n in ("cond", "body", "exit"))
    g.b.branch(cond_bb)
    g.b.position_at_end(cond_bb)
    g.b.cbranch(g.b.icmp_signed("<", g.b.load(g.vars[o.var]), count), body_bb, exit_bb)
    g.b.position_at_end(body_bb)
    g.region(o.body)
    g.b.store(g.b.add(g.b.load(g.vars[o.var]), I32(1)), g.vars[o.var])
    g.b.branch(cond_bb)
    g.b.position_at_end(exit_bb)


def _for_step(g: KernelCodegen, o: ops.ForStep) -> None:
    _let(g, ops.Let(o.count, ex.Const(0)))
    _let(g, ops.Let(o.var, o.start))
    cond_bb, body_bb, exit_bb = (g.fn.append_basic_block(f"{o.var}.{n}") for n in ("cond", "body", "exit"))
    g.b.branch(cond_bb)
    g.b.position_at_end(cond_bb)
    g.b.cbranch(g.b.icmp_unsigned("<", g.b.load(g.vars[o.var]), g.expr(o.stop)), body_bb, exit_bb)
    g.b.position_at_end(body_bb)
    g.region(o.body)
    step = g.expr(o.step)
    g.b.store(g.b.add(g.b.load(g.vars[o.var]), step), g.vars[o.var])
    g.b.store(g.b.add(g.b.load(g.vars[o.count]), I32(1)), g.vars[o.count])
    g.b.branch(cond_bb)
    g.b.position_at_end(exit_bb)


def _if(g: KernelCodegen, o: ops.If) -> None:
    g.if_then(g.b.icmp_signed("!=", g.expr(o.cond), I32(0)), lambda: g.region(o.body))


def param_name(p) -> str:
    """The LLVM name of a kernel parameter (and the key codegen finds its value by)."""
    if isinstance(p, TensorMapParam):
        return f"tm.{p.box}"
    if isinstance(p, BulkParam):
        return f"{p.box}.addr"
    if isinstance(p, BulkStrideParam):
        return f"{p.box}.stride{p.axis}"
    if isinstance(p, IndexParam):
        return f"{p.tensor}.addr"
    return p.symbol if isinstance(p, DimParam) else p.name


def _tma_load(g: KernelCodegen, o: ops.TmaLoad) -> None:
    """A tiled load; through a multicast box this CTA's slice to its set, in a pair its half."""
    box = g.boxes[o.box]
    coords = g.element_coords(box, o.coords, o.elements)
    rank, dest, barrier = len(coords), g.address(o.dest), g.address(o.barrier)
    constraints = ",".join(["r", "l"] + ["r"] * rank + ["r"])
    parts = box.slices() if o.multicast or box.pair else 1
    extra = []
    if parts > 1:   # this CTA loads part `its place in its set` (of a pair: `cta rank % 2`) of dim 0, innermost first
        if o.multicast:
            part = cluster_codegen.position(g, o.ctas)
        else:
            part = g.b.and_(g._sreg("cluster.ctarank"), I32(1))
        coords[-1] = g.b.add(coords[-1], g.b.mul(part, I32(box.shape[0] // parts)))
    tile_bytes = g.tile_bytes(o.dest.name)
    if o.multicast:   # ... and writes it into every CTA of its set, at its place in the box (in each panel)
        dest = g.b.add(dest, g.b.mul(part, I32(tile_bytes // box.panels() // parts)))
        if o.ctas == "cluster":   # a constant mask, 2^N - 1
            template = ptx_asm.tma_load_multicast(rank, (1 << parts) - 1)
        else:   # this CTA's row or column: a mask of its coordinates, one more operand
            template = ptx_asm.tma_load_multicast(rank, f"${rank + 3}")
            constraints += ",h"
            extra = [cluster_codegen.mask(g, o.ctas)]
    else:
        template = ptx_asm.tma_load(rank, o.pair)
        barrier = pair_codegen.leader_address(g, barrier) if o.pair else barrier
    last = ".multicast::cluster" if o.multicast else ".cta_group::2" if o.pair else "::bytes"   # hint goes after
    template = ptx_asm.cache_hint(template, last, box.cache)
    for at, smem in panel_codegen.copies(g, box, coords, dest, tile_bytes):
        g.asm(template, constraints, [smem, g.tensor_map(o.box), *at, barrier, *extra])


def _tma_store(g: KernelCodegen, o: ops.TmaStore) -> None:
    box = g.boxes[o.box]
    coords = g.element_coords(box, o.coords, o.elements)
    tensor_map, source = g.tensor_map(o.box), g.address(o.source)
    template = ptx_asm.cache_hint(ptx_asm.tma_store(len(coords), o.reduce), ".bulk_group", box.cache)
    for at, smem in panel_codegen.copies(g, box, coords, source, g.tile_bytes(o.source.name)):
        g.asm(template, ",".join(["l"] + ["r"] * len(coords) + ["r"]), [tensor_map, *at, smem])


def _tma_prefetch(g: KernelCodegen, o: ops.TmaPrefetch) -> None:
    box = g.boxes[o.box]
    coords = g.element_coords(box, o.coords, o.elements)
    template = ptx_asm.cache_hint(ptx_asm.tma_prefetch(len(coords)), ".tile", box.cache)
    for at, _ in panel_codegen.copies(g, box, coords, None, 0):
        g.asm(template, ",".join(["l"] + ["r"] * len(coords)), [g.tensor_map(o.box), *at])


def _peer_rank(g: KernelCodegen, o: ops.Op) -> ir.Value:
    """The cluster rank `peer` ranks on from this CTA's: (rank + peer) % cluster."""
    return g.b.urem(g.b.add(g._sreg("cluster.ctarank"), I32(o.peer)), I32(g.kernel.cluster))


def _mbar_wait(g: KernelCodegen, o: ops.MbarWait) -> None:
    site = g.watched.get(id(o))
    if site is not None:
        watchdog_codegen.emit_wait(g, o, site)
        return
    addr, parity = g.address(o.barrier), g.expr(o.parity)
    probe_bb, done_bb = g.fn.append_basic_block("wait"), g.fn.append_basic_block("waited")
    g.b.branch(probe_bb)
    g.b.position_at_end(probe_bb)
    ready = g.asm(ptx_asm.PTX["mbar_try_wait"], "=r,r,r", [addr, parity], ret=I32)
    g.b.cbranch(g.b.icmp_unsigned("!=", ready, I32(0)), done_bb, probe_bb)
    g.b.position_at_end(done_bb)


def _sync(g: KernelCodegen, o: ops.Sync) -> None:
    if o.scope == "cluster":
        g.asm(ptx_asm.PTX["sync_cluster"], "", [])
    elif o.scope == "block":
        g.asm(ptx_asm.PTX["sync_block"], "", [])
    elif g.role_threads() == 32:
        g.asm(ptx_asm.PTX["sync_warp"], "", [])
    else:
        barrier_id = 1 + g.roles.index(g.role)
        g.asm(ptx_asm.PTX["sync_named"], "n,n", [I32(barrier_id), I32(g.role_threads())])


def _tmem_alloc(g: KernelCodegen, o: ops.TmemAlloc) -> None:
    """Warp 0, whole (alloc is .sync.aligned): allocate, publish the address in smem, and give up
    the permit so that CTAs of later kernels on this SM may allocate."""
    slot = g.b.add(g.smem_base, I32(o.offset))

    def body():
        g.asm(tcgen05.alloc("$0", o.columns, g.kernel.cta_group), "r", [slot])
        g.asm(tcgen05.relinquish_alloc_permit(g.kernel.cta_group), "", [])
    g.if_then(g.b.icmp_unsigned("==", g.warp, I32(0)), body)


def _tmem_dealloc(g: KernelCodegen, o: ops.TmemDealloc) -> None:
    alloc = next(a for a in g.kernel.body if isinstance(a, ops.TmemAlloc))
    slot = g.b.inttoptr(g.b.add(g.smem_base, I32(alloc.offset)), ir.PointerType(addrspace=3))

    def body():
        base = g.b.load(slot, typ=I32)
        g.asm(tcgen05.dealloc("$0", o.columns, g.kernel.cta_group), "r", [base])
    g.if_then(g.b.icmp_unsigned("==", g.warp, I32(0)), body)


EMITTERS = {
    ops.TmemAlloc: _tmem_alloc,
    ops.TmemDealloc: _tmem_dealloc,
    ops.RoleOp: _role,
    ops.Elect: _elect,
    ops.Let: _let,
    ops.Val: _val,
    ops.ForRange: _for_range,
    ops.ForStep: _for_step,
    ops.If: _if,
    ops.TmaLoad: _tma_load,
    ops.TmaStore: _tma_store,
    ops.TmaPrefetch: _tma_prefetch,
    ops.TensorMapPrefetch: lambda g, o: g.asm(ptx_asm.PTX["tensormap_prefetch"], "l", [g.tensor_map(o.box)]),
    ops.TileAssign: lambda g, o: emit_tile_assign(g, o),
    ops.MbarWait: _mbar_wait,
    ops.Sync: _sync,
    ops.InWarpgroup: _in_warpgroup,
    ops.NamedBarSync: lambda g, o: g.asm(ptx_asm.PTX["sync_named"], "n,n", [I32(o.id), I32(o.count)]),
    ops.NamedBarArrive: lambda g, o: g.asm(ptx_asm.PTX["arrive_named"], "n,n", [I32(o.id), I32(o.count)]),
    ops.MbarInit: lambda g, o: g.asm(ptx_asm.PTX["mbar_init"], "r,n", [g.address(o.barrier), I32(o.count)]),
    ops.MbarExpectTx: lambda g, o: g.asm(ptx_asm.PTX["mbar_expect_tx"], "r,r", [g.address(o.barrier), g.expr(o.bytes)]),
    ops.MbarArrive: lambda g, o: (g.asm(ptx_asm.PTX["mbar_arrive_peer"], "r,r", [g.address(o.barrier), _peer_rank(g, o)])
                                  if o.peer else g.asm(ptx_asm.PTX["mbar_arrive"], "r", [g.address(o.barrier)])),
    ops.BulkPush: lambda g, o: g.asm(ptx_asm.PTX["bulk_push"], "r,r,r,r,r",
                                     [g.address(o.dest), g.address(o.source), g.address(o.barrier), I32(o.bytes),
                                      _peer_rank(g, o)]),
    ops.MbarArriveCluster: lambda g, o: [g.asm(ptx_asm.PTX["mbar_arrive_remote"], "r,r", [g.address(o.barrier), c])
                                         for c in cluster_codegen.targets(g, o.ctas)],
    ops.MbarArriveExpectTx: lambda g, o: (g.asm(ptx_asm.PTX["mbar_arrive_expect_tx_peer"], "r,r,r",
                                                [g.address(o.barrier), _peer_rank(g, o), g.expr(o.bytes)])
                                          if o.peer else g.asm(ptx_asm.PTX["mbar_arrive_expect_tx"], "r,r",
                                                               [g.address(o.barrier), g.expr(o.bytes)])),
    ops.Fence: lambda g, o: g.asm(ptx_asm.PTX[f"fence_{o.kind}"], "", []),
    ops.BulkCommit: lambda g, o: g.asm(ptx_asm.PTX["bulk_commit"], "", []),
    ops.BulkWait: lambda g, o: g.asm(ptx_asm.PTX["bulk_wait_read" if o.read else "bulk_wait"], "n", [I32(o.pending)]),
    ops.SetMaxNReg: lambda g, o: g.asm(ptx_asm.PTX[f"setmaxnreg_{o.action}"], "n", [I32(o.regs)]),
    ops.WarpgroupBlock: lambda g, o: g.if_then(
        g.b.and_(g.b.icmp_unsigned(">=", g.b.lshr(g.warp, I32(2)), I32(o.first)),
                 g.b.icmp_unsigned("<=", g.b.lshr(g.warp, I32(2)), I32(o.last))),
        lambda: g.region(o.body)),
    **IM2COL_EMITTERS,
    **BULK_EMITTERS,
    **GATHER_EMITTERS,
    **MMA_EMITTERS,
    **TCGEN05_EMITTERS,
    **PAIR_EMITTERS,
    **ROW_EMITTERS,
    **CLAIM_EMITTERS,
}


