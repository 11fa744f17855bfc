"""Tensor Memory declarations: planning, allocation code for sm_100a, and the interpreter's
allocation checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.interp import interpret
from tmalang.ir import ops

# examples/tma_copy.tma with Tensor Memory declared (and unused): allocation on its own
SOURCE = (ROOT / "examples" / "tma_copy.tma").read_text().replace(
    "    pipeline ring[4] { t: In }\n",
    "    pipeline ring[4] { t: In }\n    tmem accs[2]: f32[128, 128]\n    tmem scratch: f32[64, 24]\n")


@pytest.fixture(scope="module")
def kernel():
    return tmalang.compile(SOURCE, arch="sm_100a")


def test_columns_are_planned_and_allocation_rounds_to_a_power_of_two(kernel):
    tiles = ops.decls(kernel._c.ir, ops.TmemDecl)
    assert (tiles["accs"].column, tiles["scratch"].column) == (0, 256)
    alloc = next(o for o in kernel._c.ir.body if isinstance(o, ops.TmemAlloc))
    assert alloc.columns == 512 and alloc.offset >= 0          # 280 live columns -> 512


def test_sm100a_code_allocates_publishes_and_frees(kernel):
    ptx = kernel.ptx
    alloc, dealloc = ptx.index("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"), ptx.index("tcgen05.dealloc")
    assert alloc < ptx.index("tcgen05.relinquish_alloc_permit") < ptx.index("bar.sync 0") < dealloc
    assert ptx.count("tcgen05.fence::before_thread_sync") == 2 and ptx.count("tcgen05.fence::after_thread_sync") == 2
    cubin, _ = ptxas.assemble(ptx, "sm_100a")
    assert cubin[:4] == b"\x7fELF"


def _copy_args(shape=(130, 260)):
    rng = np.random.default_rng(1)
    src = rng.standard_normal(shape).astype(np.float32)
    return src, np.zeros_like(src)


def test_interpreter_runs_the_allocation(kernel):
    src, dst = _copy_args()
    kernel.interpret(src, dst)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("edit,code", [
    (lambda body: body.remove(next(o for o in body if isinstance(o, ops.TmemDealloc))), "E416"),
    (lambda body: body.insert(0, next(o for o in body if isinstance(o, ops.TmemAlloc))), "E415"),
])
def test_interpreter_checks_allocation_protocol(kernel, edit, code):
    """Exiting with TMEM allocated (E416), allocating beyond 512 columns (E415)."""
    ir = copy.deepcopy(kernel._c.ir)
    edit(ir.body)
    src, dst = _copy_args()
    with pytest.raises(tmalang.TmalangError, match=code):
        interpret(ir, kernel.manifest, src, dst)


# -- alignment of Tensor Memory tiles (issue 11, item 10) ---------------------------------------

def _tmem_kernel(decls: str):
    return tmalang.compile((ROOT / "examples" / "tma_copy.tma").read_text().replace(
        "    pipeline ring[4] { t: In }\n", "    pipeline ring[4] { t: In }\n" + decls), arch="sm_100a")


def test_every_tile_starts_on_32_columns_when_that_fits():
    """Packed, `odd` would end at column 131 and `acc` start there; each starts on 32 columns."""
    k = _tmem_kernel("    tmem odd[3]: f32[128, 1]\n    tmem acc[2]: f32[128, 64]\n    tmem last: f32[128, 8]\n")
    tiles = ops.decls(k._c.ir, ops.TmemDecl)
    assert [(t.column, t.pitch()) for t in tiles.values()] == [(0, 4), (32, 64), (160, 8)]
    assert [tiles["odd"].stage_column(s) for s in range(3)] == [0, 4, 8]   # stages on the 4-column granule


def test_alignment_falls_back_to_4_columns_when_32_would_not_fit():
    k = _tmem_kernel("    tmem a: f32[128, 200]\n    tmem b: f32[128, 60]\n    tmem c: f32[128, 232]\n")
    tiles = ops.decls(k._c.ir, ops.TmemDecl)
    assert [t.column for t in tiles.values()] == [0, 200, 260]       # 32-aligned: 0, 224, 288 + 232 > 512
    assert all(t.column % 4 == 0 for t in tiles.values())


def test_tiles_that_fit_only_packed_are_refused_on_the_declaration():
    with pytest.raises(tmalang.TmalangError) as caught:
        _tmem_kernel("    tmem acc: f32[128, 256]\n    tmem xs[100]: f32[128, 1]\n")
    assert caught.value.code == "E096" and "multiple of 4" in caught.value.message
    assert caught.value.span.source.line(caught.value.span.line).strip().startswith("tmem xs")


def test_attention_output_tile_is_aligned():
    """attention_sm100's O accumulator (an MMA output and a tcgen05.ld/st base) started at column
    130 when tiles were packed."""
    k = tmalang.compile_file(ROOT / "examples" / "attention_sm100.tma", arch="sm_100a")
    tiles = ops.decls(k._c.ir, ops.TmemDecl)
    assert {n: t.column for n, t in tiles.items()} == {"scores.s": 0, "factors.x": 128, "out.o": 160}


def _misplace(kernel, name: str, column: int):
    ir = copy.deepcopy(kernel._c.ir)
    ops.decls(ir, ops.TmemDecl)[name].column = column
    return ir


@pytest.mark.parametrize("tile,column,what", [("accs.d", 2, "tcgen05_mma"), ("accs.d", 0, None)])
def test_interpreter_refuses_a_misaligned_mma_base(tile, column, what):
    gemm = tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a")
    ir = _misplace(gemm, tile, column)
    from test_gemm_sm100 import operands

    a, b, c = operands(np.random.default_rng(0), 130, 200, 64)
    if what is None:
        interpret(ir, gemm.manifest, a, b, c, ctas=1)
        return
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(ir, gemm.manifest, a, b, c, ctas=1)
    assert caught.value.code == "E419" and what in caught.value.message and "column 2" in caught.value.message


@pytest.mark.parametrize("tile", ["out.o", "factors.x"])
def test_interpreter_refuses_a_misaligned_ld_st_base(tile):
    """attention_sm100 with a tile moved off the granule: O (an MMA output, rescaled with
    tcgen05.ld/st) at column 130, as plan_tmem used to put it; the factors (tcgen05.st) at 129."""
    from references import attention_case

    k = tmalang.compile_file(ROOT / "examples" / "attention_sm100.tma", arch="sm_100a")
    ir = _misplace(k, tile, {"out.o": 130, "factors.x": 129}[tile])
    args, _ = attention_case(np.random.default_rng(1), (130, 70))
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(ir, k.manifest, *args, ctas=1)
    assert caught.value.code == "E419", caught.value
