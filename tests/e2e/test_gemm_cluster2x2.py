"""examples/gemm_cluster2x2_sm90.tma: a 2 x 2 cluster whose CTAs take a 2 x 2 block of tiles; A is
multicast along the cluster row (`multicast(n)`), B along the cluster column (`multicast(m)`).
A ring slot is written by three CTAs (this one, its row partner, its column partner), so its
release reaches those three (the cross) and `ring.empty` counts 2 warpgroups x 3. Checked by the
interpreter against float64 at shapes that fill neither the tiles nor the cluster blocks, by its
protocol checks on a wrong release set or count, by ptxas, and on the H100 (gpu tests)."""

from __future__ import annotations

import copy
import re

import ml_dtypes
import numpy as np
import pytest
from conftest import ROOT
from test_gemm import bf16_matrix, check_on_h100, relative_error

import tmalang
from tmalang.backend import ptxas
from tmalang.interp import interpret
from tmalang.ir import ops
from tmalang.targets import cluster

SOURCE = ROOT / "examples" / "gemm_cluster2x2_sm90.tma"
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(SOURCE)


def operands(rng, m, n, k):
    a, b = bf16_matrix(rng, m, k), bf16_matrix(rng, n, k)
    return a, b, np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]


# M, N off the 128 x 256 tile and off the 256 x 512 cluster block (3 tile rows: the last cluster
# row half outside; 2 tile columns past N in the last block), K off the 64-wide step.
@pytest.mark.parametrize("m,n,k,ctas", [(300, 700, 100, 4), (130, 300, 64, 8), (257, 513, 200, 4), (1, 8, 8, 4),
                                        (520, 1100, 72, 12)])
def test_interpreter_matches_float64(gemm, m, n, k, ctas):
    a, b, c = operands(np.random.default_rng(m * n + k), m, n, k)
    gemm.interpret(a, b, c, seed=m, explore=2, ctas=ctas)
    assert relative_error(c, a, b) < 1e-2


def test_release_reaches_the_cross_and_empty_counts_it(gemm):
    kernel = gemm._c.ir
    assert kernel.cluster == 4 and kernel.cluster_shape() == (2, 2)
    loads = {o.box: o.ctas for o in ops.walk(kernel.body) if isinstance(o, ops.TmaLoad)}
    assert loads == {"A": "row", "B": "column"}
    releases = {o.ctas for o in ops.walk(kernel.body) if isinstance(o, ops.MbarArriveCluster)}
    assert releases == {"cross"}
    assert ops.decls(kernel, ops.MbarrierDecl)["ring.empty"].count == 6
    boxes = ops.decls(kernel, ops.BoxDecl)
    assert boxes["A"].multicast == 2 and boxes["B"].multicast == 2


def test_ptxas_accepts_without_spills(gemm):
    multicast = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
    lines = [line for line in gemm.ptx.splitlines() if multicast in line]
    assert len(lines) == 2 and all(re.search(r"\], %rs\d+;$", line.strip()) for line in lines)   # a 16-bit mask register
    _, stats = ptxas.assemble(gemm.ptx, "sm_90a")
    assert stats.spill_stores == 0 and stats.spill_loads == 0


@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (4, 2), (1, 4), (4, 1), (1, 8)])
def test_sets_are_symmetric_and_masks_match_members(shape):
    """What makes the release set and the empty count exact: c is in p's set iff p is in c's."""
    size = shape[0] * shape[1]
    for ctas in cluster.SETS:
        for p in range(size):
            members = cluster.members(shape, ctas, p)
            assert p in members and len(members) == cluster.size(shape, ctas)
            assert cluster.mask(shape, ctas, p) == sum(1 << r for r in members)
            assert all(p in cluster.members(shape, ctas, c) for c in members)
            if ctas != "cross":   # the positions in a line are 0..size-1, once each
                assert sorted(cluster.position(shape, ctas, c) for c in members) == list(range(len(members)))


def _retarget(kernel, ctas: str, count: int):
    """A copy whose releases reach `ctas` and whose `ring.empty` counts `count`."""
    kernel = copy.deepcopy(kernel)
    for o in ops.walk(kernel.body):
        if isinstance(o, ops.MbarArriveCluster):
            o.ctas = ctas
        if isinstance(o, ops.MbarInit) and o.barrier.name == "ring.empty":
            o.count = count
    ops.decls(kernel, ops.MbarrierDecl)["ring.empty"].count = count
    return kernel


@pytest.mark.parametrize("ctas,count,codes", [
    ("row", 4, ("E405",)),                    # the column partner refills B while this CTA reads it
    ("column", 4, ("E405",)),                 # the row partner refills A while this CTA reads it
    ("cross", 4, ("E401", "E402", "E405")),   # a count of two CTAs: the third one's release overruns
    ("cross", 8, ("E401",)),                  # a count of four CTAs: the phase never completes
])
def test_interpreter_catches_a_wrong_release_set_or_count(gemm, ctas, count, codes):
    kernel = _retarget(gemm._c.ir, ctas, count)
    a, b, c = operands(np.random.default_rng(7), 300, 700, 256)
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(kernel, gemm.manifest, a, b, c, seed=1, explore=6, ctas=4)
    assert caught.value.code in codes, caught.value


def test_a_load_to_the_wrong_line_gets_the_wrong_tiles(gemm):
    """B multicast along the row instead of the column: each CTA receives its row partner's B
    slices, the tile of another n. The protocol holds (same sizes, the cross covers both), so
    only the numbers show it: the interpreter reproduces what the hardware would compute."""
    kernel = copy.deepcopy(gemm._c.ir)
    for o in ops.walk(kernel.body):
        if isinstance(o, ops.TmaLoad) and o.box == "B":
            o.ctas = "row"
    a, b, c = operands(np.random.default_rng(9), 256, 512, 64)
    interpret(kernel, gemm.manifest, a, b, c, seed=1, explore=1, ctas=4)
    assert relative_error(c, a, b) > 0.5


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (4096, 4096, 4096), (257, 513, 2000),
                                   (300, 1100, 72)])
def test_h100_matches_float64(gemm, m, n, k):
    check_on_h100(gemm, m, n, k, "bfloat16")
