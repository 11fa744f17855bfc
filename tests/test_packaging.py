"""What a pip install gets: one version (VERSION in tmalang/api.py, read by hatch), ptxas with
the [gpu] extra (nvidia-cuda-nvcc), the C++ runtime header and py.typed inside the package."""

from __future__ import annotations

import re
import tomllib

import tmalang
from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_source():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    path = PYPROJECT["tool"]["hatch"]["version"]["path"]
    assert re.search(rf'^VERSION = "{re.escape(tmalang.__version__)}"$', (ROOT / path).read_text(), re.M)


def test_the_gpu_extra_brings_ptxas():
    assert any(r.startswith("nvidia-cuda-nvcc") for r in PYPROJECT["project"]["optional-dependencies"]["gpu"])


def test_the_package_holds_its_non_python_files():
    package = ROOT / "tmalang"
    assert (package / "py.typed").is_file()
    assert (package / "include" / "tmalang_runtime.h").is_file()
    assert (package / "__main__.py").is_file()
