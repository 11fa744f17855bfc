"""tmalang.gemm (tmalang/library): every kernel family of gemm_sm90.tma on the interpreter against
float64 at shapes that are not tile multiples, the rule that picks a configuration, the operand
handling (layouts, alignment copies, out, empty shapes, errors); on the H100 the same against
float64 and torch, decode shapes, tuning and its memory across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from conftest import ROOT
import tmalang
from tmalang.contract.errors import LaunchError
from tmalang.library import configs
from tmalang.library import gemm as library

BF16, F16, E4M3 = ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn
RNG = np.random.default_rng(15)


def _operands(m, n, k, dtype, layout):
    a = RNG.standard_normal((m, k)).astype(dtype)
    w = RNG.standard_normal((n, k)).astype(dtype)             # B = wᵀ
    b = w.T if layout == "nk" else np.ascontiguousarray(w.T)   # K-major view, or row-major [K, N]
    return a, b, a.astype(np.float64) @ w.astype(np.float64).T


def _config(kernel, bm, bn, dtype, out, split=1):
    size = np.dtype(dtype).itemsize
    out_size = 4 if split > 1 else np.dtype(out).itemsize
    return configs._config(kernel, bm, bn, size, out_size, split)


def _relative(c, reference):
    return np.abs(c.astype(np.float64) - reference).max() / np.abs(reference).max()


def _frobenius(c, reference) -> float:
    """A torch result's relative Frobenius error against a float64 reference."""
    return ((c.double() - reference).norm() / reference.norm()).item()


CASES = [   # kernel, tile, split, input, output, B layout, M x N x K
    ("gemm_cluster", (128, 256), 1, BF16, BF16, "nk", (77, 300, 200)),
    ("gemm_tile", (64, 64), 1, BF16, BF16, "nk", (5, 150, 136)),
    ("gemm_tile", (64, 128), 1, F16, F16, "nk", (70, 129, 72)),
    ("gemm_tile", (128, 128), 1, E4M3, BF16, "nk", (130, 100, 264)),
    ("gemm_tile_kn", (128, 256), 1, BF16, np.float32, "kn", (33, 260, 100)),
    ("gemm_tile_kn", (64, 64), 1, F16, F16, "kn", (9, 72, 200)),
    ("gemm_parts", (128, 128), 3, BF16, BF16, "nk", (40, 136, 400)),
    ("gemm_parts", (64, 64), 2, E4M3, np.float32, "nk", (3, 80, 512)),
    ("gemm_parts_kn", (128, 256), 2, F16, F16, "kn", (130, 264, 192)),
    ("gemm_tile", (16, 64), 1, BF16, BF16, "nk", (1, 150, 136)),        # short accumulators: decode
    ("gemm_tile", (16, 128), 1, BF16, BF16, "nk", (16, 136, 72)),
    ("gemm_tile_kn", (16, 128), 1, F16, F16, "kn", (13, 136, 200)),
    ("gemm_parts", (32, 64), 2, E4M3, np.float32, "nk", (17, 80, 512)),
    ("gemm_tile", (32, 256), 1, BF16, np.float32, "nk", (32, 264, 64)),
    ("gemm_tile", (80, 32), 1, BF16, BF16, "nk", (77, 100, 136)),       # ragged: the second warpgroup short
    ("gemm_parts", (112, 64), 2, F16, np.float32, "nk", (100, 72, 256)),
    ("gemm_tile", (128, 160), 1, BF16, BF16, "nk", (130, 200, 72)),     # widths that fit one wave
    ("gemm_row", (128, 64), 1, BF16, BF16, "nk", (130, 136, 100)),      # A shared by a cluster row:
    ("gemm_row", (128, 64), 1, F16, np.float32, "nk", (257, 250, 72)),  # 3 and 4 tile columns
]


@pytest.mark.parametrize("kernel, tile, split, dtype, out, layout, shape", CASES,
                         ids=[f"{c[0]}-{c[1][0]}x{c[1][1]}-S{c[2]}-{np.dtype(c[3]).name}" for c in CASES])
def test_each_kernel_family_matches_float64_on_the_interpreter(kernel, tile, split, dtype, out, layout, shape):
    m, n, k = shape
    a, b, reference = _operands(m, n, k, dtype, layout)
    config = _config(kernel, *tile, dtype, out, split)
    c = tmalang.gemm(a, b, alpha=0.75, out_dtype=np.dtype(out).name, config=config)
    assert c.shape == (m, n) and c.dtype == np.dtype(out)
    tolerance = 2e-2 if np.dtype(out).itemsize == 2 or np.dtype(dtype).itemsize == 1 else 1e-5
    assert _relative(c, 0.75 * reference) < tolerance


