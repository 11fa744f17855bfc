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
