"""docs/python.md stays whole: every public name of the package and every environment variable
the package reads is documented there, so a new one without its documentation fails here."""

from __future__ import annotations

import re

import tmalang
from conftest import ROOT

DOC = (ROOT / "docs" / "python.md").read_text()


def test_every_public_name_is_documented():
    missing = [name for name in tmalang.__all__ if name != "__version__" and name not in DOC]
    assert not missing, f"docs/python.md does not mention {missing}"


def test_every_environment_variable_is_documented():
    used = set()
    for path in (ROOT / "tmalang").rglob("*"):
        if path.suffix in (".py", ".cmake", ".h", ".j2"):
            used |= set(re.findall(r"\b(TMALANG_[A-Z_]+|XDG_CACHE_HOME)\b", path.read_text()))
    assert used, "found no variables: the scan is broken"
    missing = sorted(v for v in used if f"`{v}`" not in DOC)
    assert not missing, f"docs/python.md does not document {missing}"


def test_every_kernel_method_is_documented():
    public = [n for n in vars(tmalang.Kernel) if not n.startswith("_")]
    missing = [n for n in public if f"k.{n}" not in DOC and f".{n}(" not in DOC]
    assert not missing, f"docs/python.md does not mention Kernel.{missing}"
