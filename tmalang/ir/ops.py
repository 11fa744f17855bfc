"""IR operations: one class per op, with named, typed operands.

The IR is structured: ops nest in regions (`body`). Declarations (tensors, boxes, pipelines,
buffers, barriers) sit at the top of a KernelOp; roles hold statements. Integer and tile
operands are expression trees (ir/exprs.py). Each op keeps the source span it was lowered from,
so a later pass can report an error on the user's line.

Field annotations double as the text format's schema: the printer writes `name=value` for each
field in declaration order and the parser coerces values back by the annotation.
"""

from __future__ import annotations

import functools
from dataclasses import Field, dataclass, field, fields

from ..diagnostics import Span
from ..targets import cluster, dtypes, tma
from .exprs import AccRef, Bin, BufferRef, Call, Cast, Const, Expr, Neg, TmemRef
from .exprs import walk as walk_expr


@dataclass
class Op:
    span: Span | None = field(default=None, kw_only=True, repr=False, compare=False)

    name = "op"

    @classmethod
    def operand_fields(cls) -> tuple[Field, ...]:
        """The fields but the span, in declaration order."""
        return _operand_fields(cls)

    def regions(self) -> list[list[Op]]:
        return [getattr(self, name) for name in _region_names(type(self))]


# Once per class: dataclasses.fields() builds its tuple anew at each call, and the verifier, the
# printer and every walk ask for the fields of each op after each pass.
@functools.cache
def _operand_fields(cls: type[Op]) -> tuple[Field, ...]:
    return tuple(f for f in fields(cls) if f.name != "span")


@functools.cache
def _region_names(cls: type[Op]) -> tuple[str, ...]:
    return tuple(f.name for f in _operand_fields(cls) if f.type == "list[Op]")


OPS: dict[str, type[Op]] = {}


def op(name: str):
    def register(cls):
        cls.name = name
        OPS[name] = cls
        return cls
    return register


# ---- kernel and declarations ---------------------------------------------------------------


@op("kernel")
@dataclass
class KernelOp(Op):
    symbol: str
    grid: str                       # "tiles" | "persistent"
    cluster: int                    # CTAs per cluster (1: no cluster)
    cta_group: int                  # 2: CTA pairs, one tcgen05.mma for both CTAs of a pair
    threads: int                    # 0 until dispatch_roles sizes the block
    smem_bytes: int                 # 0 until plan_smem
    body: list[Op]
    cluster_cols: int = 1           # of the cluster's CTAs, how many along the second tile index

    def cluster_shape(self) -> tuple[int, int]:
        """(R, C): the cluster takes R x C tiles, R along the first tile index (targets/cluster.py)."""
        return self.cluster // self.cluster_cols, self.cluster_cols


@op("tensor")
@dataclass
class TensorDecl(Op):
    symbol: str
    dtype: str
    shape: list[str | int]


@op("scalar")
@dataclass
class ScalarDecl(Op):
    symbol: str
    dtype: str


COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
ASSUME_OPS = ("+", "-", "*", "/", "%", "&", "min", "max")   # the operators of an assumption's sides


@op("assume")
@dataclass
class AssumeDecl(Op):
    """`assume C % 64 == 0` (§2b): a comparison that every launch must satisfy, checked by the host
    before the kernel runs (the manifest carries it); no code in the kernel. `lhs` and `rhs` read
    constants and launch-bound values ($dims, integer $scalars) and compute in 64-bit signed
    integers, `/` and `%` truncating; nothing wraps: a division by zero or a value past 64 bits
    fails the assumption (contract/assumptions.py). `text` is the comparison as written, which the
    launch error quotes."""

    text: str
    lhs: Expr
    compare: str                    # COMPARISONS
    rhs: Expr


