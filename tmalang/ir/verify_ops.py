"""The verify hooks, one per op class (`VERIFY`): each checks that op's own invariants.

A hook sees the op and its `Scope`: the kernel's declarations, the enclosing ops, the role's
accumulators and row registers. It checks that the symbols the op names resolve to the right
kind of declaration, that its fields are in range, and that it stands where it may. What the
passes establish stage by stage is not an op's own rule: those rules are in verifier.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..diagnostics import TmalangError
from ..targets import cluster, tma
from ..targets.dtypes import DTYPES, SCALAR_DTYPES
from ..targets.reduce import BULK_REDUCE_TYPES, REDUCE_OPS
from . import exprs as ex
from . import ops
from .printer import format_value

# The values of the IR's own enumerated fields (ops.py names them in comments).
FENCES = ("proxy_async", "mbarrier_init", "tcgen05_before_thread_sync", "tcgen05_after_thread_sync")
SCOPES = {ops.Elect: ("role", "warpgroup", "block"), ops.Sync: ("role", "block", "cluster")}


class Scope:
    """Where an op stands, as the verifier's walk sees it, and how a hook reports a failure."""

    def __init__(self, kernel: ops.KernelOp, fail: Callable[[str, ops.Op], TmalangError]):
        self.kernel, self._fail = kernel, fail
        self.symbols: dict[str, ops.Op] = {}   # the kernel's declarations (and roles) by symbol
        self.parents: list[ops.Op] = []        # the enclosing ops, innermost last
        self.role: ops.RoleOp | None = None
        self.accs: set[str] = set()            # the accumulators and row registers of `role`
        self.rows: set[str] = set()

    def fail(self, message: str, o: ops.Op):
        raise self._fail(message, o)

    def decl(self, o: ops.Op, field: str, kind: type[ops.Op]) -> ops.Op:
        """The declaration `o.field` names, which must be a `kind`."""
        found = self.symbols.get(getattr(o, field))
        if not isinstance(found, kind):
            self.fail(f"{o.name} {field}={getattr(o, field)} does not name a {kind.__name__}", o)
        return found

    def tile(self, o: ops.Op, field: str, kind: str) -> None:
        """`o.field` is a stage of a declared tile of `kind`: smem, tmem or mbarrier."""
        ref = getattr(o, field)
        if not isinstance(ref, ex.BufferRef) or self.tile_kind(ref.name) != kind:
            self.fail(f"{o.name} {field}={ref} is not {'an' if kind[0] in 'ms' else 'a'} {kind} tile", o)

    def tile_kind(self, name: str) -> str | None:
        decl = self.symbols.get(name)
        kinds = {ops.BufferDecl: "smem", ops.TmemDecl: "tmem", ops.MbarrierDecl: "mbarrier", ops.TileQueueDecl: "queue"}
        if type(decl) in kinds:
            return kinds[type(decl)]
        field = self.pipeline_field(name)
        return None if field is None else "tmem" if field.startswith("tmem:") else "smem"

    def pipeline_field(self, name: str) -> str | None:
        """What field P.f of a declared pipeline P holds: a box name or `tmem:MxN`."""
        pipeline, _, field = name.partition(".")
        decl = self.symbols.get(pipeline)
        if isinstance(decl, ops.PipelineDecl):
            return next((f.partition(":")[2] for f in decl.fields if f.partition(":")[0] == field), None)
        return None

    def check(self, o: ops.Op, field: str, ok: bool, why: str) -> None:
        if not ok:
            self.fail(f"{o.name} {field}={format_value(getattr(o, field))}: {why}", o)

    def within(self, o: ops.Op, *parents: type[ops.Op]) -> None:
        """`o` stands directly in one of `parents` (at the top when none are given)."""
        parent = self.parents[-1] if self.parents else None
        if not (isinstance(parent, parents) if parents else parent is None):
            where = f"inside '{parent.name}'" if parent is not None else "outside a kernel"
            self.fail(f"{o.name} cannot stand {where}", o)

    def in_role(self, o: ops.Op) -> None:
        if self.role is None:
            self.fail(f"{o.name} stands outside every role", o)

    def inside(self, kind: type[ops.Op]) -> bool:
        return any(isinstance(p, kind) for p in self.parents)


# ---- the hooks ------------------------------------------------------------------------------------


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _kernel(v: Scope, o: ops.KernelOp) -> None:
    v.within(o)
    v.check(o, "grid", o.grid in ("tiles", "persistent"), "not tiles or persistent")
    v.check(o, "cluster", o.cluster in (1, 2, 4, 8), "not 1, 2, 4 or 8 CTAs")
    v.check(o, "cluster_cols", o.cluster_cols in (1, 2, 4, 8) and o.cluster % o.cluster_cols == 0,
            "not 1, 2, 4 or 8 CTAs dividing the cluster")
    v.check(o, "cta_group", o.cta_group in (1, 2) and o.cluster % o.cta_group == 0, "not 1, or 2 in an even cluster")
    v.check(o, "threads", o.threads >= 0 and o.threads % 32 == 0, "not whole warps")
    v.check(o, "smem_bytes", o.smem_bytes >= 0, "negative")


