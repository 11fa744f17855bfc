"""What one GPU architecture offers: the facts every stage asks about, as one frozen object.

A `Target` is plain data. Sema turns its absences into diagnostics at the user's line (no wgmma,
no Tensor Memory), the pass list skips passes a target cannot need, plan_smem budgets with its
shared memory, the backend reads its PTX version and name, and the runtime compares its compute
capability with the device's. Adding an architecture is one entry in `TARGETS`.

Sources: CUDA C++ Programming Guide, "Compute Capabilities" (shared memory per block, cluster
sizes); PTX ISA 9.7.15 (wgmma: sm_90a), 9.7.16 (tcgen05 and Tensor Memory: sm_100a), and the
PTX ISA release notes (PTX 8.0 introduced sm_90a, 8.6 sm_100a); PTX ISA 5.5.3.4 and
cp.async.bulk.tensor (.tile::gather4 / .tile::scatter4, .im2col::w / .im2col::w::128: PTX 8.6,
sm_100a).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import error
from .tcgen05 import tmem


@dataclass(frozen=True)
class TensorMemory:
    """Tensor Memory of one CTA: `lanes` x `columns` cells of 32 bits, allocated in powers of two
    of columns from `min_allocation` up."""

    lanes: int
    columns: int
    min_allocation: int


@dataclass(frozen=True)
class Target:
    name: str                           # the PTX `.target`, LLVM's cpu and ptxas's -arch
    compute_capability: tuple[int, int]
    ptx_version: tuple[int, int]        # the lowest PTX ISA that knows `name`
    smem_per_cta: int                   # bytes of shared memory one CTA may opt in to
    cluster_sizes: tuple[int, ...]      # portable thread-block-cluster sizes
    has_wgmma: bool                     # warpgroup MMA on register accumulators
    has_tcgen05: bool                   # fifth-generation tensor cores (tcgen05.*)
    tensor_memory: TensorMemory | None  # present exactly when has_tcgen05
    has_gather4: bool = False           # TMA .tile::gather4 / .tile::scatter4 (PTX ISA 8.6, sm_100a)
    has_im2col_w: bool = False          # TMA .im2col::w / .im2col::w::128 (PTX ISA 8.6, sm_100a)
    has_launch_control: bool = False    # clusterlaunchcontrol.try_cancel (PTX ISA 8.6, sm_100)
    smem_per_sm: int = 228 * 1024       # bytes of shared memory a multiprocessor holds, all CTAs together
    smem_reserved_per_cta: int = 1024   # of which the system keeps per resident CTA
    ctas_per_sm: int = 32               # resident CTAs a multiprocessor holds at most

    @property
    def ptx_feature(self) -> str:
        """LLVM's NVPTX feature string for the PTX version, e.g. '+ptx80'."""
        major, minor = self.ptx_version
        return f"+ptx{major}{minor}"


SM_90A = Target("sm_90a", (9, 0), (8, 0), 227 * 1024, (1, 2, 4, 8),
                has_wgmma=True, has_tcgen05=False, tensor_memory=None)
SM_100A = Target("sm_100a", (10, 0), (8, 6), 227 * 1024, (1, 2, 4, 8),
                 has_wgmma=False, has_tcgen05=True,
                 tensor_memory=TensorMemory(tmem.LANES, tmem.COLUMNS, tmem.MIN_ALLOCATION), has_gather4=True,
                 has_im2col_w=True, has_launch_control=True)

TARGETS = {t.name: t for t in (SM_90A, SM_100A)}
DEFAULT = SM_90A


def target_named(name: str | Target) -> Target:
    """The Target called `name` (a Target passes through), or E006 listing the known ones."""
    if isinstance(name, Target):
        return name
    if name not in TARGETS:
        raise error("E006", f"unknown --arch '{name}'", None, f"supported: {', '.join(TARGETS)}")
    return TARGETS[name]
