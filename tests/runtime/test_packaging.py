"""What a pip install gets: one version (VERSION in tmalang/version.py, read by hatch), ptxas with
the [gpu] extra (nvidia-cuda-nvcc), the C++ runtime header and py.typed inside the package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
    assert (package / "__main__.py").is_file()


def test_the_c_runtime_has_its_own_top_level_folder_and_ships_in_the_wheel():
    """runtime/ holds the header and the CMake helper; the wheel carries them as tmalang/include and
    tmalang/cmake (.ci/wheel checks the built wheel), and get_include()/get_cmake_dir() find them in
    a checkout too."""
    assert Path(tmalang.get_include()) == ROOT / "runtime" / "include"
    assert (Path(tmalang.get_include()) / "tmalang_runtime.h").is_file()
    assert Path(tmalang.get_cmake_dir()) == ROOT / "runtime" / "cmake"
    for name in ("tmalang.cmake", "tmalangConfig.cmake"):
        assert (Path(tmalang.get_cmake_dir()) / name).is_file()
    shipped = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert shipped["runtime/include"] == "tmalang/include" and shipped["runtime/cmake"] == "tmalang/cmake"


def test_an_emptied_package_folder_does_not_hide_the_runtime(tmp_path):
    """A checkout that once had tmalang/include (an old layout, a sync that keeps empty folders)
    still finds the header in runtime/; the wheel's folder wins when it holds the file."""
    module = tmp_path / "tmalang" / "__init__.py"
    (tmp_path / "tmalang" / "include").mkdir(parents=True)
    (tmp_path / "runtime" / "include").mkdir(parents=True)
    assert tmalang._runtime_folder("include", "tmalang_runtime.h", str(module)) == str(tmp_path / "runtime" / "include")
    (tmp_path / "tmalang" / "include" / "tmalang_runtime.h").write_text("")
    assert tmalang._runtime_folder("include", "tmalang_runtime.h", str(module)) == str(tmp_path / "tmalang" / "include")


def test_the_license_and_its_metadata_agree():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "tmalang authors" in text
    assert "License :: " not in " ".join(project["classifiers"])   # PEP 639: the SPDX expression only
    for field in ("authors", "keywords", "classifiers", "readme", "requires-python", "description"):
        assert project[field], field
    assert f"Programming Language :: Python :: 3.{project['requires-python'].split('.')[-1]}" in project["classifiers"]


def test_the_changelog_has_a_section_for_this_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(tmalang.__version__)}$", text, re.M)
    assert text.index("## Unreleased") < text.index(f"## {tmalang.__version__}")


def test_cuda_h_is_found_through_cuda_pathfinder_first(tmp_path, monkeypatch):
    pathfinder = __import__("pytest").importorskip("cuda.pathfinder")
    wheel, home = tmp_path / "wheel", tmp_path / "home"
    for folder in (wheel, home / "include"):
        folder.mkdir(parents=True)
        (folder / "cuda.h").write_text("/* stand-in */\n")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setattr(pathfinder, "find_nvidia_header_directory", lambda name: str(wheel) if name == "cudart" else None)
    assert tmalang.get_cuda_include() == str(wheel)
    monkeypatch.setattr(pathfinder, "find_nvidia_header_directory", lambda name: None)
    assert tmalang.get_cuda_include() == str(home / "include")


def test_ptxas_is_found_through_cuda_pathfinder_after_tmalang_ptxas(tmp_path, monkeypatch):
    import pytest

    from tmalang.backend import ptxas

    pathfinder = pytest.importorskip("cuda.pathfinder")
    mine = tmp_path / "my-ptxas"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    monkeypatch.delenv("TMALANG_PTXAS", raising=False)
    monkeypatch.setattr(pathfinder, "find_nvidia_binary_utility", lambda name: f"/found/by/pathfinder/{name}")
    ptxas.find_ptxas.cache_clear()
    try:
        assert ptxas.find_ptxas() == "/found/by/pathfinder/ptxas"
        monkeypatch.setenv("TMALANG_PTXAS", str(mine))
        ptxas.find_ptxas.cache_clear()
        assert ptxas.find_ptxas() == str(mine)       # the user's choice comes first
    finally:
        ptxas.find_ptxas.cache_clear()
