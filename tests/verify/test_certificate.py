"""Certificates of verify (tmalang/verify/certificate.py) and their independent checker
(tmalang/tools/certificate_check.py).

- a verified launch's certificate is accepted by the checker, for examples of every kind
  (TMA rings, wgmma, clusters and multicast, named barriers, tcgen05);
- every tampering is rejected, with its reason: a recorded phase, a deleted step, two steps'
  times swapped across a happens-before edge, an arrival count, a wait's parity, the IR text,
  a missing field, a claimed count;
- a buggy kernel gets no certificate;
- the checker shares no code with the verifier: it imports the standard library only, and
  checking a certificate loads no module of tmalang.
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys

import numpy as np
import pytest

import tmalang
from conftest import ROOT, example_arch
from references import CASES
from tmalang.tools.certificate_check import check
from tmalang.ir.printer import print_ir
from tmalang.verify import verify

CHECKER = ROOT / "tmalang" / "tools" / "certificate_check.py"
ACCEPTED = ["tma_copy", "gemm_sm90", "gemm_cluster2x2_sm90", "gemm_pingpong_sm90", "dsmem_ring_sm90",
            "attention_sm100", "gemm_multicast_sm100"]


def _compiled(name):
    path = ROOT / "examples" / f"{name}.tma"
    return tmalang.compile_file(path, arch=example_arch(path))


def _certified(name, ctas, seed=5):
    kernel = _compiled(name)
    args, _ = CASES[kernel.name](np.random.default_rng(seed), (200, 260))
    verdict = verify(kernel._c.ir, kernel.manifest, *args, ctas=ctas, certificate=True)
    assert verdict.verified and verdict.certificate is not None, verdict.summary()
    return kernel, json.loads(json.dumps(verdict.certificate))   # as a file gives it back


@pytest.mark.parametrize("ctas", [1, 3])
@pytest.mark.parametrize("name", ACCEPTED)
def test_a_verified_launch_is_certified_and_the_checker_accepts_it(name, ctas):
    kernel, doc = _certified(name, ctas)
    assert check(doc, print_ir(kernel._c.ir)) == []
    assert doc["launch"]["ctas"] == ctas and doc["launch"]["target"] == kernel.manifest.arch
    assert doc["kernel"] == kernel.name
    assert doc["checks"]["C"]["waits"] > 0                            # it checked something
    assert doc["checks"]["A"]["events"] > 0 and doc["checks"]["I"]["uses"] > 0


@pytest.fixture(scope="module")
def gemm():
    return _certified("gemm_sm90", 2, seed=7)


def _rejected(doc, *words, ir=None):
    reasons = check(doc, ir)
    assert reasons, "a tampered certificate was accepted"
    assert any(all(w in r for w in words) for r in reasons), reasons
    return reasons


def _steps(doc, kind):
    """(agent, step, event) for every event of `kind`, in the certificate's order."""
    return [(a, p, n) for a, agent in enumerate(doc["recording"]["agents"])
            for p, step in enumerate(agent["steps"]) for n, e in enumerate(step) if e[0] == kind]


def _event(doc, a, p, n):
    return doc["recording"]["agents"][a]["steps"][p][n]


def _pick(doc, kind, rng, where=lambda e: True):
    found = [s for s in _steps(doc, kind) if where(_event(doc, *s))]
    assert found, kind
    return found[rng.integers(len(found))]


def test_the_unchanged_certificate_is_accepted(gemm):
    kernel, doc = gemm
    assert check(doc, print_ir(kernel._c.ir)) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_changed_recorded_phase_is_rejected(gemm, seed):
    doc = copy.deepcopy(gemm[1])
    rng = np.random.default_rng(seed)
    kind = ["arrive", "tx", "wait"][seed]
    a, p, n = _pick(doc, kind, rng)
    _event(doc, a, p, n)[3] += int(rng.choice([-1, 1, 2]))
    _rejected(doc, "the certificate says")


@pytest.mark.parametrize("seed", range(3))
def test_a_deleted_step_is_rejected(gemm, seed):
    doc = copy.deepcopy(gemm[1])
    a, p, _ = _pick(doc, "arrive", np.random.default_rng(seed))
    agent = doc["recording"]["agents"][a]
    del agent["steps"][p], agent["times"][p]
    reasons = check(doc)
    assert reasons and any(w in r for r in reasons for w in ("cannot pass", "phase", "differ"))


