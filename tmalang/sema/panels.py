"""Panelled boxes (docs §4): a swizzled box whose rows are several swizzle spans.

`box Q = q[128, 128] swizzle 128B` of bf16 has 256-byte rows, two 128-byte spans. TMA swizzles
within one span, so such a box is moved as P = 2 *panels* of [128, 64]: the tensor map describes
one panel, every copy through the box is P TMA instructions (panel p at inner element coordinate
c + p·span/itemsize), and shared memory holds the panels one after the other, each laid out like
a narrow box's tile. That is the layout wgmma reads a K-major operand of K = 128 or an MN-major
B of N = 128 from, so the tensor cores take the tile as it lands.

Requires: a box declaration that passed the extent (E021), 16-byte (E022) and option-name (E024)
checks. Guarantees: a swizzled box's rows are at most one span, or a whole number P of spans
(E023) with P <= tma.MAX_PANELS (E515), whose panels start on the swizzle's alignment (the
panel's rows, the product of the outer tile extents, are whole 8-row swizzle atoms: E518), and
which is no `pair` box (E516). Uses that cannot take a panelled box refuse it where they stand
(`refuse`, E517): gathered rows, tcgen05 operands and tcgen05.cp sources.
"""

from __future__ import annotations

from math import prod

from ..diagnostics import Span, error
from ..syntax import ast
from ..targets import tma
from ..targets.dtypes import DType

SWIZZLE_ATOM_ROWS = 8   # a swizzle pattern repeats every 8 rows of its span (PTX ISA 5.5.8)


def check_declaration(d: ast.BoxDecl, dtype: DType, strides: list[int]) -> None:
    """E023 / E515 / E516 / E518 for a tiled box (not im2col, not bulk)."""
    span = tma.SWIZZLES[d.swizzle].span
    inner = d.shape[-1] * dtype.itemsize
    if span is None or inner <= span:
        return
    where = d.option_spans.get("swizzle", d.span)
    per_span = span // dtype.itemsize
    if inner % span:
        raise error("E023", f"inner box extent is {inner} bytes, not a whole number of {d.swizzle} swizzle spans "
                    f"({span} bytes)", where,
                    f"use at most {per_span} {dtype.name} elements innermost, or a multiple of {per_span} "
                    "(a panelled box of one panel per span, §4), or another swizzle")
    panels = inner // span
    if panels > tma.MAX_PANELS:
        raise error("E515", f"box '{d.name}' is {panels} panels of {span} bytes; a panelled box has at most "
                    f"{tma.MAX_PANELS}", where,
                    f"each panel is one TMA copy: use a wider swizzle, or at most {tma.MAX_PANELS * per_span} "
                    f"{dtype.name} elements innermost")
    if d.pair:
        raise error("E516", f"box '{d.name}' is a panelled box ({panels} panels of {span} bytes) and cannot be a "
                    "pair box", d.option_spans.get("pair", d.span),
                    f"a pair box's rows fit the swizzle span: at most {per_span} {dtype.name} elements innermost")
    rows = prod(tma.tile_shape(d.shape[:-1], strides[:-1]))
    if rows % SWIZZLE_ATOM_ROWS:
        raise error("E518", f"box '{d.name}' is a panelled box whose panels hold {rows} rows; each panel must be whole "
                    f"{SWIZZLE_ATOM_ROWS}-row swizzle atoms", d.span,
                    f"panel p lands p x rows x {span} bytes into the tile, which must stay on the "
                    f"{tma.SWIZZLES[d.swizzle].tile_alignment}-byte swizzle alignment: use a multiple of "
                    f"{SWIZZLE_ATOM_ROWS} rows (the product of the outer extents)")


def of(box) -> int:
    """Panels of a sema Box (1 for a narrow one)."""
    if box.bulk or box.im2col is not None:
        return 1
    return tma.panels(box.dtype.itemsize, box.shape[-1], box.swizzle)


def refuse(box, what: str, span: Span) -> None:
    """E517: `what` cannot take a panelled box."""
    panels = of(box)
    if panels > 1:
        raise error("E517", f"box '{box.name}' is a panelled box ({panels} panels); {what} cannot take it", span,
                    f"declare a box whose rows fit the {box.swizzle} swizzle span, "
                    f"{tma.SWIZZLES[box.swizzle].span // box.dtype.itemsize} {box.dtype.name} elements")
