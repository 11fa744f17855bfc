"""Cluster geometry: the CTAs of an R x C cluster, their coordinates, and the CTA sets that a
multicast load writes to and a slot release arrives at.

A cluster of R x C CTAs (`cluster RxC`, R along the first tile index, C along the second) is
launched as a 1-D hardware cluster of R·C CTAs (the grid is 1-D); the 2-D shape is how the tile
walk reads the rank. Rank r (`%cluster_ctarank`) has cluster coordinates (x, y) = (r mod R, r / R):
x picks the tile row within the cluster's block of tiles, y the tile column. R and C are powers
of two, so these are a mask and a shift in the PTX.

CTA sets, named from the point of view of one CTA (all of them contain it):

    cluster   every CTA of the cluster                     R·C CTAs
    row       the CTAs with the same x (same tile row)     C CTAs, ranks x + R·j
    column    the CTAs with the same y (same tile column)  R CTAs, ranks R·y + i
    cross     row ∪ column                                 R + C − 1 CTAs

Each set is symmetric (c is in CTA p's set exactly when p is in c's), which is what makes a
release to a CTA's set and an `empty` count of the set's size exact: a CTA's slot receives
slices from its set, and its `empty` barrier the releases of the same set.
"""

from __future__ import annotations

SETS = ("cluster", "row", "column", "cross")


def coords(shape: tuple[int, int], rank: int) -> tuple[int, int]:
    """(x, y) of rank `rank` in a cluster of shape (R, C)."""
    return rank % shape[0], rank // shape[0]


def members(shape: tuple[int, int], ctas: str, rank: int) -> list[int]:
    """The ranks in CTA `rank`'s set `ctas`, ascending."""
    rows, cols = shape
    x, y = coords(shape, rank)
    row = {x + rows * j for j in range(cols)}
    column = {rows * y + i for i in range(rows)}
    found = {"cluster": set(range(rows * cols)), "row": row, "column": column, "cross": row | column}[ctas]
    return sorted(found)


def size(shape: tuple[int, int], ctas: str) -> int:
    rows, cols = shape
    return {"cluster": rows * cols, "row": cols, "column": rows, "cross": rows + cols - 1}[ctas]


def position(shape: tuple[int, int], ctas: str, rank: int) -> int:
    """Where CTA `rank` stands in its line `ctas` (cluster, row or column): which slice of a
    multicast box it loads. In a row the CTAs differ in y, in a column in x."""
    x, y = coords(shape, rank)
    return {"cluster": rank, "row": y, "column": x}[ctas]


def mask(shape: tuple[int, int], ctas: str, rank: int) -> int:
    """The 16-bit ctaMask of CTA `rank`'s set: bit i for rank i."""
    return sum(1 << r for r in members(shape, ctas, rank))


def union(shape: tuple[int, int], sets: set[str]) -> str | None:
    """The one set that covers every set of `sets` (the CTAs that may write a pipeline's slot): a
    row and a column make a cross; None for no set."""
    if not sets:
        return None
    if "cluster" in sets:
        return "cluster"
    if {"row", "column"} <= sets or "cross" in sets:   # proper sets: the cross is one too (R, C > 1)
        return "cross"
    [only] = sets
    return only

