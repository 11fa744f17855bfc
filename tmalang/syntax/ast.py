"""The abstract syntax tree. Every node keeps the span of the text it came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnostics import Span


@dataclass
class Node:
    span: Span = field(repr=False, compare=False)


# ---- expressions ---------------------------------------------------------------------------


@dataclass
class Number(Node):
    value: int | float


@dataclass
class Ref(Node):
    """`name`, `slot.field`, or `name[i, j]`: block (i, j) of an accumulator (epilogues only)."""

    name: str
    field: str | None = None
    block: list | None = None

    def text(self) -> str:
        if self.block is not None:
            base = f"{self.name}.{self.field}" if self.field else self.name
            return f"{base}[{', '.join(_index_text(c) for c in self.block)}]"
        return f"{self.name}.{self.field}" if self.field else self.name


def expr_text(e, grouped: bool = False) -> str:
    """An expression as source-like text; `grouped` parenthesises every operation, a canonical
    form for comparing two expressions as written."""
    if isinstance(e, Number):
        return str(e.value)
    if isinstance(e, Ref) and e.block is not None:    # the whole index: `t[i]` and `t[i + 1]` differ
        base = f"{e.name}.{e.field}" if e.field else e.name
        return f"{base}[{', '.join(expr_text(c, grouped) for c in e.block)}]"
    if isinstance(e, Ref):
        return e.text()
    if isinstance(e, Neg):
        inner = f"-{expr_text(e.operand, grouped)}"
        return f"({inner})" if grouped else inner
    if isinstance(e, Call):
        return f"{e.func}({', '.join(expr_text(a, grouped) for a in e.args)})"
    if isinstance(e, BinOp):
        inner = f"{expr_text(e.lhs, grouped)} {e.op} {expr_text(e.rhs, grouped)}"
        return f"({inner})" if grouped else inner
    return "..."


def _index_text(e) -> str:
    if isinstance(e, Ref):
        return e.text()
    return str(e.value) if hasattr(e, "value") else "…"


@dataclass
class BinOp(Node):
    op: str  # + - * / % &
    lhs: Expr
    rhs: Expr


@dataclass
class Neg(Node):
    operand: Expr


@dataclass
class Call(Node):
    func: str
    args: list[Expr]


Expr = Number | Ref | BinOp | Neg | Call


def refs(e: Expr) -> list[Ref]:
    """Every name an expression reads, left to right."""
    if isinstance(e, Ref):
        return [e]
    if isinstance(e, BinOp):
        return refs(e.lhs) + refs(e.rhs)
    if isinstance(e, Neg):
        return refs(e.operand)
    if isinstance(e, Call):
        return [r for a in e.args for r in refs(a)]
    return []


@dataclass
class ConstUse(Node):
    """A compile-time constant where the grammar takes an integer (`a[BM, BK]`, `ring[STAGES]`);
    syntax/constants.py replaces each by its value before sema, so no later stage sees one."""

    name: str                    # "" for `(expr)`
    negative: bool = False       # `lower [-PAD]`
    expr: Expr | None = None     # `(BN / 4)`: an integer expression of constants and literals
    size: bool = False           # `swizzle SW`: the constant holds a size (128B), not an integer


# ---- statements ----------------------------------------------------------------------------


@dataclass
class ForTiles(Node):
    vars: list[str]
    tensor: Ref
    box: Ref
    index: str | None
    body: list[Stmt]
    group: int | None = None     # `grouped G`: G rows of tiles walked column by column
    # `split S` (an integer literal or scalar parameter): each tile S times; vars[0] is the split index
    split: Number | Ref | None = None
    dynamic: bool = False        # `dynamic`: tiles claimed from a counter by whichever CTA asks next
    reverse: bool = False        # `reversed`: the walk's order, last tile first
    # `stream` (stream-K): the span of the keyword; the walk visits the tiles this CTA's equal share
    # of all tiles' K steps touches
    stream: Span | None = field(default=None, repr=False, compare=False)
    # `by warpgroup`: the span of the words; each warpgroup of the role walks every n-th tile alone
    by_warpgroup: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class ForSteps(Node):
    """`for k in steps(EXTENT, CHUNK) { ... }`: k = 0 .. ceil(EXTENT / CHUNK) - 1."""

    var: str
    extent: Expr
    chunk: int
    body: list[Stmt]
    part: Ref | None = None      # `part p`: only the p-th of the tile loop's S parts of the steps
    # `stream`: the keyword's span; only this CTA's steps of the enclosing stream tile loop's tile
    stream: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class AccumulatorDecl(Node):
    """`accumulator acc: f32[R, C]`: a register tile, split by rows over the role's warpgroups;
    `... by columns`: a 64-row tile whose columns the warpgroups split."""

    name: str
    dtype: Ref
    shape: list[int]
    by_columns: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class RowDecl(Node):
    """`row m: f32` or `row s: f32[64]`: registers of a one-warpgroup role holding one value (or
    `cols` values) per row, one row per thread — the layout tcgen05.ld.32x32b delivers."""

    name: str
    dtype: Ref
    cols: int | None


@dataclass
class Mma(Node):
    """`mma acc, a, b`: acc += a · bᵀ on the tensor cores (a: [R, K], b: [C, K], both K-major);
    `mma acc, a, b kn`: acc += a · b with b [K, C] stored C-innermost (MN-major);
    `mma acc, a km, b`: acc += aᵀ · bᵀ with a [K, R] stored R-innermost (MN-major A).
    `a` is an smem tile, or `bf16(p)` / `f16(p)`: accumulator p converted in registers."""

    acc: Ref
    a: Ref | Call
    b: Ref
    kn: bool = False   # `mma acc, a, b kn`: b is [K, N], stored N-innermost; acc += a · b
    km: bool = False   # `mma acc, a km, b`: a is [K, M], stored M-innermost; acc += aᵀ · b


@dataclass
class Produce(Node):
    pipeline: Ref
    slot: str
    body: list[Stmt]


@dataclass
class Consume(Node):
    pipeline: Ref
    slot: str
    body: list[Stmt]


@dataclass
class Load(Node):
    """`load T[c..] -> dst [, barrier]`: a TMA tensor load (T names a box or a tensor)."""

    source: Ref
    coords: list[Expr]
    dest: Ref
    barrier: Ref | None
    multicast: bool = False      # each CTA of the cluster loads a slice into every CTA's smem
    elements: bool = False       # `T@[r, c]`: coordinates are element indices, not tile indices
    gather: str = ""             # sema: the index tensor of `load X[idx[p], c]` (tile::gather4)
    multicast_over: list = field(default_factory=list)   # `multicast(n)`: the tile indices that vary in the set
    offsets: list[Expr] | None = None   # `offsets [r, s]`: an im2col load's filter position
    offsets_span: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class Store(Node):
    """`store T[c..] <- src`: a TMA tensor store; with `through cs`, a staged store of the value
    `src` (an expression) in blocks through the staging tiles cs (§13h)."""

    target: Ref
    coords: list[Expr]
    source: Ref | Expr
    reduce: str = ""        # `reduce OP T[c..] <- src`: the TMA reduce operation; "" for a plain store
    reduce_span: Span | None = field(default=None, repr=False, compare=False)
    elements: bool = False  # `T@[r, c]`: coordinates are element indices, not tile indices
    gather: str = ""        # sema: the index tensor of `store X[idx[p], c] <- src` (tile::scatter4)
    through: Ref | None = None   # `through cs`: the staging tiles of a staged store
    blocks: int = 0         # sema (staged store): the column blocks the staging box cuts the tile into


@dataclass
class Prefetch(Node):
    """`prefetch T[c..]`: bring box T at tile coordinates c into L2 (cp.async.bulk.prefetch.tensor).
    No shared memory, no barrier; a box partly or wholly outside the tensor is fine."""

    box: Ref
    coords: list[Expr]
    elements: bool = False  # `prefetch T@[r, c]`: element coordinates
    gather: str = ""        # sema: the index tensor of `prefetch X[idx[p], c]` (tile::gather4 into L2)
    offsets: list[Expr] | None = None   # `offsets [r, s]`: an im2col prefetch's filter position
    offsets_span: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class Assign(Node):
    """`dst = expr`: elementwise tile math written into shared memory, or row math (sema sets
    `row_math`, so lowering follows its decision instead of repeating the rule), or a copy into
    Tensor Memory (sema sets the first column it writes, `tmem_column`)."""

    target: Ref
    value: Expr
    row_math: bool = False
    tmem_column: int = 0


@dataclass
class Elect(Node):
    body: list[Stmt]


@dataclass
class Turn(Node):
    body: list[Stmt]


@dataclass
class ExpectTx(Node):
    barrier: Ref
    bytes: Expr


@dataclass
class Arrive(Node):
    barrier: Ref


@dataclass
class Wait(Node):
    barrier: Ref
    parity: Expr


@dataclass
class Fence(Node):
    kind: Ref


@dataclass
class Sync(Node):
    pass


@dataclass
class CommitGroup(Node):
    pass


@dataclass
class WaitGroup(Node):
    read: bool
    pending: int


@dataclass
class StaticIf(Node):
    """`if A op B { ... } else { ... }` of statements or of kernel items: a choice made at compile
    time (§2a). syntax/constants.py keeps the chosen branch's contents in its place; nothing after
    it sees the node."""

    lhs: Expr
    op: str                      # == != < <= > >=
    rhs: Expr
    body: list
    orelse: list = field(default_factory=list)


def statements(body: list) -> list:
    """Every statement of a block and of the blocks nested in it, outer first (both branches of a
    compile-time `if`, before constants choose one)."""
    out = []
    for stmt in body:
        out.append(stmt)
        out += statements(getattr(stmt, "body", None) or [])
        out += statements(getattr(stmt, "orelse", None) or [])
    return out


def items(kernel_items: list) -> list:
    """A kernel's items with both branches of each compile-time `if` among them, in order."""
    out = []
    for item in kernel_items:
        out += items(item.body) + items(item.orelse) if isinstance(item, StaticIf) else [item]
    return out


