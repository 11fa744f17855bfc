"""Golden diagnostics: every tests/diagnostics/NAME.tma fails with exactly NAME.err.

Each file holds one deliberately wrong program; the .err file is the rendered diagnostic
(location, code, message, source line, caret, notes). Regenerate with --update-goldens and
review the diff.
"""

from __future__ import annotations

import pytest

from conftest import ROOT
from tmalang.compiler import compile_source
from tmalang.diagnostics import TmalangError

CASES = sorted((ROOT / "tests" / "diagnostics").glob("*.tma"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_diagnostic(path, golden):
    relative = str(path.relative_to(ROOT))
    with pytest.raises(TmalangError) as caught:
        compile_source(path.read_text(), relative, until="ll")
    golden(path.with_suffix(".err"), caught.value.render() + "\n")


def test_corpus_covers_many_distinct_errors():
    codes = set()
    for path in CASES:
        text = path.with_suffix(".err").read_text()
        codes.add(text.split("error[", 1)[1].split("]", 1)[0])
    assert len(codes) >= 20, sorted(codes)


def test_arming_and_loading_may_split_across_roles():
    """expect_tx in one role, the TMA load in another: the bytes still match, so no E102."""
    path = ROOT / "tests" / "valid_split_roles.tma"
    c = compile_source(path.read_text(), str(path), until="ptx")
    assert "mbarrier.expect_tx" in c.ptx
