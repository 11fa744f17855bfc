"""Kernel assumptions (`assume C % 64 == 0`, docs/language.md §2b): quoted as written, carried by
the IR and the manifest, checked at every launch (E219) by the interpreter, the GPU runtime and
the C++ launch header alike, before anything is staged or launched; and the one assumption the
compiler can see a kernel needs, an im2col box's K slices (E035). The compile-time diagnostics
(E012, E033, E034, E035, E077, E082) are cases of tests/diagnostics/assumptions.tma.

The numbers: examples/conv2d_sm90.tma where its assumptions hold, against a float64 NumPy
convolution of random bf16 inputs at odd N, H and W."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import conv2d_inputs, flash_attention_case
from tmalang.backend.launch_header import field_name, render
from tmalang.cli.main import main as tmalangc
from tmalang.contract.binding import bind
from tmalang.contract.errors import LaunchError
from tmalang.contract.manifest import Manifest, TensorArg
from tmalang.diagnostics import TmalangError
from tmalang.syntax.parser import parse
from tmalang.targets.dtypes import DTYPES

EXAMPLE = ROOT / "examples" / "conv2d_sm90.tma"
RTOL = 1e-2   # relative Frobenius error of a bf16 result with f32 accumulation (tests/e2e/test_conv2d.py)


@functools.cache
def _conv(kernel: str = "conv2d") -> tmalang.Kernel:
    return tmalang.compile_file(EXAMPLE, kernel=kernel)


def _line_of(text: str, kernel: str) -> int:
    """The line of `assume <text>` in the example's kernel `kernel`."""
    lines = EXAMPLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"kernel {kernel}("))
    return next(i for i, line in enumerate(lines) if i > start and line.strip() == f"assume {text}") + 1


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def _refused(launch, args, **options) -> LaunchError:
    """The E219 `launch` raises for `args`, which it leaves as they were, bit for bit (NaNs too)."""
    before = [_bits(a) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(LaunchError) as caught:
        launch(*args, **options)
    assert caught.value.code == "E219", caught.value
    assert [_bits(a) if isinstance(a, np.ndarray) else a for a in args] == before
    return caught.value


# ---- the text as written ----------------------------------------------------------------------


def test_an_assumption_is_quoted_as_written():
    """Parentheses lark leaves out of a rule's span, constants before their values, comments and
    line breaks dropped."""
    source = """kernel k<B = 64>(x: f32[M, C], n: i32) {
    assume (C + 1) % B == (0)
    assume M   // the rows
       >= 2 * ((n))
    assume ((C)) != M
}
"""
    items = parse(source).kernels[0].items
    assert [a.text for a in items] == ["(C + 1) % B == (0)", "M >= 2 * ((n))", "((C)) != M"]
    spans = [(a.span.line, a.span.col, a.span.end_line, a.span.end_col) for a in items]
    assert spans == [(2, 5, 2, 30), (3, 5, 4, 20), (5, 5, 5, 22)]


# ---- the interpreter -----------------------------------------------------------------------------


@pytest.mark.parametrize("kernel,stride", [("conv2d", 1), ("conv2d_s2", 2)])
def test_conv2d_at_48_channels_is_refused_before_it_runs(kernel, stride):
    """C = 48: the weight slices would straddle filter taps and the result would be wrong (max
    error ~100); the launch is refused instead, and the NaN-filled output is left alone."""
    args, _ = conv2d_inputs(np.random.default_rng(3), 1, 5, 7, 48, 64, stride)
    error = _refused(_conv(kernel).interpret, args)
    assert error.message == f"kernel '{kernel}' assumes C % 64 == 0, but C = 48"
    assert error.notes == ["C % 64 = 48"]
    line = _line_of("C % 64 == 0", kernel)
    assert error.span.location() == f"{EXAMPLE}:{line}:5"
    assert error.render().splitlines()[1:3] == ["        assume C % 64 == 0", "        " + "^" * 18]


def test_weights_and_outputs_of_the_wrong_size_are_refused():
    """w must be the [K, 9·C] view of the KRSC weights and o hold N·H·W rows; each is named."""
    args, _ = conv2d_inputs(np.random.default_rng(5), 1, 5, 7, 64, 64, 1)
    x, w, o = args
    error = _refused(_conv().interpret, [x, np.ascontiguousarray(w[:, :512]), o])
    assert error.message == "kernel 'conv2d' assumes RSC == 9 * C, but RSC = 512, C = 64"
    assert error.notes == ["9 * C = 576"]
    error = _refused(_conv().interpret, [x, w, np.concatenate([o, o[:1]])])
    assert error.message == "kernel 'conv2d' assumes NPQ == N * H * W, but NPQ = 36, N = 1, H = 5, W = 7"
    assert error.notes == ["N * H * W = 35"]
    s2 = _refused(_conv("conv2d_s2").interpret, [x, w, o])   # stride 2 makes 3 x 4 output pixels
    assert s2.message == ("kernel 'conv2d_s2' assumes NPQ == N * ((H - 1) / 2 + 1) * ((W - 1) / 2 + 1), but "
                          "NPQ = 35, N = 1, H = 5, W = 7")
    assert s2.notes == ["N * ((H - 1) / 2 + 1) * ((W - 1) / 2 + 1) = 12"]


SHAPES = [(1, 5, 7, 64, 64), (3, 3, 5, 128, 192), (1, 7, 3, 192, 64)]   # (N, H, W, C, K): odd N, H, W


@pytest.mark.parametrize("kernel,stride", [("conv2d", 1), ("conv2d_s2", 2)])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_conv2d_runs_where_its_assumptions_hold(kernel, stride, shape):
    args, expected = conv2d_inputs(np.random.default_rng(sum(shape)), *shape, stride)
    _conv(kernel).interpret(*args)
    out = args[-1].astype(np.float64)
    assert np.isfinite(out).all()
    assert np.linalg.norm(out - expected) / np.linalg.norm(expected) < RTOL


# A copy with integer scalars: the arithmetic of an assumption, as the launch computes it.
ARITHMETIC = """
kernel copy(n: i32, d: i32, big: i64, src: f32[M, N], dst: f32[M, N]) {
    assume n / d > -2                     // truncated: -7 / 4 is -1, -9 / 4 is -2
    assume (0 - M) % 3 == 0 - M % 3       // the remainder takes the dividend's sign
    assume big * M != 0                   // 2^61 * 4 leaves 64 bits
    assume min(M, N) >= max(n % 5, 1)
    grid tiles
    box In  = src[64, 64]
    box Out = dst[64, 64]
    pipeline ring[2] { t: In }
    role producer: warp 0 {
        for tile (i, j) in tiles(src, In) { produce ring as s { load In[i, j] -> s.t } }
    }
    role consumer: warps 4..7 {
        for tile (i, j) in tiles(dst, Out) { consume ring as s { store Out[i, j] <- s.t } }
    }
}
"""

# (n, d, big, M, N) and the E219 message and notes, or None where every assumption holds (floor
# division would refuse the first case and every other that holds: -64 % 3 is -1, not 2)
ARITHMETIC_CASES = [
    ((-7, 4, 1, 64, 68), None),
    ((-7, -4, 1, 67, 68), None),
    ((-9, 4, 1, 64, 68), ("kernel 'copy' assumes n / d > -2, but n = -9, d = 4", ["n / d = -2"])),
    ((3, 0, 1, 64, 68), ("kernel 'copy' assumes n / d > -2, but n = 3, d = 0", ["n / d divides by zero"])),
    ((1, 1, 2**61, 2, 68), None),
    ((1, 1, 2**61, 4, 68), ("kernel 'copy' assumes big * M != 0, but big = 2305843009213693952, M = 4",
                            ["big * M overflows 64 bits"])),
    ((1, 1, -(2**62), 2, 68), None),   # -2^63 is a 64-bit value
    ((4, 1, 1, 3, 4), ("kernel 'copy' assumes min(M, N) >= max(n % 5, 1), but M = 3, N = 4, n = 4",
                       ["min(M, N) = 3", "max(n % 5, 1) = 4"])),
]


def _copy_args(n, d, big, m, cols):
    src = np.arange(m * cols, dtype=np.float32).reshape(m, cols)
    return [np.int32(n), np.int32(d), np.int64(big), src, np.full_like(src, np.nan)]


@functools.cache
def _arithmetic() -> tmalang.Kernel:
    return tmalang.compile(ARITHMETIC, name="arithmetic.tma")


@pytest.mark.parametrize("values,refusal", ARITHMETIC_CASES)
def test_the_launch_computes_as_c_does(values, refusal):
    """64-bit integers, `/` and `%` truncating; a zero divisor or a value past 64 bits fails."""
    args = _copy_args(*values)
    if refusal is None:
        _arithmetic().interpret(*args)
        np.testing.assert_array_equal(args[-1], args[-2])
        return
    error = _refused(_arithmetic().interpret, args)
    assert (error.message, error.notes) == refusal


def test_assumptions_in_the_manifest_the_ir_and_explain(capsys):
    m = _conv().manifest
    assert [a.written for a in m.assumptions] == ["C % 64 == 0", "RSC == 9 * C", "NPQ == N * H * W"]
    assert m.assumptions[1].lhs == "RSC" and m.assumptions[1].rhs == ("*", 9, "C")
    assert Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    plain = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma").manifest
    assert "assumptions" not in plain.to_json() and plain.assumptions == ()
    assert 'assume text="RSC == 9 * C" lhs=$RSC compare="==" rhs=(9 * $C)' in _conv().ir
    assert tmalangc([str(EXAMPLE), "--explain", "-o", "/dev/null"]) == 0
    explained = capsys.readouterr().out
    assert "assumptions (every launch must satisfy them, or it is refused: E219):\n  C % 64 == 0\n" in explained


def test_an_assumption_of_constants_only_needs_no_launch_check():
    """Proven at compile time (E034 otherwise), so the hosts do not check it again."""
    k = tmalang.compile(ARITHMETIC.replace("assume n / d > -2 ", "assume 7 / 2 == 3 "), name="k.tma")
    assert [a.written for a in k.manifest.assumptions][0] == "(0 - M) % 3 == 0 - M % 3"
    assert 'assume text="7 / 2 == 3"' in k.ir


# ---- the assumptions the examples and the library state ------------------------------------------


@pytest.mark.parametrize("kernel", ["flash_attention", "flash_attention_hd128"])
def test_attention_takes_causal_to_be_0_or_1(kernel):
    """Its key masks compute with 1 - causal: causal = 2 would mask nonsense."""
    k = tmalang.compile_file(ROOT / "examples" / "attention_sm90.tma", kernel=kernel)
    head = 64 if kernel == "flash_attention" else 128
    args, _ = flash_attention_case(np.random.default_rng(2), (65, 70))
    if head == 128:
        args = [np.concatenate([a, a], axis=-1) if a.ndim == 3 else a for a in args]
    for causal, bound in ((2, "causal <= 1"), (-1, "causal >= 0")):
        args[4] = np.int32(causal)
        error = _refused(k.interpret, args)
        assert error.message == f"kernel '{kernel}' assumes {bound}, but causal = {causal}"


def test_the_library_split_k_keeps_a_slab_for_every_part():
    """gemm_parts writes part p into slab p of its workspace: a part past the last slab was lost."""
    k = tmalang.compile_file(ROOT / "tmalang" / "library" / "gemm_sm90.tma", kernel="gemm_parts")
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((rows, 64)).astype(DTYPES["bf16"].numpy) for rows in (130, 136))
    w, c = np.zeros((2, 130, 136), np.float32), np.zeros((130, 136), DTYPES["bf16"].numpy)
    error = _refused(k.interpret, [np.int32(3), a, b, w, c])
    assert error.message == "kernel 'gemm_parts' assumes S <= P, but S = 3, P = 2"


