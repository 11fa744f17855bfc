"""The wait-cycle check (E047, tmalang/sema/wait_cycles.py) against the interpreter.

A program of the high-level layer whose roles wait for each other through their pipelines
compiles to a protocol that hangs: the interpreter reports E401, the GPU hangs. The check must
refuse exactly those. So every fixture in tests/wait_cycles/ (cycles of two and three roles,
through full rings, nested blocks, steps, split and peer loops, a tmem pipeline, and look-alikes
that run) is compiled twice: with the check, and without it (monkeypatched away) for the
interpreter, and the two verdicts must agree; so must they on random programs
(tests/wait_cycle_programs.py), whose outputs must also match NumPy where they run.
Each fixture says its target and the dims the interpreter runs it at (`// arch:`, `// dims:`).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, example_arch
from wait_cycle_programs import random_program

import tmalang
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.interp import interpret
from tmalang.cli.run import _random_inputs
from tmalang.sema import wait_cycles

FIXTURES = sorted((ROOT / "tests" / "wait_cycles").glob("*.tma"))
INTERP_WAIT = re.compile(r"role '(\w+)', warp \d+(?: \([^)]*\))? waits at (\S+) on mbarrier")
CHECK_WAIT = re.compile(r"role '(\w+)' waits at (\S+), and")


def _directives(path) -> tuple[str, dict[str, int]]:
    text = path.read_text()
    arch = re.search(r"^// arch: (\S+)$", text, re.M).group(1)
    dims = re.search(r"^// dims: (.+)$", text, re.M).group(1)
    return arch, {k.strip(): int(v) for k, v in (pair.split("=") for pair in dims.split(","))}


def _refusal(text: str, name: str, arch: str) -> TmalangError | None:
    """The check's verdict: its E047, or None when the program compiles (any other error fails)."""
    try:
        compile_source(text, name, Options(arch=arch), until="ir")
    except TmalangError as caught:
        assert caught.code == "E047", caught.render()
        return caught
    return None


def _unchecked(text: str, name: str, arch: str, monkeypatch):
    """The compilation the check would have refused: what the GPU would run."""
    with monkeypatch.context() as patched:
        patched.setattr(wait_cycles, "check", lambda info: None)
        return compile_source(text, name, Options(arch=arch), until="ir")


def _run(c, args: list, dims: dict, seed: int) -> TmalangError | None:
    """The interpreter's protocol verdict under random schedules: E401, or None when it ran clean."""
    try:
        interpret(c.ir, c.manifest, *args, dims=dict(dims), seed=seed, explore=2)
    except TmalangError as caught:
        assert caught.code == "E401", caught.render()
        return caught
    return None


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_refused_exactly_when_the_interpreter_deadlocks(path, monkeypatch):
    arch, dims = _directives(path)
    name = str(path.relative_to(ROOT))
    refused = _refusal(path.read_text(), name, arch)
    c = _unchecked(path.read_text(), name, arch, monkeypatch)
    hang = _run(c, _random_inputs(c.manifest, dict(dims), np.random.default_rng(1)), dims, seed=5)
    assert (refused is None) == (hang is None), (refused or hang).render()
    if refused is not None:
        # every role of the cycle is one the interpreter found waiting, at the block the check names
        named = {m.groups() for n in refused.notes if (m := CHECK_WAIT.search(n))}
        waiting = {m.groups() for n in hang.notes if (m := INTERP_WAIT.search(n))}
        assert len(named) >= 2 and named <= waiting, (named, waiting)


def test_the_fixtures_hold_cycles_and_look_alikes():
    """Both verdicts occur often, so the test above can fail either way."""
    verdicts = [_refusal(p.read_text(), p.name, _directives(p)[0]) is None for p in FIXTURES]
    assert verdicts.count(True) >= 6 and verdicts.count(False) >= 6, verdicts