def test_split_k_sums_its_parts_in_a_fixed_order():
    """The workspace's slabs are summed 0, 1, 2, .. whatever order the parts ran in: bit-exact."""
    a, b, _ = _operands(20, 72, 384, BF16, "nk")
    config = _config("gemm_parts", 64, 64, BF16, np.float32, split=3)
    ops = library.prepare(a, b, None, "f32", 1.0)
    main = library.kernel(config.kernel, config.constants, "bf16", "f32")
    runs = [main.interpret(3, ops.a, ops.b, ops.workspace(3), ops.c, seed=seed)[0] for seed in (1, 2)]
    assert np.array_equal(runs[0], runs[1])
    c = tmalang.gemm(a, b, out_dtype="float32", config=config)
    w = runs[0]
    assert np.array_equal(c, (w[0] + w[1]) + w[2])


@pytest.mark.parametrize("shape, kernel, tile, split", [
    ((1, 8192, 8192), "gemm_tile", (16, 64), 1),         # decode: short tiles, the most CTAs in one wave
    ((1, 4096, 4096), "gemm_tile", (16, 64), 1),
    ((2, 5120, 5120), "gemm_tile", (16, 64), 1),
    ((16, 14336, 4096), "gemm_tile", (16, 128), 1),      # 224 64-wide tiles would take 1.7 waves
    ((4, 11008, 4096), "gemm_tile", (16, 128), 1),
    ((1, 32000, 4096), "gemm_tile", (16, 256), 1),       # 125 256-wide tiles
    ((8, 4096, 14336), "gemm_parts", (16, 64), 2),       # half the GPU over a long K: split in two
    ((32, 4096, 4096), "gemm_tile", (32, 64), 1),        # 17..32 rows: 32-row tiles
    ((77, 512, 65536), "gemm_parts", (80, 64), 8),       # 16 ragged tiles over a long K: split in 8
    ((1, 128, 131072), "gemm_parts", (16, 64), 8),
    ((77, 4096, 4096), "gemm_tile", (80, 32), 1),        # one ragged tile of M, 128 CTAs
    ((3072, 768, 768), "gemm_tile", (128, 160), 1),      # 120 tiles: one wave, where 128 x 128 takes 1.09
    ((4096, 4096, 128), "gemm_tile", (128, 256), 1),     # two K slices: no cluster, whatever the waves
    ((4096, 4096, 512), "gemm_cluster", (128, 256), 1),
    ((64, 8192, 8192), "gemm_tile", (64, 64), 1),
    ((128, 8192, 8192), "gemm_tile", (64, 128), 1),
    ((256, 8192, 8192), "gemm_tile", (128, 128), 1),
    ((1024, 1024, 65536), "gemm_parts", (128, 256), 4),  # few tiles, long K: the widest tile, split
    ((512, 1024, 65536), "gemm_parts", (128, 256), 8),
    ((2048, 1024, 16384), "gemm_tile", (128, 128), 1),   # an unsplit tile that fills comes first
    ((8192, 8192, 8192), "gemm_cluster", (128, 256), 1),
    ((512, 512, 512), "gemm_tile", (64, 64), 1),         # latency-bound: the most CTAs in one wave
    ((1000, 1000, 1000), "gemm_row", (128, 64), 1),      # rows off 32-byte sectors: A shared in pairs
    ((1100, 600, 4104), "gemm_row", (128, 64), 1),       # (before a split)
    ((1000, 936, 1000), "gemm_tile", (128, 128), 1),     # 15 tile columns: no pairs, 128-row tiles
    ((1000, 1000, 1024), "gemm_tile", (64, 128), 1),
    ((1000, 1000, 1008), "gemm_tile", (64, 128), 1),     # 2016-byte rows: on sectors, off 128-byte lines
    ((777, 1531, 1000), "gemm_tile", (128, 128), 1),     # 64-row tiles would take 1.2 waves
    ((4097, 2049, 1032), "gemm_tile", (128, 128), 1),    # 128 x 256: 2.25 waves; 128 x 128: 4.25
    ((1568, 2048, 512), "gemm_tile", (128, 256), 1),     # a short K loop: no cluster
    ((25088, 128, 512), "gemm_tile", (128, 128), 1),     # N = 128: no 256-wide tile
    ((1568, 512, 2048), "gemm_tile", (64, 128), 1),      # 32 K slices: a narrow tile before a split
    ((1568, 512, 4608), "gemm_tile", (128, 64), 1),      # 104 128 x 64 tiles fill one wave: no split
    ((3136, 256, 2304), "gemm_tile", (128, 64), 1),
    ((1280, 640, 5120), "gemm_tile", (128, 64), 1),
    ((1536, 512, 16384), "gemm_parts", (64, 128), 8),    # past 128 K slices a split still
    ((25088, 256, 512), "gemm_tile", (128, 128), 1),     # 128 x 64 tiles: more than a wave
    ((25088, 512, 128), "gemm_tile", (128, 256), 1),     # 392 tiles: 2.97 waves, the last all but full
    ((6272, 256, 1024), "gemm_tile", (128, 128), 1),     # (not for 64-row tiles: 128 x 128, not 64 x 64)
])
def test_the_rule_picks_by_how_the_ctas_fill_the_gpu(shape, kernel, tile, split):
    sectors = shape[2] * 2 % 32 == 0       # K = 1000 bf16 rows are 2000 bytes apart
    pick = configs.ranked(*shape, 2, 2, n_major=False, sms=132, sectors=sectors)[0]
    assert (pick.kernel, (pick.bindings()["BM"], pick.bindings()["BN"]), pick.split) == (kernel, tile, split)