# ---- the im2col K slices (E035) -----------------------------------------------------------------

# tests/diagnostics/assumptions.tma's convolution: 64-channel K slices of C under 9 filter taps
CONV = """
kernel conv(x: bf16[N, H, W, C], w: bf16[K, RSC], o: bf16[P, K]) {
    grid persistent
    im2col A = x[64, 64] lower [-1, -1] upper [-1, -1] swizzle 128B
    box B = w[64, 64] swizzle 128B
    box O = o[64, 64] swizzle 128B
    smem os: O
    pipeline ring[2] { a: A, b: B }
    role producer: warp 0 {
        for tile (m, n) in tiles(o, O) {
            for r in steps(9, 1) {
                for c in steps(C, 64) {
                    produce ring as s {
                        load A[64 * m / (H * W), 64 * m / W % H - 1, 64 * m % W - 1, 64 * c] offsets [r / 3, r % 3] -> s.a
                        load B[n, r * (C / 64) + c] -> s.b
                    }
                }
            }
        }
    }
    role consumer: warps 4..7 {
        accumulator acc: f32[64, 64]
        for tile (m, n) in tiles(o, O) {
            acc = 0
            for r in steps(9, 1) {
                for c in steps(C, 64) {
                    consume ring as s { mma acc, s.a, s.b }
                }
            }
            elect { wait_group read 0 }
            sync
            os = bf16(acc)
            elect { store O[m, n] <- os  commit_group }
        }
        elect { wait_group 0 }
    }
}
"""


