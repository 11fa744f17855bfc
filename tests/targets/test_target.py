"""Arch facts come from the Target object alone.

A made-up target (an sm_120-like part: ~99 KB of shared memory per CTA, no wgmma, no tcgen05)
is built here and handed to the compiler; nothing registers it. Every difference in what the
compiler accepts or emits must then follow from that object: its name and PTX version reach the
PTX, its shared memory bounds the plan, its missing instruction families become diagnostics at
the user's line and skip the passes that would rewrite them. Variants of the real targets with
one fact changed show the same from the other side: a changed fact changes the outcome although
the name is the same.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import tmalang

from conftest import ROOT
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.passes import PIPELINE, PassLog
from tmalang.targets.arch import SM_90A, SM_100A, TARGETS, Target, target_named

SM_120_LIKE = Target("sm_120a", (12, 0), (8, 7), 99 * 1024, (1, 2, 4, 8),
                     has_wgmma=False, has_tcgen05=False, tensor_memory=None)


def example(name: str) -> str:
    return (ROOT / "examples" / f"{name}.tma").read_text()


def compile_for(target, text: str, until: str = "ptx", log: PassLog | None = None):
    return compile_source(text, "kernel.tma", Options(arch=target, log=log or PassLog()), until=until)


def refusal(target, text: str) -> TmalangError:
    with pytest.raises(TmalangError) as caught:
        compile_for(target, text)
    return caught.value


def test_the_fake_target_is_not_registered():
    assert "sm_120a" not in TARGETS
    assert target_named(SM_120_LIKE) is SM_120_LIKE


def test_name_and_ptx_version_reach_the_ptx():
    ptx = compile_for(SM_120_LIKE, example("tma_copy").replace("ring[4]", "ring[2]")).ptx
    assert ".target sm_120a" in ptx and ".version 8.7" in ptx
    assert "cp.async.bulk.tensor" in ptx


def test_shared_memory_per_cta_bounds_the_plan():
    four_stages = example("tma_copy")           # 4 x 32 KB of f32 tiles: fits 227 KB, not 99 KB
    compile_for(SM_90A, four_stages, until="ir")
    err = refusal(SM_120_LIKE, four_stages)
    assert err.code == "E032" and f"a CTA may use {99 * 1024}" in err.message
    smaller = replace(SM_90A, smem_per_cta=64 * 1024)   # same name, one fact changed
    assert refusal(smaller, four_stages).code == "E032"


def test_no_wgmma_refuses_register_mma_at_its_line():
    text = example("gemm_sm90")
    err = refusal(SM_120_LIKE, text)
    assert err.code == "E091" and "not sm_120a" in err.message
    line = text.splitlines()[err.span.line - 1]
    assert line[err.span.col - 1:].startswith("mma acc"), line
    assert refusal(replace(SM_90A, has_wgmma=False), text).code == "E091"


def test_no_tensor_memory_refuses_tmem_at_its_declaration():
    text = example("gemm_sm100")
    err = refusal(SM_120_LIKE, text)
    assert err.code == "E097" and "not sm_120a" in err.message
    assert text.splitlines()[err.span.line - 1].lstrip().startswith(("tmem ", "pipeline "))


def test_tensor_memory_geometry_bounds_the_columns():
    text = example("gemm_sm100")
    compile_for(SM_100A, text, until="ir")
    narrow = replace(SM_100A, tensor_memory=replace(SM_100A.tensor_memory, columns=256))
    err = refusal(narrow, text)
    assert err.code == "E096" and "a CTA has 256" in err.message


def test_cluster_sizes_come_from_the_target():
    text = example("gemm_sm90")                  # cluster 2
    err = refusal(replace(SM_90A, cluster_sizes=(1,)), text)
    assert err.code == "E058" and "one of 1," in err.message


@pytest.mark.parametrize("target", [SM_90A, SM_100A, SM_120_LIKE], ids=lambda t: t.name)
def test_passes_run_only_where_their_instructions_exist(target):
    log = PassLog()
    compile_for(target, example("tma_copy").replace("ring[4]", "ring[2]"), until="ir", log=log)
    ran = {name for name, _ in log.timings}
    assert ("order_wgmma" in ran) == target.has_wgmma
    assert ("defer_mma_release" in ran) == target.has_wgmma
    assert {"fence_tensor_memory", "pair_ctas", "plan_tmem"} <= ran if target.has_tcgen05 else \
        not {"fence_tensor_memory", "pair_ctas", "plan_tmem"} & ran
    assert {p.name for p in PIPELINE if p.needs is None} <= ran


def test_an_unknown_arch_name_is_a_diagnostic():
    with pytest.raises(TmalangError) as caught:
        compile_for("sm_120a", example("tma_copy"))
    assert caught.value.code == "E006" and "supported: sm_90a, sm_100a" in caught.value.notes[0]


# --- the shared tables: one spelling per tool, each one the tool actually defines ---


def test_every_tensor_map_spelling_is_a_driver_enum():
    cu = pytest.importorskip("cuda.bindings.driver")
    from tmalang.targets import tma
    from tmalang.targets.dtypes import DTYPES

    enums = [(cu.CUtensorMapDataType, tma.DATA_TYPE_PREFIX + d.tma) for d in DTYPES.values()]
    enums += [(cu.CUtensorMapSwizzle, s.tensor_map) for s in tma.SWIZZLES.values()]
    enums += [(cu.CUtensorMapL2promotion, name) for name in tma.L2_PROMOTIONS.values()]
    enums += [(cu.CUtensorMapFloatOOBfill, name) for name in tma.OOB_FILLS.values()]
    missing = [name for enum, name in enums if not hasattr(enum, name)]
    assert not missing, missing


def test_a_header_with_every_box_option_compiles(tmp_path):
    """The launch header spells swizzle, L2 promotion and oob fill from the same tables as the
    Python runtime (it once wrote CU_TENSOR_MAP_L2_PROMOTION_64B, which cuda.h does not define)."""
    import shutil
    import subprocess
    from pathlib import Path

    from tmalang.cli.main import main

    cuda_h = Path("/usr/local/cuda/include/cuda.h")
    if shutil.which("g++") is None or not cuda_h.exists():
        pytest.skip("needs g++ and the CUDA driver header to compile the C++ launch header")
    source = tmp_path / "opts.tma"
    source.write_text(example("tma_copy")
                      .replace("box In  = src[64, 128]", "box In  = src[64, 32] swizzle 128B l2 64B oob nan")
                      .replace("box Out = dst[64, 128]", "box Out = dst[64, 32] swizzle 128B l2 256B"))
    header = tmp_path / "opts.h"
    assert main([str(source), "--emit", "header", "-o", str(header)]) == 0
    text = header.read_text()
    assert "CU_TENSOR_MAP_L2_PROMOTION_L2_64B" in text and "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA" in text
    unit = tmp_path / "use.cpp"
    unit.write_text('#include "opts.h"\n')
    run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                          f"-I{tmalang.get_include()}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# --- the runtime reads the target too ---


@pytest.mark.gpu
def test_a_kernel_for_another_target_is_refused_before_the_driver_loads_it():
    """An sm_100a cubin on this GPU (or an sm_90a one on a Blackwell): E217 names both sides."""
    import numpy as np

    import tmalang
    from tmalang.runtime import driver

    driver.init()
    here = driver.compute_capability(0)
    other = next(t for t in TARGETS.values() if t.compute_capability != here)
    kernel = tmalang.compile(example("tma_copy").replace("ring[4]", "ring[2]"), arch=other.name)
    src = np.random.default_rng(0).standard_normal((70, 132)).astype(np.float32)
    dst = np.zeros_like(src)
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel(src, dst)
    assert caught.value.code == "E217"
    assert other.name in caught.value.message and f"{here[0]}.{here[1]}" in caught.value.message
    assert not dst.any()


# --- a kernel written from the docs alone, for every target it fits ---

SCALED_MAX = """
// out = a * max(x, y), elementwise, through swizzled boxes with L2 promotion; tails read NaN
// (oob nan) and stores clip them, so odd shapes are exact.
kernel scaled_max(a: f32, x: f32[M, N], y: f32[M, N], out: f32[M, N]) {
    grid persistent
    box X = x[16, 32] swizzle 128B l2 64B oob nan
    box Y = y[16, 32] swizzle 128B l2 256B oob nan
    box O = out[16, 32] swizzle 128B
    pipeline ring[3] { xs: X, ys: Y }

    role loader: warp 0 {
        for tile (m, n) in tiles(out, O) {
            produce ring as s {
                load X[m, n] -> s.xs
                load Y[m, n] -> s.ys
            }
        }
    }
    role math: warps 1..2 {
        for tile (m, n) in tiles(out, O) {
            consume ring as s {
                s.ys = a * max(s.xs, s.ys)
                store O[m, n] <- s.ys
            }
        }
    }
}
"""


def _scaled_max_inputs(m: int, n: int):
    import numpy as np

    rng = np.random.default_rng(m * 1000 + n)
    x, y = (rng.standard_normal((m, n)).astype(np.float32) for _ in range(2))
    expected = (np.float64(-1.75) * np.maximum(x.astype(np.float64), y)).astype(np.float32)
    return x, y, expected


@pytest.mark.parametrize("arch", sorted(TARGETS))
@pytest.mark.parametrize("m,n", [(203, 100), (17, 36)])
def test_docs_kernel_on_the_interpreter_for_every_target(arch, m, n):
    import numpy as np

    import tmalang

    kernel = tmalang.compile(SCALED_MAX, arch=arch)
    assert f".target {arch}" in kernel.ptx and "cp.async.bulk.tensor" in kernel.ptx
    x, y, expected = _scaled_max_inputs(m, n)
    out = np.full_like(x, 7.0)
    (got,) = kernel.interpret(np.float32(-1.75), x, y, out, seed=3)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(203, 100), (17, 36), (1000, 1004)])
def test_docs_kernel_on_the_gpu_matches_numpy_and_the_interpreter(m, n):
    import numpy as np

    import tmalang
    from tmalang.runtime import driver

    driver.init()
    arch = next(t.name for t in TARGETS.values() if t.compute_capability == driver.compute_capability(0))
    kernel = tmalang.compile(SCALED_MAX, arch=arch)
    x, y, expected = _scaled_max_inputs(m, n)
    out = np.full_like(x, 7.0)
    kernel(np.float32(-1.75), x, y, out)
    np.testing.assert_array_equal(out, expected)
    (interpreted,) = kernel.interpret(np.float32(-1.75), x, y, np.full_like(x, 7.0))
    np.testing.assert_array_equal(interpreted, out)
