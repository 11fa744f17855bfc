"""Shared test setup: the --update-goldens flag and the gpu marker's skip rule."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import pytest

from tmalang.diagnostics import TmalangError
from tmalang.sema import check
from tmalang.sema.available import check_available
from tmalang.syntax.parser import parse
from tmalang.targets.arch import DEFAULT, TARGETS

ROOT = Path(__file__).resolve().parents[1]
# The tests live in one folder per stage (tests/syntax, sema, ..., e2e, gpu, tools); a few share
# helpers by module name across folders (test_gemm's check_on_h100, test_gemm_sm100's operands), so
# every stage folder is importable by basename, whatever order pytest collects them in (test file
# names are unique across the folders).
sys.path[1:1] = [str(folder) for folder in sorted(Path(__file__).parent.iterdir())
                 if folder.is_dir() and any(folder.glob("test_*.py"))]
# Hermetic caches: a test session starts from an empty compile cache of its own (unless the caller
# chose one, as the GPU runs do), so no answer comes from a user's cache or an earlier session.
os.environ.setdefault("TMALANG_CACHE_DIR", tempfile.mkdtemp(prefix="tmalang-test-cache-"))
EXAMPLES = sorted((ROOT / "examples").glob("*.tma"))


@functools.cache
def example_archs(path) -> tuple[str, ...]:
    """Every known target whose rules an example's kernels meet (sema decides, from the target's
    features: Tensor Memory needs tcgen05, register-accumulator mma needs wgmma)."""
    program = parse(Path(path).read_text(), str(path))
    fits = []
    for target in TARGETS.values():
        try:
            for info in check(program, target):
                check_available(info)
        except TmalangError:
            continue
        fits.append(target.name)
    return tuple(fits)


def example_arch(path) -> str:
    """The target an example is written for: the first that accepts it, so a kernel every target
    could run takes the default."""
    return (example_archs(path) or (DEFAULT.name,))[0]


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", help="rewrite golden files from current output")


@pytest.fixture
def golden(request):
    """golden(path, text): compare text with the file, or rewrite it under --update-goldens."""
    update = request.config.getoption("--update-goldens")

    def check(path: Path, text: str) -> None:
        if update or not path.exists():
            if not update:
                pytest.fail(f"missing golden {path.relative_to(ROOT)}; run pytest --update-goldens")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert text == path.read_text(), f"output differs from {path.relative_to(ROOT)} (pytest --update-goldens)"

    return check


@functools.cache
def gpu_available() -> bool:
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """Tests that report what `verify` showed and what it cost (`record_property("verify_report",
    line)`) are listed at the end of the run: issue 28 asks for each example's time in CI."""
    lines = [value for report in terminalreporter.stats.get("passed", [])
             for name, value in getattr(report, "user_properties", []) if name == "verify_report"]
    if lines:
        terminalreporter.section("verify: every example, every dim")
        for line in sorted(lines):
            terminalreporter.write_line(line)
