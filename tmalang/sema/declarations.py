"""Declarations: names, dtypes, shapes, the TMA descriptor rules and warp-role layout.

Every rule here is a hardware limit from the PTX ISA / CUDA driver documentation for
cuTensorMapEncodeTiled and setmaxnreg; breaking one on the device is a fault or a hang, so
each becomes a located compile-time error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnostics import Span, error
from ..syntax import ast
from ..targets import tma
from ..targets.arch import Target
from ..targets.tma_modes import mode_of
from ..targets.dtypes import DTYPES, SCALAR_DTYPES, DType
from . import interleave, panels

GRID_KINDS = ("tiles", "persistent")
MAX_WARPS = 32          # 1024 threads per CTA
REGS_PER_SM = 65536
MAX_TX_BYTES = (1 << 20) - 1
RESERVED_FIELDS = ("full", "empty")   # the names of a pipeline's own barriers


@dataclass
class Tensor:
    name: str
    dtype: DType
    shape: list[str | int]
    span: Span
    read: bool = False
    written: bool = False


@dataclass
class Scalar:
    name: str
    dtype: DType
    span: Span


@dataclass
class Box:
    name: str
    tensor: Tensor
    shape: list[int]
    strides: list[int]
    swizzle: str
    oob: str
    l2: str
    span: Span
    pair: bool = False               # each CTA of a tcgen05 pair loads and holds half of the rows
    pair_span: Span | None = None
    cache: str = "none"              # L2 eviction policy of every copy through the box (sema/prefetch.py)
    bulk: bool = False               # no tensor map: copies are cp.async.bulk of one row chunk (sema/bulk.py)
    gather: bool = False             # copied by rows (tile::gather4/scatter4): a one-row tensor map (sema/gather.py)
    interleave: str = "none"         # NC/8HWC8-like tensor, one channel slice innermost (sema/interleave.py)
    im2col: object = None            # sema/im2col.py's Im2col (the pixel box): shape is [pixels, channels]

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype

    @property
    def mode(self) -> str:
        """Its TMA mode (targets/tma_modes.py MODES), from the declaration's switches."""
        return mode_of(self.bulk, self.im2col is not None, getattr(self.im2col, "wide", ""), self.gather)

    @property
    def tile_shape(self) -> list[int]:
        """The smem tile a load fills: every stride-th element of each extent, packed densely."""
        return tma.tile_shape(self.shape, self.strides)

    @property
    def matrix(self) -> list[int]:
        """The tile as a matrix (leading 1s dropped): what mma, epilogues and row math read."""
        return tma.matrix_shape(self.tile_shape)

    @property
    def strided(self) -> bool:
        return any(stride != 1 for stride in self.strides)

    @property
    def bytes(self) -> int:
        return tma.tile_bytes(self.dtype.itemsize, self.shape, self.strides)


@dataclass
class Pipeline:
    name: str
    stages: int
    fields: dict[str, Box]
    span: Span
    tmem_fields: dict[str, list[int]] = field(default_factory=dict)   # name -> [M, N]: a TMEM pipeline
    producers: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    produce_nests: list = field(default_factory=list)   # (loops around each produce block, span)
    peer: int = 0                                       # `peer +K`: a ring across the cluster (sema/dsmem.py)
    peer_span: Span | None = None
    consume_nests: list = field(default_factory=list)


@dataclass
class SmemBuffer:
    name: str
    box: Box
    span: Span
    users: dict[str, Span] = field(default_factory=dict)   # role name -> its first use
    stages: int = 0          # `smem cs[S]: C`: S staging tiles, owned by one staged store (§13h)
    store: Span | None = None   # sema/staged.py: the staged store that owns them


@dataclass
class Mbarrier:
    name: str
    count: int
    span: Span


@dataclass
class TmemTile:
    """`stages` tiles of Tensor Memory, `shape` = [lanes, 32-bit columns] each."""

    name: str
    stages: int
    shape: list[int]
    span: Span

    @property
    def columns(self) -> int:
        return self.stages * self.shape[1]


