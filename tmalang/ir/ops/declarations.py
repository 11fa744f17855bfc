"""The declarations at the top of a kernel: global tensors, scalar parameters, launch assumptions,
TMA boxes, pipelines (with the names expand_pipelines derives from them), shared-memory buffers
and mbarriers. Tensor Memory tiles are declared with the tcgen05 ops (tcgen05.py), tile queues
with the dynamic tile loop (scheduling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...targets import dtypes, tma
from ...targets.tma_modes import Im2col
from ..exprs import Expr
from .base import Op, op


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
    # its TMA mode (targets/tma_modes.py MODES), as sema derived it: "bulk" has no tensor map (each
    # copy one cp.async.bulk of the innermost chunk), "gather4" copies by rows (the map holds one
    # row), the im2col modes hold their record below
    mode: str = "tiled"
    interleave: str = "none"        # tma.INTERLEAVES: the tensor map's interleaved layout (NC/8HWC8-like)
    # an im2col box (cuTensorMapEncodeIm2col) when set, the record sema made (targets/tma_modes.py):
    # shape is [pixels, channels]; the pixel box runs from lower[i] to dim - 1 + upper[i] along
    # spatial dim i (outermost first) by traversal stride strides[i]. A wide box (wide "w" or
    # "w128", cuTensorMapEncodeIm2colWide, sm_100a) walks along W only (0/0/1 for D and H), and
    # `halo` more pixels of the walk (wHalo) follow the row in smem: shape[0] is pixels + halo
    im2col: Im2col | None = None

    @property
    def bulk(self) -> bool:
        return self.mode == "bulk"

    @property
    def gather(self) -> bool:
        return self.mode == "gather4"

    @property
    def wide(self) -> str:
        return self.im2col.wide if self.im2col else ""

    @property
    def halo(self) -> int:
        return self.im2col.halo if self.im2col else 0

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