def test_fp8_decode_shapes_take_short_tiles_as_bf16_does():
    """fp8 K slices are 128 elements: 14336 is 112 of them, short of a split's long K."""
    def pick(*shape):
        c = configs.ranked(*shape, 1, 2, n_major=False, sms=132)[0]
        return c.kernel, (c.bindings()["BM"], c.bindings()["BN"]), c.split
    assert pick(1, 8192, 8192) == ("gemm_tile", (16, 64), 1)
    assert pick(2, 5120, 5120) == ("gemm_tile", (16, 64), 1)
    assert pick(16, 14336, 4096) == ("gemm_tile", (16, 128), 1)
    assert pick(8, 4096, 14336) == ("gemm_tile", (16, 64), 1)


def test_n_major_b_picks_the_kn_kernels_and_fp8_a_k_major_copy():
    a, b, _ = _operands(8, 64, 64, BF16, "kn")
    assert tmalang.gemm_config(a, b).config.kernel.endswith("_kn")
    a8, b8, reference = _operands(8, 64, 128, E4M3, "kn")
    assert not tmalang.gemm_config(a8, b8).config.kernel.endswith("_kn")
    assert _relative(tmalang.gemm(a8, b8), reference) < 2e-2


def test_every_candidate_fits_shared_memory():
    """Each binding the library can choose compiles (smem, registers, swizzle rules) for each dtype."""
    for size, dtype in ((2, "bf16"), (1, "f8e4m3")):
        for out, out_size in (("bf16", 2), ("f32", 4)):
            for layout in (False, True) if size == 2 else (False,):
                for m in (64, 32, 16, 77):   # 32, 16 and 77: short and ragged tiles too
                    for config in configs.candidates(m, 8192, 8192, size, out_size, n_major=layout):
                        library.kernel(config.kernel, config.constants, dtype, out)


def test_unaligned_operands_are_copied_and_left_untouched():
    """K = 100 bf16 rows are 200 bytes: TMA cannot read them in place; out is written, a and b not."""
    a, b, reference = _operands(30, 44, 100, BF16, "nk")
    a_before, b_before = a.copy(), b.copy()
    out = np.zeros((30, 44), np.float32)
    result = tmalang.gemm(a, b, out)
    assert result is out and _relative(out, reference) < 1e-5
    assert np.array_equal(a, a_before) and np.array_equal(b, b_before)


def test_empty_shapes():
    a, b, _ = _operands(7, 9, 0, BF16, "nk")
    assert np.array_equal(tmalang.gemm(a, b), np.zeros((7, 9), BF16))
    a, b, _ = _operands(0, 9, 16, BF16, "nk")
    assert tmalang.gemm(a, b).shape == (0, 9)


