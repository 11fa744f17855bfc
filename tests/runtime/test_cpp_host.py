"""The C++ route end to end: host programs built with g++ against the header of `tmalangc --emit
header` (and tmalang_runtime.h from `tmalang.get_include()`), as docs/cpp.md tells users to.

On the H100, for every sm_90a example, a host program generated from the kernel's manifest
(tests/host/generate.py) launches the kernel on odd shapes (the inputs of tests/references.py)
and must match the same kernel launched from Python on the same bytes: bit for bit, or, for the
kernels whose TMA reduce-adds land in the GPU's order, within the reference tolerance of float64.
saxpy also runs from a hand-written host program (tests/host/saxpy_host.cpp) and from a header
that embeds its cubin.

On any machine with g++ and cuda.h, every example's host program (sm_100a ones too, which the
H100 cannot run) is built against a stand-in driver library (tests/host/mock_cuda.cpp) and run:
the image it loads, the tensor maps it encodes, its grid and its parameter bytes must be those
of the Python runtime for the same arguments. The embedded cubin's bytes and the CMake helper
(runtime/cmake) are checked there too.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tmalang
from conftest import EXAMPLES, ROOT, example_arch
from host import generate
from references import CASES, check
from tmalang.backend import launch_header
from tmalang.cli.main import build_parser, main
from tmalang.contract.binding import bind
from tmalang.contract.manifest import BulkParam, CounterParam, DimParam, IndexParam, ScalarParam, TensorArg, TensorMapParam
from tmalang.runtime.launch import grid_size
from tmalang.runtime.params import pack_params
from tmalang.runtime.tensormap import tensor_map_fields
from tmalang.targets.dtypes import NUMPY

CUDA_INCLUDE = Path(tmalang.get_cuda_include() or "/usr/local/cuda/include")   # cuda-pathfinder first
HOST = ROOT / "tests" / "host"
SHAPES = [(197, 330), (67, 250)]   # (197, 330): tests/gpu/test_interp_vs_h100.py's shape for every sm_90a example
SM90 = [p for p in EXAMPLES if example_arch(p) == "sm_90a"]
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror"]


def _libcuda() -> str | None:
    """The driver library to link: the toolkit's stub, else the driver's own (ldconfig knows it,
    or the GPU machines' /usr/local/nvidia/lib64)."""
    for candidate in (Path("/usr/local/cuda/lib64/stubs/libcuda.so"), Path("/usr/local/nvidia/lib64/libcuda.so")):
        if candidate.exists():
            return str(candidate)
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    found = [line.split("=>")[-1].strip() for line in listing.splitlines() if "libcuda.so" in line]
    return found[0] if found else None


def _need_compiler() -> None:
    if shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda.h").exists():
        pytest.skip("needs g++ and the CUDA driver header (cuda.h)")


def _need_linker() -> str:
    _need_compiler()
    libcuda = _libcuda()
    if libcuda is None:
        pytest.skip("needs libcuda to link against")
    return libcuda


@functools.cache
def _kernel(path: Path) -> tmalang.Kernel:
    return tmalang.compile_file(path, arch=example_arch(path))


def _gxx(tmp_path: Path, source: Path, *flags: str) -> None:
    """g++ over `source` with the include folders of the docs: the header's, the runtime's, cuda.h's."""
    run = subprocess.run(["g++", *FLAGS, f"-I{tmp_path}", f"-I{HOST}", f"-I{tmalang.get_include()}",
                          f"-I{CUDA_INCLUDE}", str(source), *flags], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[:4000]


def _host_source(tmp_path: Path, k: tmalang.Kernel, path: Path, cubin: bytes | None = None) -> Path:
    """The kernel's header (its cubin embedded when given) and a generated host program over it."""
    header = tmp_path / f"{path.stem}.h"
    header.write_text(launch_header.render(k.manifest, str(path), cubin=cubin))
    source = tmp_path / f"{path.stem}_host.cpp"
    source.write_text(generate.host_program(k.manifest, header.name, embedded=cubin is not None))
    return source


def _build(tmp_path: Path, path: Path, embed: bool = False) -> Path:
    libcuda = _need_linker()
    k = _kernel(path)
    source = _host_source(tmp_path, k, path, k.cubin if embed else None)
    if not embed:
        (tmp_path / f"{path.stem}.cubin").write_bytes(k.cubin)
    program = tmp_path / f"{path.stem}_host"
    _gxx(tmp_path, source, "-O1", "-o", str(program), libcuda)
    return program


def _run(program: Path, directory: Path, *cubin: Path) -> None:
    run = subprocess.run([str(program), generate.SPEC, *map(str, cubin)], cwd=directory,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _compare(k: tmalang.Kernel, directory: Path, args, expected) -> None:
    """The C++ outputs against the Python launch on the same bytes (exact), or for kernels that
    reduce-add in the GPU's order, against float64 within the reference tolerance; the last
    output (the one tests/references.py describes) against the reference too."""
    m = k.manifest
    cpp = generate.read_outputs(directory, m, args)
    check(k.name, cpp[m.args[-1].name], expected)
    if " reduce=" in k.ir:
        return
    py_args = generate.inputs_from_files(directory, m, args)
    k(*py_args)
    for spec, py in zip(m.args, py_args):
        if isinstance(spec, TensorArg) and spec.written:
            np.testing.assert_array_equal(_bits(cpp[spec.name]), _bits(py), err_msg=f"output '{spec.name}'")


def _launches(k: tmalang.Kernel) -> int:
    """Two launches for a dynamic tile loop: the second finds the tile counter at zero again."""
    return 2 if any(isinstance(p, CounterParam) for p in k.manifest.ptx_params) else 1


@pytest.mark.gpu
@pytest.mark.parametrize("path", SM90, ids=[p.stem for p in SM90])
def test_a_generated_host_program_matches_python(tmp_path, path):
    program = _build(tmp_path, path)
    k = _kernel(path)
    for i, shape in enumerate(SHAPES):
        directory = tmp_path / f"run{i}"
        directory.mkdir()
        args, expected = CASES[k.name](np.random.default_rng(5 + i), shape)
        generate.write_run(directory, k.manifest, args, _launches(k))
        _run(program, directory, tmp_path / f"{path.stem}.cubin")
        _compare(k, directory, args, expected)


@pytest.mark.gpu
def test_a_host_program_runs_from_an_embedded_cubin(tmp_path):
    path = ROOT / "examples" / "saxpy.tma"
    program = _build(tmp_path, path, embed=True)
    k = _kernel(path)
    args, expected = CASES[k.name](np.random.default_rng(3), (77, 130))
    generate.write_run(tmp_path, k.manifest, args)
    _run(program, tmp_path)   # no cubin argument: saxpy_load reads the header's array
    _compare(k, tmp_path, args, expected)


# ---- every example against a stand-in driver (no GPU needed) --------------------------------------

MOCK_MULTIPROCESSORS = 132   # tests/host/mock_cuda.cpp's device: one resident CTA per multiprocessor


@pytest.fixture(scope="module")
def mock_driver(tmp_path_factory) -> Path:
    """tests/host/mock_cuda.cpp as a shared library with its own name (a real libcuda on the
    library path cannot stand in for it)."""
    _need_compiler()
    folder = tmp_path_factory.mktemp("mock_cuda")
    library = folder / "libtmalang_mock_cuda.so"
    _gxx(folder, HOST / "mock_cuda.cpp", "-shared", "-fPIC", "-O1", "-Wl,-soname," + library.name, "-o", str(library))
    return library


def _param_size(param) -> int:
    """The bytes of a PTX parameter, for the stand-in driver to log."""
    if isinstance(param, TensorMapParam):
        return 128
    if isinstance(param, DimParam):
        return 4
    if isinstance(param, ScalarParam):
        return np.dtype(NUMPY[param.dtype]).itemsize
    return 8   # a device address or a byte stride


def _mock_log(program: Path, directory: Path, k: tmalang.Kernel, *cubin: Path) -> list[dict]:
    arch = k.manifest.arch
    env = {"MOCK_LOG": str(directory / "driver.jsonl"),
           "MOCK_PARAM_SIZES": ",".join(str(_param_size(p)) for p in k.manifest.ptx_params),
           "MOCK_CC_MAJOR": str(10 if arch == "sm_100a" else 9)}
    run = subprocess.run([str(program), generate.SPEC, *map(str, cubin)], cwd=directory, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in (directory / "driver.jsonl").read_text().splitlines()]


def _fnv1a(data: bytes) -> int:
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return value


def _check_maps(log: list[dict], k: tmalang.Kernel, binding, launches: int) -> None:
    """Every encode, in parameter order per launch, with the driver arguments the Python runtime
    derives (tensor_map_fields), the device address aside."""
    cu = pytest.importorskip("cuda.bindings.driver")
    params = [p for p in k.manifest.ptx_params if isinstance(p, TensorMapParam)] * launches
    encodes = [e for e in log if "tiled" in e or "im2col" in e]
    assert len(encodes) == len(params)
    for entry, param in zip(encodes, params):
        (kind, got), = entry.items()
        f = tensor_map_fields(param, binding.views[param.tensor], 0)
        want = {"dtype": int(getattr(cu.CUtensorMapDataType, f.data_type)), "rank": f.rank,
                "dims": list(f.global_dim), "element_strides": list(f.element_strides),
                "interleave": int(getattr(cu.CUtensorMapInterleave, f.interleave)),
                "swizzle": int(getattr(cu.CUtensorMapSwizzle, f.swizzle)),
                "l2": int(getattr(cu.CUtensorMapL2promotion, f.l2_promotion)),
                "oob": int(getattr(cu.CUtensorMapFloatOOBfill, f.oob_fill))}
        if f.rank > 1:
            want["strides"] = list(f.global_strides)
        if kind == "tiled":
            want["box"] = list(f.box_dim)
        else:
            want.update(lower=list(f.lower), upper=list(f.upper), channels=f.box_dim[0], pixels=f.box_dim[1])
        assert {key: got[key] for key in want} == want, f"box '{param.box}'"


def _check_launches(log: list[dict], k: tmalang.Kernel, binding, launches: int) -> None:
    """Grid, block, shared memory, cluster and every parameter's bytes (tensor maps and device
    addresses aside) as the Python launcher would pass them; one tile counter for all launches."""
    m = k.manifest
    cluster = m.cluster[0]
    capacity = MOCK_MULTIPROCESSORS // cluster * cluster
    grid = grid_size(m.grid.kind, binding.tile_count(), m.cluster, lambda: capacity)
    expected = pack_params(binding, lambda p: bytes(128), lambda what: 0)
    runs = [e["launch"] for e in log if "launch" in e]
    assert len(runs) == launches
    counters = [e["counter"] for e in log if "counter" in e]
    assert len(counters) == (launches > 1)
    for run in runs:
        assert (run["grid"], run["block"], run["smem"], run["cluster"]) == (grid, m.block_threads, m.smem_bytes, cluster)
        assert run["overlap_prior"] == 1     # it waits for the kernel before it (backend/prior_grid.py)
        for i, param in enumerate(m.ptx_params):
            got = bytes.fromhex(run["params"][i])
            if isinstance(param, CounterParam):
                assert int.from_bytes(got, "little") == counters[0]
            elif not isinstance(param, (TensorMapParam, BulkParam, IndexParam)):
                assert got == expected.value(i), f"parameter {i} ({type(param).__name__})"


# two examples by default (a scalar and tensor maps; a GEMM with its dims), every example with -m slow
FAST_HOSTS = {"saxpy", "gemm_sm90"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=() if p.stem in FAST_HOSTS else pytest.mark.slow)
                                  for p in EXAMPLES], ids=[p.stem for p in EXAMPLES])
def test_a_generated_host_program_launches_as_python_does(tmp_path, mock_driver, path):
    """Built like the GPU test's programs, linked to the stand-in driver: it loads the cubin
    (embedded for a dynamic tile loop's kernel, whose two launches share one tile counter),
    copies the tensors through unchanged, and asks the driver for what the Python runtime would."""
    k = _kernel(path)
    embed = _launches(k) > 1
    source = _host_source(tmp_path, k, path, k.cubin if embed else None)
    cubin = tmp_path / f"{path.stem}.cubin"
    cubin.write_bytes(k.cubin)
    program = tmp_path / f"{path.stem}_host"
    _gxx(tmp_path, source, "-O0", "-o", str(program), str(mock_driver), f"-Wl,-rpath,{mock_driver.parent}")
    args, _ = CASES[k.name](np.random.default_rng(5), SHAPES[0])
    generate.write_run(tmp_path, k.manifest, args, _launches(k))
    log = _mock_log(program, tmp_path, k, *([] if embed else [cubin]))
    assert log[0] == {"image": {"size": len(k.cubin), "fnv1a": _fnv1a(k.cubin)}}
    assert log[1] == {"entry": k.name}
    outputs = generate.read_outputs(tmp_path, k.manifest, args)
    for spec, value in zip(k.manifest.args, args):
        if spec.name in outputs:   # the stand-in runs no kernel: what went in comes back
            np.testing.assert_array_equal(_bits(outputs[spec.name]), _bits(np.asarray(value)))
    binding = bind(k.manifest, tuple(generate.inputs_from_files(tmp_path, k.manifest, args)))
    _check_maps(log, k, binding, _launches(k))
    _check_launches(log, k, binding, _launches(k))


# ---- the embedded cubin (--embed-cubin) ----------------------------------------------------------


def _embedded_bytes(header: str, kernel: str) -> bytes:
    body = re.search(rf"unsigned char {kernel}_cubin\[(\d+)\] = \{{(.*?)\}};", header, re.S)
    data = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-f]{2})", body.group(2)))
    assert len(data) == int(body.group(1))
    return data