@pytest.mark.parametrize("assume", ["C % 64 == 0", "C % 128 == 0", "0 == C % 192", "C == 192"])
def test_an_assumption_that_implies_whole_k_slices_is_enough(assume):
    source = CONV.replace("    grid persistent", f"    assume {assume}\n    grid persistent")
    tmalang.compile(source, name="conv.tma")


def test_literal_channels_need_no_assumption_when_they_are_whole_slices():
    tmalang.compile(CONV.replace("bf16[N, H, W, C]", "bf16[N, H, W, 128]").replace("steps(C,", "steps(128,")
                    .replace("(C / 64)", "(128 / 64)"), name="conv.tma")


def test_without_the_assumption_the_k_slices_are_refused():
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(CONV, name="conv.tma")
    assert caught.value.code == "E035"


# ---- the C++ launch header ------------------------------------------------------------------------

HOST = ROOT / "tests" / "host"


def _cuda_include():
    return tmalang.get_cuda_include() or "/usr/local/cuda/include"


def _gxx(folder, *arguments):
    run = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{folder}",
                          f"-I{tmalang.get_include()}", f"-I{_cuda_include()}", *map(str, arguments)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[:4000]


@pytest.fixture(scope="module")
def mock_driver(tmp_path_factory):
    """tests/host/mock_cuda.cpp, the stand-in driver of tests/runtime/test_cpp_host.py."""
    if shutil.which("g++") is None or not (Path(_cuda_include()) / "cuda.h").exists():
        pytest.skip("needs g++ and the CUDA driver header (cuda.h)")
    folder = tmp_path_factory.mktemp("mock")
    library = folder / "libtmalang_mock_cuda.so"
    _gxx(folder, HOST / "mock_cuda.cpp", "-shared", "-fPIC", "-O1", f"-Wl,-soname,{library.name}", "-o", library)
    return library


