"""Diagnostics: every case of tests/diagnostics/*.tma fails with exactly the error written inline.

Group files hold many small wrong programs of one topic (syntax, names, boxes, roles, ...), cut by
`// -----` lines; each case names itself (`// case: NAME`), its target (`// arch: sm_90a`),
optionally its last stage (`// until: ast|ir|ll|ptx`, default ll), and marks its one expected error
under the line it points at::

        role producer: warps 4..7 {
    //  ^^^^^^^^^^^^^^^^^^^^^^^^^^^ error[E010]: 'producer' is already declared in kernel 'copy'
    // expect-note: a note the error must carry (all of them, in order)

tests/split_cases.py states the whole format (other expectation forms, `[[@LINE-N]]` in notes).
Each case is one test, id `<file>:<case>`; a mismatch prints the expected and the actual rendered
diagnostic. A few cases are also kept as full rendered goldens in tests/diagnostics/rendered/
(`--update-goldens` rewrites those): the end-to-end net for the renderer itself.
"""

from __future__ import annotations

import pytest

from conftest import ROOT
from split_cases import load_dir
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError

DIAGNOSTICS = ROOT / "tests" / "diagnostics"
CASES = load_dir(DIAGNOSTICS, ROOT)
BY_ID = {case.id: case for case in CASES}

# Rendered in full against tests/diagnostics/rendered/<group>.<case>.err: a wide caret, an
# "expected one of" note, a table of notes, notes that carry locations.
RENDERED = ["names.tma:duplicate_role_name", "syntax.tma:regs_without_comma",
            "pipelines.tma:smem_overflow_two_fields", "tcgen05.tma:tmem_over_allocated"]


def _diagnostic(case) -> TmalangError | None:
    try:
        compile_source(case.source(), case.relative, Options(arch=case.arch, constants=case.constants),
                       until=case.until)
    except TmalangError as caught:
        return caught
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_diagnostic(case):
    problem = case.mismatch(_diagnostic(case))
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.mark.parametrize("case_id", RENDERED)
def test_rendered_diagnostic(case_id, golden):
    case = BY_ID[case_id]
    got = _diagnostic(case)
    assert got is not None, f"{case_id} compiled without error"
    golden(DIAGNOSTICS / "rendered" / f"{case.path.stem}.{case.name}.err", got.render() + "\n")


def test_corpus_covers_many_distinct_errors():
    codes = {case.expected.code for case in CASES}
    assert len(codes) >= 20, sorted(codes)


def test_arming_and_loading_may_split_across_roles():
    """expect_tx in one role, the TMA load in another: the bytes still match, so no E102."""
    path = ROOT / "tests" / "valid_split_roles.tma"
    c = compile_source(path.read_text(), str(path), until="ptx")
    assert "mbarrier.expect_tx" in c.ptx
