"""Per-op backend tests: tests/backend/ir/<family>_<what>.ir, final IR → PTX, checked by filecheck.

Each file holds one small final-IR kernel (as `tmalangc K.tma --emit ir` prints it, trimmed to
what the verifier needs around the op under test) and the `// CHECK` lines naming the PTX that
op must produce. Its first line names the target,

    // ARCH: sm_90a

and an optional `// OPTIONS: watchdog timeline` line turns on the backend's optional
instrumentation. The runner compiles the kernel with `compile_ir` (the `tmalangc K.ir --emit ptx`
entry: parse, target check, verifier, launch contract, backend) and pipes the PTX through the
filecheck package, as tests/passes/test_passes_filecheck.py does for the passes. Comment lines (the
`// begin inline asm` markers) and `.loc` line-info directives are dropped first, so that
CHECK-NEXT means the next instruction.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT
from tmalang.compiler import ARCHS, Options, compile_ir

CASES = sorted((ROOT / "tests" / "backend" / "ir").glob("*.ir"))
ARCH = re.compile(r"// ARCH: (?P<arch>\S+)$")
OPTIONS = re.compile(r"^// OPTIONS: (?P<words>.*)$", re.M)
SWITCHES = ("watchdog", "timeline")   # Options fields a case may turn on
NOISE = re.compile(r"^\s*(//|\.loc\b)")


def case_options(text: str, name: str) -> Options:
    """The target of the first line and the switches of an OPTIONS line (all off unless named)."""
    match = ARCH.match(text.splitlines()[0])
    assert match and match["arch"] in ARCHS, f"{name}: the first line must be `// ARCH: <one of {ARCHS}>`"
    found = OPTIONS.search(text)
    words = found["words"].split() if found else []
    assert set(words) <= set(SWITCHES), f"{name}: OPTIONS may name only {SWITCHES}"
    return Options(arch=match["arch"], **{switch: switch in words for switch in SWITCHES})


def compile_case(path) -> str:
    text = path.read_text()
    ptx = compile_ir(text, path.name, case_options(text, path.name)).ptx
    return "\n".join(line for line in ptx.splitlines() if not NOISE.match(line))


def filecheck(path, ptx: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "filecheck", str(path)], input=ptx, capture_output=True, text=True)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_emitted_ptx_matches_its_checks(path):
    checked = filecheck(path, compile_case(path))
    assert checked.returncode == 0, checked.stderr + checked.stdout