Stmt = ForTiles | ForSteps | AccumulatorDecl | RowDecl | Mma | Produce | Consume | Load | Store | Assign | Elect | ExpectTx | Arrive | Wait
Stmt = Stmt | Fence | Sync | CommitGroup | WaitGroup | Prefetch | Turn


# ---- declarations --------------------------------------------------------------------------


@dataclass
class Dim(Node):
    value: str | int  # a symbol bound at launch, or a literal extent


@dataclass
class Param(Node):
    name: str
    dtype: Ref
    shape: list[Dim] | None  # None: a scalar


@dataclass
class GridDecl(Node):
    kind: Ref


@dataclass
class ClusterDecl(Node):
    """`cluster N` or `cluster RxC`: CTAs launch in clusters of R·C; a cluster takes an R x C block
    of adjacent tiles (R along the first tile index, C along the second; `cluster N` is N x 1)."""

    rows: int
    cols: int = 1

    @property
    def size(self) -> int:
        return self.rows * self.cols


@dataclass
class OccupancyDecl(Node):
    """`occupancy N`: N CTAs of the kernel share a multiprocessor (launch registers and shared
    memory sized for N)."""

    ctas: int


@dataclass
class CtaGroupDecl(Node):
    """`cta_group 2`: the CTAs of a cluster pair up; one tcgen05.mma works for both CTAs of a pair."""

    size: int


