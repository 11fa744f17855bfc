"""2-D clusters (`cluster RxC`), multicast to a cluster row or column (`multicast(n)`,
`multicast(m)`), and the cluster coordinates in index expressions (`cluster.rank`, `.x`, `.y`).

Copies and f32 sums, so every result is exact: the interpreter against NumPy, and (gpu tests)
the H100 against NumPy and the interpreter bit for bit, for every shape within the portable
limit of 8 CTAs, at shapes that fill neither the tiles nor the cluster blocks."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from test_gemm_sm100 import operands, relative_error

import tmalang
from tmalang.backend import ptxas
from tmalang.ir import ops

SHAPES = [(2, 2), (2, 4), (4, 2), (1, 2), (2, 1), (1, 8), (8, 1), (1, 4)]
TILE = 32


def cross_source(rows: int, cols: int) -> str:
    """dst tile (m, n) = A tile (m, 0) + B tile (0, n): A is the same along a cluster row (multicast
    to the CTAs whose tiles differ in n), B along a cluster column (those that differ in m)."""
    a = " multicast(n)" if cols > 1 else ""
    b = " multicast(m)" if rows > 1 else ""
    return f"""
kernel cross(a: f32[M, K], b: f32[P, N], dst: f32[M, N]) {{
    grid persistent
    cluster {rows}x{cols}
    box A = a[64, {TILE}]
    box B = b[64, {TILE}]
    box Out = dst[64, {TILE}]
    pipeline ring[3] {{ a: A, b: B }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(dst, Out) {{
            produce ring as s {{
                load A[m, 0] -> s.a{a}
                load B[0, n] -> s.b{b}
            }}
        }}
    }}
    role consumer: warps 4..7 {{
        for tile (m, n) in tiles(dst, Out) {{
            consume ring as s {{
                s.a = s.a + s.b
                store Out[m, n] <- s.a
            }}
        }}
    }}
}}
"""


def matrix(rows: int, cols: int, rng=None) -> np.ndarray:
    """f32 [rows, cols] (random, or NaN without `rng`) whose rows are 16-byte aligned: a view
    into padded rows, as TMA needs."""
    padded = (rows, -(-cols // 4) * 4)
    base = np.full(padded, np.nan, np.float32) if rng is None else rng.standard_normal(padded).astype(np.float32)
    return base[:, :cols]


def cross_operands(rng, m: int, n: int):
    a, b, dst = matrix(m, TILE + 3, rng), matrix(64 + 5, n, rng), matrix(m, n)
    expected = a[:, np.arange(n) % TILE] + b[np.arange(m) % 64, :]
    return a, b, dst, expected


# 5 x 3 and 3 x 5 tiles of 64 x 32: neither a multiple of any side of the shapes above
ODD = [(5 * 64 - 17, 3 * TILE - 5), (3 * 64 - 1, 5 * TILE + 7)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("m,n", ODD)
def test_cross_multicast_matches_numpy(shape, m, n):
    k = tmalang.compile(cross_source(*shape))
    a, b, dst, expected = cross_operands(np.random.default_rng(m + n), m, n)
    k.interpret(a, b, dst, seed=shape[0], explore=3, ctas=2 * shape[0] * shape[1])
    np.testing.assert_array_equal(dst, expected)


def test_the_release_set_is_the_union_of_the_load_sets():
    """Row and column loads into one ring: the release reaches the cross, `empty` counts its
    3 + 2 - 1 = 4 CTAs (one arrival each: the consumer's release is elected)."""
    ir = tmalang.compile(cross_source(2, 4))._c.ir
    assert {o.ctas for o in ops.walk(ir.body) if isinstance(o, ops.MbarArriveCluster)} == {"cross"}
    assert ops.decls(ir, ops.MbarrierDecl)["ring.empty"].count == 2 + 4 - 1
    one_set = tmalang.compile(cross_source(1, 4))._c.ir   # a 1 x 4 cluster: the row is the whole cluster
    assert {o.ctas for o in ops.walk(one_set.body) if isinstance(o, ops.MbarArriveCluster)} == {"cluster"}
    assert {o.ctas for o in ops.walk(one_set.body) if isinstance(o, ops.TmaLoad) and o.multicast} == {"cluster"}


@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (4, 2), (1, 8)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_ptxas_accepts_cross_multicast(shape):
    ptxas.assemble(tmalang.compile(cross_source(*shape)).ptx, "sm_90a")


def coords_source(rows: int, cols: int, coords: str) -> str:
    """Each CTA loads the tile its cluster coordinates name, whatever tile it stores."""
    return f"""
kernel where(src: f32[M, N], dst: f32[M, N]) {{
    grid persistent
    cluster {rows}x{cols}
    box T = src[{TILE}, {TILE}]
    box O = dst[{TILE}, {TILE}]
    pipeline ring[2] {{ t: T }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(dst, O) {{
            produce ring as s {{ load T[{coords}] -> s.t }}
        }}
    }}
    role consumer: warps 4..7 {{
        for tile (m, n) in tiles(dst, O) {{
            consume ring as s {{ store O[m, n] <- s.t }}
        }}
    }}
}}
"""


COORDS = {"xy": "cluster.x, cluster.y", "rank": "{rank} % {rows}, {rank} / {rows}"}


def coords_case(rows, cols, spelling, m, n):
    coords = COORDS[spelling].format(rank="cluster.rank", rows=rows)
    k = tmalang.compile(coords_source(rows, cols, coords))
    rng = np.random.default_rng(m * n)
    src = matrix(m, n, rng)
    padded = np.zeros((rows * TILE, cols * TILE), np.float32)
    padded[: min(m, rows * TILE), : min(n, cols * TILE)] = src[: rows * TILE, : cols * TILE]
    i, j = np.arange(m), np.arange(n)
    # tile (m, n) is taken by the CTA at (m mod R, n mod C) of its cluster's block
    expected = padded[((i // TILE) % rows * TILE + i % TILE)[:, None], ((j // TILE) % cols * TILE + j % TILE)[None, :]]
    return k, src, matrix(m, n), expected


@pytest.mark.parametrize("spelling", sorted(COORDS))
@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (4, 2), (1, 4), (4, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_cluster_coordinates_in_index_expressions(shape, spelling):
    k, src, dst, expected = coords_case(*shape, spelling, 5 * TILE - 3, 7 * TILE + 1)
    k.interpret(src, dst, seed=1, ctas=3 * shape[0] * shape[1])
    np.testing.assert_array_equal(dst, expected)


def test_cluster_coordinates_without_a_cluster_are_zero():
    k, src, dst, expected = coords_case(1, 1, "xy", 3 * TILE, 2 * TILE)
    k.interpret(src, dst)
    np.testing.assert_array_equal(dst, expected)
    assert "%cluster_ctarank" not in k.ptx   # x and y of a 1 x 1 cluster are the constant 0


# ---- sm_100a: the release of a row/column multicast ring is a tcgen05.commit with the cross's mask


def test_tcgen05_commit_reaches_the_cross():
    source = (ROOT / "examples" / "gemm_multicast_sm100.tma").read_text()
    source = source.replace("    cluster 2\n", "    cluster 2x2\n")
    source = source.replace("load A[m, k] -> s.a\n", "load A[m, k] -> s.a multicast(n)\n")
    source = source.replace("load B[n, k] -> s.b multicast ", "load B[n, k] -> s.b multicast(m) ")
    k = tmalang.compile(source, arch="sm_100a")
    commits = [o for o in ops.walk(k._c.ir.body) if isinstance(o, ops.Tcgen05CommitCluster)]
    assert [o.ctas for o in commits] == ["cross"]
    assert ops.decls(k._c.ir, ops.MbarrierDecl)["ring.empty"].count == 3
    _, stats = ptxas.assemble(k.ptx, "sm_100a")
    assert stats.spill_stores == 0
    a, b, c = operands(np.random.default_rng(3), 300, 700, 100)
    k.interpret(a, b, c, seed=2, explore=2, ctas=8)
    assert relative_error(c, a, b) < 1e-2


# ---- H100


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint32)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("m,n", ODD + [(4096 + 64 * 3 + 1, 2048 + 32 * 5 + 3)])
def test_h100_cross_multicast_matches_numpy_and_the_interpreter(shape, m, n):
    k = tmalang.compile(cross_source(*shape))
    a, b, dst, expected = cross_operands(np.random.default_rng(m + n), m, n)
    k(a, b, dst)
    np.testing.assert_array_equal(dst, expected)
    if m < 1000:
        interp = matrix(m, n)
        k.interpret(a, b, interp, seed=1)
        np.testing.assert_array_equal(_bits(dst), _bits(interp))


@pytest.mark.gpu
@pytest.mark.parametrize("spelling", sorted(COORDS))
@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (4, 2), (1, 8), (8, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_h100_cluster_coordinates_match(shape, spelling):
    k, src, dst, expected = coords_case(*shape, spelling, 9 * TILE - 3, 11 * TILE + 1)
    k(src, dst)
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("spelling", ["multicast", "multicast(m, n)", "multicast(n, m)"])
def test_whole_cluster_multicast_in_a_2d_cluster(spelling):
    """Bare `multicast` (or naming both indices) in a 2 x 2 cluster: one box for all four CTAs, a
    quarter each; coordinates may use neither tile index."""
    source = coords_source(2, 2, "0, 0").replace("-> s.t }", f"-> s.t {spelling} }}")
    k = tmalang.compile(source)
    assert {o.ctas for o in ops.walk(k._c.ir.body) if isinstance(o, ops.TmaLoad)} == {"cluster"}
    assert ops.decls(k._c.ir, ops.BoxDecl)["T"].multicast == 4
    src, dst = matrix(3 * TILE, 5 * TILE - 1, np.random.default_rng(2)), matrix(3 * TILE, 5 * TILE - 1)
    k.interpret(src, dst, seed=3, explore=2, ctas=8)
    j = np.arange(dst.shape[1])
    np.testing.assert_array_equal(dst, src[np.arange(3 * TILE) % TILE][:, j % TILE])