def test_an_embedded_cubin_is_the_cubin_byte_for_byte(tmp_path):
    """Every byte value, and a length that is not a whole number of lines."""
    k = _kernel(ROOT / "examples" / "saxpy.tma")
    cubin = bytes(range(256)) * 3 + b"\x7fELF"
    header = launch_header.render(k.manifest, "saxpy.tma", cubin=cubin)
    assert _embedded_bytes(header, "saxpy") == cubin
    assert "saxpy_load(CUmodule* module" in header
    plain = launch_header.render(k.manifest, "saxpy.tma")
    assert "saxpy_cubin" not in plain and "saxpy_load(" not in plain and "saxpy_load_file(" in plain
    _need_compiler()
    (tmp_path / "saxpy.h").write_text(header)
    unit = tmp_path / "use.cpp"
    unit.write_text('#include "saxpy.h"\n#include "saxpy.h"\n'
                    'static_assert(sizeof saxpy_cubin == 772, "the array holds the cubin");\n')
    _gxx(tmp_path, unit, "-fsyntax-only")


def test_an_empty_cubin_is_refused():
    k = _kernel(ROOT / "examples" / "saxpy.tma")
    with pytest.raises(ValueError, match="empty"):
        launch_header.render(k.manifest, "saxpy.tma", cubin=b"")