def test_a_full_ring_closes_the_cycle_only_once_its_stages_are_used(monkeypatch):
    """With S stages a role can run S items ahead: the cycle of full_ring_steps.tma needs more steps
    than that. The interpreter runs S steps clean and hangs at S + 1; the check refuses the kernel
    (K is bound at launch) and names the S + 1 steps."""
    path = ROOT / "tests" / "wait_cycles" / "full_ring_steps.tma"
    text, (arch, _) = path.read_text(), _directives(path)
    stages = int(re.search(r"pipeline keys\[(\d+)\]", text).group(1))
    c = _unchecked(text, path.name, arch, monkeypatch)
    for steps, hangs in ((stages, False), (stages + 1, True)):
        dims = {"M": 100, "K": 64 * steps}
        args = _random_inputs(c.manifest, dict(dims), np.random.default_rng(steps))
        assert (_run(c, args, dims, seed=steps) is not None) == hangs, steps
    refused = _refusal(text, path.name, arch)
    assert refused is not None
    assert any(f"runs {stages + 1} times (K = {64 * (stages + 1)})" in n for n in refused.notes), refused.notes


def test_the_user_s_own_barriers_are_not_judged(monkeypatch):
    """With an mbarrier of the user's the protocol is the user's (the interpreter checks it): the
    same cycle, with a barrier role a arrives on and waits for each tile, compiles, and hangs on
    the interpreter."""
    path = ROOT / "tests" / "wait_cycles" / "two_roles.tma"
    arch, dims = _directives(path)
    edits = [("    grid persistent\n", "    grid persistent\n    mbarrier tick(1)\n"),
             ("        for tile (m, n) in tiles(x, X) {\n            consume b2a",
              "        for tile (m, n) in tiles(x, X) as i {\n            elect { arrive tick }\n"
              "            wait tick, i & 1\n            consume b2a")]
    text = path.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    assert _refusal(text, path.name, arch) is None
    c = compile_source(text, path.name, Options(arch=arch), until="ir")
    assert _run(c, _random_inputs(c.manifest, dict(dims), np.random.default_rng(0)), dims, seed=1) is not None


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_passes_the_check(path):
    assert _refusal(path.read_text(), path.name, example_arch(path)) is None


