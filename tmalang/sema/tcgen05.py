"""Blackwell tensor cores in sema: mma into Tensor Memory, and epilogues that read it.

A tmem pipeline (`pipeline accp[2] { d: tmem f32[128, 256] }`) hands accumulators from an MMA role
to an epilogue role. The MMA role is one warp: its produce block zeroes the slot's tile
(`t.d = 0`) and accumulates into it with `mma t.d, s.a, s.b` inside consume blocks of an operand
ring; one thread issues every tcgen05.mma. The epilogue role is one warpgroup: each warp reads
its quarter of the 128 lanes, in `cs = bf16(t.d[0, j])` epilogues inside the consume block.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets.tcgen05 import descriptors
from . import panels
from .declarations import KernelInfo
from .operands import Accumulator, block_index, check_operand
from .scope import open_slot, tile_ref

TCGEN05_INPUT_DTYPES = ("bf16", "f16", "f8e4m3", "f8e5m2", "f32")


def operand_type(dtype: str) -> str:
    """What the tensor cores read an operand tile as: f32 tiles go in as tf32 (.kind::tf32)."""
    return "tf32" if dtype == "f32" else dtype


def tmem_field(scope, ref) -> list[int] | None:
    """The [M, N] shape when `ref` is `slot.field` of a tmem pipeline slot in scope."""
    if not isinstance(ref, ast.Ref) or ref.field is None:
        return None
    found = open_slot(scope, ref.name)
    return None if found is None else found[0].tmem_fields.get(ref.field)


def check_mma(info: KernelInfo, s: ast.Mma, scope, shape: list[int]) -> None:
    """`mma t.d, a, b`: D[M, N] += A[M, K] · B[N, K]ᵀ, one tcgen05.mma per K step of the kind."""
    _check_mma_role(scope.role, s.span)
    if scope.elected:
        raise error("E083", "mma inside elect: the compiler elects the issuing thread itself", s.span)
    if isinstance(s.a, ast.Call):
        raise error("E088", "tcgen05.mma reads A from shared memory here", s.a.span)
    a, b = tile_ref(info, s.a, scope), tile_ref(info, s.b, scope, pair_ok=True)
    for ref, tile in ((s.a, a), (s.b, b)):
        panels.refuse(tile, "a tcgen05 mma operand", ref.span)   # its descriptors take one span per row
        check_operand(ref, tile, TCGEN05_INPUT_DTYPES)
    if a.dtype != b.dtype:
        raise error("E088", f"mma operands differ in dtype: {a.dtype.name} and {b.dtype.name}", s.span)
    m, n = shape
    if a.shape[0] != m or b.shape[0] != n or a.shape[1] != b.shape[1]:
        raise error("E088", f"mma shapes do not fit: D is [{m}, {n}], a is {a.shape}, b is {b.shape}", s.span,
                    "a must be [M, K] and b [N, K] (D += a · bᵀ)")
    if b.pair != (info.cta_group == 2):
        why = ("with `cta_group 2`, b is split between the CTAs of the pair: load it through a `pair` box"
               if info.cta_group == 2 else "a pair box needs `cta_group 2`")
        raise error("E060", f"mma reads b from box '{b.name}': {why}", s.b.span)
    try:   # a CTA pair's MMA has M = 2 x 128: each CTA's rows of A, each CTA's lanes of D
        descriptors.instruction_descriptor(operand_type(a.dtype.name), operand_type(b.dtype.name), "f32",
                                           m * info.cta_group, n, info.cta_group)
    except ValueError as exc:
        raise error("E088", f"tcgen05.mma cannot do this: {exc}", s.span) from None


def check_zero(s: ast.Assign, scope) -> None:
    if not (isinstance(s.value, ast.Number) and s.value.value == 0) or s.target.block is not None:
        raise error("E085", "a tmem accumulator can only be assigned 0 or a shared-memory tile (use mma to "
                    "accumulate)", s.value.span)
    _check_mma_role(scope.role, s.span)   # `t.d = 0`: the role's next tcgen05.mma into the tile overwrites


def check_copy(info: KernelInfo, s: ast.Assign, scope, shape: list[int]) -> None:
    """`t.d = tile` or `t.d[0, j] = tile`: tcgen05.cp of an f32 [128, W] smem tile (rows of one
    swizzle span, read through a matrix descriptor) into W columns of the tmem tile."""
    _check_mma_role(scope.role, s.span)
    if scope.elected:
        raise error("E083", "a copy into Tensor Memory inside elect: the compiler elects the issuing thread itself",
                    s.span)
    if info.cta_group == 2:
        raise error("E060", "tcgen05.cp in a cta_group 2 kernel is not in v0", s.span)
    tile = tile_ref(info, s.value, scope)
    if tile.dtype.name != "f32":
        raise error("E080", f"tcgen05.cp copies 32-bit cells into an f32 tile; '{s.value.text()}' is "
                    f"{tile.dtype.name}", s.value.span)
    panels.refuse(tile, "the tcgen05.cp source", s.value.span)
    check_operand(s.value, tile, ("f32",), "the tcgen05.cp source")
    lanes, columns = shape
    if lanes != 128 or tile.shape[0] != 128:
        raise error("E099", f"tcgen05.cp.128x256b copies 128 rows into 128 lanes; '{s.value.text()}' has "
                    f"{tile.shape[0]} rows and '{s.target.text()}' {lanes} lanes", s.span)
    width = tile.shape[1]
    column = 0 if s.target.block is None else _copy_block(s.target, width, columns)
    if s.target.block is None and width != columns:
        raise error("E067", f"'{s.value.text()}' is [128, {width}] but '{s.target.text()}' has {columns} columns",
                    s.span, f"copy into a block: {s.target.text()}[0, j] = tile writes columns {width}·j ..")
    s.tmem_column = column


def _copy_block(ref: ast.Ref, width: int, columns: int) -> int:
    if len(ref.block) != 2 or not all(isinstance(c, ast.Number) and isinstance(c.value, int) for c in ref.block):
        raise error("E093", f"'{ref.text()}': a Tensor Memory block index is two integer literals", ref.span,
                    f"e.g. {ref.name}.{ref.field}[0, 1]")
    i, j = block_index(ref)
    if i != 0 or (j + 1) * width > columns:
        raise error("E093", f"block ({i}, {j}) of {width} columns is outside '{ref.name}.{ref.field}' "
                    f"({columns} columns)", ref.span, f"blocks are (0, 0) .. (0, {columns // width - 1})")
    return j * width


def _check_mma_role(role, span) -> None:
    if role.warps != 1:
        raise error("E099", f"tcgen05.mma is issued by one thread, so the MMA role is one warp; role "
                    f"'{role.name}' has {role.warps}", span, "declare it as `role mma: warp N`")


def check_epilogue(info: KernelInfo, s: ast.Assign, scope, ref: ast.Ref, shape: list[int]):
    """`cs = f(t.d[0, j])` in the consume block: one warpgroup, each warp its 32 lanes."""
    role = scope.role
    if scope.producing or scope.pipeline is None or scope.slot != ref.name:
        raise error("E099", f"'{ref.text()}' is read in a consume block of its tmem pipeline", ref.span)
    if shape[0] != 128:
        raise error("E099", f"'{ref.text()}' has {shape[0]} lanes; an epilogue reads 128-lane tiles, one warp per "
                    "32 lanes (a 64-row accumulator uses lanes 0-15, 32-47, ... in another layout)", ref.span)
    if role.warps != 4 or role.first_warp % 4:
        raise error("E099", f"an epilogue from Tensor Memory runs on one warpgroup (warp w reads lanes "
                    f"32·(w % 4) .. +31); role '{role.name}' is warps {role.first_warp}..{role.last_warp}",
                    s.span, "declare the epilogue role as 4 warps starting at a multiple of 4")
    return Accumulator(ref.text() if ref.block is None else f"{ref.name}.{ref.field}", "f32",
                              list(shape), role, ref.span)