# ---- the CMake helper (runtime/cmake) ---------------------------------------------------------------

CMAKE_DIR = Path(tmalang.get_cmake_dir())
TMALANGC = [sys.executable, "-m", "tmalang"]

CMAKE_PROJECT = """cmake_minimum_required(VERSION 3.18)
project(uses_tmalang LANGUAGES CXX)
find_package(tmalang REQUIRED CONFIG)
add_library(host OBJECT host.cpp)   # compiled, not linked: the machine may have no libcuda
tmalang_add_kernel(host kernels/saxpy.tma ARCH sm_90a HEADER axpy.h)
"""

CMAKE_HOST = """#include "axpy.h"
int main() {{
  CUmodule module;
  CUfunction function;
  static_assert(sizeof {kernel}_cubin > 0, "the header embeds the cubin");
  return {kernel}_load(&module, &function) ? 1 : 0;
}}
"""


def _cmake(*arguments: str) -> None:
    run = subprocess.run(["cmake", *arguments], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]


def test_the_cmake_helper_builds_a_host_program_against_an_embedded_header(tmp_path):
    """configure + build of a small project: tmalang_add_kernel runs tmalangc at build time (again
    when the kernel's source changes) and gives the target the header, with its cubin, and the
    include folders."""
    _need_compiler()
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    if "--embed-cubin" not in build_parser().format_help():
        pytest.skip("tmalangc has no --embed-cubin yet (tmalang/cli/main.py)")
    project, build = tmp_path / "project", tmp_path / "build"
    (project / "kernels").mkdir(parents=True)
    source = project / "kernels" / "saxpy.tma"
    source.write_text((ROOT / "examples" / "saxpy.tma").read_text())
    (project / "CMakeLists.txt").write_text(CMAKE_PROJECT)
    (project / "host.cpp").write_text(CMAKE_HOST.format(kernel="saxpy"))
    _cmake("-S", str(project), "-B", str(build), f"-Dtmalang_DIR={CMAKE_DIR}", f"-DTMALANGC={';'.join(TMALANGC)}")
    _cmake("--build", str(build))
    header = build / "tmalang" / "host" / "axpy.h"
    assert _embedded_bytes(header.read_text(), "saxpy") == tmalang.compile_file(source).cubin   # the PTX names the file
    source.write_text(source.read_text().replace("kernel saxpy(", "kernel saxpy2("))
    (project / "host.cpp").write_text(CMAKE_HOST.format(kernel="saxpy2"))
    _cmake("--build", str(build))
    assert "saxpy2_cubin" in header.read_text()


