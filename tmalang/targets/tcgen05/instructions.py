"""The PTX text of every tcgen05 instruction the compiler emits, operands as `$n` placeholders
(LLVM inline-asm numbering) or as given.

Sources (PTX ISA 9.0): 9.7.16.7.1 alloc/dealloc/relinquish_alloc_permit, 9.7.16.10.9.1 mma,
9.7.16.12.1 commit, 9.7.16.8.3-5 ld/st/wait, 9.7.16.9.2 cp, 9.7.16.11.1 fences. All need
PTX ISA 8.6 and sm_100a (or sm_101a). Every tcgen05 instruction of a kernel must use the same
.cta_group.
"""

from __future__ import annotations

from .descriptors import KINDS, kind_of
from .tmem import COLUMNS, MIN_ALLOCATION, ld_registers

PTX_VERSION = (8, 6)

FENCE_BEFORE_THREAD_SYNC = "tcgen05.fence::before_thread_sync;"
FENCE_AFTER_THREAD_SYNC = "tcgen05.fence::after_thread_sync;"
WAIT_LD = "tcgen05.wait::ld.sync.aligned;"
WAIT_ST = "tcgen05.wait::st.sync.aligned;"


def _group(cta_group: int) -> str:
    if cta_group not in (1, 2):
        raise ValueError(f"cta_group must be 1 or 2, got {cta_group}")
    return f"cta_group::{cta_group}"


def alloc(dst: str, columns: int, cta_group: int = 1) -> str:
    """Allocate `columns` (a power of two in 32..512) and write the TMEM address to smem `dst`.
    A whole warp executes it."""
    if columns < MIN_ALLOCATION or columns > COLUMNS or columns & (columns - 1):
        raise ValueError(f"tcgen05.alloc takes a power of two of columns in {MIN_ALLOCATION}..{COLUMNS}, got {columns}")
    return f"tcgen05.alloc.{_group(cta_group)}.sync.aligned.shared::cta.b32 [{dst}], {columns};"


def dealloc(taddr: str, columns: int, cta_group: int = 1) -> str:
    return f"tcgen05.dealloc.{_group(cta_group)}.sync.aligned.b32 {taddr}, {columns};"


def relinquish_alloc_permit(cta_group: int = 1) -> str:
    return f"tcgen05.relinquish_alloc_permit.{_group(cta_group)}.sync.aligned;"


def mma(d_tmem: str, a: str, b_desc: str, idesc: str, enable_input_d: str, dtype: str, cta_group: int = 1,
        a_from_tmem: bool = False) -> str:
    """One dense MMA, issued by one thread: D (+)= A·B. `a` is an smem descriptor, or a TMEM
    address with `a_from_tmem`. `enable_input_d` is a 32-bit value: 0 ignores D's old contents."""
    kind = kind_of(dtype)
    a_operand = f"[{a}]" if a_from_tmem else a
    return ("{\n.reg .pred p;\n"
            f"setp.ne.b32 p, {enable_input_d}, 0;\n"
            f"tcgen05.mma.{_group(cta_group)}.kind::{kind} [{d_tmem}], {a_operand}, {b_desc}, {idesc}, p;\n}}")


def commit(mbar: str, cta_group: int = 1, cta_mask: str | None = None) -> str:
    """Arrive once on `mbar` when every prior async tcgen05 op of this thread has completed; with
    `cta_mask` (16 bits), on the mbarrier at the same offset in each CTA the mask selects."""
    base = f"tcgen05.commit.{_group(cta_group)}.mbarrier::arrive::one.shared::cluster"
    if cta_mask is None:
        return f"{base}.b64 [{mbar}];"
    return f"{base}.multicast::cluster.b64 [{mbar}], {cta_mask};"


def ld(registers: list[str], taddr: str, shape: str = "32x32b", num: int = 1, half_split: int | None = None) -> str:
    """Load this thread's cells of a `shape` access (x `num`) from Tensor Memory at `taddr`;
    `.16x32bx2` needs `half_split` (see `_half_split`)."""
    _check_registers(registers, shape, num)
    split = _half_split(shape, half_split)
    return f"tcgen05.ld.sync.aligned.{shape}.x{num}.b32 {{{', '.join(registers)}}}, [{taddr}]{split};"


def st(taddr: str, registers: list[str], shape: str = "32x32b", num: int = 1, half_split: int | None = None) -> str:
    _check_registers(registers, shape, num)
    split = _half_split(shape, half_split)
    return f"tcgen05.st.sync.aligned.{shape}.x{num}.b32 [{taddr}]{split}, {{{', '.join(registers)}}};"


HALF_SPLIT_SHAPES = ("16x32bx2",)


def _half_split(shape: str, offset: int | None) -> str:
    """The `immHalfSplitoff` operand (9.7.16.8.3-4): `.16x32bx2` makes two `.16x32b` accesses, the
    second at `taddr + immHalfSplitoff`, an immediate column offset; ptxas rejects the shape
    without it, and the other shapes take none. It follows [taddr] in ld and st alike."""
    if shape not in HALF_SPLIT_SHAPES:
        if offset is not None:
            raise ValueError(f"tcgen05.ld/st.{shape} takes no half-split offset")
        return ""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < COLUMNS:
        raise ValueError(f"tcgen05.ld/st.{shape} needs an immediate half-split column offset in 0..{COLUMNS - 1}, "
                         f"got {offset!r}")
    return f", {offset}"


def _check_registers(registers: list[str], shape: str, num: int) -> None:
    want = ld_registers(shape, num)
    if len(registers) != want:
        raise ValueError(f"{shape}.x{num} moves {want} registers per thread, got {len(registers)}")


CP_SHAPES = {"128x256b": None, "4x256b": None, "128x128b": None,
             "64x128b": ("warpx2::02_13", "warpx2::01_23"), "32x128b": ("warpx4",)}


def cp(taddr: str, s_desc: str, shape: str = "128x256b", multicast: str | None = None, cta_group: int = 1) -> str:
    """Copy shared memory (described by `s_desc`) into TMEM; asynchronous, tracked by commit."""
    if shape not in CP_SHAPES:
        raise ValueError(f"unknown tcgen05.cp shape {shape!r} (known: {', '.join(CP_SHAPES)})")
    needed = CP_SHAPES[shape]
    if (needed is None) != (multicast is None) or (needed and multicast not in needed):
        rule = f"needs .{' or .'.join(needed)}" if needed else "takes no multicast qualifier"
        raise ValueError(f"tcgen05.cp.{shape} {rule}")
    qualifier = f".{multicast}" if multicast else ""
    return f"tcgen05.cp.{_group(cta_group)}.{shape}{qualifier} [{taddr}], {s_desc};"


def mma_k_steps(k: int, dtype: str) -> int:
    """Instructions one K extent takes: K / (16, 8 or 32 elements by kind)."""
    per = KINDS[kind_of(dtype)][1]
    if k % per:
        raise ValueError(f"K = {k} is not a multiple of the {per} {dtype} elements of one tcgen05.mma")
    return k // per
