"""Prefetch to L2 and L2 cache policies (docs/language.md §"Prefetch and L2 cache policies"):
the IR text form, the verify hooks, the PTX each form becomes (and that ptxas takes it), the
interpreter's meaning (no observable effect) and --explain. Diagnostics: tests/diagnostics/prefetch.tma
and tests/verify/prefetch.tma; GPU runs: tests/gpu/test_gpu_prefetch.py."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import CASES
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError
from tmalang.interp.trace import Trace
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify

EXAMPLE = ROOT / "examples" / "blocksum_prefetch.tma"
COPY = (ROOT / "examples" / "tma_copy.tma").read_text()


def _hinted_copy(load: str = "evict_first", store: str = "evict_last", ahead: bool = True) -> str:
    """tma_copy with cache policies on both boxes and, optionally, a prefetch of the next tile."""
    src = COPY.replace("box In  = src[64, 128]", f"box In  = src[64, 128] cache {load}\n    box Next = src[64, 128]")
    src = src.replace("box Out = dst[64, 128]", f"box Out = dst[64, 128] cache {store}")
    src = src.replace("    grid persistent\n", "    grid persistent\n    prefetch tensormaps\n")
    if ahead:
        src = src.replace("            produce ring as s", "            elect { prefetch Next[m, n + 1] }\n            produce ring as s")
    return src


def test_a_box_without_policy_prints_as_before_and_one_with_it_round_trips():
    plain = print_ir(tmalang.compile(COPY)._c.ir)
    assert "cache=" not in plain
    hinted = print_ir(tmalang.compile(_hinted_copy())._c.ir)
    assert "cache=evict_first" in hinted and "cache=evict_last" in hinted
    assert "tensormap_prefetch box=In" in hinted and "tma_prefetch box=Next coords=[%m, (%n + 1)]" in hinted
    assert print_ir(parse_ir(hinted)) == hinted


@pytest.mark.parametrize("old,new,message", [
    ("cache=evict_first", "cache=evict_always", "box cache=evict_always: not an L2 cache policy"),
    ("elect scope=role {\n          tma_prefetch", "if cond=1 {\n          tma_prefetch",
     "tma_prefetch outside elect: every thread would issue it"),
])
def test_verify_hooks_refuse_a_bad_policy_and_an_unelected_prefetch(old, new, message):
    text = print_ir(tmalang.compile(_hinted_copy())._c.ir)
    assert old in text
    [kernel] = parse_ir(text.replace(old, new, 1))
    with pytest.raises(TmalangError) as caught:
        verify(kernel, "lower_tile_walk", ["lower"])
    assert message in caught.value.render()


def test_ptx_of_each_form():
    ptx = tmalang.compile(_hinted_copy()).ptx
    assert ptx.count("prefetch.tensormap [") == 3
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [" in ptx
    assert ("createpolicy.fractional.L2::evict_first.b64 l2p, 1.0; cp.async.bulk.tensor.2d.shared::cluster.global"
            ".tile.mbarrier::complete_tx::bytes.L2::cache_hint [") in ptx
    assert ("createpolicy.fractional.L2::evict_last.b64 l2p, 1.0; cp.async.bulk.tensor.2d.global.shared::cta.tile"
            ".bulk_group.L2::cache_hint [") in ptx
    assert "], l2p; }" in ptx


def _multicast_gemm() -> str:
    src = (ROOT / "examples" / "gemm_sm90.tma").read_text()
    assert "box B = b[BN, BK] swizzle SWIZZLE" in src
    return src.replace("box B = b[BN, BK] swizzle SWIZZLE", "box B = b[BN, BK] swizzle SWIZZLE cache evict_last")


def _pair_gemm() -> str:
    src = (ROOT / "examples" / "gemm_pair_sm100.tma").read_text()
    return src.replace("swizzle 128B pair", "swizzle 128B pair cache evict_last")


@pytest.mark.parametrize("source,arch,qualifiers", [
    (_hinted_copy(), "sm_90a", ["bytes.L2::cache_hint"]),
    (_multicast_gemm(), "sm_90a", [".multicast::cluster.L2::cache_hint"]),
    (_pair_gemm(), "sm_100a", [".cta_group::2.L2::cache_hint"]),
    (EXAMPLE.read_text(), "sm_90a", ["cp.async.bulk.prefetch.tensor.2d.L2.global.tile.L2::cache_hint"]),
])
def test_ptxas_accepts_hinted_copies(source, arch, qualifiers):
    ptx = tmalang.compile(source, arch=arch).ptx
    for q in qualifiers:
        assert q in ptx
    cubin, _ = ptxas.assemble(ptx, arch)
    assert cubin[:4] == b"\x7fELF"


def test_prefetch_and_policies_change_no_result_and_the_trace_shows_the_prefetches():
    rng = np.random.default_rng(3)
    src = np.asarray(rng.standard_normal((130, 300)), dtype=np.float32)
    dst = np.full_like(src, np.nan)
    trace = Trace()
    tmalang.compile(_hinted_copy()).interpret(src, dst, trace=trace)
    np.testing.assert_array_equal(dst, src)
    prefetches = [e for e in trace.events if e.get("name") == "tma prefetch"]
    assert prefetches and {e["name"] for e in trace.events} >= {"tma_prefetch", "tensormap_prefetch"}
    # tiles at the right edge prefetch a box wholly outside the tensor: no bytes inside
    assert 0 in {e["args"]["bytes"] for e in prefetches}


@pytest.mark.parametrize("shape", [(130, 200), (1, 64), (65, 1000)])
def test_blocksum_prefetch_equals_blocksum(shape):
    args, expected = CASES["blocksum"](np.random.default_rng(7), shape)
    plain = [a.copy() for a in args]
    tmalang.compile_file(EXAMPLE).interpret(*args, seed=5)
    tmalang.compile_file(ROOT / "examples" / "blocksum.tma").interpret(*plain)
    np.testing.assert_array_equal(args[-1], expected)
    np.testing.assert_array_equal(args[-1], plain[-1])


def test_explain_lists_prefetches_and_policies_only_where_there_are_some():
    assert "L2:" not in tmalang.compile(COPY).explain()
    text = tmalang.compile(_hinted_copy()).explain()
    assert "tensor maps prefetched at kernel start: In, Next, Out" in text
    assert "boxes prefetched into L2: Next" in text
    assert "L2 cache policies: In evict_first, Out evict_last" in text