@pytest.mark.parametrize("call, message", [
    (lambda a, b: tmalang.gemm(a, b.T), "a's columns must match b's rows"),
    (lambda a, b: tmalang.gemm(a, b.astype(np.float16)), "share one dtype"),
    (lambda a, b: tmalang.gemm(a.astype(np.float32), b.astype(np.float32)), "share one dtype"),
    (lambda a, b: tmalang.gemm(a, b, out_dtype="int8"), "output dtype"),
    (lambda a, b: tmalang.gemm(a, b, np.zeros((3, 3), BF16)), "out must be"),
    (lambda a, b: tmalang.gemm(a[None], b), "must be 2-D"),
    (lambda a, b: tmalang.gemm(a, b, tune=True), "torch CUDA tensors"),
])
def test_bad_calls_say_what_is_wrong(call, message):
    a, b, _ = _operands(8, 16, 32, BF16, "nk")
    with pytest.raises(LaunchError, match=message):
        call(a, b)


# -- H100 ------------------------------------------------------------------------------------

def test_cpu_torch_tensors_with_a_stream_get_the_diagnostic():
    """The stream is entered only for CUDA tensors: CPU ones reach prepare's E212, not a torch error."""
    torch = pytest.importorskip("torch")
    a, b = torch.ones(4, 8, dtype=torch.bfloat16), torch.ones(8, 4, dtype=torch.bfloat16)
    for stream in (None, 5):
        with pytest.raises(LaunchError, match="CUDA torch tensors"):
            tmalang.gemm(a, b, stream=stream)


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def _torch_operands(torch, m, n, k, dtype, layout):
    w = torch.randn(n, k, device="cuda").to(dtype)
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = w.t() if layout == "nk" else w.t().contiguous()
    return a, b, a.double() @ w.double().t()


GPU_SHAPES = [(1, 8192, 4096), (77, 1531, 1000), (300, 700, 2050), (1000, 1000, 16384), (2049, 3000, 520),
              (7, 1000, 2056), (29, 1536, 520), (3, 4104, 14336)]     # decode: short tiles, one split


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype, layout", [("bfloat16", "nk"), ("float16", "kn"), ("float8_e4m3fn", "nk")])
def test_gemm_matches_float64_on_the_h100(torch, shape, dtype, layout):
    m, n, k = shape
    a, b, reference = _torch_operands(torch, m, n, k, getattr(torch, dtype), layout)
    c = tmalang.gemm(a, b)
    assert c.shape == (m, n) and c.is_contiguous()
    assert _frobenius(c, reference) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("config", [c for c in configs.candidates(100, 600, 1200, 2, 2, n_major=False)],
                         ids=lambda c: c.describe())
def test_every_candidate_runs_on_the_h100(torch, config):
    a, b, reference = _torch_operands(torch, 100, 600, 1200, torch.bfloat16, "nk")
    c = tmalang.gemm(a, b, config=config)
    assert _frobenius(c, reference) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1000, 1000), (1100, 600, 4104), (257, 250, 72), (130, 136, 100)])
def test_gemm_row_runs_on_the_h100(torch, shape):
    """The rule's pick where rows of A are off sectors (a pair of CTAs shares each A tile), and
    the kernel bound by hand where a cluster's second tile column is past N (3 columns)."""
    m, n, k = shape
    a, b, reference = _torch_operands(torch, m, n, k, torch.bfloat16, "nk")
    row = _config("gemm_row", 128, 64, BF16, BF16)
    c = tmalang.gemm(a, b, config=row if m < 1000 else None)
    assert _frobenius(c, reference) < 1e-2
    if m >= 1000:
        assert tmalang.gemm_config(a, b).config.kernel == "gemm_row"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [65, 77, 80, 93])
@pytest.mark.parametrize("config", [c for c in configs.candidates(77, 600, 1200, 2, 2, n_major=False)
                                    if c.bindings()["BM"] % 64], ids=lambda c: c.describe())
def test_every_ragged_tile_runs_on_the_h100(torch, config, m):
    """An 80-row tile: its second warpgroup holds 16 rows; M = 93 takes two tiles of M."""
    a, b, reference = _torch_operands(torch, m, 600, 1200, torch.bfloat16, "nk")
    c = tmalang.gemm(a, b, config=config)
    assert _frobenius(c, reference) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5, 16, 21, 32])
@pytest.mark.parametrize("config", [c for c in configs.candidates(16, 600, 1200, 2, 2, n_major=False)
                                    if c.bindings()["BM"] < 64], ids=lambda c: c.describe())
def test_every_short_tile_runs_on_the_h100(torch, config, m):
    """A short tile over M rows: up to its own (the epilogue writes M rows, TMA loads M rows of A),
    and past them (M = 21, 32 > 16: two tiles of M), the rows of wgmma's 64 that are no
    program's never reach C."""
    a, b, reference = _torch_operands(torch, m, 600, 1200, torch.bfloat16, "nk")
    c = tmalang.gemm(a, b, config=config)
    assert _frobenius(c, reference) < 1e-2


