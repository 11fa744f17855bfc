"""IR operations: one class per op, with named, typed operands.

The IR is structured: ops nest in regions (`body`). Declarations (tensors, boxes, pipelines,
buffers, barriers) sit at the top of a KernelOp; roles hold statements. Integer and tile
operands are expression trees (ir/exprs.py). Each op keeps the source span it was lowered from,
so a later pass can report an error on the user's line.

Field annotations double as the text format's schema: the printer writes `name=value` for each
field in declaration order and the parser coerces values back by the annotation.

The ops live in one module per family, all built on base.py (`Op`, the `OPS` registry, `walk`):
kernel.py (kernel, roles, warpgroup blocks), declarations.py (tensors, scalars, assumptions,
boxes, pipelines, buffers, mbarriers), control.py (loops, branches, variables, elect, turns,
produce/consume), copies.py (TMA and bulk copies, prefetches), barriers.py (mbarriers, fences,
syncs, named barriers), wgmma.py (sm_90a tensor cores), tcgen05.py (sm_100a tensor cores and
Tensor Memory), tile_math.py (tile and row math) and scheduling.py (dynamic tile claims). This
package re-exports every name, so `ops.TmaLoad` is what it always was.
"""

from __future__ import annotations

from ...diagnostics import Span
from ...targets import cluster, dtypes, tma
from ..exprs import AccRef, Bin, BufferRef, Call, Cast, Const, Expr, Neg, TmemRef
from ..exprs import walk as walk_expr
from .base import OPS, Op, op, walk
from .kernel import KernelOp, RoleOp, SetMaxNReg, WarpgroupBlock, decls, roles
from .layout import TMEM_ADDRESS_BYTES, smem_ranges
from .declarations import (
    ASSUME_OPS,
    COMPARISONS,
    PIPELINE_BARRIERS,
    PIPELINE_COUNTERS,
    AssumeDecl,
    BoxDecl,
    BufferDecl,
    MbarrierDecl,
    PipelineDecl,
    ScalarDecl,
    TensorDecl,
    is_pipeline_buffer,
    pipeline_of,
)
from .tcgen05 import (
    TENSOR_CORE_OPS,
    TMEM_GRANULE,
    Tcgen05Commit,
    Tcgen05CommitCluster,
    Tcgen05Cp,
    Tcgen05Mma,
    TmemAlloc,
    TmemDealloc,
    TmemDecl,
    TmemEpilogue,
    TmemZero,
)
from .tile_math import RowAssign, RowDecl, TileAssign
from .control import (
    Consume,
    Elect,
    ForRange,
    ForStep,
    ForTiles,
    If,
    InPairLeader,
    InWarpgroup,
    LeaveIf,
    Let,
    Loop,
    Produce,
    Turn,
    Val,
)
from .copies import (BulkCommit, BulkLoad, BulkPrefetch, BulkPush, BulkStore, BulkWait, GatherLoad, GatherPrefetch,
                     Im2colLoad, Im2colPrefetch, ScatterStore, StagedStore, TensorLoad, TensorMapPrefetch,
                     TensorPrefetch, TensorStore, TmaLoad, TmaPrefetch, TmaStore)
from .wgmma import (AccDecl, AccStore, AccZero, Wgmma, WgmmaCommit, WgmmaFence, WgmmaWait, accumulators_touched,
                    short_a_operands)
from .barriers import (
    NAMED_BARRIERS,
    Fence,
    MbarArrive,
    MbarArriveCluster,
    MbarArriveExpectTx,
    MbarArriveLeader,
    MbarExpectTx,
    MbarInit,
    MbarWait,
    NamedBarArrive,
    NamedBarSync,
    Sync,
)
from .scheduling import ClcQuery, ClcTryCancel, TileClaim, TilePublish, TileQueueDecl, TileTake