def _host(manifest: Manifest) -> str:
    """main(): load argv[1], fill the kernel's arguments from argv (each tensor's dims, contiguous,
    then each scalar), launch; print the error's text, or `launched`."""
    k, fields, at = manifest.kernel, [], 2
    for a in manifest.args:
        if isinstance(a, TensorArg):
            rank, size = len(a.shape), DTYPES[a.dtype].itemsize
            fields += [f"  args.{field_name(a.name)}.rank = {rank};",
                       f"  args.{field_name(a.name)}.data = 0x100000;",
                       *(f"  args.{field_name(a.name)}.shape[{i}] = std::strtoull(argv[{at + i}], nullptr, 10);"
                         for i in range(rank)),
                       f"  args.{field_name(a.name)}.strides[{rank - 1}] = {size};",
                       *(f"  args.{field_name(a.name)}.strides[{i}] = args.{field_name(a.name)}.strides[{i + 1}] * "
                         f"args.{field_name(a.name)}.shape[{i + 1}];" for i in reversed(range(rank - 1)))]
            at += rank
        else:
            fields.append(f"  args.{field_name(a.name)} = decltype(args.{field_name(a.name)})"
                          f"(std::strtoll(argv[{at}], nullptr, 10));")
            at += 1
    return "\n".join([
        f'#include "{k}.h"', "#include <cstdio>", "#include <cstdlib>", "",
        "int main(int, char** argv) {",
        "  CUdevice device; CUcontext context; CUmodule module; CUfunction function;",
        "  cuInit(0); cuDeviceGet(&device, 0); cuDevicePrimaryCtxRetain(&context, device); cuCtxSetCurrent(context);",
        f"  tmalang::Error e = {k}_load_file(argv[1], &module, &function);",
        "  if (e) { std::printf(\"%s\\n\", e.text().c_str()); return 1; }",
        f"  {k}_args args{{}};", *fields,
        f"  e = {k}_launch(function, args, nullptr);",
        "  std::printf(\"%s\\n\", e ? e.text().c_str() : \"launched\");",
        "  return 0;", "}", ""])