# ---- a hand-written host program (what a user writes) -------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1000), (77, 130), (4099, 257)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_cpp_host_program_runs_saxpy_from_the_header(tmp_path, shape):
    """tests/host/saxpy_host.cpp against the header and cubin of tmalangc, as docs/cpp.md builds
    it. saxpy uses 96 KB of shared memory: its persistent grid is sized by an occupancy query that
    must come after the >48 KB opt-in."""
    libcuda = _need_linker()
    example = ROOT / "examples" / "saxpy.tma"
    assert main([str(example), "--emit", "header", "-o", str(tmp_path / "saxpy.h")]) == 0
    assert main([str(example), "--emit", "cubin", "-o", str(tmp_path / "saxpy.cubin")]) == 0
    program = tmp_path / "saxpy_host"
    _gxx(tmp_path, HOST / "saxpy_host.cpp", "-O1", "-o", str(program), libcuda)
    m, n = shape
    rng = np.random.default_rng(16)
    pitch = -(-n // 4) * 4
    x, y = (rng.standard_normal((m, pitch)).astype(np.float32) for _ in range(2))
    x.tofile(tmp_path / "x.bin")
    y.tofile(tmp_path / "y.bin")
    a = np.float32(1.75)
    run = subprocess.run([str(program), str(tmp_path / "saxpy.cubin"), str(m), str(n), "1.75",
                          str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), str(tmp_path / "out.bin")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(m, pitch)
    np.testing.assert_array_equal(out[:, :n], (a * x + y)[:, :n])


def test_every_sm90_example_has_a_reference_case():
    """The GPU test runs each sm_90a example on the inputs of its kernel's reference case."""
    assert len(SM90) >= 15 and all(_kernel(p).name in CASES for p in SM90)
