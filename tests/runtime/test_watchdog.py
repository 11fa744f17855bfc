"""The watchdog (backend/watchdog_codegen.py, runtime/watchdog.py): every mbarrier wait loop times
out, reports what it waited on and traps; the runtime names the waits as the interpreter does and
recovers. The GPU tests hang kernels of the explicit layer on purpose, each in a process of its
own (the recovery resets the device's context, which would take other tests' memory with it)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from split_cases import load_dir
from tmalang.cli.main import main
from tmalang.compiler import Options, compile_source
from tmalang.contract import watchdog as layout
from tmalang.contract.errors import LaunchError
from tmalang.contract.manifest import Manifest
from tmalang.runtime import watchdog

VERIFY = {c.name: c for c in load_dir(ROOT / "tests" / "verify", ROOT)}
# a parity that never completes, an expect_tx never met, a missing arrival, and two roles that
# each wait for the other (the interpreter's E401 cases of tests/verify/barriers.tma)
HANGS = ["deadlock_second_wait", "deadlock_expect_tx_too_many_bytes", "deadlock_arrive_after_wait",
         "deadlock_consumer_inverted_parity"]
NOTE = re.compile(r"role '(\w+)', warp \d+ waits at (\S+) on mbarrier (\S+)\[(\d+)\] parity (\d)")


def _compile(case, watchdog=True, **options):
    return compile_source(case.source(), case.relative, Options(arch=case.arch, watchdog=watchdog, **options),
                          until="ptx")


def _waits(notes: list[str]) -> set[tuple]:
    """(role, where, barrier, stage, parity) of every wait a diagnostic's notes name."""
    return {m.groups() for n in notes if (m := NOTE.search(n))}


def test_every_wait_loop_is_watched():
    c = _compile(VERIFY["deadlock_consumer_inverted_parity"])
    waits = c.manifest.waits
    assert [(w.role, w.barrier) for w in waits] == [("loader", "free"), ("writer", "full")]
    assert all(w.file == "tests/verify/barriers.tma" and w.text.strip().startswith("wait ") for w in waits)
    assert c.ptx.count("%globaltimer") == 2 * len(waits)           # per site: the deadline, the check
    assert ".visible .global .align 8 .b8 tmalang$watchdog[32]" in c.ptx
    assert "trap;" not in c.ptx and "exit;" in c.ptx      # a stopped kernel exits: a trap is sticky
    assert c.ptx.count("@p bar.arrive") == 1              # only the writers (two warps) have a role barrier to free


def test_the_watchdog_is_one_switch_away(monkeypatch, tmp_path):
    case = VERIFY["deadlock_second_wait"]
    off = compile_source(case.source(), case.relative, Options(arch=case.arch), until="ptx")   # off by default
    assert not off.manifest.waits and "globaltimer" not in off.ptx and "tmalang$watchdog" not in off.ptx
    monkeypatch.setenv("TMALANG_WATCHDOG", "1")
    assert "globaltimer" in compile_source(case.source(), case.relative, Options(arch=case.arch), until="ptx").ptx
    assert "globaltimer" in tmalang.compile(case.source(), arch=case.arch).ptx
    monkeypatch.setenv("TMALANG_WATCHDOG", "0")
    path = case.write(tmp_path)
    outputs = {}
    for flag in ("--watchdog", "--no-watchdog"):   # the command line's switch beats the environment,
        out = tmp_path / f"{flag}.ptx"                # and the whole-compile cache keeps the two apart
        assert main([str(path), "--arch", case.arch, flag, "-o", str(out)]) == 0
        outputs[flag] = out.read_text()
    assert "globaltimer" in outputs["--watchdog"] and "globaltimer" not in outputs["--no-watchdog"]


def test_the_manifest_keeps_its_wait_sites():
    c = _compile(VERIFY["deadlock_consumer_inverted_parity"])
    data = json.loads(json.dumps(c.manifest.to_json()))
    assert Manifest.from_json(data) == c.manifest
    assert "waits" not in _compile(VERIFY["deadlock_second_wait"], watchdog=False).manifest.to_json()


def _fake_report(c, entries: list[dict]) -> tuple[watchdog._Record, ctypes.Array]:
    """A record as a kernel would have left it, in ordinary host memory."""
    memory = ctypes.create_string_buffer(layout.RECORD_BYTES)
    for index, fields in enumerate(entries):
        words = {name: 0 for name in layout.Entry._fields} | {"written": 1, "tag": 7} | fields
        ctypes.memmove(ctypes.addressof(memory) + index * 4 * layout.ENTRY_WORDS,
                       np.array([words[n] for n in layout.Entry._fields], np.uint32).tobytes(), 4 * layout.ENTRY_WORDS)
    record = watchdog._Record(0, ctypes.addressof(memory), 0, {7: watchdog._Armed(c.manifest, 0)})
    record.rearm = lambda: ctypes.memset(ctypes.addressof(memory), 0, layout.RECORD_BYTES)   # no module to write
    return record, memory