def _tensor(v: Scope, o: ops.TensorDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "dtype", o.dtype in DTYPES, "not an element type")
    v.check(o, "shape", 1 <= len(o.shape) <= tma.MAX_RANK, f"rank not 1..{tma.MAX_RANK}")
    v.check(o, "shape", all(isinstance(d, str) or d >= 1 for d in o.shape), "a dimension below 1")


def _scalar(v: Scope, o: ops.ScalarDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "dtype", o.dtype in SCALAR_DTYPES, "not a scalar parameter type")


def _assume(v: Scope, o: ops.AssumeDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "compare", o.compare in ops.COMPARISONS, f"not one of {' '.join(ops.COMPARISONS)}")
    for side in ("lhs", "rhs"):   # host arithmetic: integers and launch-bound values, nothing of the kernel's
        v.check(o, side, all(_host_integer(x) for x in ex.walk(getattr(o, side))), "not an integer expression of $values")


def _host_integer(x: ex.Expr) -> bool:
    return (isinstance(x, (ex.Param, ex.Neg)) or isinstance(x, ex.Const) and type(x.value) is int
            or isinstance(x, ex.Bin) and x.op in ops.ASSUME_OPS)


def _box(v: Scope, o: ops.BoxDecl) -> None:
    v.within(o, ops.KernelOp)
    tensor = v.decl(o, "tensor", ops.TensorDecl)
    v.check(o, "dtype", o.dtype == tensor.dtype, f"not the dtype of tensor @{tensor.symbol}")
    if o.im2col:
        _im2col_box(v, o, tensor)
    else:
        v.check(o, "shape", len(o.shape) == len(tensor.shape), f"not the rank of tensor @{tensor.symbol}")
    if o.bulk:   # one row chunk: [1, ..., 1, CHUNK], a multiple of 16 bytes, plain and whole
        v.check(o, "shape", all(n == 1 for n in o.shape[:-1]) and o.shape[-1] >= 1
                and (o.dtype not in DTYPES or o.shape[-1] * DTYPES[o.dtype].itemsize % tma.BULK_ALIGNMENT == 0),
                f"not [1, .., 1, CHUNK] with CHUNK a multiple of {tma.BULK_ALIGNMENT} bytes")
        v.check(o, "swizzle", o.swizzle == "none" and o.cache == "none" and o.multicast == 1 and not o.pair,
                "a bulk box has no tensor map: no swizzle, cache policy, multicast or pair")
    else:
        v.check(o, "shape", all(1 <= n <= tma.MAX_BOX_EXTENT for n in o.shape),
                f"an extent outside 1..{tma.MAX_BOX_EXTENT}")
    v.check(o, "strides", 1 <= len(o.strides) == len(o.shape)
            and all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in o.strides),
            f"not one stride in 1..{tma.MAX_ELEMENT_STRIDE} per dimension")
    v.check(o, "swizzle", o.swizzle in tma.SWIZZLES, "not a TMA swizzle")
    v.check(o, "oob", o.oob in tma.OOB_FILLS, "not a TMA out-of-bounds fill")
    v.check(o, "l2", o.l2 in tma.L2_PROMOTIONS, "not a TMA L2 promotion")
    v.check(o, "cache", o.cache in tma.CACHE_POLICIES, "not an L2 cache policy")
    v.check(o, "interleave", o.interleave in tma.INTERLEAVES and (o.interleave == "none" or not o.bulk
            and len(o.shape) >= tma.INTERLEAVE_MIN_RANK and (o.interleave != "32B" or o.swizzle == "32B")),
            "not a TMA interleave, or one the driver refuses here (a bulk box, rank below 3, 32B without swizzle 32B)")
    if o.strides[-1] != 1:
        v.fail(f"box '@{o.symbol}' has innermost element stride {o.strides[-1]}; TMA ignores it (§4)", o)
    v.check(o, "multicast", o.multicast >= 1 and (o.multicast == 1 or not o.pair), "below 1, or on a pair box")
    span = tma.SWIZZLES[o.swizzle].span if o.swizzle in tma.SWIZZLES else None
    if span and not (o.bulk or o.im2col) and o.dtype in DTYPES and o.shape[-1] * DTYPES[o.dtype].itemsize > span:
        _panelled_box(v, o, span)
    if o.gather:   # a one-row tensor map over a 2-D tensor, copied four rows at a time
        v.check(o, "gather", len(o.shape) == tma.GATHER_RANK and o.shape[0] % tma.GATHER_ROWS == 0
                and o.strides == [1] * len(o.shape) and not (o.bulk or o.pair or o.multicast > 1)
                and (o.dtype not in DTYPES or tma.GATHER_ROWS * o.shape[-1] * DTYPES[o.dtype].itemsize
                     % tma.SMEM_COPY_ALIGNMENT == 0),
                f"a gathered box is 2-D, unstrided, {tma.GATHER_ROWS}k rows of which four are "
                f"{tma.SMEM_COPY_ALIGNMENT}k bytes, not bulk, pair or multicast")


