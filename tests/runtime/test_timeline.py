"""The hardware timeline (backend/timeline_codegen.py, runtime/timeline.py, Kernel.profile): stamps
at each role's waits, arrivals, TMA issues and MMA commits, read back into the interpreter's trace
format."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.compiler import Options, compile_source
from tmalang.contract import timeline as layout
from tmalang.contract.errors import LaunchError
from tmalang.contract.manifest import Manifest
from tmalang.runtime.timeline import to_trace

GEMM = ROOT / "examples" / "gemm_sm90.tma"


def _gemm(**options):
    return compile_source(GEMM.read_text(), str(GEMM), Options(timeline=True, **options), until="cubin")


def test_every_role_s_waits_issues_and_commits_are_stamped():
    c = _gemm()
    kinds = {(e.role, e.kind, e.name) for e in c.manifest.events}
    assert {("producer", "wait", "wait ring.empty"), ("producer", "tma load", "tma load A"),
            ("producer", "tma load", "tma load B"), ("consumer", "wait", "wait ring.full"),
            ("consumer", "mma commit", "mma commit"), ("consumer", "tma store", "tma store C")} <= kinds
    assert all(e.where.startswith(str(GEMM)) for e in c.manifest.events)
    assert ".visible .global .align 8 .b8 tmalang$timeline[16]" in c.ptx
    assert c.stats.spill_stores == 0 and "Potential Performance Loss" not in c.stats.log
    assert Manifest.from_json(json.loads(json.dumps(c.manifest.to_json()))) == c.manifest
    plain = compile_source(GEMM.read_text(), str(GEMM), Options(), until="ptx")
    assert "tmalang$timeline" not in plain.ptx and "events" not in plain.manifest.to_json()


def test_the_trace_has_a_track_per_warp_named_after_its_role():
    c = _gemm()
    m = c.manifest
    site = {(e.role, e.name): i for i, e in enumerate(m.events)}
    E = layout.Event
    tracks = {
        (0, 0): [E(1_000, site["producer", "wait ring.empty"], layout.BEGIN, 2), E(3_500, site["producer", "wait ring.empty"], layout.END, 2),
                 E(4_000, site["producer", "tma load A"], layout.INSTANT, 0)],
        (0, 4): [E(2_000, site["consumer", "wait ring.full"], layout.BEGIN, 1), E(9_000, site["consumer", "wait ring.full"], layout.END, 1),
                 E(9_500, site["consumer", "mma commit"], layout.INSTANT, 0)],
    }
    events = json.loads(to_trace(tracks, m).to_json())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {(0, 0): "warp 0 (producer)", (0, 4): "warp 4 (consumer)"}
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == ["CTA 0"]
    slices = {(e["tid"], e["name"]): (e["ts"], e["dur"]) for e in events if e["ph"] == "X"}
    assert slices == {(0, "wait ring.empty[2]"): (0.0, 2.5), (4, "wait ring.full[1]"): (1.0, 7.0)}
    instants = {(e["tid"], e["name"], e["ts"]) for e in events if e["ph"] == "i"}
    assert instants == {(0, "tma load A", 3.0), (4, "mma commit", 8.5)}


def test_profile_checks_its_ctas_before_anything_runs():
    k = tmalang.compile_file(GEMM)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(LaunchError, match="ctas must be a positive int"):
            k.profile(np.zeros((1, 1)), ctas=bad)


@pytest.mark.gpu
def test_a_gemm_on_the_h100_leaves_a_timeline_of_its_pipeline():
    import ml_dtypes

    rng = np.random.default_rng(5)
    m, n, k = 300, 520, 1000                 # K: 16 steps of 64 (the last one partial)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), ml_dtypes.bfloat16)
    kernel = tmalang.compile_file(GEMM)
    trace = kernel.profile(a, b, c, ctas=2)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.abs(c.astype(np.float64) - reference).max() <= 0.02 * np.abs(reference).max()
    events = json.loads(trace.to_json())["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks[0, 0] == "warp 0 (producer)" and all(tracks[0, w] == f"warp {w} (consumer)" for w in range(4, 12))
    assert {pid for pid, _ in tracks} == {0, 1}

    def on(tid, ph, prefix):
        return [e for e in events if e["pid"] == 0 and e.get("tid") == tid and e["ph"] == ph and e["name"].startswith(prefix)]

    steps = -(-k // 64)
    assert len(on(0, "i", "tma load A")) >= steps and len(on(0, "X", "wait ring.empty")) >= steps
    assert len(on(4, "i", "mma commit")) >= steps and len(on(4, "X", "wait ring.full")) >= steps
    loads, commits = on(0, "i", "tma load A"), on(4, "i", "mma commit")
    assert loads[0]["ts"] < commits[0]["ts"]          # the first slice is loaded before it is multiplied
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")
    kernel(a, b, c)                                   # plain launches after a profile are untouched


def test_tmalangc_run_names_its_engine(capsys):
    from tmalang.cli.main import main

    copy = str(ROOT / "examples" / "tma_copy.tma")
    for argv in ([copy], [copy, "--interpret", "--gpu"], [copy, "--gpu", "--seed", "1"],
                 [copy, "--interpret", "--watchdog"]):
        with pytest.raises(SystemExit) as exited:
            main(["run", *argv])
        assert exited.value.code == 2
    assert "--seed and --explore choose the interpreter's schedules" in capsys.readouterr().err


@pytest.mark.gpu
def test_tmalangc_run_gpu_trace_writes_the_hardware_timeline(tmp_path, capsys):
    from tmalang.cli.main import main

    out = tmp_path / "gemm.json"
    assert main(["run", str(GEMM), "--gpu", "--dims", "M=300,N=520,K=200", "--trace", str(out), "--ctas", "2"]) == 0
    assert "ran on the GPU" in capsys.readouterr().out
    events = json.loads(out.read_text())["traceEvents"]
    roles = {e["args"]["name"].split("(")[1].rstrip(")") for e in events if e["name"] == "thread_name"}
    assert roles == {"producer", "consumer"}
    assert any(e["ph"] == "X" and e["name"].startswith("wait ring.full") for e in events)


def test_module_globals_are_written_whole_and_checked_for_size(monkeypatch):
    from tmalang.contract import watchdog as watchdog_layout
    from tmalang.runtime import driver

    assert len(layout.state(1, 2, 3)) == layout.GLOBAL_BYTES
    assert len(watchdog_layout.state(1, 2, 3)) == watchdog_layout.GLOBAL_BYTES
    calls = []
    sizes = {layout.GLOBAL: layout.GLOBAL_BYTES, "short": 8}

    def fake(name, *args):
        calls.append((name, *args))
        return (0x1000, sizes[args[1].decode()]) if name == "cuModuleGetGlobal" else None

    monkeypatch.setattr(driver, "call", fake)
    assert driver.write_global("module", layout.GLOBAL, layout.state(7, 1, 64)) == 0x1000
    assert calls[-1] == ("cuMemcpyHtoD", 0x1000, layout.state(7, 1, 64), layout.GLOBAL_BYTES)
    with pytest.raises(LaunchError, match="the kernel's short is 8 bytes, expected 16"):
        driver.write_global("module", "short", layout.state(0, 0, 0))
