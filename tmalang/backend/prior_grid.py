"""Programmatic dependent launch: a kernel overlaps the end of the kernel before it in the stream.

The runtime launches every kernel compiled with this (Manifest.overlaps_prior) with programmatic
stream serialization, so the driver may set its launch up, and its CTAs may start, before the
previous kernel has fully finished. The kernel owes the stream order one thing, which this module
emits: `griddepcontrol.wait` before the first top-level op that may touch global memory. It returns
once the previous kernel has completed and its writes are visible, so no load, store, atomic or
claim of this kernel can meet the previous kernel's (read after write, write after read, write
after write). Before it runs only shared-memory set-up (mbarrier.init, its fence, the tensor-map
prefetch of a __grid_constant__ parameter, the start-up sync), which the overlap hides along with
the launch. TMEM allocation (sm_100a) comes after the wait: a previous kernel of someone else's
that triggered its dependents early could still need the TMEM it has yet to allocate.

The kernel does not trigger its dependents early (`griddepcontrol.launch_dependents`): the next
kernel starts when this one's CTAs end, as without the attribute. An early trigger made small
GEMMs faster in CUDA-graph replay (512³ 3.4 µs against 3.6 without it) but memory-bound ones
slower (128 x 8192² 44.8 µs against 37.3; 16 x 14336 x 4096 33.4 against 30.9), whether issued at
the kernel's start or when its producer finished (H200, bench/results/
prior-grid-triggers-2026-11-29-h200.json). Without the trigger, the overlap still took 512³ from
0.93x cuBLAS to 1.01x in graph replay and 1024³ from 1.01x to 1.06x, and left memory-bound shapes
as they were (bench/prior_grid.py, prior-grid-2026-11-29-h200.json).

A kernel launched without the attribute (TMALANG_OVERLAP=0 in Python; a C++ host of its own that
calls tmalang::launch without overlap_prior) waits for nothing.
"""

from __future__ import annotations

from ..ir import ops
from . import ptx_asm

SHARED_ONLY = (ops.MbarInit, ops.Fence, ops.TensorMapPrefetch)     # inside a top-level elect
SET_UP = (ops.Sync, ops.Fence)


def is_set_up(o: ops.Op) -> bool:
    """Whether top-level op `o` is set-up that cannot touch global memory (it may run before the
    wait)."""
    if isinstance(o, ops.Elect):
        return all(isinstance(inner, SHARED_ONLY) for inner in o.body)
    return isinstance(o, SET_UP)


def wait(g) -> None:
    """Before the first op that may touch global memory: the previous kernel has finished."""
    g.asm(ptx_asm.PTX["wait_prior_grid"], "", [])