def _panelled_box(v: Scope, o: ops.BoxDecl, span: int) -> None:
    """A box of several swizzle spans per row (§4): whole spans, at most MAX_PANELS, panels of whole
    8-row atoms, and none of the forms whose copies are not one box (pair, gather, interleave)."""
    rows = math.prod(tma.tile_shape(o.shape[:-1], o.strides[:-1]))
    v.check(o, "shape", o.shape[-1] * DTYPES[o.dtype].itemsize % span == 0 and o.panels() <= tma.MAX_PANELS
            and rows % 8 == 0, f"a panelled box: rows not whole {span}-byte spans, more than {tma.MAX_PANELS} "
            "panels, or panels that are not whole 8-row swizzle atoms")
    v.check(o, "swizzle", not (o.pair or o.gather or o.interleave != "none"),
            "a panelled box that is pair, gathered or interleaved")


def _pipeline(v: Scope, o: ops.PipelineDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", 1 <= o.stages <= 32, "not 1..32")
    for entry in o.fields:
        name, _, what = entry.partition(":")
        tmem = what.startswith("tmem:") and all(n.isdigit() for n in what[5:].split("x"))
        if not name or not (tmem or isinstance(v.symbols.get(what), ops.BoxDecl)):
            v.fail(f"pipeline field '{entry}' is not FIELD:BOX or FIELD:tmem:MxN", o)


def _buffer(v: Scope, o: ops.BufferDecl) -> None:
    v.within(o, ops.KernelOp)
    v.decl(o, "box", ops.BoxDecl)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "bytes", o.bytes >= 1, "empty")
    v.check(o, "align", _power_of_two(o.align) and o.align >= 16, "not a power of two from 16")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % o.align == 0, "not a multiple of align")


def _mbarrier(v: Scope, o: ops.MbarrierDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "count", o.count == -1 or 1 <= o.count <= 0xFFFFF, "not -1 (unscheduled) or 1..1048575")
    v.check(o, "tx_bytes", o.tx_bytes >= 0, "negative")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % 8 == 0, "not 8-byte aligned")


def _tmem(v: Scope, o: ops.TmemDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "no stage")
    v.check(o, "shape", len(o.shape) == 2 and o.shape[0] in (64, 128) and 1 <= o.shape[1] <= 256,
            "not [64 or 128 lanes, 1..256 columns]")
    v.check(o, "column", o.column == -1 or o.column >= 0 and o.column % ops.TMEM_GRANULE == 0,
            f"not a multiple of {ops.TMEM_GRANULE}")


def _tmem_alloc(v: Scope, o: ops.TmemAlloc) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "columns", _power_of_two(o.columns) and o.columns >= 32, "not a power of two from 32")
    v.check(o, "offset", o.offset == -1 or o.offset >= 0 and o.offset % 8 == 0, "not 8-byte aligned")


def _tmem_dealloc(v: Scope, o: ops.TmemDealloc) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "columns", _power_of_two(o.columns) and o.columns >= 32, "not a power of two from 32")


def _role(v: Scope, o: ops.RoleOp) -> None:
    v.within(o, ops.KernelOp, ops.WarpgroupBlock)
    v.check(o, "first_warp", 0 <= o.first_warp <= o.last_warp < 32, "not a warp range within 0..31")
    v.check(o, "regs", o.regs == 0 or 24 <= o.regs <= 256 and o.regs % 8 == 0, "not 0 or a multiple of 8 in 24..256")
    group = v.parents[-1]
    if isinstance(group, ops.WarpgroupBlock) and not group.first <= o.first_warp // 4 <= o.last_warp // 4 <= group.last:
        v.fail(f"role @{o.symbol} has warps outside warpgroups {group.first}..{group.last}", o)


def _warpgroups(v: Scope, o: ops.WarpgroupBlock) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "first", 0 <= o.first <= o.last < 8, "not a warpgroup range within 0..7")
    if not (o.body and isinstance(o.body[0], ops.SetMaxNReg) and all(isinstance(r, ops.RoleOp) for r in o.body[1:])):
        v.fail("a warpgroups block holds one setmaxnreg, then roles", o)


def _setmaxnreg(v: Scope, o: ops.SetMaxNReg) -> None:
    v.within(o, ops.WarpgroupBlock)
    v.check(o, "action", o.action in ("inc", "dec"), "not inc or dec")
    v.check(o, "regs", 24 <= o.regs <= 256 and o.regs % 8 == 0, "not a multiple of 8 in 24..256")