@dataclass
class Role:
    name: str
    first_warp: int
    last_warp: int
    regs: int | None
    decl: ast.RoleDecl

    @property
    def warps(self) -> int:
        return self.last_warp - self.first_warp + 1

    @property
    def by_warpgroup(self) -> bool:
        """Whether each warpgroup walks tiles by itself (`by warpgroup`, §15f)."""
        return any(isinstance(s, ast.ForTiles) and s.by_warpgroup for s in ast.statements(self.decl.body))

    @property
    def tile_warpgroups(self) -> int:
        """The warpgroups that hold one tile's accumulator rows: all of the role's, or one each."""
        return 1 if self.by_warpgroup else self.warps // 4


@dataclass
class KernelInfo:
    """Everything sema learned about a kernel; lowering reads it instead of re-resolving names."""

    node: ast.Kernel
    target: Target
    grid: str = "tiles"
    grid_decl: ast.GridDecl | None = None
    cluster: int = 1                   # CTAs per cluster
    dynamic_roles: dict = field(default_factory=dict)   # role -> its dynamic tile loop (sema/dynamic.py)
    cluster_cols: int = 1              # of which along the second tile index (`cluster RxC`: C)
    cluster_decl: ast.ClusterDecl | None = None
    multicast_boxes: dict = field(default_factory=dict)   # box name -> loaded with multicast
    multicast_sets: dict = field(default_factory=dict)    # box name -> the CTA set (targets/cluster.py)
    occupancy: int = 1                 # CTAs of the kernel a multiprocessor holds at once (§3)
    occupancy_decl: ast.OccupancyDecl | None = None
    cta_group: int = 1                 # 2: one tcgen05.mma works for a pair of CTAs (sema/pairs.py)
    cta_group_decl: ast.CtaGroupDecl | None = None
    symbols: dict[str, object] = field(default_factory=dict)
    dims: dict[str, Span] = field(default_factory=dict)    # symbolic dims bound at launch
    roles: list[Role] = field(default_factory=list)
    # (shape, box shape, group, split, stream, first loop) shared by every tile loop
    tile_space: tuple | None = None
    stream_steps: tuple | None = None   # (extent text, chunk, first loop) of every `steps .. stream` loop
    accumulators: dict = field(default_factory=dict)   # (role, name) -> sema.operands.Accumulator
    tmem_sites: list[Span] = field(default_factory=list)    # Tensor Memory declarations (sema/available.py)
    wgmma_sites: list[Span] = field(default_factory=list)   # mma on register accumulators
    prefetch_maps: ast.PrefetchDecl | None = None          # `prefetch tensormaps` (sema/prefetch.py)
    gather_sites: list[Span] = field(default_factory=list)  # gathered loads / scattered stores (sema/gather.py)
    gather_boxes: dict = field(default_factory=dict)        # box name -> copied by rows (True) or as a box
    index_tensors: dict = field(default_factory=dict)       # index tensor name -> the first copy naming it
    assumptions: list = field(default_factory=list)         # the accepted ast.AssumeDecls (sema/assumptions.py)

    def lookup(self, ref: ast.Ref, *kinds: type, what: str):
        """The declaration `ref` names, which must be one of `kinds`."""
        found = self.symbols.get(ref.name)
        if found is None:
            raise error("E012", f"no {what} named '{ref.name}'", ref.span)
        if kinds and not isinstance(found, kinds):
            raise error("E013", f"'{ref.name}' is {a_or_an(_kind_name(found))}, not {a_or_an(what)}", ref.span)
        return found

    def box_for(self, ref: ast.Ref) -> Box:
        """A box by name, or the only box over a tensor named `ref`."""
        found = self.lookup(ref, Box, Tensor, what="box")
        if isinstance(found, Box):
            return found
        boxes = [b for b in self.symbols.values() if isinstance(b, Box) and b.tensor is found]
        if len(boxes) != 1:
            count = "no box" if not boxes else f"{len(boxes)} boxes"
            raise error("E014", f"tensor '{ref.name}' has {count}; name the box to use", ref.span)
        return boxes[0]


def _kind_name(obj) -> str:
    return {Tensor: "tensor", Scalar: "scalar", Box: "box", Pipeline: "pipeline",
            SmemBuffer: "smem buffer", Mbarrier: "mbarrier", Role: "role", TmemTile: "tmem tile"}.get(type(obj), "name")


