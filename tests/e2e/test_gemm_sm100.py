"""examples/gemm_sm100.tma: the tcgen05 GEMM, validated without a Blackwell GPU — by the
interpreter (numerics and protocol) and by ptxas for sm_100a."""

from __future__ import annotations

import copy

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.targets.tcgen05 import descriptors
from tmalang.interp import interpret
from tmalang.ir import exprs as ex
from tmalang.ir import ops

BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a")


def operands(rng, m, n, k):
    a = rng.standard_normal((m, -(-k // 8) * 8)).astype(BF16)[:, :k]
    b = rng.standard_normal((n, -(-k // 8) * 8)).astype(BF16)[:, :k]
    return a, b, np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]


def relative_error(c, a, b) -> float:
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    return float(np.linalg.norm(c.astype(np.float64) - reference) / np.linalg.norm(reference))


@pytest.mark.parametrize("m,n,k", [(130, 300, 100), (257, 513, 200), (512, 512, 512)])
def test_interpreter_matches_float64(gemm, m, n, k):
    a, b, c = operands(np.random.default_rng(m + n + k), m, n, k)
    gemm.interpret(a, b, c, ctas=3)
    assert relative_error(c, a, b) < 1e-2


def test_ptx_issues_tcgen05_with_the_encoded_descriptor(gemm):
    ptx = gemm.ptx
    assert ptx.count("tcgen05.mma.cta_group::1.kind::f16") == 4           # K = 64: four k16 MMAs
    assert ptx.count("tcgen05.commit.cta_group::1.mbarrier::arrive::one") == 2   # ring slot, accumulator
    assert "tcgen05.ld.sync.aligned.32x32b.x64.b32" in ptx and "tcgen05.wait::ld.sync.aligned" in ptx
    assert "tcgen05.alloc" in ptx and "tcgen05.dealloc" in ptx
    assert str(descriptors.instruction_descriptor("bf16", "bf16", "f32", 128, 256)) in ptx
    assert gemm.stats().spill_stores == 0


def _edit(gemm, change):
    kernel = copy.deepcopy(gemm._c.ir)
    change(kernel)
    return kernel


def _remove_fence(kind: str, role: str, before):
    """Remove the `kind` fence whose next op satisfies `before`."""
    def change(kernel):
        body = next(r for r in ops.roles(kernel) if r.symbol == role).body
        for region in _regions(body):
            for i, o in enumerate(region[:-1]):
                if isinstance(o, ops.Fence) and o.kind == kind and before(region, i + 1):
                    del region[i]
                    return
        raise AssertionError(f"no {kind} fence in role {role}")
    return change


def _is(kind):
    return lambda region, i: isinstance(region[i], kind)


def _sync_after_tmem_reads(region, i):
    """The role sync after an epilogue's Tensor Memory reads (its proxy fence may stand between)."""
    return isinstance(region[i], ops.Sync) and any(isinstance(o, ops.TmemEpilogue) for o in region[max(0, i - 3):i])


def _regions(body):
    yield body
    for o in body:
        for r in o.regions():
            yield from _regions(r)


def _thread_release(kernel):
    """Release the operand slot with a thread arrive instead of tcgen05.commit."""
    for region in _regions(next(r for r in ops.roles(kernel) if r.symbol == "mma").body):
        for o in region:
            if isinstance(o, ops.Elect) and isinstance(o.body[0], ops.Tcgen05Commit) and "ring" in o.body[0].barrier.name:
                o.body[0] = ops.MbarArrive(ex.BufferRef(o.body[0].barrier.name, o.body[0].barrier.index), span=o.span)
                return
    raise AssertionError("no ring release")


@pytest.mark.parametrize("change,code", [
    (_remove_fence("tcgen05_after_thread_sync", "mma", _is(ops.Tcgen05Mma)), "E417"),
    (_remove_fence("tcgen05_after_thread_sync", "epilogue", _is(ops.TmemEpilogue)), "E417"),
    (_remove_fence("tcgen05_before_thread_sync", "epilogue", _sync_after_tmem_reads), "E417"),
    (_thread_release, "E405"),
])
def test_interpreter_catches_tcgen05_protocol_bugs(gemm, change, code):
    """Missing tcgen05 thread-sync fences (E417); a slot freed by the issuing thread instead of by
    tcgen05.commit lets the loader overwrite operands the tensor cores still read (E405)."""
    kernel = _edit(gemm, change)
    a, b, c = operands(np.random.default_rng(7), 256, 256, 512)
    with pytest.raises(tmalang.TmalangError, match=code):
        interpret(kernel, gemm.manifest, a, b, c, seed=3, explore=16, ctas=2)


KIND_VARIANTS = {   # operand dtype -> (K elements per 128-byte row, kind, numpy type)
    "f32": (32, "tf32", np.float32),
    "f8e4m3": (128, "f8f6f4", ml_dtypes.float8_e4m3fn),
}


def kind_variant(dtype: str):
    k, _, _ = KIND_VARIANTS[dtype]
    source = (ROOT / "examples" / "gemm_sm100.tma").read_text()
    source = (source.replace("a: bf16[M, K], b: bf16[N, K]", f"a: {dtype}[M, K], b: {dtype}[N, K]")
              .replace("a[128, 64] swizzle 128B", f"a[128, {k}] swizzle 128B")
              .replace("b[256, 64] swizzle 128B", f"b[256, {k}] swizzle 128B").replace("steps(K, 64)", f"steps(K, {k})"))
    return tmalang.compile(source, arch="sm_100a")


@pytest.mark.parametrize("dtype", sorted(KIND_VARIANTS))
def test_other_kinds_compile_and_interpret(dtype):
    """f32 tiles multiply as .kind::tf32 (inputs truncated to tf32), fp8 as .kind::f8f6f4."""
    k, kind, np_type = KIND_VARIANTS[dtype]
    gemm = kind_variant(dtype)
    assert gemm.ptx.count(f"tcgen05.mma.cta_group::1.kind::{kind}") == k * np.dtype(np_type).itemsize // 32
    operand = "tf32" if dtype == "f32" else dtype
    assert str(descriptors.instruction_descriptor(operand, operand, "f32", 128, 256)) in gemm.ptx
    assert gemm.stats().spill_stores == 0
    rng = np.random.default_rng(11)
    pad = 16 // np.dtype(np_type).itemsize
    a = rng.standard_normal((200, 112 + pad)).astype(np_type)[:, :112]
    b = rng.standard_normal((300, 112 + pad)).astype(np_type)[:, :112]
    c = np.full((200, 304), np.nan, dtype=BF16)[:, :300]
    gemm.interpret(a, b, c)
    assert relative_error(c, a, b) < 1e-2