def _for_tiles(v: Scope, o: ops.ForTiles) -> None:
    v.in_role(o)
    v.decl(o, "tensor", ops.TensorDecl)
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", box.tensor == o.tensor, f"cuts tensor @{box.tensor}, not @{o.tensor}")
    v.check(o, "vars", len(o.vars) == len(box.shape), "not one variable per box dimension")
    v.check(o, "group", o.group >= 0, "negative")
    v.check(o, "split", not isinstance(o.split, ex.Const) or o.split.value >= 1, "not a positive count")
    v.check(o, "part", bool(o.part) or o.split == ex.Const(1), "a split binds no part variable")
    v.check(o, "dynamic", not o.dynamic or v.kernel.cluster == 1, "claims are shared by CTAs of one-CTA clusters only")
    v.check(o, "stream", len(o.stream) in (0, 2), "not [first step, step count]")
    v.check(o, "stream", not o.stream or (o.split == ex.Const(1) and not o.part), "a walk both split and streamed")
    v.check(o, "stream", not o.stream or v.kernel.grid == "persistent", "a stream walk on a grid of tiles")
    v.check(o, "stream", not o.stream or v.kernel.cluster == 1, "a stream walk in clusters")
    v.check(o, "chunk", o.chunk >= 1 if o.stream else o.chunk == 0, "not a stream walk's positive chunk")
    v.check(o, "extent", isinstance(o.extent, ex.Param) or isinstance(o.extent, ex.Const) and type(o.extent.value) is int
            if o.stream else o.extent == ex.Const(0), "not a stream walk's launch-bound extent")


def _statement(v: Scope, o: ops.Op) -> None:
    """Let, val, if, for_range, for_step, wgmma fences and commits, bulk commits: in a role, nothing else."""
    v.in_role(o)


def _pending(v: Scope, o: ops.BulkWait | ops.WgmmaWait) -> None:
    v.in_role(o)
    v.check(o, "pending", o.pending >= 0, "negative")


def _elect(v: Scope, o: ops.Elect) -> None:
    v.check(o, "scope", o.scope in SCOPES[ops.Elect], "unknown")
    v.check(o, "scope", (o.scope == "block") == (v.role is None), "block scope outside roles only")
    if v.inside(ops.Elect):
        v.fail("elect inside elect", o)


def _sync(v: Scope, o: ops.Sync) -> None:
    v.check(o, "scope", o.scope in SCOPES[ops.Sync], "unknown")
    v.check(o, "scope", (o.scope == "role") == (v.role is not None), "role scope inside roles only")
    v.check(o, "scope", o.scope != "cluster" or v.kernel.cluster > 1, "the kernel has no cluster")
    if v.inside(ops.Elect):
        v.fail("sync inside elect: the other threads never reach it", o)


def _fence(v: Scope, o: ops.Fence) -> None:
    v.check(o, "kind", o.kind in FENCES, "unknown")


def _pipeline_block(v: Scope, o: ops.Produce | ops.Consume) -> None:
    v.in_role(o)
    v.decl(o, "pipeline", ops.PipelineDecl)
    if v.inside(ops.Elect):
        v.fail(f"{o.name} inside elect", o)


def _warpgroups_of(role: ops.RoleOp) -> int:
    """How many whole warpgroups the role is (0 when it is not aligned whole warpgroups)."""
    warps = role.last_warp - role.first_warp + 1
    return warps // 4 if role.first_warp % 4 == 0 and warps % 4 == 0 else 0


def _turn(v: Scope, o: ops.Turn) -> None:
    v.in_role(o)
    if _warpgroups_of(v.role) < 2 and not v.role.group:   # a group's roles take turns with each other
        v.fail("turn in a role of fewer than 2 whole warpgroups: nobody to take turns with", o)
    if v.inside(ops.Elect) or v.inside(ops.Turn) or v.inside(ops.Produce):
        v.fail("turn inside elect, produce or another turn", o)


def _in_warpgroup(v: Scope, o: ops.InWarpgroup) -> None:
    v.in_role(o)
    v.check(o, "group", 0 <= o.group < _warpgroups_of(v.role), "not a warpgroup of the role")
    if v.inside(ops.Elect) or v.inside(ops.InWarpgroup):
        v.fail("in_warpgroup inside elect or in_warpgroup", o)


def _named_barrier(v: Scope, o: ops.NamedBarSync | ops.NamedBarArrive) -> None:
    v.in_role(o)
    v.check(o, "id", 0 <= o.id < ops.NAMED_BARRIERS, f"not a named barrier (0..{ops.NAMED_BARRIERS - 1})")
    v.check(o, "count", o.count > 0 and o.count % 32 == 0, "not a positive multiple of the warp size")
    if v.inside(ops.Elect):
        v.fail(f"{o.name} inside elect: bar.sync and bar.arrive are executed by whole warps", o)


def _in_pair_leader(v: Scope, o: ops.InPairLeader) -> None:
    v.in_role(o)
    _pair_kernel(v, o)