@op("box")
@dataclass
class BoxDecl(Op):
    symbol: str
    tensor: str
    dtype: str
    shape: list[int]
    strides: list[int]
    swizzle: str
    oob: str
    l2: str
    multicast: int                  # >1: each CTA's tensor map covers 1/multicast of dim 0
    pair: bool                      # a CTA pair's box: each CTA of the pair loads and holds half of dim 0
    cache: str = "none"             # L2 eviction policy (tma.CACHE_POLICIES) of every copy through the box
    bulk: bool = False              # no tensor map: each copy is one cp.async.bulk of the innermost chunk
    gather: bool = False            # copied by rows (tile::gather4/scatter4): the tensor map holds one row
    interleave: str = "none"        # tma.INTERLEAVES: the tensor map's interleaved layout (NC/8HWC8-like)
    # an im2col box (cuTensorMapEncodeIm2col) when `lower` is not empty: shape is [pixels,
    # channels]; the pixel box runs from lower[i] to dim - 1 + upper[i] along spatial dim i
    # (outermost first) by traversal stride im2col_strides[i]
    lower: list[int] = field(default_factory=list)
    upper: list[int] = field(default_factory=list)
    im2col_strides: list[int] = field(default_factory=list)
    # a wide im2col box (cuTensorMapEncodeIm2colWide, sm_100a): "w" or "w128"; the walk moves along
    # W only, so lower/upper/im2col_strides hold 0/0/1 for D and H; `halo` more pixels of the walk
    # (wHalo) follow the row in smem: shape[0] is pixels + halo
    wide: str = ""
    halo: int = 0

    @property
    def im2col(self) -> bool:
        return bool(self.lower)

    def map_shape(self) -> list[int]:
        """The box one CTA's tensor map describes: its slice of a split box, one row of a gathered one,
        one panel of a panelled box."""
        if self.gather:
            return [1, *self.shape[1:]]
        shape = [self.shape[0] // self.slices(), *self.shape[1:]]
        if self.panels() > 1:   # a panelled box has rank 2 or more (a rank-1 panel is one row: E518)
            shape[-1] = self.panel_cols()
        return shape

    def panels(self) -> int:
        """How many swizzle-span panels each row is cut into (tma.panels; 1 for a narrow box). The
        split is derived from shape, dtype and swizzle, so the IR carries no field for it."""
        if self.dtype not in dtypes.DTYPES or self.bulk or self.im2col:
            return 1
        return tma.panels(dtypes.itemsize(self.dtype), self.shape[-1], self.swizzle)

    def panel_cols(self) -> int:
        """Elements of one panel's rows: the inner extent the tensor map describes."""
        return self.shape[-1] // self.panels()

    def slices(self) -> int:
        """Into how many parts along dim 0 the CTAs split the box: each tensor map covers one."""
        return 2 if self.pair else self.multicast

    def held_shape(self) -> list[int]:
        """The part of the box one CTA's smem tile holds: half the rows of a pair box."""
        return [self.shape[0] // 2, *self.shape[1:]] if self.pair else list(self.shape)

    def bytes(self, itemsize: int) -> int:
        """The bytes one load brings into each CTA that receives it."""
        return tma.tile_bytes(itemsize, self.held_shape(), self.strides)


@op("pipeline")
@dataclass
class PipelineDecl(Op):
    symbol: str
    stages: int
    fields: list[str]             # "field:box" pairs
    peer: int = 0                 # K > 0: a ring across the cluster, produced into the CTA K ranks on


# How expand_pipelines names what a pipeline P becomes, for the passes that read its output:
# barriers `P.full` / `P.empty`, and a role's position in the ring `P.it` (one side) or
# `P.put` / `P.get` (a role on both sides).
PIPELINE_BARRIERS = (".full", ".empty")
PIPELINE_COUNTERS = (".it", ".put", ".get")


def is_pipeline_buffer(name: str) -> bool:
    """Whether a buffer or barrier name is one expand_pipelines made (`P.field`, `P.full`): a
    pipeline's names hold a dot, user names never do."""
    return "." in name


def pipeline_of(name: str, suffixes: tuple[str, ...] = PIPELINE_BARRIERS) -> str | None:
    """P for a name `P<suffix>` that expand_pipelines made, else None."""
    return next((name[: -len(s)] for s in suffixes if name.endswith(s)), None)


@op("buffer")
@dataclass
class BufferDecl(Op):
    """`stages` copies of one box tile in shared memory."""

    symbol: str
    box: str
    stages: int
    bytes: int                      # one stage
    align: int
    offset: int                     # from the aligned smem base; -1 until plan_smem


@op("mbarrier")
@dataclass
class MbarrierDecl(Op):
    symbol: str
    stages: int
    count: int                      # arrivals per phase; -1 until schedule_barriers
    tx_bytes: int                   # bytes expected per phase (0: none)
    offset: int                     # -1 until plan_smem


@op("tmem")
@dataclass
class TmemDecl(Op):
    """`stages` Tensor Memory tiles of [lanes, columns] 32-bit cells (sm_100a)."""

    symbol: str
    stages: int
    shape: list[int]
    column: int                     # first column; -1 until plan_tmem

    def pitch(self) -> int:
        """Columns from one stage to the next: the width rounded up to TMEM_GRANULE, so that every
        stage of a tile starts on the granule its first stage starts on (plan_tmem)."""
        return -(-self.shape[1] // TMEM_GRANULE) * TMEM_GRANULE

    def stage_column(self, stage: int) -> int:
        return self.column + stage * self.pitch()


TMEM_GRANULE = 4   # every tcgen05 Tensor Memory base (mma D, cp, ld, st) is a multiple of 4 columns


@op("tmem_alloc")
@dataclass
class TmemAlloc(Op):
    """Warp 0 allocates `columns` of Tensor Memory (a power of two, 32..512) and writes the base
    address to shared memory at `offset`, then gives up the right to allocate again."""

    columns: int
    offset: int                     # the smem word holding the TMEM base address; -1 until plan_smem


@op("tmem_dealloc")
@dataclass
class TmemDealloc(Op):
    """Warp 0 frees the allocation, after every warp has finished with Tensor Memory."""

    columns: int


@op("tcgen05_mma")
@dataclass
class Tcgen05Mma(Op):
    """D += A · Bᵀ into Tensor Memory tile `d` (K-major smem a: [M, K], b: [N, K]), issued by one
    thread. Asynchronous: it has read a and b and written d once a later tcgen05_commit of the
    same thread has arrived on its barrier."""

    d: BufferRef
    a: BufferRef
    b: BufferRef


@op("tcgen05_cp")
@dataclass
class Tcgen05Cp(Op):
    """Copy the f32 smem tile `source` ([128, W], K-major rows of one swizzle span) into columns
    `col` .. `col` + W − 1 of Tensor Memory tile `d`, lane i from row i (tcgen05.cp.128x256b, 8
    columns per instruction), issued by one thread. Asynchronous like tcgen05_mma and ordered
    before that thread's later MMAs, which add onto the copy; a later tcgen05_commit of the same
    thread arrives once it has completed."""

    d: BufferRef
    col: int
    source: BufferRef


@op("tmem_zero")
@dataclass
class TmemZero(Op):
    """The next tcgen05_mma into `tile` overwrites it (enable-input-d false) instead of adding."""

    tile: BufferRef


@op("tcgen05_commit")
@dataclass
class Tcgen05Commit(Op):
    """One arrival on `barrier` once every earlier tcgen05 op of this thread has completed."""

    barrier: BufferRef


@op("tcgen05_commit_cluster")
@dataclass
class Tcgen05CommitCluster(Tcgen05Commit):
    """A tcgen05_commit that arrives on this barrier (same offset) in every CTA of this CTA's set
    `ctas` (`.multicast::cluster` with its mask): the release of a slot that other CTAs multicast into."""

    ctas: str = "cluster"

    def senders(self, kernel: KernelOp) -> int:
        """How many CTAs' commit sites reach one CTA's barrier (the sets are symmetric)."""
        return cluster.size(kernel.cluster_shape(), self.ctas)


@op("tmem_epilogue")
@dataclass
class TmemEpilogue(Op):
    """`dest` = value over a Tensor Memory tile: each warp of a warpgroup loads its 32 lanes
    (rows 32·(warp % 4) ..) with tcgen05.ld, waits for them, and writes those rows of dest."""

    dest: BufferRef
    value: Expr


@op("row_decl")
@dataclass
class RowDecl(Op):
    """Row registers of a one-warpgroup role: thread t holds row t (warp w: rows 32·(w % 4) ..),
    `cols` f32 values of it, or one value when `cols` is 0."""

    symbol: str
    cols: int


@op("row_assign")
@dataclass
class RowAssign(Op):
    """Row math: every thread computes `value` over its own row and writes it to `dest` — a row
    register (`^m`), a Tensor Memory tile (tcgen05.st into its lane, then tcgen05.wait::st) or
    an smem tile (its row). Tensor Memory operands are read with tcgen05.ld.32x32b."""

    dest: Expr
    value: Expr

    def stores_tmem(self, tmem_tiles) -> bool:
        return isinstance(self.dest, BufferRef) and self.dest.name in tmem_tiles

    def touches_tmem(self, tmem_tiles) -> bool:
        """Loads from or stores to Tensor Memory (tcgen05.ld / tcgen05.st): a tcgen05 access."""
        return self.stores_tmem(tmem_tiles) or any(isinstance(e, TmemRef) for e in walk_expr(self.value))


@op("role")
@dataclass
class RoleOp(Op):
    symbol: str
    first_warp: int
    last_warp: int                  # inclusive
    regs: int                       # 0: keep the launch budget
    body: list[Op]
    # `by warpgroup` (§15f): the source role this one-warpgroup role is a part of, "" otherwise;
    # the roles of a group take tiles in turn (their for_tiles' offset) and chain their turns
    group: str = ""


# ---- control -------------------------------------------------------------------------------


@op("for_tiles")
@dataclass
class ForTiles(Op):
    """Loop over the tiles of `tensor` cut by `box`; persistent grids stride over them.

    Binds `vars` (tile index per dim, outermost first) and `index` (this CTA's iteration). With
    `group` G, tile t of a 2-D space lies in band t // (G * columns) and walks that band's G rows
    first, so concurrently running CTAs share operand tiles in L2. With `split` S (a constant or
    a scalar parameter) every tile is walked S times, binding `part` = 0 .. S - 1: the part is the
    slowest index, so the CTAs running at once work on the same part of K. With `stream` (the
    names of two variables: this CTA's first step of the tile and its step count) the walk is
    stream-K: the tiles x `steps` (K steps per tile) units of work are cut into one equal range
    per CTA, and the loop visits, in tile order, only the tiles its range touches, binding the
    steps of each that fall in it. The passes find the tile loop by this op; the last one,
    lower_tile_walk, writes out what it means in vals and a for_step, which is what the
    interpreter and the backend run.
    """

    vars: list[str]
    tensor: str
    box: str
    index: str
    group: int                      # 0: row-major; G: bands of G tile rows, walked column by column
    body: list[Op]
    split: Expr = Const(1)          # parts per tile (`split S`); 1: no split
    part: str = ""                  # the variable bound to the part (the split index), with a split
    dynamic: bool = False           # tiles claimed in linear order from a global counter (claim_tiles)
    # stream-K: the stream steps loops' steps(extent, chunk) (extent a literal or launch-bound),
    # and the names of this CTA's [first step, step count] of each tile it visits
    extent: Expr = Const(0)
    chunk: int = 0
    stream: list[str] = field(default_factory=list)
    # `by warpgroup`: this loop takes tiles offset, offset + every, ... of the CTA's walk (the
    # other offsets are the other warpgroups' roles); 1: every tile
    every: int = 1
    offset: int = 0


@op("for_range")
@dataclass
class ForRange(Op):
    """`var` = 0, 1, .., count - 1 (count is evaluated once, on entry)."""

    var: str
    count: Expr
    body: list[Op]


@op("for_step")
@dataclass
class ForStep(Op):
    """C's `for (var = start, count = 0; var < stop; var += step, count += 1) body`, unsigned
    32-bit: `start` is evaluated on entry, `stop` before every iteration, `step` after every
    iteration (neither reads `var` or `count`). `count` numbers the iterations 0, 1, ..: the body
    often needs it besides its strided position (a persistent CTA's i-th tile picks a parity)."""

    var: str
    count: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Op]


@op("if")
@dataclass
class If(Op):
    """Run `body` when `cond` is non-zero (uniform across the threads that reach it)."""

    cond: Expr
    body: list[Op]


@op("let")
@dataclass
class Let(Op):
    """Define or update an integer variable."""

    var: str
    value: Expr


@op("val")
@dataclass
class Val(Op):
    """Name a value: `var` = `value`, like a let, for the ops after it in its region. A val is the
    index arithmetic a pass derived: the backend keeps it as an SSA value (no stack slot, unless a
    let or a loop also binds the name), and the interpreter does not count it as a step of the
    warp, where the scheduler may switch warps (no other agent can observe it)."""

    var: str
    value: Expr


@op("in_pair_leader")
@dataclass
class InPairLeader(Op):
    """Run `body` only in the leader CTA of each CTA pair (even %cluster_ctarank, cta_group 2)."""

    body: list[Op]


@op("elect")
@dataclass
class Elect(Op):
    """Run `body` on one thread: the role's first thread, the first thread of each of the role's
    warpgroups, or thread 0 of the block."""

    scope: str                      # "role" | "warpgroup" | "block"
    body: list[Op]


@op("turn")
@dataclass
class Turn(Op):
    """The role's warpgroups run `body` one at a time, in warpgroup order, round-robin (§15e).
    order_turns replaces it by named-barrier ops; no turn remains after that pass."""

    body: list[Op]


@op("in_warpgroup")
@dataclass
class InWarpgroup(Op):
    """Run `body` on warpgroup `group` of the role only (its four warps, every thread)."""

    group: int
    body: list[Op]


@op("produce")
@dataclass
class Produce(Op):
    pipeline: str
    slot: str
    body: list[Op]


@op("consume")
@dataclass
class Consume(Op):
    pipeline: str
    slot: str
    body: list[Op]


# ---- data movement and math ----------------------------------------------------------------


@op("tma_load")
@dataclass
class TmaLoad(Op):
    box: str
    coords: list[Expr]            # tile indices, outermost first
    dest: BufferRef
    barrier: BufferRef | None
    multicast: bool               # this CTA's slice of the box, written into every CTA of its set `ctas`
    pair: bool                    # completes its bytes on the barrier of the CTA pair's leader (cta_group 2)
    elements: bool = False        # coords are element indices (innermost last), not tile indices
    # an index tensor: coords[0] is then a tile position p in it, and tile row j comes from tensor
    # row gather[p * rows + j] (tile::gather4, four rows per copy); "": a box at tile coordinates
    gather: str = ""
    ctas: str = "cluster"         # a multicast's CTA set: cluster, row or column (targets/cluster.py)
    # through an im2col box: coords are element coordinates (N, spatial..., C) and these the
    # filter position added to each pixel, one per spatial dim, outermost first
    offsets: list[Expr] = field(default_factory=list)


@op("tma_store")
@dataclass
class TmaStore(Op):
    box: str
    coords: list[Expr]
    source: BufferRef
    reduce: str = ""              # a TMA reduce (cp.reduce.async.bulk.tensor) with this operation; "": a store
    elements: bool = False        # coords are element indices, not tile indices
    gather: str = ""              # an index tensor, as for tma_load: tile row j goes to row gather[p * rows + j]


@op("staged_store")
@dataclass
class StagedStore(Op):
    """A staged store (§13h): `value`, an epilogue reading an accumulator, written to global memory in
    `blocks` column blocks of box `box`, block j converted into staging tile j mod (the buffer's
    stages) and stored (or reduced, `reduce`) at `coords` with the last coordinate moved on j blocks
    (j × the box's columns at element coordinates). High level: stage_stores expands it into the
    epilogues, TMA stores, waits, syncs and bulk groups it derives."""

    box: str
    coords: list[Expr]            # block 0's, in units of `box` (element indices with `elements`)
    value: Expr                   # the accumulator read from column 0 (!acc, or tmem[...] at column 0)
    staging: str                  # the staging buffer
    blocks: int
    reduce: str = ""
    elements: bool = False


@op("tma_prefetch")
@dataclass
class TmaPrefetch(Op):
    """Box `box` at tile coordinates `coords` into L2 (cp.async.bulk.prefetch.tensor), issued by
    one thread: no shared memory, no barrier, no effect on any value; what lies outside the
    tensor is skipped. Through a bulk box, cp.async.bulk.prefetch.L2 of its chunk, which must
    lie inside the tensor (as a bulk copy's)."""

    box: str
    coords: list[Expr]            # tile indices, outermost first
    elements: bool = False        # coords are element indices, not tile indices
    gather: str = ""              # an index tensor, as for tma_load: the rows gather[p * rows + j] into L2


@op("tensormap_prefetch")
@dataclass
class TensorMapPrefetch(Op):
    """The tensor-map descriptor of `box` into the cache (prefetch.tensormap), issued by one thread."""

    box: str


@op("tile_assign")
@dataclass
class TileAssign(Op):
    """Elementwise math over whole tiles: dest[k] = value(k) for every element k."""

    dest: BufferRef
    value: Expr


@op("bulk_commit")
@dataclass
class BulkCommit(Op):
    pass


@op("bulk_wait")
@dataclass
class BulkWait(Op):
    """cp.async.bulk.wait_group[.read] pending."""

    pending: int
    read: bool


# ---- tensor cores ----------------------------------------------------------------------------


@op("accumulator")
@dataclass
class AccDecl(Op):
    """A register tile of the enclosing role; warpgroup g holds rows 64g .. 64g + 63."""

    symbol: str
    dtype: str
    shape: list[int]


@op("acc_zero")
@dataclass
class AccZero(Op):
    acc: str


@op("wgmma")
@dataclass
class Wgmma(Op):
    """acc += a · bᵀ over the whole K extent of the tiles (K-major a: [R, K], b: [C, K]).
    `a` is an smem tile, or `cvt.bf16(!p)`: accumulator p converted in registers (wgmma's
    register-A form; p's fragment layout is the A fragment layout, 16 columns per K step)."""

    acc: str
    a: Expr
    b: BufferRef
    kn: bool = False   # b is [K, C], stored C-innermost (MN-major, imm-trans-b = 1): acc += a · b

    def register_a(self) -> set[str]:
        """The accumulator read as a register A operand (`cvt.bf16(!p)`), if any."""
        return {e.name for e in walk_expr(self.a) if isinstance(e, AccRef)}


@op("wgmma_fence")
@dataclass
class WgmmaFence(Op):
    """wgmma.fence. `pins`: the accumulators whose registers the backend ties to it (writes
    before the fence stay before it); empty: all of the role's (wait_wgmma_late leaves out those
    of groups still in flight)."""

    pins: list[str] = field(default_factory=list)


@op("wgmma_commit")
@dataclass
class WgmmaCommit(Op):
    pass


@op("wgmma_wait")
@dataclass
class WgmmaWait(Op):
    """wgmma.wait_group: at most `pending` groups stay in flight. `pins`: the accumulators whose
    registers the backend ties to the wait (reads after it stay after it): the ones the groups
    it retires wrote (wait_wgmma_late); empty: all of the role's."""

    pending: int
    pins: list[str] = field(default_factory=list)


@op("acc_store")
@dataclass
class AccStore(Op):
    """Epilogue: dest[r, c] = value with !acc standing for acc[r, c], for every element."""

    dest: BufferRef
    value: Expr


# ---- synchronisation -----------------------------------------------------------------------


@op("mbar_init")
@dataclass
class MbarInit(Op):
    barrier: BufferRef
    count: int


@op("mbar_expect_tx")
@dataclass
class MbarExpectTx(Op):
    barrier: BufferRef
    bytes: Expr


@op("mbar_arrive")
@dataclass
class MbarArrive(Op):
    """With `peer` K > 0: on the barrier at the same offset in the CTA of rank (rank + K) % cluster
    (mapa; .release.cluster), the release of a peer pipeline's slot to the CTA that pushed it."""

    barrier: BufferRef
    peer: int = 0


@op("mbar_arrive_cluster")
@dataclass
class MbarArriveCluster(Op):
    """Arrive on this barrier (same offset) in every CTA of this CTA's set `ctas`: the whole
    cluster, or its row, column or cross (targets/cluster.py)."""

    barrier: BufferRef
    ctas: str = "cluster"

    def senders(self, kernel: KernelOp) -> int:
        """How many CTAs' arrive sites reach one CTA's barrier (the sets are symmetric)."""
        return cluster.size(kernel.cluster_shape(), self.ctas)


@op("mbar_arrive_leader")
@dataclass
class MbarArriveLeader(MbarArriveCluster):
    """Arrive on this barrier (same offset) in the leader CTA of this CTA's pair (cta_group 2):
    both CTAs of a pair release a slot where the pair's MMA role waits."""

    def senders(self, kernel: KernelOp) -> int:
        return 2


@op("mbar_arrive_expect_tx")
@dataclass
class MbarArriveExpectTx(Op):
    """With `peer` K > 0: on the barrier at the same offset in the CTA K ranks on, as MbarArrive."""

    barrier: BufferRef
    bytes: Expr
    peer: int = 0


@op("bulk_push")
@dataclass
class BulkPush(Op):
    """Distributed shared memory: `bytes` of this CTA's tile `source` into tile `dest` of the CTA
    of rank (rank + peer) % cluster, completing the bytes on that CTA's `barrier`
    (cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes), issued by one thread.
    The source is read asynchronously: nothing but the peer's release of `dest` says it has been."""

    source: BufferRef
    dest: BufferRef
    barrier: BufferRef
    bytes: int
    peer: int


@op("tile_queue")
@dataclass
class TileQueueDecl(Op):
    """Shared-memory words (u32, `words` per stage) through which a dynamic tile loop's claimer
    hands each claimed tile index to every role of its CTA (passes/claim_tiles.py); with
    `words` = 4, the 16-byte response a cluster launch control cancel writes (clc_try_cancel)."""

    symbol: str
    stages: int
    offset: int                     # -1 until placed in the smem plan
    words: int = 1

    @property
    def stage_bytes(self) -> int:
        return 4 * self.words


@op("tile_claim")
@dataclass
class TileClaim(Op):
    """One thread claims the next tile: t = atom.global.add.u32 [tile counter], 1 (relaxed), and
    stores t into `slot` (a tile_queue word). The claim that returns `tiles` + nctaid - 1, the
    last one of the launch, stores 0 back into the counter (passes/claim_tiles.py argues why)."""

    slot: BufferRef
    tiles: Expr


@op("tile_publish")
@dataclass
class TilePublish(Op):
    """One thread stores `value` into `slot` (a tile_queue word): a grid of tiles' CTA publishes
    its own tile, ctaid.x, as its first claim (passes/claim_tiles.py)."""

    slot: BufferRef
    value: Expr


@op("clc_try_cancel")
@dataclass
class ClcTryCancel(Op):
    """One thread asks to cancel a CTA of the launch that has not started yet (cluster launch
    control, sm_100a): the 16-byte answer lands in `response` (a 4-word tile_queue) and completes
    16 transaction bytes on `barrier`, whose expect_tx the thread has armed before."""

    response: BufferRef
    barrier: BufferRef


@op("clc_query")
@dataclass
class ClcQuery(Op):
    """One thread decodes `response` into `slot` (a tile_queue word): the canceled CTA's ctaid.x,
    the tile it would have run, or `tiles` (past the end) when nothing was left to cancel."""

    slot: BufferRef
    response: BufferRef
    tiles: Expr


@op("tile_take")
@dataclass
class TileTake(Op):
    """`var` = the tile index in `slot` (a tile_queue word), read by every thread."""

    var: str
    slot: BufferRef


@op("loop")
@dataclass
class Loop(Op):
    """`count` = 0, 1, ..: run `body` until a `leave_if` directly in it finds its condition true."""

    count: str
    body: list[Op]


@op("leave_if")
@dataclass
class LeaveIf(Op):
    """Leave the enclosing `loop` (of which it is a direct child) when `cond` is non-zero
    (uniform across the threads that reach it)."""

    cond: Expr


@op("mbar_wait")
@dataclass
class MbarWait(Op):
    barrier: BufferRef
    parity: Expr


@op("fence")
@dataclass
class Fence(Op):
    kind: str                       # "proxy_async" | "mbarrier_init" | "tcgen05_{before,after}_thread_sync"


@op("sync")
@dataclass
class Sync(Op):
    """A barrier across the role's threads (scope role), the whole block, or the whole cluster."""

    scope: str


@op("named_bar_sync")
@dataclass
class NamedBarSync(Op):
    """`bar.sync id, count`: the executing warp arrives on CTA named barrier `id` (0..15) and
    waits until `count` threads (a multiple of 32) have arrived in the barrier's current phase."""

    id: int
    count: int


@op("named_bar_arrive")
@dataclass
class NamedBarArrive(Op):
    """`bar.arrive id, count`: the executing warp arrives on named barrier `id` without waiting."""

    id: int
    count: int


NAMED_BARRIERS = 16        # bar.sync / bar.arrive ids 0..15 per CTA (PTX ISA, barrier{.cta})


@op("warpgroups")
@dataclass
class WarpgroupBlock(Op):
    """Warpgroups first..last (inclusive): runs `body` (setmaxnreg, then their roles) on their warps."""

    first: int
    last: int
    body: list[Op]


@op("setmaxnreg")
@dataclass
class SetMaxNReg(Op):
    """Set the register budget of the warpgroups running it (one instruction for all their warps)."""

    action: str                     # "inc" | "dec"
    regs: int


TENSOR_CORE_OPS = (Tcgen05Mma, Tcgen05Cp)   # read smem asynchronously; tcgen05_commit tracks them


def accumulators_touched(o: Op) -> set[str]:
    """Accumulators an op reads or writes in registers (its own, not those of nested ops)."""
    if isinstance(o, AccZero):
        return {o.acc}
    values = [getattr(o, f.name) for f in o.operand_fields()]
    return {e.name for v in values if isinstance(v, (Bin, Neg, Cast, Call, AccRef))
            for e in walk_expr(v) if isinstance(e, AccRef)}


def walk(ops: list[Op]):
    """Every op in a region, parents before children."""
    for o in ops:
        yield o
        for region in o.regions():
            yield from walk(region)


def decls(kernel: KernelOp, cls: type[Op]) -> dict[str, Op]:
    return {d.symbol: d for d in kernel.body if isinstance(d, cls)}


def roles(kernel: KernelOp) -> list[RoleOp]:
    """The kernel's roles, also those dispatch_roles placed inside warpgroup blocks."""
    found = []
    for o in kernel.body:
        if isinstance(o, RoleOp):
            found.append(o)
        elif isinstance(o, WarpgroupBlock):
            found += [r for r in o.body if isinstance(r, RoleOp)]
    return found