def test_steps_swapped_across_a_happens_before_edge_are_rejected(gemm):
    """A landing of phase k and a wait that observed phase k exchange their times: each agent's
    steps stay in order, but the wait now runs before the bytes it waited for."""
    doc = copy.deepcopy(gemm[1])
    agents = doc["recording"]["agents"]
    swap = None
    for a, agent in enumerate(agents):
        if agent["key"][0] != "transfer":
            continue
        bar, k, t_land = agent["steps"][0][0][1], agent["steps"][0][0][3], agent["times"][0]
        for b, p, n in _steps(doc, "wait"):
            e, times = _event(doc, b, p, n), agents[b]["times"]
            if e[1] == bar and e[3] == k and times[p] > t_land and (p == 0 or times[p - 1] < t_land) \
                    and (p + 1 == len(times) or times[p + 1] > times[p]):
                swap = (a, b, p)
                break
        if swap:
            break
    assert swap, "no landing and wait to swap"
    a, b, p = swap
    agents[a]["times"][0], agents[b]["times"][p] = agents[b]["times"][p], agents[a]["times"][0]
    _rejected(doc, "cannot pass")


def test_a_changed_arrival_count_is_rejected(gemm):
    doc = copy.deepcopy(gemm[1])
    doc["recording"]["counts"][0][1] += 1
    _rejected(doc, "initialised with count")


def test_an_arrival_count_changed_everywhere_is_rejected_by_the_replay(gemm):
    """The count and the init event agree, so only replaying the barrier shows the change."""
    doc = copy.deepcopy(gemm[1])
    bar, count = doc["recording"]["counts"][0]
    doc["recording"]["counts"][0][1] = count + 1
    for a, p, n in _steps(doc, "init"):
        if _event(doc, a, p, n)[1] == bar:
            _event(doc, a, p, n)[2] = count + 1
    reasons = check(doc)
    assert reasons and any(w in r for r in reasons for w in ("cannot pass", "differ", "the certificate says"))


@pytest.mark.parametrize("seed", range(3))
def test_a_flipped_wait_parity_is_rejected(gemm, seed):
    doc = copy.deepcopy(gemm[1])
    a, p, n = _pick(doc, "wait", np.random.default_rng(seed))
    _event(doc, a, p, n)[2] ^= 1
    _rejected(doc, "cannot pass", "parity")


def test_another_ir_text_is_rejected(gemm):
    kernel, doc = gemm
    ir = print_ir(kernel._c.ir)
    assert check(doc, ir) == []
    _rejected(doc, "sha256", ir=ir.replace("parity=", "parity= ", 1))
    _rejected(doc, "sha256", ir=print_ir(_compiled("tma_copy")._c.ir))


@pytest.mark.parametrize("path", [("checks",), ("launch",), ("ir_sha256",), ("recording", "counts"),
                                  ("recording", "completed"), ("launch", "ctas")])
def test_a_missing_field_is_rejected(gemm, path):
    doc = copy.deepcopy(gemm[1])
    parent = doc
    for name in path[:-1]:
        parent = parent[name]
    del parent[path[-1]]
    _rejected(doc, f"missing field '{path[-1]}'")


def test_a_missing_time_is_rejected(gemm):
    doc = copy.deepcopy(gemm[1])
    del doc["recording"]["agents"][3]["times"]
    _rejected(doc, "missing field 'times'")


@pytest.mark.parametrize("check_name", list("ABCPI"))
def test_a_changed_claim_is_rejected(gemm, check_name):
    doc = copy.deepcopy(gemm[1])
    field = next(k for k in doc["checks"][check_name] if k != "what")
    doc["checks"][check_name][field] += 1
    _rejected(doc, f"check {check_name}: the certificate claims")


def test_a_changed_completed_count_is_rejected(gemm):
    doc = copy.deepcopy(gemm[1])
    doc["recording"]["completed"][-1][1] += 1
    _rejected(doc, "phases each barrier completed")


def test_a_transfer_landing_before_its_issue_is_rejected(gemm):
    doc = copy.deepcopy(gemm[1])
    transfer = next(a for a in doc["recording"]["agents"] if a["key"][0] == "transfer")
    transfer["times"][0] = -1
    _rejected(doc, "lands before the step that issues it")


@pytest.mark.parametrize("bug", ["lagging_waiter", "early_completion", "every_other_phase"])
def test_a_buggy_kernel_gets_no_certificate(tmp_path, bug):
    kernel = tmalang.compile_file(ROOT / "tests" / "verify_bugs" / f"{bug}.tma")
    rng = np.random.default_rng(1)
    src = rng.standard_normal((96, 128)).astype(np.float32)
    target = tmp_path / "bug.json"
    verdict = kernel.verify(src, np.full_like(src, np.nan), ctas=1, certificate=target)
    assert not verdict.verified and verdict.error is not None and verdict.certificate is None
    assert not target.exists()


def test_a_certificate_comes_from_the_order_method_only():
    kernel = _compiled("tma_copy")
    args, _ = CASES[kernel.name](np.random.default_rng(0), (70, 130))
    with pytest.raises(ValueError, match="method='order'"):
        verify(kernel._c.ir, kernel.manifest, *args, ctas=1, method="explore", certificate=True)