def _im2col_box(v: Scope, o: ops.BoxDecl, tensor: ops.TensorDecl) -> None:
    """[pixels, channels] over a rank 3..5 tensor; corners and strides per spatial dim, in range."""
    rank = len(tensor.shape)
    v.check(o, "shape", rank in tma.IM2COL_RANKS and len(o.shape) == 2, "not [pixels, channels] over a rank 3..5 tensor")
    if rank not in tma.IM2COL_RANKS:
        return
    v.check(o, "multicast", o.multicast == 1 and not o.pair and not o.bulk, "an im2col box is not sliced")
    if o.wide:
        _im2col_wide_box(v, o, rank)
        return
    v.check(o, "halo", not o.halo, "a halo belongs to a wide im2col box")
    low, high = tma.im2col_corner_range(rank)
    for name in ("lower", "upper"):
        corner = getattr(o, name)
        v.check(o, name, len(corner) == rank - 2 and all(low <= c <= high for c in corner),
                f"not {rank - 2} values in [{low}, {high}]")
    v.check(o, "im2col_strides", len(o.im2col_strides) == rank - 2
            and all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in o.im2col_strides),
            f"not {rank - 2} traversal strides in 1..{tma.MAX_ELEMENT_STRIDE}")
    v.check(o, "shape", len(o.shape) == 2 and 1 <= o.shape[0] <= tma.IM2COL_MAX_PIXELS
            and 1 <= o.shape[1] <= tma.IM2COL_MAX_CHANNELS, "pixels or channels out of range")


def _im2col_wide_box(v: Scope, o: ops.BoxDecl, rank: int) -> None:
    """sm_100a W-only modes: one W corner per side (D, H: 0), one W stride (D, H: 1), the halo's
    range, [pixels + halo, channels] with 128 pixels in w128, and a swizzle."""
    v.check(o, "wide", o.wide in tma.IM2COL_WIDE_MODES, "not a wide im2col mode (w, w128)")
    if o.wide not in tma.IM2COL_WIDE_MODES:
        return
    low, high = tma.IM2COL_WIDE_CORNER
    for name in ("lower", "upper"):
        corner = getattr(o, name)
        v.check(o, name, len(corner) == rank - 2 and all(c == 0 for c in corner[:-1]) and low <= corner[-1] <= high,
                f"not {rank - 3} zeros and a W corner in [{low}, {high}]")
    strides = o.im2col_strides
    v.check(o, "im2col_strides", len(strides) == rank - 2 and all(s == 1 for s in strides[:-1])
            and 1 <= strides[-1] <= tma.MAX_ELEMENT_STRIDE, "not ones and a W traversal stride")
    v.check(o, "halo", 0 <= o.halo < tma.IM2COL_WIDE_HALO[o.wide] and not (o.wide == "w128" and o.halo),
            "halo out of range for the mode")
    pixels = o.shape[0] - o.halo if len(o.shape) == 2 else 0
    v.check(o, "shape", len(o.shape) == 2 and 1 <= pixels <= tma.IM2COL_MAX_PIXELS
            and (o.wide != "w128" or pixels == tma.IM2COL_W128_PIXELS)
            and 1 <= o.shape[1] <= tma.IM2COL_MAX_CHANNELS, "pixels (+ halo) or channels out of range")
    v.check(o, "swizzle", o.swizzle in tma.IM2COL_WIDE_SWIZZLES, "a wide im2col box swizzles 64B or 128B")


def _pair_kernel(v: Scope, o: ops.Op) -> None:
    if v.kernel.cta_group != 2:
        v.fail(f"{o.name} belongs to CTA pairs, and the kernel has cta_group={v.kernel.cta_group}", o)


def _tma_load(v: Scope, o: ops.TmaLoad) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    if box.im2col:   # element coordinates of the tensor; an offset per spatial dim
        rank = len(v.decl(box, "tensor", ops.TensorDecl).shape)
        v.check(o, "coords", len(o.coords) == rank, f"not one per dimension of im2col box @{box.symbol}'s tensor")
        v.check(o, "offsets", len(o.offsets) == (1 if box.wide else rank - 2),
                f"not one per spatial dimension of @{box.symbol}'s tensor (a wide box: one wOffset)")
        v.check(o, "pair", not o.multicast and not o.pair, f"im2col box @{box.symbol} has no multicast or pair load")
    else:
        v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
        v.check(o, "offsets", not o.offsets, f"box @{box.symbol} is not an im2col box")
    v.tile(o, "dest", "smem")
    if o.barrier is not None:
        v.tile(o, "barrier", "mbarrier")
    v.check(o, "multicast", not o.multicast or box.multicast > 1, f"box @{box.symbol} is not multicast")
    _cta_set(v, o, ("cluster", "row", "column"))
    v.check(o, "ctas", o.ctas == "cluster" or o.multicast, "a CTA set on a load without multicast")
    if o.multicast and o.ctas in cluster.SETS:   # each CTA of the set loads one slice
        size = cluster.size(v.kernel.cluster_shape(), o.ctas)
        v.check(o, "ctas", box.multicast == size, f"{size} CTAs, but box @{box.symbol} has {box.multicast} slices")
    v.check(o, "pair", not (box.bulk and o.pair), f"bulk box @{box.symbol} has no pair form")
    v.check(o, "elements", not o.elements or box.slices() == 1,
            "element coordinates on a sliced box (multicast or pair), whose slices are placed by tile")
    v.check(o, "elements", not (o.elements and box.bulk), "element coordinates on a bulk box (whole chunks)")
    if o.pair:
        _pair_kernel(v, o)
    _gathered(v, o, box)