def a_or_an(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def declare(info: KernelInfo, name: str, obj, span: Span) -> None:
    if name in info.symbols:
        raise error("E010", f"'{name}' is already declared in kernel '{info.node.name}'", span)
    if name in info.dims:
        raise error("E010", f"'{name}' is already a dimension of kernel '{info.node.name}'", span,
                    f"declared at {info.dims[name].location()}")
    info.symbols[name] = obj


def declare_dim(info: KernelInfo, dim: ast.Dim) -> None:
    if dim.value in info.symbols:
        raise error("E010", f"dimension '{dim.value}' has the name of {_kind_name(info.symbols[dim.value])} "
                    f"'{dim.value}'", dim.span)
    info.dims.setdefault(dim.value, dim.span)


def check_param(info: KernelInfo, p: ast.Param) -> None:
    dtype = DTYPES.get(p.dtype.name)
    if dtype is None:
        raise error("E011", f"unknown dtype '{p.dtype.name}'", p.dtype.span,
                    f"known dtypes: {', '.join(DTYPES)}")
    if p.shape is None:
        if dtype.name not in SCALAR_DTYPES:
            raise error("E016", f"scalar parameters may be {', '.join(SCALAR_DTYPES)}; got {dtype.name}",
                        p.dtype.span, "pass an f32 and cast in tile math instead")
        declare(info, p.name, Scalar(p.name, dtype, p.span), p.span)
        return
    declare(info, p.name, Tensor(p.name, dtype, [d.value for d in p.shape], p.span), p.span)
    for dim in p.shape:
        if isinstance(dim.value, int) and dim.value < 1:
            raise error("E015", f"tensor dims must be at least 1, got {dim.value}", dim.span)
        if isinstance(dim.value, str):
            declare_dim(info, dim)


def check_box(info: KernelInfo, d: ast.BoxDecl) -> None:
    tensor = info.lookup(d.tensor, Tensor, what="tensor")
    rank = len(tensor.shape)
    if len(d.shape) != rank:
        raise error("E020", f"box '{d.name}' has rank {len(d.shape)} but tensor '{tensor.name}' has rank {rank}", d.span)
    if not 1 <= rank <= tma.MAX_RANK:
        raise error("E026", f"TMA supports tensors of rank 1 to {tma.MAX_RANK}; '{tensor.name}' has rank {rank}", d.span)
    for extent in d.shape:
        if not 1 <= extent <= tma.MAX_BOX_EXTENT:
            raise error("E021", f"box extents must be 1..{tma.MAX_BOX_EXTENT}, got {extent}", d.span,
                        f"a TMA box is at most {tma.MAX_BOX_EXTENT} elements along each dimension")
    check_option(d, "swizzle", tma.SWIZZLES)
    check_option(d, "oob", tma.OOB_FILLS)
    check_option(d, "l2", tma.L2_PROMOTIONS)
    strides = d.strides or [1] * rank
    if len(strides) != rank or not all(1 <= s <= tma.MAX_ELEMENT_STRIDE for s in strides):
        raise error("E025", f"element strides must be {rank} values in 1..{tma.MAX_ELEMENT_STRIDE}, got {strides}",
                    d.option_spans.get("strides", d.span))
    if strides[-1] != 1:
        # Measured on the H100 (tests/gpu/test_interp_vs_h100.py): the TMA unit ignores the innermost
        # element stride and moves the whole inner extent, so the bytes landing on the barrier,
        # the smem layout and the elements a store writes all differ from a strided reading, and
        # an inner coordinate that is not a multiple of the stride faults the launch.
        raise error("E025", f"the innermost element stride must be 1, got {strides[-1]}",
                    d.option_spans.get("strides", d.span),
                    "TMA cannot skip elements within a row; stride an outer dimension, or use a "
                    "narrower box and tile math to pick columns")
    inner_bytes = d.shape[-1] * tensor.dtype.itemsize
    if inner_bytes % tma.GLOBAL_ALIGNMENT:
        raise error("E022", f"inner box extent is {inner_bytes} bytes; TMA needs a multiple of {tma.GLOBAL_ALIGNMENT}",
                    d.span, f"{d.shape[-1]} x {tensor.dtype.name} ({tensor.dtype.itemsize} B) = {inner_bytes} B")
    check_static_strides(tensor, d)
    interleave.check(d, tensor)          # an interleaved box's rows are one slice: never wide
    panels.check_declaration(d, tensor.dtype, strides)   # rows of several swizzle spans: a panelled box
    tensor_box = Box(d.name, tensor, list(d.shape), strides, d.swizzle, d.oob, d.l2, d.span, d.pair,
                     d.option_spans.get("pair"), cache_policy(d), interleave=d.interleave)
    if d.oob == "nan" and tensor.dtype.kind not in ("float",):
        raise error("E024", f"oob nan needs a floating-point tensor; '{tensor.name}' is {tensor.dtype.name}",
                    d.option_spans["oob"])
    declare(info, d.name, tensor_box, d.span)


def cache_policy(d: ast.BoxDecl) -> str:
    if d.cache not in tma.CACHE_POLICIES:
        raise error("E454", f"unknown L2 cache policy '{d.cache}'", d.option_spans.get("cache", d.span),
                    f"expected one of: {', '.join(tma.CACHE_POLICIES[1:])}")
    return d.cache


def check_option(d: ast.BoxDecl, key: str, allowed) -> None:
    value = getattr(d, key)
    if value not in allowed:
        raise error("E024", f"unknown {key} '{value}'", d.option_spans.get(key, d.span),
                    f"expected one of: {', '.join(allowed)}")


def check_static_strides(tensor: Tensor, d: ast.BoxDecl) -> None:
    """Row strides of a dense tensor with literal inner dims must be multiples of 16 bytes."""
    stride = tensor.dtype.itemsize
    for dim in reversed(tensor.shape[1:]):
        if not isinstance(dim, int):
            return  # known at launch; the runtime checks it
        stride *= dim
        if stride % tma.GLOBAL_ALIGNMENT:
            raise error("E027", f"tensor '{tensor.name}' has a {stride}-byte stride; TMA needs a multiple of {tma.GLOBAL_ALIGNMENT}",
                        tensor.span, "pad the inner dimension or use a symbolic dim and a padded array")


def check_pipeline(info: KernelInfo, d: ast.PipelineDecl) -> None:
    if not 1 <= d.stages <= 32:
        raise error("E030", f"a pipeline needs 1 to 32 stages, got {d.stages}", d.span)
    fields: dict[str, Box] = {}
    tmem_fields: dict[str, list[int]] = {}
    for f in d.fields:
        if f.name in RESERVED_FIELDS:
            raise error("E031", f"field name '{f.name}' is reserved", f.span,
                        f"the pipeline's barriers are named {d.name}.full and {d.name}.empty")
        if f.name in fields or f.name in tmem_fields:
            raise error("E031", f"field '{f.name}' appears twice in pipeline '{d.name}'", f.span)
        if f.tmem is None:
            fields[f.name] = info.lookup(f.box, Box, what="box")
        else:
            tmem_fields[f.name] = _tmem_shape(f.tmem[0], f.tmem[1], f.span)
    if fields and tmem_fields:
        raise error("E098", f"pipeline '{d.name}' mixes shared-memory and Tensor Memory fields", d.span,
                    "a tmem pipeline hands accumulators from an MMA role to an epilogue: declare two pipelines")
    pipe = Pipeline(d.name, d.stages, fields, d.span, tmem_fields)
    if tmem_fields:
        info.tmem_sites.append(d.span)
    _check_tmem_budget(info, d.name, d.stages * sum(s[1] for s in tmem_fields.values()), d.span)
    declare(info, d.name, pipe, d.span)


MAX_STAGING = 8   # staging tiles per staged store: more only costs smem, a store waits for one at most


def check_smem(info: KernelInfo, d: ast.SmemDecl) -> None:
    if d.stages is not None and not 1 <= d.stages <= MAX_STAGING:
        raise error("E590", f"a staged store takes 1..{MAX_STAGING} staging tiles, got {d.stages}", d.span,
                    "two let one block's store overlap the next block's conversion")
    declare(info, d.name, SmemBuffer(d.name, info.lookup(d.box, Box, what="box"), d.span, stages=d.stages or 0),
            d.span)


def check_mbarrier(info: KernelInfo, d: ast.MbarrierDecl) -> None:
    if not 1 <= d.count <= MAX_TX_BYTES:
        raise error("E071", f"an mbarrier's arrival count must be 1..{MAX_TX_BYTES}, got {d.count}", d.span)
    declare(info, d.name, Mbarrier(d.name, d.count, d.span), d.span)


def check_tmem(info: KernelInfo, d: ast.TmemDecl) -> None:
    """A TMEM accumulator tile; all TMEM of the kernel together within the target's columns."""
    shape = _tmem_shape(d.dtype, d.shape, d.span)
    if d.stages < 1:
        raise error("E095", "a TMEM tile needs at least one stage", d.span)
    _check_tmem_budget(info, d.name, d.stages * shape[1], d.span)
    info.tmem_sites.append(d.span)
    declare(info, d.name, TmemTile(d.name, d.stages, shape, d.span), d.span)


def _tmem_shape(dtype: str, shape: list[int], span) -> list[int]:
    """f32, 128 or 64 lanes (one cta_group::1 MMA's M), 1..256 columns. An MMA into the tile checks
    its N against the kind's shapes (E088); row math may keep narrower tiles, e.g. [128, 1]."""
    if dtype != "f32":
        raise error("E094", f"a TMEM tile holds f32 values, not {dtype}", span)
    if len(shape) != 2 or shape[0] not in (64, 128) or not 1 <= shape[1] <= 256:
        raise error("E095", f"TMEM tile shape {shape} is not [M, N] with M = 64 or 128 and N in 1..256", span,
                    "an accumulator's M and N are those of the tcgen05.mma that writes it")
    return list(shape)


def _check_tmem_budget(info: KernelInfo, name: str, columns: int, span) -> None:
    """All Tensor Memory of the kernel within the target's columns (a target without Tensor
    Memory refuses it altogether: sema/available.py)."""
    if info.target.tensor_memory is None:
        return
    budget = info.target.tensor_memory.columns
    users = [(t.name, t.columns, t.span) for t in info.symbols.values() if isinstance(t, TmemTile)]
    users += [(p.name, p.stages * sum(s[1] for s in p.tmem_fields.values()), p.span)
              for p in info.symbols.values() if isinstance(p, Pipeline) and p.tmem_fields]
    users.append((name, columns, span))
    total = sum(c for _, c, _ in users)
    if total > budget:
        raise error("E096", f"Tensor Memory over-allocated: {total} columns, a CTA has {budget}", span,
                    *(f"{n}: {c} columns ({s.location()})" for n, c, s in users if c))


def check_grid(info: KernelInfo, d: ast.GridDecl) -> None:
    if info.grid_decl is not None:
        raise error("E057", "the grid is already declared", d.span,
                    f"first declared at {info.grid_decl.span.location()}")
    info.grid_decl = d
    if d.kind.name not in GRID_KINDS:
        raise error("E050", f"unknown grid kind '{d.kind.name}'", d.kind.span,
                    f"expected one of: {', '.join(GRID_KINDS)}")
    info.grid = d.kind.name


def check_occupancy(info: KernelInfo, d: ast.OccupancyDecl) -> None:
    """`occupancy N`: 1 to the multiprocessor's CTA limit (E601)."""
    if info.occupancy_decl is not None:
        raise error("E057", "occupancy is already declared", d.span,
                    f"first declared at {info.occupancy_decl.span.location()}")
    if not 1 <= d.ctas <= info.target.ctas_per_sm:
        raise error("E601", f"occupancy {d.ctas}: a multiprocessor holds 1 to {info.target.ctas_per_sm} CTAs", d.span)
    info.occupancy, info.occupancy_decl = d.ctas, d


def check_cluster(info: KernelInfo, d: ast.ClusterDecl) -> None:
    if info.cluster_decl is not None:
        raise error("E057", "the cluster is already declared", d.span)
    sizes = info.target.cluster_sizes
    if d.cols == 1 and d.size not in sizes:
        raise error("E058", f"cluster size must be one of {', '.join(map(str, sizes))}, got {d.size}",
                    d.span, "larger clusters need a non-portable opt-in")
    if d.cols != 1:
        _check_cluster_shape(d, sizes)
    info.cluster, info.cluster_cols, info.cluster_decl = d.size, d.cols, d


def _check_cluster_shape(d: ast.ClusterDecl, sizes: tuple[int, ...]) -> None:
    """`cluster RxC`: R and C each a portable size (powers of two, so that the rank splits into
    coordinates by mask and shift), and R·C CTAs at most the portable limit."""
    shape = f"{d.rows}x{d.cols}"
    if d.rows not in sizes or d.cols not in sizes:
        raise error("E462", f"cluster {shape}: each side must be one of {', '.join(map(str, sizes))}", d.span)
    if d.size > max(sizes):
        why = ("16 CTAs need the non-portable opt-in (cudaFuncAttributeNonPortableClusterSizeAllowed), "
               "which tmalang does not set (v0)" if d.size == 16 else "no GPU runs a cluster of more than 16 CTAs")
        raise error("E462", f"cluster {shape} has {d.size} CTAs, more than the portable limit of {max(sizes)}",
                    d.span, why)


def check_roles(info: KernelInfo, decls: list[ast.RoleDecl]) -> None:
    if not decls:
        raise error("E046", f"kernel '{info.node.name}' has no roles", info.node.name_span,
                    "declare at least one `role NAME: warps A..B { ... }`")
    owner: dict[int, Role] = {}
    for d in decls:
        role = Role(d.name, d.first_warp, d.last_warp, d.regs, d)
        if d.first_warp > d.last_warp:
            raise error("E040", f"warp range {d.first_warp}..{d.last_warp} is empty", d.warps_span)
        if d.last_warp >= MAX_WARPS:
            raise error("E042", f"warp {d.last_warp} is out of range: a CTA has at most {MAX_WARPS} warps",
                        d.warps_span)
        for w in range(d.first_warp, d.last_warp + 1):
            if w in owner:
                raise error("E041", f"warp {w} belongs to role '{owner[w].name}' and to role '{d.name}'",
                            d.warps_span)
            owner[w] = role
        if d.regs is not None and (d.regs % 8 or not 24 <= d.regs <= 256):
            raise error("E043", f"register budget must be a multiple of 8 in 24..256, got {d.regs}", d.regs_span)
        declare(info, d.name, role, d.span)
        info.roles.append(role)
    _check_warpgroup_budgets(info)


def _check_warpgroup_budgets(info: KernelInfo) -> None:
    """setmaxnreg acts on whole warpgroups: every role in one warpgroup must agree."""
    budgets: dict[int, Role] = {}
    for role in info.roles:
        if role.regs is None:
            continue
        for wg in range(role.first_warp // 4, role.last_warp // 4 + 1):
            other = budgets.setdefault(wg, role)
            if other.regs != role.regs:
                raise error("E044", f"roles '{other.name}' and '{role.name}' share warpgroup {wg} "
                            f"but ask for {other.regs} and {role.regs} registers", role.decl.regs_span,
                            "setmaxnreg applies to a whole warpgroup (4 aligned warps)")
    for role in info.roles:
        if role.regs is None and any(w // 4 in budgets for w in range(role.first_warp, role.last_warp + 1)):
            wg = next(w // 4 for w in range(role.first_warp, role.last_warp + 1) if w // 4 in budgets)
            raise error("E044", f"role '{role.name}' shares warpgroup {wg} with role '{budgets[wg].name}', "
                        "which sets a register budget", role.decl.warps_span,
                        "give both the same `regs`, or move one to another warpgroup")
    if budgets:
        total = sum(r.regs for r in budgets.values()) * 128
        if total > REGS_PER_SM:
            raise error("E045", f"register budgets need {total} registers; a CTA has {REGS_PER_SM}",
                        next(iter(budgets.values())).decl.regs_span,
                        *(f"warpgroup {wg}: {r.regs} x 128 threads" for wg, r in sorted(budgets.items())))
