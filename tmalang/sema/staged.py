"""Staged stores (§13h): `store T[c..] <- value through cs` and `reduce OP T[c..] <- value through cs`.

`value` is an epilogue (§15): it reads one accumulator (a register accumulator of the role, or a
Tensor Memory slot field inside its consume block) with scalars, numbers, row registers, row
vectors and tiles. `T` is the box of the tile the role computes; `cs` are staging tiles
(`smem cs[S]: C`) whose box `C` cuts `T` into column blocks. The value is written to global
memory one block at a time: block j is converted into staging tile j mod S and stored through C
(passes/stage_stores.py derives the waits, syncs and bulk groups).

Sema checks block j as the epilogue `cs = value(acc[0, j])` it becomes (mma.check_acc_assign
with the accumulator read in blocks), the store rules of `T` at the written coordinates (the
caller's), and that `C` cuts `T`: same tensor, same rows, a column extent that divides T's. It
records the block count on the node for lowering.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..diagnostics import error
from ..syntax import ast
from . import mma, tcgen05
from .declarations import Box, KernelInfo, SmemBuffer


@dataclass
class StagingRef(ast.Ref):
    """The staging tiles as the store's own epilogue names them: the one reference allowed."""

    staging: bool = True


def check(info: KernelInfo, s: ast.Store, scope, store_rules) -> None:
    buffer = _staging(info, s)
    if buffer.store is not None and buffer.store is not s.span:
        raise error("E591", f"staging tiles '{buffer.name}' already belong to the staged store at "
                    f"{buffer.store.location()}", s.through.span, "give each staged store staging tiles of its own")
    buffer.store = s.span
    tile = info.box_for(s.target)
    blocks = _blocks(tile, buffer, s)
    if not _reads_accumulator(s.source, scope):
        raise error("E592", "a staged store writes an epilogue: a value computed from an accumulator",
                    s.source.span, "store a shared tile directly: `store T[m, n] <- tile`")
    if s.gather:
        raise error("E593", "a staged store writes boxes at tile or element coordinates, not scattered rows", s.span)
    store_rules(info, s, tile, scope)
    _tiles_need_one_block(info, s, blocks, scope)
    for j in range(blocks):
        target = StagingRef(s.through.span, buffer.name)
        value = s.source if blocks == 1 else _in_block(s.source, j, scope)
        mma.check_acc_assign(info, ast.Assign(s.span, target, value), scope)
    s.blocks = blocks


def _tiles_need_one_block(info: KernelInfo, s: ast.Store, blocks: int, scope) -> None:
    """An epilogue reads a row vector or residual tile in the target's columns, which are the
    block's: the same tile cannot serve every block, so tiles join a staged store of one block."""
    if blocks == 1:
        return
    for r in ast.refs(s.source):
        local = r.name in scope.accs or r.name in scope.rows or r.field is not None and _is_accumulator(r, scope)
        if not local and (r.field is not None or isinstance(info.symbols.get(r.name), SmemBuffer)):
            raise error("E594", f"'{r.text()}' is a tile, and this staged store writes {blocks} blocks: an "
                        "epilogue reads a tile in the columns of the block it writes", r.span,
                        "stage the whole tile in one block: a staging box of the tile's shape")


def _staging(info: KernelInfo, s: ast.Store) -> SmemBuffer:
    buffer = info.lookup(s.through, SmemBuffer, what="smem buffer")
    if not buffer.stages:
        raise error("E590", f"'{buffer.name}' is one smem buffer, not staging tiles", s.through.span,
                    f"declare the staging tiles with their count: `smem {buffer.name}[2]: {buffer.box.name}`")
    return buffer


def _blocks(tile: Box, buffer: SmemBuffer, s: ast.Store) -> int:
    """How many column blocks of the staging box make the tile."""
    block = buffer.box
    why = None
    if block.tensor is not tile.tensor:
        why = f"it cuts tensor '{block.tensor.name}', the store writes '{tile.tensor.name}'"
    elif block.strided or tile.strided or block.bulk or tile.bulk or block.gather or tile.gather:
        why = "staged stores take dense tensor-map boxes (no element strides, bulk or gathered rows)"
    elif len(block.shape) != len(tile.shape) or block.shape[:-1] != tile.shape[:-1]:
        why = f"its rows {block.shape[:-1]} are not the tile's {tile.shape[:-1]}"
    elif tile.shape[-1] % block.shape[-1]:
        why = f"its {block.shape[-1]} columns do not divide the tile's {tile.shape[-1]}"
    if why is not None:
        raise error("E593", f"staging box '{block.name}' {block.shape} does not cut box '{tile.name}' "
                    f"{tile.shape} into column blocks: {why}", s.through.span,
                    f"a block box has the tile's rows and a column extent that divides {tile.shape[-1]}")
    return tile.shape[-1] // block.shape[-1]


def _is_accumulator(ref: ast.Ref, scope) -> bool:
    return (ref.field is None and ref.name in scope.accs) or tcgen05.tmem_field(scope, ref) is not None


def _reads_accumulator(value, scope) -> bool:
    return any(_is_accumulator(r, scope) for r in ast.refs(value))


def _in_block(value, j: int, scope):
    """`value` with its accumulator read as block (0, j): `acc` becomes `acc[0, j]`."""
    if isinstance(value, ast.Ref):
        if not _is_accumulator(value, scope):
            return value
        if value.block is not None:
            raise error("E093", f"'{value.text()}': a staged store reads the whole accumulator; the compiler "
                        "cuts it into the staging tiles' blocks", value.span)
        index = [ast.Number(value.span, 0), ast.Number(value.span, j)]
        return replace(value, block=index)
    if isinstance(value, ast.BinOp):
        return replace(value, lhs=_in_block(value.lhs, j, scope), rhs=_in_block(value.rhs, j, scope))
    if isinstance(value, ast.Neg):
        return replace(value, operand=_in_block(value.operand, j, scope))
    if isinstance(value, ast.Call):
        return replace(value, args=[_in_block(a, j, scope) for a in value.args])
    return value
