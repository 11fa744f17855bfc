"""On the H100: the C++ route end to end. A host program built with g++ against the header of
`tmalangc --emit header` (and tmalang_runtime.h from `tmalang.get_include()`) loads the cubin of `--emit cubin`,
launches, and matches NumPy exactly. saxpy uses 96 KB of shared memory: its persistent grid
is sized by an occupancy query that must come after the >48 KB opt-in."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tmalang

from conftest import ROOT

pytestmark = pytest.mark.gpu

CUDA_INCLUDE = Path("/usr/local/cuda/include")


def _libcuda() -> str | None:
    """The driver library to link: the toolkit's stub, else the driver's own (ldconfig knows it)."""
    stub = Path("/usr/local/cuda/lib64/stubs/libcuda.so")
    if stub.exists():
        return str(stub)
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    found = [line.split("=>")[-1].strip() for line in listing.splitlines() if "libcuda.so" in line]
    return found[0] if found else None


def _build(tmp_path: Path) -> Path:
    from tmalang.cli import main

    libcuda = _libcuda()
    if shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda.h").exists() or libcuda is None:
        pytest.skip("needs g++, the CUDA driver header and libcuda")
    example = ROOT / "examples" / "saxpy.tma"
    assert main([str(example), "--emit", "header", "-o", str(tmp_path / "saxpy.h")]) == 0
    assert main([str(example), "--emit", "cubin", "-o", str(tmp_path / "saxpy.cubin")]) == 0
    program = tmp_path / "saxpy_host"
    run = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{tmalang.get_include()}",
                          f"-I{tmp_path}", f"-I{CUDA_INCLUDE}", str(ROOT / "tests" / "host" / "saxpy_host.cpp"),
                          "-o", str(program), libcuda],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return program


@pytest.mark.parametrize("shape", [(1000, 1000), (77, 130), (4099, 257)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_cpp_host_program_runs_saxpy_from_the_header(tmp_path, shape):
    program = _build(tmp_path)
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