def _tma_store(v: Scope, o: ops.TmaStore) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
    v.tile(o, "source", "smem")
    v.check(o, "elements", not (o.elements and box.bulk), "element coordinates on a bulk box (whole chunks)")
    _gathered(v, o, box)
    v.check(o, "reduce", not (o.gather and o.reduce), "a gathered store has no reduce form (no .tile::scatter4)")
    v.check(o, "box", not box.im2col, "an im2col box only loads")
    if o.reduce and box.bulk:
        v.check(o, "reduce", box.dtype in BULK_REDUCE_TYPES.get(o.reduce, {}),
                f"not a bulk reduce of box @{box.symbol}'s {box.dtype} elements")
    elif o.reduce:
        v.check(o, "reduce", o.reduce in REDUCE_OPS, f"not one of {', '.join(REDUCE_OPS)}")
        v.check(o, "reduce", box.dtype not in DTYPES or DTYPES[box.dtype].tma in REDUCE_OPS[o.reduce].types,
                f"does not reduce box @{box.symbol}'s {box.dtype} elements")


def _staged_store(v: Scope, o: ops.StagedStore) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    staging = v.decl(o, "staging", ops.BufferDecl)
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
    v.check(o, "staging", staging.box == box.symbol, f"@{staging.symbol} holds box @{staging.box}, not @{box.symbol}")
    v.check(o, "blocks", o.blocks >= 1, "not a positive block count")
    v.check(o, "reduce", not o.reduce or o.reduce in REDUCE_OPS, f"not one of {', '.join(REDUCE_OPS)}")
    v.check(o, "box", not (box.im2col or box.bulk or box.gather), "not a dense tensor-map box")
    v.check(o, "value", any(isinstance(e, (ex.AccRef, ex.TmemRef)) for e in ex.walk(o.value)),
            "reads no accumulator")


def _gathered(v: Scope, o: ops.TmaLoad | ops.TmaStore | ops.TmaPrefetch, box: ops.BoxDecl) -> None:
    """A copy (or prefetch) by rows names a 1-D i32 index tensor and goes through a gathered box;
    a box copy does not go through one (its tensor map holds one row)."""
    v.check(o, "box", bool(o.gather) == box.gather,
            f"box @{box.symbol} {'is' if box.gather else 'is not'} gathered, unlike the copy")
    if o.gather:
        index = v.decl(o, "gather", ops.TensorDecl)
        v.check(o, "gather", index.dtype == "i32" and len(index.shape) == 1, "not a 1-D i32 tensor")
        v.check(o, "multicast", not getattr(o, "multicast", False) and not getattr(o, "pair", False),
                "a gathered load has no multicast or pair form")


def _tma_prefetch(v: Scope, o: ops.TmaPrefetch) -> None:
    v.in_role(o)
    box = v.decl(o, "box", ops.BoxDecl)
    _gathered(v, o, box)
    v.check(o, "coords", len(o.coords) == len(box.shape), f"not one per dimension of box @{box.symbol}")
    v.check(o, "box", box.slices() == 1, "a sliced box (multicast or pair): its tensor map covers part of it")
    v.check(o, "box", not box.im2col, "an im2col box only loads")
    _one_thread(v, o)


def _tensormap_prefetch(v: Scope, o: ops.TensorMapPrefetch) -> None:
    box = v.decl(o, "box", ops.BoxDecl)
    v.check(o, "box", not box.bulk, "a bulk box: it has no tensor map")
    _one_thread(v, o)


def _one_thread(v: Scope, o: ops.Op) -> None:
    if not v.inside(ops.Elect):
        v.fail(f"{o.name} outside elect: every thread would issue it", o)


def _writes_smem(v: Scope, o: ops.TileAssign | ops.AccStore | ops.TmemEpilogue) -> None:
    v.in_role(o)
    v.tile(o, "dest", "smem")


def _row_assign(v: Scope, o: ops.RowAssign) -> None:
    v.in_role(o)
    if isinstance(o.dest, ex.BufferRef):
        v.tile(o, "dest", "tmem" if v.tile_kind(o.dest.name) == "tmem" else "smem")
    elif not isinstance(o.dest, (ex.RowVar, ex.AccRef)):
        v.fail(f"row_assign dest={o.dest} is neither a row register, an accumulator nor a tile", o)


