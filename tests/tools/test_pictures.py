"""docs/pictures/ is made by docs/pictures/make_pictures.py from the compiler's IR and the
interpreter's trace. These tests run the script and check that the committed files are exactly
what it makes today (so a change to the compiler or the interpreter cannot leave a stale picture
behind), and that each SVG is well-formed and shows what the docs say it shows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT

PICTURES = ROOT / "docs" / "pictures"
SCRIPT = PICTURES / "make_pictures.py"
FILES = ["barriers_tma_copy.svg", "barriers_gemm_sm90.svg", "trace_saxpy.svg", "trace_saxpy.json",
         "trace_gemm_sm90_h100.svg"]
SVG = "{http://www.w3.org/2000/svg}"


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def texts(name: str) -> list[str]:
    """Every text the SVG shows, tspans joined."""
    root = ET.parse(PICTURES / name).getroot()
    assert root.tag == SVG + "svg"
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("pictures")
    result = run_script("--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.parametrize("name", FILES)
def test_the_committed_file_is_what_the_script_makes_today(regenerated, name):
    made = (regenerated / name).read_text()
    committed = (PICTURES / name).read_text()
    assert made == committed, f"docs/pictures/{name} is stale: run python docs/pictures/make_pictures.py"


def test_check_mode_passes_on_the_committed_files_and_fails_on_a_stale_one(tmp_path):
    for name in FILES:
        shutil.copy(PICTURES / name, tmp_path / name)
    assert run_script("--check", "--out", str(tmp_path)).returncode == 0
    (tmp_path / FILES[0]).write_text((tmp_path / FILES[0]).read_text().replace("parity 1", "parity 0"))
    result = run_script("--check", "--out", str(tmp_path))
    assert result.returncode == 1
    assert FILES[0] in result.stderr


def test_the_barrier_schedule_has_both_roles_and_the_explain_table():
    shown = texts("barriers_tma_copy.svg")
    assert {"producer", "consumer"} <= set(shown)
    # the table as --explain prints it, then the steps: the consumer waits for full[s] with
    # parity = lap, the producer for empty[s] with the opposite parity
    assert any(t.startswith("ring.full   4       1      32768") for t in shown)
    assert any(t.startswith("ring.empty  4       1      -") for t in shown)
    for slot in range(4):
        assert f"wait full[{slot}] parity 0" in shown and f"wait full[{slot}] parity 1" in shown
        assert f"wait empty[{slot}] parity 1" in shown and f"wait empty[{slot}] parity 0" in shown
        assert f"arrive+tx full[{slot}] 32768 B" in shown
        assert f"full[{slot}] phase 0" in shown and f"empty[{slot}] phase 0" in shown


def test_the_gemm_schedule_shows_the_deferred_release():
    shown = texts("barriers_gemm_sm90.svg")
    assert {"producer", "consumer"} <= set(shown)
    assert "load B -> b[0] multicast" in shown
    # step k's consumer releases step k - 1's slot (one wgmma group stays in flight), in both CTAs
    assert "arrive.cluster empty[3]" in shown and "arrive.cluster empty[0]" in shown


def test_the_trace_picture_has_a_track_per_warp_and_the_tma_engine():
    shown = texts("trace_saxpy.svg")
    for track in ["warp 0 (producer)", "warp 1 (idle)", "warp 4 (consumer)", "warp 7 (consumer)", "TMA engine"]:
        assert track in shown
    assert "mbar_wait" in shown and "tma load" in shown


def test_the_trace_json_is_chrome_trace_events():
    trace = json.loads((PICTURES / "trace_saxpy.json").read_text())
    phases = {e["ph"] for e in trace["traceEvents"]}
    assert phases == {"M", "X", "i"}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert all(e["dur"] >= 1 and e["args"]["at"].startswith("examples/saxpy.tma:") for e in slices)


def test_the_hardware_trace_picture_has_the_gemm_s_roles_and_its_pipeline():
    shown = texts("trace_gemm_sm90_h100.svg")
    for track in ["warp 0 (producer)", "warp 4 (consumer)", "warp 11 (consumer)"]:
        assert track in shown
    assert {"wait ring.empty[0]", "wait ring.full[0]", "tma load A", "mma commit", "microseconds"} <= set(shown)