@pytest.mark.gpu
def test_tuning_is_remembered_across_processes(torch, tmp_path):
    env = {**os.environ, "TMALANG_CACHE_DIR": str(tmp_path)}
    script = ("import torch, tmalang, time\n"
              "a = torch.randn(64, 4096, device='cuda', dtype=torch.bfloat16)\n"
              "w = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
              "t = time.perf_counter(); c = tmalang.gemm(a, w.t(), tune=True); torch.cuda.synchronize()\n"
              "print(time.perf_counter() - t)\n"
              "assert ((c.double() - a.double() @ w.double().t()).norm() / (a.double() @ w.double().t()).norm()) < 1e-2\n")
    first = float(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                 check=True).stdout)
    choices = json.loads((tmp_path / "gemm" / "choices.json").read_text())
    assert len(choices) == 1
    second = float(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                  check=True).stdout)
    assert first < 10 and second < first


@pytest.mark.gpu
def test_a_repeated_call_takes_the_fast_path_and_sees_new_data(torch):
    a, b, _ = _torch_operands(torch, 100, 256, 320, torch.bfloat16, "nk")
    c = torch.empty(100, 256, device="cuda", dtype=torch.bfloat16)
    library._repeats.clear()
    tmalang.gemm(a, b, c)
    assert len(library._repeats) == 1
    a.copy_(torch.randn_like(a, dtype=torch.float32).to(torch.bfloat16))
    tmalang.gemm(a, b, c, alpha=2.0)
    reference = 2 * (a.double() @ b.double())
    assert _frobenius(c, reference) < 1e-2
    assert len(library._repeats) == 1


@pytest.mark.gpu
def test_a_call_without_out_repeats_exactly_and_sees_new_data(torch):
    """No `out`: C is allocated as prepare would (aligned rows), so the call repeats like one with
    `out` when torch's allocator hands the same block back; every result is checked."""
    a, b, _ = _torch_operands(torch, 77, 264, 320, torch.bfloat16, "kn")
    library._repeats.clear()
    for round in range(3):
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(torch.bfloat16))
        c = tmalang.gemm(a, b)
        reference = a.double() @ b.double()
        assert c.shape == (77, 264) and c.dtype == torch.bfloat16 and c.is_contiguous()
        assert _frobenius(c, reference) < 1e-2
        del c
    assert len(library._repeats) == 1
    kept = []
    for alpha in (1.0, 1.0, -0.5, -0.5, 2):     # results kept: new addresses; alpha's bits in the key
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(torch.bfloat16))
        kept.append((alpha, a.double() @ b.double(), tmalang.gemm(a, b, alpha=alpha)))
    for alpha, reference, c in kept:
        assert _frobenius(c, alpha * reference) < 1e-2
    assert len({c.data_ptr() for _, _, c in kept}) == len(kept)
    for out in (None, kept[0][2]):             # an unhashable out_dtype: a diagnostic, not a TypeError
        with pytest.raises(LaunchError):
            tmalang.gemm(a, b, out=out, out_dtype=[1])
    odd = tmalang.gemm(a, b[:, :261])          # 261 bf16 columns: rows TMA cannot write, padded by prepare
    assert odd.shape == (77, 261) and odd.is_contiguous()
    assert ((odd.double() - a.double() @ b[:, :261].double()).norm() / odd.double().norm()).item() < 1e-2


@pytest.mark.gpu
def test_a_repeat_on_another_stream_is_another_launch(torch):
    a, b, _ = _torch_operands(torch, 100, 256, 320, torch.bfloat16, "nk")
    c = torch.empty(100, 256, device="cuda", dtype=torch.bfloat16)
    library._repeats.clear()
    tmalang.gemm(a, b, c)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tmalang.gemm(a, b, c, alpha=-1.0)
    torch.cuda.synchronize()
    assert len(library._repeats) == 2
    reference = -(a.double() @ b.double())
    assert _frobenius(c, reference) < 1e-2