def test_kernel_verify_writes_a_file_the_checker_cli_accepts_and_rejects_when_tampered(tmp_path):
    kernel = _compiled("gemm_sm90")
    args, _ = CASES[kernel.name](np.random.default_rng(11), (200, 260))
    cert, ir = tmp_path / "gemm.cert.json", tmp_path / "gemm.ir"
    verdict = kernel.verify(*args, ctas=2, certificate=cert)
    assert verdict.verified and json.loads(cert.read_text()) == json.loads(json.dumps(verdict.certificate))
    ir.write_text(print_ir(kernel._c.ir))
    run = [sys.executable, "-m", "tmalang.tools.certificate_check", str(cert), "--ir", str(ir)]
    ok = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and "accepted" in ok.stdout, ok.stderr
    doc = json.loads(cert.read_text())
    _event(doc, *_pick(doc, "wait", np.random.default_rng(0)))[2] ^= 1
    cert.write_text(json.dumps(doc))
    bad = subprocess.run(run, capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "rejected" in bad.stderr and "cannot pass" in bad.stderr


def test_the_checker_imports_the_standard_library_only():
    tree = ast.parse(CHECKER.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import reaches into tmalang"
            imported.add(node.module.split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_checking_loads_no_module_of_tmalang(tmp_path, gemm):
    """The checker, loaded from its file in a fresh interpreter, accepts the certificate and
    rejects a tampered one without importing anything of tmalang (verify, interp, sema, ...)."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(gemm[1]))
    doc = copy.deepcopy(gemm[1])
    doc["recording"]["counts"][0][1] += 1
    bad.write_text(json.dumps(doc))
    script = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('checker', {str(CHECKER)!r})\n"
        "m = sys.modules['checker'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"print(m.check(json.load(open({str(good)!r}))), bool(m.check(json.load(open({str(bad)!r})))))\n"
        "print(sorted(n for n in sys.modules if n.startswith('tmalang')))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[] True", "[]"], out.stdout


FORGED = {"lagging_waiter": "check B", "every_other_phase": "check B", "early_completion": "check P",
          "bytes_before_arming": "check P"}


@pytest.mark.parametrize("bug", sorted(FORGED))
def test_a_forged_certificate_of_a_buggy_kernel_is_rejected_by_the_checks(bug):
    """verify refuses these kernels; a certificate written anyway from their recorded run (which
    the interpreter completes cleanly, and which replays) fails the checker's own happens-before
    checks: the checker finds the bug without the verifier."""
    from tmalang.interp import interpret
    from tmalang.verify.certificate import certificate_of
    from tmalang.verify.record import Recorder
    kernel = tmalang.compile_file(ROOT / "tests" / "verify_bugs" / f"{bug}.tma")
    src = np.random.default_rng(1).standard_normal((96, 128)).astype(np.float32)
    recorder = Recorder()
    interpret(kernel._c.ir, kernel.manifest, src, np.full_like(src, np.nan), ctas=1, observer=recorder)
    doc = json.loads(json.dumps(certificate_of(kernel._c.ir, kernel.manifest, recorder.recording(),
                                               {"M": 96, "N": 128}, 1)))
    reasons = check(doc)
    assert reasons and all(r.startswith("check ") for r in reasons), reasons
    assert any(r.startswith(FORGED[bug]) for r in reasons), reasons


def test_tmalangc_verify_writes_a_certificate_the_checker_accepts(tmp_path, capsys):
    from tmalang.tools.certificate_check import main as check_main
    from tmalang.cli.main import main
    cert, ir = tmp_path / "copy.json", tmp_path / "copy.ir"
    source = str(ROOT / "examples" / "tma_copy.tma")
    assert main(["verify", source, "--dims", "M=300,N=200", "--ctas", "3", "--certificate", str(cert)]) == 0
    assert f"certificate written to {cert}" in capsys.readouterr().out
    assert main([source, "--emit", "ir", "-o", str(ir)]) == 0
    doc = json.loads(cert.read_text())
    assert doc["launch"] == {"dims": {"M": 300, "N": 200}, "ctas": 3, "target": "sm_90a"}
    assert check_main([str(cert), "--ir", str(ir)]) == 0
    ir.write_text(ir.read_text() + "\n")
    assert check_main([str(cert), "--ir", str(ir)]) == 1
    assert "sha256" in capsys.readouterr().err


def test_tmalangc_verify_writes_no_certificate_for_a_buggy_kernel(tmp_path, capsys):
    from tmalang.cli.main import main
    cert = tmp_path / "bug.json"
    code = main(["verify", str(ROOT / "tests" / "verify_bugs" / "lagging_waiter.tma"), "--dims", "M=96,N=128",
                 "--ctas", "1", "--certificate", str(cert)])
    assert code == 1 and "error[E425]" in capsys.readouterr().err and not cert.exists()
