"""examples/gemm_pair_sm100.tma: one tcgen05.mma per K step for a CTA pair (cta_group::2),
validated without a Blackwell GPU — by the interpreter (numerics and protocol) and by ptxas."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ROOT
from test_gemm_sm100 import _edit, _regions, operands, relative_error

import tmalang
from tmalang.targets.tcgen05 import descriptors
from tmalang.interp import interpret
from tmalang.ir import ops


@pytest.fixture(scope="module")
def pair():
    return tmalang.compile_file(ROOT / "examples" / "gemm_pair_sm100.tma", arch="sm_100a")


@pytest.fixture(scope="module")
def single():
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a")


@pytest.mark.parametrize("m,n,k,ctas", [(130, 300, 100, 2), (300, 513, 200, 4), (257, 129, 64, 6), (1, 8, 8, 2)])
def test_interpreter_matches_float64(pair, m, n, k, ctas):
    """Tile rows that do not fill the last pair (300 rows: 3 of 4), N and K off the box."""
    a, b, c = operands(np.random.default_rng(m * n + k), m, n, k)
    pair.interpret(a, b, c, ctas=ctas)
    assert relative_error(c, a, b) < 1e-2


def test_many_schedules_agree(pair):
    a, b, c = operands(np.random.default_rng(3), 260, 300, 130)
    pair.interpret(a, b, c, ctas=4, seed=17, explore=24)
    assert relative_error(c, a, b) < 1e-2


def test_ptx_uses_cta_group_2_throughout(pair):
    """PTX requires one .cta_group for every tcgen05 instruction of a kernel."""
    ptx = pair.ptx
    assert ptx.count("tcgen05.mma.cta_group::2.kind::f16") == 4            # K = 64: four k16 MMAs
    assert ptx.count("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster") == 2
    assert ptx.count("mbarrier::complete_tx::bytes.cta_group::2") == 2      # A and B complete at the leader
    for op in ("alloc", "dealloc", "relinquish_alloc_permit"):
        assert f"tcgen05.{op}.cta_group::2" in ptx
    assert "cta_group::1" not in ptx
    assert str(descriptors.instruction_descriptor("bf16", "bf16", "f32", 256, 256, 2)) in ptx   # M = 256
    assert pair.manifest.cluster == (2, 1, 1)
    assert pair.stats().spill_stores == 0


def test_each_cta_holds_half_of_b(pair):
    """The pair box's tensor map and ring slot cover 128 of its 256 rows; the leader's full barrier
    expects both CTAs' bytes."""
    kernel = pair._c.ir
    params = {p.box: p for p in pair.manifest.ptx_params if hasattr(p, "box_shape")}
    assert params["B"].box_shape == (128, 64) and params["A"].box_shape == (128, 64)
    buffers = ops.decls(kernel, ops.BufferDecl)
    assert buffers["ring.b"].bytes == buffers["ring.a"].bytes == 128 * 64 * 2
    assert ops.decls(kernel, ops.MbarrierDecl)["ring.full"].tx_bytes == 2 * 2 * 128 * 64 * 2
    assert ops.decls(kernel, ops.MbarrierDecl)["accs.empty"].count == 2   # one release from each CTA


def _unpair_load(kernel):
    """The peer's B bytes complete on its own barrier instead of the leader's."""
    load = next(o for o in ops.walk(next(r for r in ops.roles(kernel) if r.symbol == "load").body)
                if isinstance(o, ops.TmaLoad) and o.box == "B")
    load.pair = False


def _local_release(kernel):
    """Each CTA's epilogue releases its own accumulator slot, so the leader never hears of the peer's."""
    for region in _regions(next(r for r in ops.roles(kernel) if r.symbol == "epilogue").body):
        for i, o in enumerate(region):
            if isinstance(o, ops.MbarArriveLeader):
                region[i] = ops.MbarArrive(o.barrier, span=o.span)
                return
    raise AssertionError("no leader release")


def _small_allocation(kernel):
    next(o for o in kernel.body if isinstance(o, ops.TmemAlloc)).columns = 256
    next(o for o in kernel.body if isinstance(o, ops.TmemDealloc)).columns = 256


def _no_drain(kernel):
    load = next(r for r in ops.roles(kernel) if r.symbol == "load")
    load.body = [o for o in load.body if not (isinstance(o, ops.ForRange) and o.var.endswith(".tail"))]


@pytest.mark.parametrize("change,code", [
    (_unpair_load, "E401"),          # the leader's full barrier misses the peer's bytes: deadlock
    (_local_release, "E401"),        # the leader's accumulator slot never frees: deadlock
    (_small_allocation, "E418"),     # the MMA writes Tensor Memory columns no CTA allocated
    (_no_drain, "E412"),             # a commit may land on a barrier of a CTA that has exited
])
def test_interpreter_catches_pair_protocol_bugs(pair, change, code):
    """Four tiles per CTA: both accumulator slots are used twice."""
    kernel = _edit(pair, change)
    a, b, c = operands(np.random.default_rng(5), 1024, 256, 64)
    with pytest.raises(tmalang.TmalangError, match=code):
        interpret(kernel, pair.manifest, a, b, c, ctas=2)


def test_single_cta_ring_is_drained_too(single):
    """gemm_sm100's loader also waits for the last commits before its CTA may exit."""
    a, b, c = operands(np.random.default_rng(6), 200, 256, 128)
    with pytest.raises(tmalang.TmalangError, match="E412"):
        interpret(_edit(single, _no_drain), single.manifest, a, b, c, ctas=1)


def test_explain_says_where_each_barrier_lives(pair):
    text = pair.explain()
    assert "CTA pairs (cta_group 2)" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith(("ring.", "accs."))}
    assert rows["ring.full"].rstrip().endswith("load (in the pair's leader)")
    assert "tcgen05.commit in both CTAs of the pair" in rows["ring.empty"]
    assert rows["accs.empty"].rstrip().endswith("epilogue (on the pair's leader, from both CTAs)")