@pytest.mark.gpu
def test_an_out_tma_cannot_write_repeats_through_a_staged_c_and_sees_new_data(torch):
    """`out` of 1531 bf16 columns (rows of 3062 bytes): the kernel writes an aligned C that is
    copied into `out`; a repeat of the call runs the plan again, checking and choosing nothing,
    and with alpha repeated too (-0.5 twice), the launch that wrote the allocator's C as it was."""
    a, b, _ = _torch_operands(torch, 77, 1531, 136, torch.bfloat16, "nk")
    out = torch.empty(77, 1531, device="cuda", dtype=torch.bfloat16)
    library._repeats.clear()
    for alpha in (1.0, -0.5, -0.5, 2.0):
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(torch.bfloat16))
        out.fill_(float("nan"))
        assert tmalang.gemm(a, b, out, alpha=alpha) is out
        assert _frobenius(out, alpha * (a.double() @ b.double())) < 1e-2
    assert [type(r).__name__ for r in library._repeats.values()] == ["StagedRepeat"]
    assert next(iter(library._repeats.values())).launches    # the staged C's launch, repeated as is


@pytest.mark.gpu
@pytest.mark.parametrize("aligned_a", [True, False], ids=["staged-out", "staged-out-and-a"])
def test_copies_of_a_call_on_a_given_stream_wait_for_its_kernel(torch, aligned_a):
    """The stream passed is busy (a long sleep) when the call is made: the copy of the staged C
    into `out`, and of an unaligned A into an aligned one, must queue behind it on that stream,
    not run at once on the current one; the first call and its repeat (a StagedRepeat where A is
    read as it is, the whole call again where it is copied) alike."""
    k = 136 if aligned_a else 137             # rows of 272 bytes, or 274: A and B copied into aligned ones
    a, b, _ = _torch_operands(torch, 77, 1531, k, torch.bfloat16, "nk")
    out = torch.empty(77, 1531, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    library._repeats.clear()
    for _ in range(2):
        out.fill_(float("nan"))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)     # ~10 ms of GPU time before the kernel can start
        tmalang.gemm(a, b, out, stream=side)
        torch.cuda.synchronize()
        assert _frobenius(out, a.double() @ b.double()) < 1e-2
    assert [type(r).__name__ for r in library._repeats.values()] == (["StagedRepeat"] if aligned_a else [])


@pytest.mark.gpu
def test_launch_repeatable_launches_again_with_new_data(torch):
    saxpy = tmalang.compile_file(ROOT / "examples" / "saxpy.tma")
    x, y = torch.randn(130, 72, device="cuda"), torch.randn(130, 72, device="cuda")
    x, y = x[:, :68], y[:, :68]        # 68 columns in rows of 288 bytes: not the box's width
    out = torch.empty(130, 68, device="cuda")
    again = saxpy.launch_repeatable(2.0, x, y, out)
    torch.testing.assert_close(out, 2 * x + y)
    x.copy_(torch.randn_like(x))
    out.zero_()
    again()
    torch.testing.assert_close(out, 2 * x + y)
    assert saxpy.launch_repeatable(2.0, x.cpu().numpy(), y.cpu().numpy(), out.cpu().numpy()) is None


@pytest.mark.gpu
@pytest.mark.parametrize("side_stream", [False, True], ids=["current-stream", "side-stream"])
def test_a_repeated_split_call_takes_the_fast_path_and_sees_new_data(torch, side_stream):
    a, b, _ = _torch_operands(torch, 130, 264, 4104, torch.bfloat16, "nk")   # K: 64 x 64 + 8
    c = torch.empty(130, 264, device="cuda", dtype=torch.bfloat16)
    config = _config("gemm_parts", 128, 128, BF16, BF16, split=4)
    stream = torch.cuda.Stream() if side_stream else None
    library._repeats.clear()
    tmalang.gemm(a, b, c, config=config, stream=stream)
    assert [entry.split for entry in library._repeats.values()] == [4]
    for alpha in (0.5, -3.0, 0.5, 0.5):      # repeats of an alpha: both launches repeated as they are
        a.copy_(torch.randn_like(a, dtype=torch.float32).to(torch.bfloat16))
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        tmalang.gemm(a, b, c, alpha=alpha, config=config, stream=stream)
        torch.cuda.synchronize()
        reference = alpha * (a.double() @ b.double())
        assert _frobenius(c, reference) < 1e-2
    assert len(library._repeats) == 1
    assert next(iter(library._repeats.values())).parts     # (alpha, workspace address) -> the launches


def test_tuning_keeps_the_rules_pick_unless_another_is_clearly_faster():
    ranking = configs.ranked(512, 512, 512, 2, 2, n_major=False, sms=132)
    pick, other = ranking[0], ranking[1]
    assert library._fastest({pick: 10.0, other: 9.8}, pick) == pick      # within noise
    assert library._fastest({pick: 10.0, other: 9.0}, pick) == other     # 10% faster