def test_a_report_names_each_wait_as_the_interpreter_does():
    case = VERIFY["deadlock_consumer_inverted_parity"]
    c = _compile(case)
    free, full = c.manifest.waits
    record, memory = _fake_report(c, [
        dict(site=0, warp=0, offset=free.offset, parity=0, timeout_lo=10**9),
        dict(site=1, warp=1, lane=0, offset=full.offset, parity=0, word_lo=0xABC),
        dict(site=1, warp=1, lane=3, offset=full.offset, parity=0),      # a second lane of the same warp
        dict(site=1, warp=2, cta_x=5, offset=full.offset, parity=0),
        *(dict(site=1, warp=1, cta_x=x, offset=full.offset, parity=0) for x in (7, 1, 2, 3, 2))])
    assert record.fired()
    report = watchdog._report(record, stuck=False)
    assert report.code == "E218" and "kernel 'handoff' hung on the GPU" in report.message and "1 s" in report.message
    assert report.span.location() == f"tests/verify/barriers.tma:{free.line}:{free.col}"
    rendered = report.render()
    assert "\n    " + free.text + "\n" in rendered and "^^^^" in rendered
    waits = [n for n in report.notes if NOTE.search(n)]
    assert waits == [
        f"CTA 0: role 'loader', warp 0 waits at tests/verify/barriers.tma:{free.line}:{free.col} on mbarrier free[0] "
        "parity 0 (the phase in progress has parity 0)",
        f"5 CTAs (0-3, 7): role 'writer', warp 1 waits at tests/verify/barriers.tma:{full.line}:{full.col} on "
        "mbarrier full[0] parity 0 (the phase in progress has parity 0)",     # one note for the same wait
        f"CTA 5: role 'writer', warp 2 waits at tests/verify/barriers.tma:{full.line}:{full.col} on mbarrier full[0] "
        "parity 0 (the phase in progress has parity 0)"]
    assert "this process can launch again" in report.notes[-2]
    assert not record.fired() and not record.entries()            # cleared for the next launch
    with pytest.raises(tmalang.TmalangError) as interp:
        tmalang.compile(case.source(), name=case.relative, arch=case.arch).interpret(
            np.ones((32, 64), np.float32), np.zeros((32, 64), np.float32))
    assert interp.value.code == "E401"
    assert _waits(report.notes) <= _waits(interp.value.notes)
    assert ctypes.sizeof(memory) == layout.RECORD_BYTES


def test_a_long_list_of_ctas_is_cut():
    assert watchdog._cta_list([(x, 0, 0) for x in range(0, 40, 2)]) == "0, 2, 4, 6, 8, 10, 12, 14, ..."
    assert watchdog._cta_list([(0, 0, 0), (1, 0, 0), (5, 0, 0)]) == "0-1, 5"
    assert watchdog._cta_list([(0, 1, 0), (2, 0, 0)]) == "(0, 1, 0), (2, 0, 0)"


def test_a_stuck_kernel_is_reported_without_clearing_the_record():
    c = _compile(VERIFY["deadlock_second_wait"])
    record, memory = _fake_report(c, [dict(site=0, warp=0, offset=c.manifest.waits[0].offset, parity=1)])
    report = watchdog._report(record, stuck=True)
    assert report.code == "E218" and "blocked at a named barrier" in report.notes[-2]
    assert record.fired()       # the kernel still runs: nothing is re-armed under it


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_bad_timeout_is_a_launch_error(monkeypatch, value):
    monkeypatch.setenv("TMALANG_WATCHDOG_TIMEOUT", value)
    with pytest.raises(LaunchError, match="TMALANG_WATCHDOG_TIMEOUT"):
        watchdog.timeout_ns()
    monkeypatch.setenv("TMALANG_WATCHDOG_TIMEOUT", "0.25")
    assert watchdog.timeout_ns() == 250_000_000


# ---- on the GPU ---------------------------------------------------------------------------------