def _cpp_launches(tmp_path, mock_driver, k: tmalang.Kernel, runs: list[list[int]]) -> list[tuple[str, list]]:
    """(what the host program printed, the driver calls it made after loading) for each run."""
    m = k.manifest
    (tmp_path / f"{m.kernel}.h").write_text(render(m, "k.tma"))
    (tmp_path / "host.cpp").write_text(_host(m))
    (tmp_path / "k.cubin").write_bytes(k.cubin)
    program = tmp_path / "host"
    _gxx(tmp_path, tmp_path / "host.cpp", "-O0", "-o", program, mock_driver, f"-Wl,-rpath,{mock_driver.parent}")
    out = []
    for i, values in enumerate(runs):
        log = tmp_path / f"driver{i}.jsonl"
        run = subprocess.run([str(program), str(tmp_path / "k.cubin"), *map(str, values)], capture_output=True,
                             text=True, timeout=60, env={"MOCK_LOG": str(log), "MOCK_CC_MAJOR": "9"})
        assert run.returncode == 0, run.stdout + run.stderr
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        out.append((run.stdout.rstrip("\n"), [c for c in calls if not {"image", "entry"} & c.keys()]))
    return out


def _python_text(k: tmalang.Kernel, args) -> str:
    try:
        bind(k.manifest, tuple(args))
    except LaunchError as error:
        return "\n".join([error.message, *(f"note: {n}" for n in error.notes)])
    return "launched"


def test_the_cpp_header_refuses_what_python_refuses(tmp_path, mock_driver):
    """The same message and notes, and no tensor map encoded and nothing launched."""
    k = _arithmetic()
    runs = [[n, d, big, m, cols, m, cols] for (n, d, big, m, cols), _ in ARITHMETIC_CASES]
    for (text, calls), ((n, d, big, m, cols), refusal) in zip(_cpp_launches(tmp_path, mock_driver, k, runs),
                                                                ARITHMETIC_CASES):
        assert text == _python_text(k, _copy_args(n, d, big, m, cols))
        assert (refusal is None) == bool(calls) == (text == "launched"), (text, calls)


def test_the_cpp_header_refuses_conv2d_at_48_channels(tmp_path, mock_driver):
    k = _conv()
    shapes = [(1, 5, 7, 48, 64), (1, 5, 7, 64, 64), (2, 3, 5, 128, 64)]
    runs, expected = [], []
    for n, h, w, c, kk in shapes:
        rsc, npq = 9 * c + 8 * (c == 128), n * h * w   # 8 more columns keep w's rows 16-byte aligned
        runs.append([n, h, w, c, kk, rsc, npq, kk])
        args = [np.zeros((n, h, w, c), DTYPES["bf16"].numpy), np.zeros((kk, rsc), DTYPES["bf16"].numpy),
                np.zeros((npq, kk), DTYPES["bf16"].numpy)]
        expected.append(_python_text(k, args))
    got = _cpp_launches(tmp_path, mock_driver, k, runs)
    assert [text for text, _ in got] == expected
    assert expected[0] == "kernel 'conv2d' assumes C % 64 == 0, but C = 48\nnote: C % 64 = 48"
    assert expected[1] == "launched"
    assert expected[2] == "kernel 'conv2d' assumes RSC == 9 * C, but RSC = 1160, C = 128\nnote: 9 * C = 1152"
    assert [bool(calls) for _, calls in got] == [False, True, False]


# ---- the GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_gpu_launch_refuses_48_channels_before_launching(monkeypatch):
    """The refusal comes from the binding, before the driver hears of the launch; a launch that
    holds then runs and matches the float64 reference."""
    from tmalang.runtime import driver

    k = _conv()
    bad, _ = conv2d_inputs(np.random.default_rng(7), 1, 5, 7, 48, 64, 1)
    with monkeypatch.context() as patched:
        def no_launch(*_):
            raise AssertionError("the kernel was launched")
        patched.setattr(driver, "launch", no_launch)
        error = _refused(k, bad)
    assert error.message == "kernel 'conv2d' assumes C % 64 == 0, but C = 48"
    assert error.notes == ["C % 64 = 48"]
    assert error.span.location() == f"{EXAMPLE}:{_line_of('C % 64 == 0', 'conv2d')}:5"
    good, expected = conv2d_inputs(np.random.default_rng(8), 1, 5, 7, 64, 64, 1)
    k(*good)
    out = good[-1].astype(np.float64)
    assert np.linalg.norm(out - expected) / np.linalg.norm(expected) < RTOL
