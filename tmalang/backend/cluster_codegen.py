"""CTA sets of a cluster → LLVM IR: a CTA's place in its set, the set's 16-bit ctaMask, and the
ranks a release arrives at (targets/cluster.py defines the sets; the interpreter computes the same
from the rank).

The whole cluster keeps the constant forms the backend always emitted (mask 2^N − 1, arrivals at
ranks 0..N−1). A row, column or cross depends on this CTA's coordinates, x = rank mod R and
y = rank / R, which are a mask and a shift of %cluster_ctarank since R is a power of two.
"""

from __future__ import annotations

from llvmlite import ir

I16, I32 = ir.IntType(16), ir.IntType(32)


def _rank(g) -> ir.Value:
    return g._sreg("cluster.ctarank")


def _x(g, rows: int) -> ir.Value:
    return g.b.and_(_rank(g), I32(rows - 1))


def _column_base(g, rows: int) -> ir.Value:
    """R·y: the rank of this CTA's column's first CTA."""
    return g.b.and_(_rank(g), I32(~(rows - 1) & 0xFFFFFFFF))


def position(g, ctas: str) -> ir.Value:
    """Which slice of a multicast box this CTA loads: its rank in the cluster, y in a row, x in a column."""
    rows, _ = g.kernel.cluster_shape()
    if ctas == "row":
        return g.b.lshr(_rank(g), I32(rows.bit_length() - 1))
    if ctas == "column":
        return _x(g, rows)
    return _rank(g)


def mask(g, ctas: str) -> ir.Value:
    """The 16-bit ctaMask of this CTA's set: bit r for each rank r in it."""
    rows, cols = g.kernel.cluster_shape()
    if ctas == "cluster":
        return I16((1 << g.kernel.cluster) - 1)
    row = g.b.shl(I32(sum(1 << (rows * j) for j in range(cols))), _x(g, rows))
    column = g.b.shl(I32((1 << rows) - 1), _column_base(g, rows))
    found = {"row": lambda: row, "column": lambda: column, "cross": lambda: g.b.or_(row, column)}[ctas]()
    return g.b.trunc(found, I16)


def targets(g, ctas: str) -> list[ir.Value]:
    """The ranks of this CTA's set, each once: a release arrives on the barrier of each."""
    rows, cols = g.kernel.cluster_shape()
    if ctas == "cluster":
        return [I32(c) for c in range(g.kernel.cluster)]
    row = [g.b.add(_x(g, rows), I32(rows * j)) for j in range(cols)] if ctas in ("row", "cross") else []
    first = 1 if ctas == "cross" else 0   # a cross's own rank is in its row already
    column = [g.b.add(_column_base(g, rows), g.b.and_(g.b.add(_rank(g), I32(i)), I32(rows - 1)))
              for i in range(first, rows)] if ctas in ("column", "cross") else []
    return row + column