# ---- random programs ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(48))
def test_random_programs_are_refused_exactly_when_they_hang(seed, monkeypatch):
    """Refused iff the interpreter hangs at a K large enough to fill every ring (loops over K run
    deepest + 2 steps); where accepted, the program runs clean at that K and at one step, and each
    output is x times the number of times its consume block runs per tile (float64 reference)."""
    program = random_program(random.Random(seed))
    refused = _refusal(program.text, "random.tma", "sm_90a")
    c = _unchecked(program.text, "random.tma", "sm_90a", monkeypatch)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((100, 132)).astype(np.float32)
    for steps in (program.deepest + 2, 1):
        outputs = [np.zeros_like(x) for _ in program.outputs]
        hang = _run(c, [x, np.zeros((64 * steps, 16), np.float32), *outputs], {"K": 64 * steps}, seed)
        if refused is not None:
            assert hang is not None, f"refused, but runs clean:\n{program.text}\n{refused.render()}"
            return
        assert hang is None, f"accepted, but hangs at K = {64 * steps}:\n{program.text}\n{hang.render()}"
        for out, (_, loop) in zip(outputs, program.outputs):
            runs = steps if loop == "K" else 1 if loop is None else loop
            np.testing.assert_allclose(out, runs * x.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_random_programs_hold_both_verdicts():
    verdicts = [_refusal(random_program(random.Random(s)).text, "random.tma", "sm_90a") is None
                for s in range(48)]
    assert 8 <= verdicts.count(False) <= 40, verdicts.count(False)


# ---- on the GPU ----------------------------------------------------------------------------------

# Each refused sm_90a fixture whose waiting warps all wait on mbarriers (the watchdog stops those;
# a warp left at a named barrier would keep the GPU busy until the process exits)
GPU_HANGS = ["two_roles.tma", "three_roles.tma", "full_ring.tma", "full_ring_steps.tma", "nested_hold.tma",
             "steps_cycle.tma", "split_part_cycle.tma"]
GPU_RUNS = ["two_roles_ok.tma", "three_roles_ok.tma", "deep_ring.tma", "nested_hold_deeper.tma", "steps_ok.tma",
            "steps_never_run.tma", "peer_ok.tma"]

HANG_PROBE = r"""
import json, sys
import numpy as np
import tmalang
from tmalang.cli.run import _random_inputs
from tmalang.sema import wait_cycles
wait_cycles.check = lambda info: None        # the kernel as it compiled before the check: what would hang
path, arch, dims = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
kernel = tmalang.compile(open(path).read(), name=path, arch=arch, watchdog=True)
args = _random_inputs(kernel.manifest, dims, np.random.default_rng(0))
try:
    kernel(*args)
    report = {"code": None}
except tmalang.TmalangError as exc:
    report = {"code": exc.code, "notes": exc.notes, "rendered": exc.render()}
print(json.dumps(report))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_HANGS)
def test_h100_hangs_where_the_check_refuses(name):
    """The refused kernel, compiled without the check and with the watchdog, hangs on the H100
    (E218), and every wait the check names is one the watchdog reports."""
    path = ROOT / "tests" / "wait_cycles" / name
    arch, dims = _directives(path)
    relative = str(path.relative_to(ROOT))
    refused = _refusal(path.read_text(), relative, arch)
    assert refused is not None
    env = {**os.environ, "TMALANG_WATCHDOG_TIMEOUT": "1"}
    run = subprocess.run([sys.executable, "-c", HANG_PROBE, relative, arch, json.dumps(dims)], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["code"] == "E218", report
    named = {m.groups() for n in refused.notes if (m := CHECK_WAIT.search(n))}
    gpu = {m.groups() for n in report["notes"] if (m := INTERP_WAIT.search(n))}
    assert len(named) >= 2 and named <= gpu, (named, report["rendered"])


def _copy(a: np.ndarray) -> np.ndarray:
    """A copy in the same padded rows (_random_inputs pads them to the 16 bytes TMA needs)."""
    return a.copy() if a.base is None else a.base.copy()[..., : a.shape[-1]]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_RUNS)
def test_h100_runs_the_accepted_look_alikes_as_the_interpreter_does(name):
    path = ROOT / "tests" / "wait_cycles" / name
    arch, dims = _directives(path)
    kernel = tmalang.compile(path.read_text(), name=name, arch=arch, watchdog=True)
    args = _random_inputs(kernel.manifest, dict(dims), np.random.default_rng(3))
    on_gpu = [_copy(a) if isinstance(a, np.ndarray) else a for a in args]
    kernel(*on_gpu)
    kernel.interpret(*args)
    for i, (gpu, interpreted) in enumerate(zip(on_gpu, args)):
        np.testing.assert_array_equal(gpu, interpreted, err_msg=f"argument {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(24))
def test_h100_runs_accepted_random_programs_as_numpy_says(seed):
    program = random_program(random.Random(seed))
    if _refusal(program.text, "random.tma", "sm_90a") is not None:
        pytest.skip("refused: its hang is the interpreter's to show")
    kernel = tmalang.compile(program.text, name="random.tma", arch="sm_90a", watchdog=True)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((100, 132)).astype(np.float32)
    steps = program.deepest + 2
    outputs = [np.zeros_like(x) for _ in program.outputs]
    kernel(x, np.zeros((64 * steps, 16), np.float32), *outputs)
    for out, (_, loop) in zip(outputs, program.outputs):
        runs = steps if loop == "K" else 1 if loop is None else loop
        np.testing.assert_allclose(out, runs * x.astype(np.float64), rtol=1e-6, atol=1e-6)