@dataclass
class BoxDecl(Node):
    name: str
    tensor: Ref
    shape: list[int]
    swizzle: str = "none"
    oob: str = "zero"
    strides: list[int] | None = None
    l2: str = "none"
    pair: bool = False           # a CTA pair's box: each CTA of the pair loads and holds half its rows
    cache: str = "none"          # `cache evict_last`: the L2 eviction policy of every copy through the box
    bulk: bool = False           # `bulk Row = x[CHUNK]`: shape is [CHUNK]; no tensor map (cp.async.bulk)
    interleave: str = "none"     # `interleave 16B|32B`: the tensor is NC/8HWC8-like, one C slice innermost
    im2col: bool = False         # `im2col A = x[PIXELS, CHANNELS] lower [..] upper [..]` (sema/im2col.py)
    lower: list[int] | None = None   # im2col: the pixel box's lower corner, one per spatial dim
    upper: list[int] | None = None   # im2col: its upper corner, relative to the far edge of each dim
    wide: str = ""               # `wide w|w128`: the sm_100a W-only im2col modes (sema/im2col_wide.py)
    halo: int | None = None      # `halo H`: a wide box's extra pixels after its row (wHalo)
    option_spans: dict[str, Span] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class FieldDecl(Node):
    """`name: Box` (an smem tile per stage) or `name: tmem f32[M, N]` (a Tensor Memory tile per stage)."""

    name: str
    box: Ref | None
    tmem: tuple[str, list[int]] | None = None   # (dtype, shape) of a tmem field
    dtype_span: Span | None = field(default=None, repr=False, compare=False)   # a tmem field's dtype


