"""Per-pass tests on IR text: tests/passes/<pass>/*.ir, run through `tmalangc opt` and filecheck.

Each file starts with a RUN line, as in LLVM's lit tests,

    // RUN: tmalangc opt %s --passes=expand_pipelines | filecheck %s

then holds a small kernel (IR at the stage just before the pass) and the `// CHECK` lines that
state what the pass guarantees about its output. The runner reads the `opt` arguments from the
RUN line, runs `tmalangc opt` in-process and pipes its output through the filecheck package.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT
from tmalang.cli.main import main
from tmalang.passes import PASS_NAMES

CASES = sorted((ROOT / "tests" / "passes").glob("*/*.ir"))
RUN = re.compile(r"// RUN: tmalangc opt %s (?P<args>.*) \| filecheck %s$")


def run_case(path, capsys) -> subprocess.CompletedProcess:
    match = RUN.match(path.read_text().splitlines()[0])
    assert match, f"{path.name}: the first line must be `// RUN: tmalangc opt %s ARGS | filecheck %s`"
    code = main(["opt", str(path), *shlex.split(match["args"])])
    out, err = capsys.readouterr()
    assert code == 0, err
    return subprocess.run([sys.executable, "-m", "filecheck", str(path)], input=out, capture_output=True, text=True)


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_pass_output_matches_its_checks(path, capsys):
    checked = run_case(path, capsys)
    assert checked.returncode == 0, checked.stderr + checked.stdout


def test_every_pass_has_a_test():
    assert {p.parent.name for p in CASES} == set(PASS_NAMES)
    for path in CASES:
        assert f"--passes={path.parent.name}" in path.read_text().splitlines()[0], path