PROBE = r"""
import json, sys, time
import numpy as np
import tmalang

source, name, arch, shape, via_torch = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5] == "1"
kernel = tmalang.compile(open(source).read(), name=name, arch=arch)
rng = np.random.default_rng(0)
src = rng.standard_normal(shape).astype(np.float32)
dst = np.zeros(shape, np.float32)
if via_torch:
    import torch
    a, b = torch.from_numpy(src).cuda(), torch.from_numpy(dst).cuda()
    torch.cuda.synchronize()
start = time.monotonic()
try:
    if via_torch:
        kernel(a, b)
        kernel.synchronize()
    else:
        kernel(src, dst)
    report = {"code": None}
except tmalang.TmalangError as exc:
    report = {"code": exc.code, "message": exc.message, "notes": exc.notes, "rendered": exc.render()}
report["seconds"] = time.monotonic() - start
report["dst_untouched"] = bool((dst == 0).all())       # a NumPy output is not copied back
if via_torch:
    # the context survived: torch's tensors keep their data, and torch can still compute
    report["torch_still_works"] = bool(np.array_equal((a + 1).cpu().numpy(), src + 1))
copy = tmalang.compile_file("examples/tma_copy.tma")    # the same process launches again
x = rng.standard_normal((300, 200)).astype(np.float32)
y = np.full((300, 200), np.nan, np.float32)
copy(x, y)
report["next_launch_exact"] = bool(np.array_equal(x, y))
print(json.dumps(report))
"""


def _hang_on_gpu(case, tmp_path, via_torch=False) -> dict:
    path = tmp_path / "case.tma"
    path.write_text(case.source())
    env = {**os.environ, "TMALANG_WATCHDOG": "1", "TMALANG_WATCHDOG_TIMEOUT": "1"}
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", PROBE, str(path), case.relative, case.arch, json.dumps([200, 300]),
                          "1" if via_torch else "0"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    report["wall"] = time.monotonic() - started
    return report


def _interpreter_waits(case) -> set[tuple]:
    kernel = tmalang.compile(case.source(), name=case.relative, arch=case.arch, watchdog=True)
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel.interpret(np.ones((200, 300), np.float32), np.zeros((200, 300), np.float32))
    assert caught.value.code == "E401"
    return _waits(caught.value.notes)


@pytest.mark.gpu
@pytest.mark.parametrize("name", HANGS)
def test_a_hang_raises_e218_naming_the_interpreter_s_waits(name, tmp_path):
    case = VERIFY[name]
    report = _hang_on_gpu(case, tmp_path)
    assert report["code"] == "E218", report
    assert report["seconds"] < 5, report["seconds"]          # a 1 s timeout, a 50 ms grace, the report
    gpu, interp = _waits(report["notes"]), _interpreter_waits(case)
    assert gpu and gpu <= interp, (gpu, interp)
    first = NOTE.search(report["notes"][0]).groups()
    assert first in interp
    assert report["rendered"].startswith(f"{first[1]}: error[E218]")   # the caret sits at the first wait
    assert report["next_launch_exact"] and report["dst_untouched"]


@pytest.mark.gpu
def test_a_hang_with_device_arrays_is_reported_by_synchronize(tmp_path):
    pytest.importorskip("torch")
    case = VERIFY["deadlock_second_wait"]
    report = _hang_on_gpu(case, tmp_path, via_torch=True)
    assert report["code"] == "E218" and report["seconds"] < 5, report
    assert _waits(report["notes"]) <= _interpreter_waits(case)
    assert report["next_launch_exact"] and report["torch_still_works"]


@pytest.mark.gpu
def test_a_healthy_gemm_gives_the_same_bits_with_and_without_the_watchdog():
    rng = np.random.default_rng(11)
    import ml_dtypes
    m, n, k = 333, 517, 200          # not multiples of the 128 x 256 x 64 tiles
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    outs = {}
    for on in (True, False):
        c = np.zeros((m, 520), ml_dtypes.bfloat16)[:, :n]
        tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma", watchdog=on)(a, b, c)
        outs[on] = c.astype(np.float64)
    np.testing.assert_array_equal(outs[True], outs[False])
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.abs(outs[True] - reference).max() <= 0.02 * np.abs(reference).max()


@pytest.mark.gpu
def test_a_user_kernel_s_hang_is_named_by_tmalangc_run_gpu_as_by_the_interpreter(tmp_path):
    # tests/user_kernels/handoff_tx_bug.tma was written from the docs: expect_tx counts padded rows.
    # 6000 tiles: more than an H100 holds CTAs of it, so each CTA's loader comes back for a second
    # tile and waits for the buffer's release too (with one tile each, only the storers wait)
    path, dims = "tests/user_kernels/handoff_tx_bug.tma", "M=64000,N=132"
    env = {**os.environ, "TMALANG_WATCHDOG_TIMEOUT": "1"}

    def run(*flags):
        return subprocess.run([sys.executable, "-m", "tmalang", "run", path, "--dims", dims, *flags],
                              capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)

    interp, gpu = run("--interpret"), run("--gpu", "--watchdog")
    assert interp.returncode == 1 and "error[E401]" in interp.stderr
    assert gpu.returncode == 1 and "error[E218]" in gpu.stderr, gpu.stderr
    gpu_waits, interp_waits = _waits(gpu.stderr.splitlines()), _waits(interp.stderr.splitlines())
    assert {w[0] for w in gpu_waits} == {"loader", "storer"} and gpu_waits <= interp_waits
