"""Panelled boxes (docs §4) in LLVM IR: the P copies of one TMA load, store or prefetch, and where
element (row, col) of a panelled tile sits in shared memory.

Requires: a box that sema and the verifier admitted, so P = box.panels() panels of whole 8-row
swizzle atoms (each panel starts on the swizzle's alignment), no pair or gathered box.
Guarantees: for P = 1 nothing changes (the same values, the same instructions: the PTX of a
narrow box is what it was); for P > 1 panel p is copied at inner element coordinate
c + p·panel_cols into the tile at p·panel_bytes, and element (row, col) is read and written at
panel col // panel_cols, offset row·span + (col % panel_cols)·itemsize within it, swizzled there.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import ops

I32 = ir.IntType(32)


def copies(g, box: ops.BoxDecl, coords: list[ir.Value], smem: ir.Value | None, tile_bytes: int):
    """(coordinates innermost first, shared address) of each panel's copy; `smem` None for a
    prefetch, which names no shared memory."""
    panels = box.panels()
    for p in range(panels):
        if p == 0:
            yield coords, smem
            continue
        moved = [g.b.add(coords[0], I32(p * box.panel_cols())), *coords[1:]]
        yield moved, None if smem is None else g.b.add(smem, I32(p * (tile_bytes // panels)))


def element_offset(g, box: ops.BoxDecl, row: ir.Value, col: ir.Value, itemsize: int, swizzled) -> ir.Value:
    """Byte offset of element (row, col) in a 2-D tile of `box`: `swizzled(offset)` applies the
    swizzle within one span-wide row, as in a narrow tile."""
    panels, cols = box.panels(), box.shape[-1]
    if panels == 1:
        return swizzled(g.b.mul(g.b.add(g.b.mul(row, I32(cols)), col), I32(itemsize)))
    width = box.panel_cols()                  # a power of two: span / itemsize
    panel, inside = g.b.udiv(col, I32(width)), g.b.urem(col, I32(width))
    panel_bytes = box.bytes(itemsize) // panels
    within = swizzled(g.b.mul(g.b.add(g.b.mul(row, I32(width)), inside), I32(itemsize)))
    return g.b.add(g.b.mul(panel, I32(panel_bytes)), within)