def _role_decl(v: Scope, o: ops.AccDecl | ops.RowDecl) -> None:
    v.within(o, ops.RoleOp)
    if isinstance(o, ops.RowDecl):
        v.check(o, "cols", 0 <= o.cols <= 256, "not 0..256")
    else:
        v.check(o, "shape", len(o.shape) == 2 and all(n >= 1 for n in o.shape), "not two extents")


def _acc_zero(v: Scope, o: ops.AccZero) -> None:
    v.in_role(o)
    v.check(o, "acc", o.acc in v.accs, "not an accumulator of the role")


def _wgmma(v: Scope, o: ops.Wgmma) -> None:
    _acc_zero(v, o)
    v.tile(o, "b", "smem")
    if isinstance(o.a, ex.BufferRef):
        v.tile(o, "a", "smem")
    elif not (isinstance(o.a, ex.Cast) and isinstance(o.a.operand, ex.AccRef)):
        v.fail(f"wgmma a={o.a} is neither an smem tile nor a converted accumulator", o)


def _barrier_op(v: Scope, o: ops.Op) -> None:
    """mbarrier operations and tcgen05 commits of a role: the barrier is an mbarrier tile."""
    v.in_role(o)
    v.tile(o, "barrier", "mbarrier")
    if isinstance(o, (ops.MbarExpectTx, ops.MbarArriveExpectTx)) and isinstance(o.bytes, ex.Const):
        v.check(o, "bytes", 0 <= o.bytes.value <= 0xFFFFF, "not 0..1048575")


def _arrive(v: Scope, o: ops.MbarArrive | ops.MbarArriveExpectTx) -> None:
    _barrier_op(v, o)
    _peer(v, o, 0)


def _peer(v: Scope, o: ops.Op, least: int) -> None:
    """A peer offset reaches another CTA of the cluster (0: this CTA, where `least` allows it)."""
    v.check(o, "peer", least <= o.peer < max(1, v.kernel.cluster), f"not in {least}..cluster - 1")


def _bulk_push(v: Scope, o: ops.BulkPush) -> None:
    """One thread pushes a whole smem tile into the same tile of a peer CTA."""
    _barrier_op(v, o)
    v.tile(o, "source", "smem")
    v.tile(o, "dest", "smem")
    _peer(v, o, 1)
    sizes = {getattr(v.symbols.get(r.name), "bytes", None) for r in (o.source, o.dest)}
    v.check(o, "bytes", sizes <= {o.bytes, None} and 0 < o.bytes <= 0xFFFFF and o.bytes % 16 == 0,
            "not the bytes of its tiles, a positive multiple of 16 below 2^20")
    _one_thread(v, o)


def _cluster_arrive(v: Scope, o: ops.MbarArriveCluster | ops.Tcgen05CommitCluster) -> None:
    _barrier_op(v, o)
    if v.kernel.cluster < 2:
        v.fail(f"{o.name} in a kernel without a cluster", o)
    _cta_set(v, o, cluster.SETS)


def _cta_set(v: Scope, o: ops.Op, allowed: tuple[str, ...]) -> None:
    """A CTA set other than the whole cluster is a proper part of it, of two CTAs or more: a row
    or column of a cluster with more than one of each (a cross, then, too)."""
    v.check(o, "ctas", o.ctas in allowed, f"not one of {', '.join(allowed)}")
    rows, cols = v.kernel.cluster_shape()
    v.check(o, "ctas", o.ctas == "cluster" or (rows > 1 and cols > 1),
            f"a {o.ctas} of a {rows}x{cols} cluster is one CTA or the whole cluster")


def _leader_arrive(v: Scope, o: ops.MbarArriveLeader) -> None:
    _barrier_op(v, o)
    v.check(o, "ctas", o.ctas == "cluster", "the pair's leader is the only target")
    _pair_kernel(v, o)


def _mbar_init(v: Scope, o: ops.MbarInit) -> None:
    v.tile(o, "barrier", "mbarrier")
    v.check(o, "count", 1 <= o.count <= 0xFFFFF, "not 1..1048575")
    if not v.inside(ops.Elect):
        v.fail("mbar_init outside elect: every thread would initialise the barrier", o)


def _tcgen05_mma(v: Scope, o: ops.Tcgen05Mma) -> None:
    v.in_role(o)
    v.tile(o, "d", "tmem")
    v.tile(o, "a", "smem")
    v.tile(o, "b", "smem")


def _tcgen05_cp(v: Scope, o: ops.Tcgen05Cp) -> None:
    v.in_role(o)
    v.tile(o, "d", "tmem")
    v.check(o, "col", o.col >= 0, "negative")
    v.tile(o, "source", "smem")


