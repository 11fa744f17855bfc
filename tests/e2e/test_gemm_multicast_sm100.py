"""examples/gemm_multicast_sm100.tma: a cluster of CTAs shares B by TMA multicast into a ring that
tcgen05.mma consumes. The slot's release is a tcgen05.commit that arrives in every CTA of the
cluster (`.multicast::cluster`), and `ring.empty` counts one arrival per CTA — validated by the
interpreter (numerics and protocol, many schedules) and by ptxas for sm_100a."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import ROOT
from test_gemm_sm100 import operands, relative_error

import tmalang
from tmalang.backend import ptxas
from tmalang.interp import interpret
from tmalang.ir import ops

SOURCE = ROOT / "examples" / "gemm_multicast_sm100.tma"


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(SOURCE, arch="sm_100a")


def _cluster(n: int) -> tmalang.Kernel:
    return tmalang.compile(SOURCE.read_text().replace("cluster 2", f"cluster {n}"), arch="sm_100a")


@pytest.mark.parametrize("m,n,k,ctas", [(130, 300, 100, 2), (300, 513, 200, 4), (257, 129, 64, 6), (1, 8, 8, 2)])
def test_interpreter_matches_float64(gemm, m, n, k, ctas):
    """Tile rows that do not fill the last cluster (3 of 4), N and K off the box."""
    a, b, c = operands(np.random.default_rng(m * n + k), m, n, k)
    gemm.interpret(a, b, c, ctas=ctas)
    assert relative_error(c, a, b) < 1e-2


def test_many_schedules_agree(gemm):
    a, b, c = operands(np.random.default_rng(3), 260, 300, 130)
    gemm.interpret(a, b, c, ctas=4, seed=29, explore=24)
    assert relative_error(c, a, b) < 1e-2


@pytest.mark.parametrize("size", [4, 8])
def test_larger_clusters_count_every_cta(size):
    """Each CTA loads 1/N of B; every CTA's commit reaches every CTA: `empty` counts N."""
    kernel = _cluster(size)
    empty = ops.decls(kernel._c.ir, ops.MbarrierDecl)["ring.empty"]
    assert empty.count == size
    a, b, c = operands(np.random.default_rng(size), 600, 300, 130)
    kernel.interpret(a, b, c, ctas=size, seed=size, explore=4)
    assert relative_error(c, a, b) < 1e-2
    cubin, _ = ptxas.assemble(kernel.ptx, "sm_100a")
    assert cubin[:4] == b"\x7fELF"


def test_release_is_a_multicast_commit_counted_per_cta(gemm):
    kernel = gemm._c.ir
    commits = [o for o in ops.walk(kernel.body) if isinstance(o, ops.Tcgen05Commit)]
    assert [(type(o).__name__, o.barrier.name) for o in commits] == [
        ("Tcgen05CommitCluster", "ring.empty"), ("Tcgen05Commit", "accs.full")]
    barriers = ops.decls(kernel, ops.MbarrierDecl)
    assert barriers["ring.empty"].count == 2 and barriers["accs.full"].count == 1
    ptx = gemm.ptx
    multicast = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
    assert ptx.count(multicast) == 1
    assert ptx.count("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64") == 1
    assert gemm.stats().spill_stores == 0


def test_mask_selects_every_cta_of_the_cluster(gemm):
    """The commit's 16-bit CTA mask is 2^N - 1, a constant in the PTX."""
    import re

    line = next(l for l in gemm.ptx.splitlines() if "multicast::cluster.b64" in l and "tcgen05.commit" in l)
    register = re.search(r"\], (%rs\d+);", line).group(1)
    assert re.search(rf"mov\.[bu]16\s+{re.escape(register)}, 3;", gemm.ptx)


def _count_one(kernel: ops.KernelOp) -> None:
    """`ring.empty` initialised for one arrival per phase, as a local commit would count it."""
    ops.decls(kernel, ops.MbarrierDecl)["ring.empty"].count = 1
    for o in ops.walk(kernel.body):
        if isinstance(o, ops.MbarInit) and o.barrier.name == "ring.empty":
            o.count = 1


def test_a_local_commit_lets_a_peer_overwrite_the_slot(gemm):
    """Without the multicast (the bug of issue 11, item 6): a CTA's producer refills a slot the
    other CTA's tensor cores may still read, and the interpreter reports the race."""
    kernel = copy.deepcopy(gemm._c.ir)
    for o in ops.walk(kernel.body):
        if isinstance(o, ops.Elect):
            o.body = [ops.Tcgen05Commit(s.barrier, span=s.span) if isinstance(s, ops.Tcgen05CommitCluster) else s
                      for s in o.body]
    _count_one(kernel)
    a, b, c = operands(np.random.default_rng(0), 300, 300, 200)
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(kernel, gemm.manifest, a, b, c, ctas=4)
    assert caught.value.code == "E405"


def test_a_count_of_one_is_overrun_by_the_peer(gemm):
    """The multicast commits with `empty` counting one CTA: one CTA's commit completes the phase for
    both, the other's falls into the next phase, and the protocol breaks (a hang or a race)."""
    kernel = copy.deepcopy(gemm._c.ir)
    _count_one(kernel)
    a, b, c = operands(np.random.default_rng(0), 300, 300, 200)
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(kernel, gemm.manifest, a, b, c, ctas=2)
    assert caught.value.code in ("E401", "E402", "E405")
