"""Tensor Memory that nothing initialised (issue 28, item 3): the interpreter reports an MMA that
adds onto, or a tcgen05.ld whose values leave Tensor Memory from, cells that no overwriting MMA,
tcgen05.cp or tcgen05.st wrote since the allocation (E422). The kernels below are written from
docs/language.md §15a-§15c; numerics are checked against float64 on random data."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import attention_case, bf16_gemm_operands, check, gemm_relative_error
from test_gemm_sm100 import _regions
from tmalang.interp import interpret
from tmalang.interp import tmem_init
from tmalang.ir import ops

# C = A·Bᵀ over the first min(K, kmax) columns of K (rounded up to whole 64-column steps); a
# two-stage accumulator, `t.d = 0` for every tile. kmax = 0 runs no MMA at all.
TRUNCATED = """
kernel gemm_first(a: bf16[M, K], b: bf16[N, K], kmax: i32, c: bf16[M, N]) {
    grid persistent
    box A = a[128, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box T = c[128, 64]
    box C = c[128, 64] swizzle 128B
    smem cs[1]: C
    pipeline ring[2] { a: A, b: B }
    pipeline accs[2] { d: tmem f32[128, 64] }

    role load: warp 0 {
        for tile (m, n) in tiles(c, T) {
            for k in steps(min(K, kmax), 64) {
                produce ring as s {
                    load A[m, k] -> s.a
                    load B[n, k] -> s.b
                }
            }
        }
    }
    role mma: warp 1 {
        for tile (m, n) in tiles(c, T) {
            produce accs as t {
                t.d = 0
                for k in steps(min(K, kmax), 64) {
                    consume ring as s { mma t.d, s.a, s.b }
                }
            }
        }
    }
    role epilogue: warps 4..7 {
        for tile (m, n) in tiles(c, T) {
            consume accs as t { store T[m, n] <- bf16(t.d) through cs }
        }
    }
}
"""

RESET = "                t.d = 0\n"


def _compile(source: str):
    return tmalang.compile(source, arch="sm_100a")


def _gemm_case(m: int, n: int, k: int, seed: int):
    return bf16_gemm_operands(m, n, k, seed)


def _interp_error(kernel_ir, manifest, *args, **options) -> tmalang.TmalangError:
    with pytest.raises(tmalang.TmalangError) as caught:
        interpret(kernel_ir, manifest, *args, **options)
    return caught.value


# ---- correct programs run clean and match float64 --------------------------------------------

@pytest.mark.parametrize("m,n,k,kmax", [(130, 72, 100, 1000), (257, 136, 200, 64)])
def test_every_tile_reset_runs_clean_and_matches_float64(m, n, k, kmax):
    kernel = _compile(TRUNCATED)
    a, b, c = _gemm_case(m, n, k, seed=m + kmax)
    kernel.interpret(a, b, np.int32(kmax), c, ctas=2, seed=5, explore=2)
    used = min(k, -(-kmax // 64) * 64)
    assert gemm_relative_error(c, a[:, :used], b[:, :used]) < 1e-2


def test_one_tile_per_cta_needs_no_reset():
    """`grid tiles`: each CTA's one tile takes stage 0 with the flag clear, so its first MMA
    overwrites; the accumulator never reaches a stage nothing wrote. Accepted, and correct."""
    source = TRUNCATED.replace(RESET, "").replace("grid persistent", "grid tiles")
    kernel = _compile(source)
    a, b, c = _gemm_case(200, 136, 150, seed=3)
    kernel.interpret(a, b, np.int32(150), c)
    assert gemm_relative_error(c, a, b) < 1e-2


def test_attention_rescales_o_before_its_first_pv_and_runs_clean():
    """attention_sm100's correction reads O (t.o = t.o * f.x) before the tile's first P·V, which
    then overwrites it: the read only moves undefined values within Tensor Memory, which is no
    use of them. One CTA walks three tiles, so later tiles' turns run on a written O."""
    kernel = tmalang.compile_file(ROOT / "examples" / "attention_sm100.tma", arch="sm_100a")
    args, expected = attention_case(np.random.default_rng(7), (300, 100))
    kernel.interpret(*args, ctas=1, seed=2, explore=2)
    check("attention", args[-1], expected)


# ---- the interpreter: E422 ---------------------------------------------------------------------

def test_reading_a_stage_no_mma_wrote_is_reported():
    """kmax = 0: the MMA warp runs no step, so the epilogue's tcgen05.ld reads stage 0 of the
    accumulator, which nothing has written (on the GPU: whatever Tensor Memory held)."""
    kernel = _compile(TRUNCATED)
    a, b, c = _gemm_case(130, 72, 100, seed=1)
    error = _interp_error(kernel._c.ir, kernel.manifest, a, b, np.int32(0), c)
    assert error.code == "E422"
    assert "an epilogue (tcgen05.ld) reads 'accs.d[0]'" in error.message
    assert "store T[m, n] <- bf16(t.d) through cs" in error.render()


def _without_resets(kernel):
    ir = copy.deepcopy(kernel._c.ir)
    for region in _regions(ir.body):
        region[:] = [o for o in region if not isinstance(o, ops.TmemZero)]
    return ir


def test_second_tile_of_a_persistent_loop_adds_onto_an_unwritten_stage():
    """gemm_sm100 without its `t.d = 0` (taken out of the IR): the first tile overwrites stage 0;
    the CTA's second tile adds onto stage 1."""
    gemm = tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a")
    a, b, c = _gemm_case(300, 512, 64, seed=2)     # 3 x 2 tiles: three per CTA
    error = _interp_error(_without_resets(gemm), gemm.manifest, a, b, c, ctas=2)
    assert error.code == "E422"
    assert error.message.startswith("tcgen05.mma accumulates into 'accs.d[1]' (lanes 0..127, columns 256..511")
    assert "mma t.d, s.a, s.b" in error.render()


def test_one_tile_per_cta_without_resets_is_clean_on_the_interpreter():
    """The same IR with as many CTAs as tiles: each CTA's only tile overwrites stage 0."""
    gemm = tmalang.compile_file(ROOT / "examples" / "gemm_sm100.tma", arch="sm_100a")
    a, b, c = _gemm_case(300, 512, 64, seed=2)
    interpret(_without_resets(gemm), gemm.manifest, a, b, c, ctas=6)
    assert gemm_relative_error(c, a, b) < 1e-2


PARTIAL_COPY = ("                    t.d[0, 2] = q.r2\n                    t.d[0, 3] = q.r3\n")


def test_adding_onto_a_partial_copy_is_reported():
    """gemm_residual with R copied into two of its four 32-column blocks: the first MMA adds
    onto columns 64..127 that nothing wrote. Sema counts a copy as writing the tile (it does not
    track blocks), so this is the interpreter's to find."""
    source = (ROOT / "examples" / "gemm_residual_sm100.tma").read_text()
    assert PARTIAL_COPY in source
    kernel = _compile(source.replace(PARTIAL_COPY, ""))
    rng = np.random.default_rng(4)
    a, b, c = _gemm_case(130, 136, 72, seed=4)
    r = rng.standard_normal((130, 136)).astype(np.float32)
    error = _interp_error(kernel._c.ir, kernel.manifest, a, b, r, c)
    assert error.code == "E422" and "tcgen05.mma accumulates into 'accs.d[0]'" in error.message
    assert "lane 0, column 64 and" in error.message     # the first block no copy wrote


def _drop_pv(kernel):
    """attention_sm100 without the P·V MMA: O is never written by the tensor cores."""
    ir = copy.deepcopy(kernel._c.ir)
    for region in _regions(ir.body):
        region[:] = [o for o in region if not (isinstance(o, ops.Tcgen05Mma) and o.d.name.startswith("out"))]
    return ir


def test_undefined_values_moved_within_tensor_memory_are_reported_where_they_leave_it():
    """Without the P·V MMA, the correction's rescales (t.o = t.o * f.x) only carry O's missing
    value along; its last turn reads O into the staging tile, and that read is the report."""
    kernel = tmalang.compile_file(ROOT / "examples" / "attention_sm100.tma", arch="sm_100a")
    args, _ = attention_case(np.random.default_rng(8), (130, 70))
    error = _interp_error(_drop_pv(kernel), kernel.manifest, *args, ctas=1)
    assert error.code == "E422"
    assert error.message.startswith("row math (tcgen05.ld) reads 'out.o[0]'")
    assert "r.o = bf16(t.o * f.x)" in error.render()


def test_a_dealloc_forgets_what_was_written():
    """Cells written before a tcgen05.dealloc hold nothing after it (a new allocation starts
    over): the flags are per allocation, not per launch."""
    class Cta:
        tmem_written = tmem_init.fresh(128, 512)

    tmem_init.wrote(Cta, (slice(0, 128), slice(0, 512)))
    tmem_init.freed(Cta, 256)
    assert Cta.tmem_written[:, :256].all() and not Cta.tmem_written[:, 256:].any()