@dataclass
class PipelineDecl(Node):
    name: str
    stages: int
    fields: list[FieldDecl]
    peer: int = 0                 # `peer +K`: produce blocks fill the slot of the CTA K ranks on (§16b)
    peer_span: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class SmemDecl(Node):
    name: str
    box: Ref
    stages: int | None = None   # `smem cs[2]: C`: staging tiles of a staged store; None: one plain buffer


@dataclass
class MbarrierDecl(Node):
    name: str
    count: int


@dataclass
class TmemDecl(Node):
    """`tmem acc[S]: f32[R, C]`: S tiles of Tensor Memory (sm_100a), R lanes x C columns each."""

    name: str
    stages: int
    dtype: str
    shape: list[int]
    dtype_span: Span | None = field(default=None, repr=False, compare=False)


@dataclass
class PrefetchDecl(Node):
    """`prefetch tensormaps`: one thread prefetches every tensor map of the kernel at its start."""

    what: Ref


@dataclass
class RoleDecl(Node):
    name: str
    first_warp: int
    last_warp: int  # inclusive
    regs: int | None
    body: list[Stmt]
    warps_span: Span = field(repr=False, compare=False, default=None)
    regs_span: Span | None = field(repr=False, compare=False, default=None)


@dataclass
class AssumeDecl(Node):
    """`assume C % 64 == 0`: a comparison of integer expressions of the kernel's dims, integer
    scalars and constants that the kernel takes for granted (§2b); `text` is the comparison as
    written (before constants are replaced), which the launch-time error quotes."""

    lhs: Expr
    op: str                      # == != < <= > >=
    rhs: Expr
    text: str = ""


Decl = GridDecl | OccupancyDecl | ClusterDecl | BoxDecl | PipelineDecl | SmemDecl | MbarrierDecl | RoleDecl | PrefetchDecl | AssumeDecl


@dataclass
class ConstantDecl(Node):
    """`BM = 128` in `kernel gemm<BM = 128>(...)`: a compile-time constant and its default;
    syntax/constants.py sets `value` (the default or the binding) and `origin` (where it came from)."""

    name: str
    default: int | str | None    # an integer, a size like "128B", or a dtype like "bf16" (syntax/bindings.py)
    value: int | str | None = None
    origin: str = ""
    name_span: Span = field(repr=False, compare=False, default=None)


@dataclass
class Kernel(Node):
    name: str
    params: list[Param]
    items: list[Decl]
    name_span: Span = field(repr=False, compare=False, default=None)
    constants: list[ConstantDecl] = field(default_factory=list)


@dataclass
class Program(Node):
    kernels: list[Kernel]
    uses: list = field(default_factory=list, repr=False, compare=False)   # constants' uses (syntax/constants.py)