def _tile_queue(v: Scope, o: ops.TileQueueDecl) -> None:
    v.within(o, ops.KernelOp)
    v.check(o, "stages", o.stages >= 1, "not a positive count")
    v.check(o, "offset", o.offset == -1 or o.offset % o.stage_bytes == 0, f"not {o.stage_bytes}-byte aligned")
    v.check(o, "words", o.words in (1, 4), "neither a tile word (1) nor a cancel response (4)")


def _tile_claim(v: Scope, o: ops.TileClaim) -> None:
    v.in_role(o)
    _one_thread(v, o)
    v.tile(o, "slot", "queue")


def _tile_publish(v: Scope, o: ops.TilePublish) -> None:
    v.in_role(o)
    _one_thread(v, o)
    v.tile(o, "slot", "queue")


def _clc_try_cancel(v: Scope, o: ops.ClcTryCancel) -> None:
    v.in_role(o)
    _one_thread(v, o)
    v.check(o, "response", v.kernel.grid == "tiles", "a cancel on a persistent grid (no CTA waits to start)")
    _response(v, o)
    v.tile(o, "barrier", "mbarrier")


def _clc_query(v: Scope, o: ops.ClcQuery) -> None:
    v.in_role(o)
    _one_thread(v, o)
    v.tile(o, "slot", "queue")
    _response(v, o)


def _response(v: Scope, o: ops.ClcTryCancel | ops.ClcQuery) -> None:
    v.tile(o, "response", "queue")
    decl = v.symbols.get(o.response.name)
    v.check(o, "response", decl.words == 4, "not a 16-byte (4-word) response")


def _tile_take(v: Scope, o: ops.TileTake) -> None:
    v.in_role(o)
    v.tile(o, "slot", "queue")


def _leave_if(v: Scope, o: ops.LeaveIf) -> None:
    v.within(o, ops.Loop)   # directly in its loop: the backend branches to the loop's exit from there


def _tmem_zero(v: Scope, o: ops.TmemZero) -> None:
    v.in_role(o)
    v.tile(o, "tile", "tmem")


VERIFY: dict[type[ops.Op], Callable[[Scope, ops.Op], None]] = {
    ops.KernelOp: _kernel, ops.TensorDecl: _tensor, ops.ScalarDecl: _scalar, ops.BoxDecl: _box,
    ops.AssumeDecl: _assume,
    ops.PipelineDecl: _pipeline, ops.BufferDecl: _buffer, ops.MbarrierDecl: _mbarrier, ops.TmemDecl: _tmem,
    ops.TmemAlloc: _tmem_alloc, ops.TmemDealloc: _tmem_dealloc,
    ops.RoleOp: _role, ops.WarpgroupBlock: _warpgroups, ops.SetMaxNReg: _setmaxnreg,
    ops.ForTiles: _for_tiles, ops.ForRange: _statement, ops.ForStep: _statement, ops.If: _statement,
    ops.Let: _statement, ops.Val: _statement, ops.Loop: _statement, ops.LeaveIf: _leave_if,
    ops.TileQueueDecl: _tile_queue, ops.TileClaim: _tile_claim, ops.TileTake: _tile_take,
    ops.TilePublish: _tile_publish, ops.ClcTryCancel: _clc_try_cancel, ops.ClcQuery: _clc_query,
    ops.Elect: _elect, ops.Sync: _sync, ops.Fence: _fence, ops.InPairLeader: _in_pair_leader,
    ops.Turn: _turn, ops.InWarpgroup: _in_warpgroup, ops.NamedBarSync: _named_barrier,
    ops.NamedBarArrive: _named_barrier,
    ops.Produce: _pipeline_block, ops.Consume: _pipeline_block,
    ops.TmaLoad: _tma_load, ops.TmaStore: _tma_store, ops.StagedStore: _staged_store, ops.TmaPrefetch: _tma_prefetch,
    ops.TensorMapPrefetch: _tensormap_prefetch, ops.BulkCommit: _statement, ops.BulkWait: _pending,
    ops.TileAssign: _writes_smem, ops.AccStore: _writes_smem, ops.TmemEpilogue: _writes_smem,
    ops.RowAssign: _row_assign, ops.RowDecl: _role_decl, ops.AccDecl: _role_decl,
    ops.AccZero: _acc_zero, ops.Wgmma: _wgmma, ops.WgmmaFence: _statement, ops.WgmmaCommit: _statement,
    ops.WgmmaWait: _pending,
    ops.MbarInit: _mbar_init, ops.MbarExpectTx: _barrier_op, ops.MbarArrive: _arrive, ops.BulkPush: _bulk_push,
    ops.MbarArriveCluster: _cluster_arrive, ops.MbarArriveLeader: _leader_arrive,
    ops.MbarArriveExpectTx: _arrive, ops.MbarWait: _barrier_op,
    ops.Tcgen05Mma: _tcgen05_mma, ops.Tcgen05Cp: _tcgen05_cp, ops.TmemZero: _tmem_zero,
    ops.Tcgen05Commit: _barrier_op, ops.Tcgen05CommitCluster: _cluster_arrive,
}
