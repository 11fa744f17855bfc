"""`verify` on every kernel the project keeps outside examples/: no false positive (issue 28).

- tests/user_kernels/*.tma (kernels written from the docs alone): each verifies on 1 and 3 CTAs,
  or is `not_covered` because its warps' paths depend on the schedule; handoff_tx_bug, the one
  written to be wrong, is refused with the deadlock its header describes;
- the accepted fixtures of the other test folders (whatever compiles there is meant to run clean);
- every complete kernel shown in docs/*.md and README.md (a fenced block that is a whole kernel).

Inputs come from tmalang.cli.run._random_inputs (rows padded to 16 bytes, as TMA needs) at shapes
that are not multiples of the boxes. examples/ are covered by tests/verify/test_verify.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tmalang
from conftest import ROOT, example_arch
from tmalang.cli.run import _random_inputs
from tmalang.verify import verify

USER_KERNELS = ROOT / "tests" / "user_kernels"
# Written to be wrong, and what verify must say about them.
KNOWN_BUGS = {"handoff_tx_bug": "E401"}
# Launch dims: odd shapes; a few kernels bound a dim (scores_softmax: N <= 256 keys; slabsum: S slabs).
DIMS = {"M": 197, "N": 260, "K": 136, "S": 5}
DIMS_FOR = {"scores_softmax": {"N": 200},
            "taps": {"N": 2, "H": 9, "W": 13, "C": 64, "NHW": 234, "C9": 576},   # im2col_taps_prefetched's assumptions
            "causal_block_sums": {"B": 3, "R": 200, "C": 148},
            "softmax_pv": {"T": 50}}
# Fixture folders whose kernels, when they compile, are meant to run clean (tests/verify holds
# deliberately broken ones besides ok/, tests/verify_bugs the protocol bugs of test_verify.py).
FIXTURE_GLOBS = ["*.tma", "global_races/*.tma", "soundness/*.tma", "verify/ok/*.tma", "wait_cycles/*.tma",
                 "conversions/*.tma"]
FIXTURE_DIM, FIXTURE_SMALL_DIMS = 150, {"S": 5, "P": 3}


def kernels_of(path: Path) -> list[str]:
    return re.findall(r"^\s*kernel (\w+)", path.read_text(), re.M)


def _cases(paths) -> list[tuple[Path, str]]:
    return [(p, k) for p in paths for k in kernels_of(p)]


def _launch(kernel, dims: dict, seed: int) -> list:
    return _random_inputs(kernel.manifest, dict(dims), np.random.default_rng(seed))


def _assert_no_false_positive(verdict) -> None:
    assert verdict.error is None, verdict.error.render()
    if not verdict.verified:
        assert verdict.not_covered and "depend on the schedule" in verdict.not_covered, verdict.summary()
    else:
        assert verdict.agents > 0 and verdict.states > 0, verdict.summary()


USER_CASES = _cases(sorted(USER_KERNELS.glob("*.tma")))


def test_every_user_kernel_file_is_covered():
    """The parametrisation below sees every kernel of the folder (a regex miss would skip one)."""
    for path in USER_KERNELS.glob("*.tma"):
        names = kernels_of(path)
        assert names and len(names) == path.read_text().count("\nkernel ") + path.read_text().startswith("kernel ")


@pytest.mark.parametrize("ctas", [1, 3])
@pytest.mark.parametrize("path,name", USER_CASES, ids=[f"{p.stem}-{k}" for p, k in USER_CASES])
def test_user_kernel_verifies(path, name, ctas):
    kernel = tmalang.compile_file(path, kernel=name, arch=example_arch(path))
    args = _launch(kernel, {**DIMS, **DIMS_FOR.get(name, {})}, seed=len(name) + ctas)
    verdict = kernel.verify(*args, ctas=ctas)
    if name in KNOWN_BUGS:
        assert verdict.error is not None and verdict.error.code == KNOWN_BUGS[name], verdict.summary()
        return
    _assert_no_false_positive(verdict)


def test_a_schedule_dependent_user_kernel_is_said_to_be_checked_on_one_schedule():
    """fold_claimed claims its tiles (`dynamic`): not a proof for every schedule, and it says so."""
    path = USER_KERNELS / "block_sums.tma"
    kernel = tmalang.compile_file(path, kernel="fold_claimed")
    verdict = kernel.verify(*_launch(kernel, DIMS, seed=3), ctas=3)
    assert not verdict.verified and verdict.error is None
    assert "tile_claim" in verdict.not_covered and "block_sums.tma:" in verdict.not_covered


def _fixture_cases():
    paths = sorted({p for pattern in FIXTURE_GLOBS for p in (ROOT / "tests").glob(pattern)})
    cases = []
    for path in paths:
        for name in kernels_of(path):
            try:
                tmalang.compile_file(path, kernel=name, arch=example_arch(path))
            except tmalang.TmalangError:
                continue          # a fixture the compiler refuses (E580, E047...): nothing to launch
            cases.append((path, name))
    return cases


FIXTURE_CASES = _fixture_cases()
# tests/verify_bugs/handoff_idle_writer_warp.tma, once tests/handoff_correct.tma: its writer role
# had two warps, only the elected thread arrives on `free`, so warp 2 only waits on `full` and can
# fall two phases behind; both methods find it hanging (E401) with 4 tiles.
HANDOFF_BUG = ROOT / "tests" / "verify_bugs" / "handoff_idle_writer_warp.tma"


def test_fixtures_are_found():
    assert len(FIXTURE_CASES) >= 25
    assert {p.parent.name for p, _ in FIXTURE_CASES} >= {"global_races", "soundness", "ok", "wait_cycles"}


@pytest.mark.parametrize("path,name", FIXTURE_CASES, ids=[f"{p.parent.name}-{p.stem}-{k}" for p, k in FIXTURE_CASES])
def test_accepted_fixture_verifies(path, name):
    kernel = tmalang.compile_file(path, kernel=name, arch=example_arch(path))
    dims = {d: FIXTURE_SMALL_DIMS.get(d, FIXTURE_DIM) for d in _symbols(kernel)}
    _assert_no_false_positive(kernel.verify(*_launch(kernel, dims, seed=7), ctas=2))


def _symbols(kernel) -> list[str]:
    return [d for a in kernel.manifest.args for d in getattr(a, "shape", ()) if isinstance(d, str)]


def _handoff_launch():
    rng = np.random.default_rng(4)
    src = rng.standard_normal((96, 64)).astype(np.float32)
    return src, np.zeros_like(src)


@pytest.mark.parametrize("method", ["explore", "order"])
def test_a_writer_warp_that_only_waits_is_found(method):
    """The counterexample: a writer warp that only waits falls behind and waits forever."""
    kernel = tmalang.compile_file(HANDOFF_BUG)
    verdict = verify(kernel._c.ir, kernel.manifest, *_handoff_launch(), ctas=2, method=method)
    assert verdict.error is not None and verdict.error.code in ("E401", "E425"), verdict.summary()
    assert "warp 2" in verdict.error.render() and "synchronisation steps" in verdict.error.render()


# ---- kernels shown in the docs -------------------------------------------------------------

FENCE = re.compile(r"^```(.*)$")


def fenced_blocks(path: Path) -> list[tuple[str, int, str]]:
    """(info string, first code line, code) of every fenced block."""
    blocks, info, body, start = [], None, [], 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if info is None:
            if fence:
                info, body, start = fence.group(1).strip(), [], number + 1
        elif fence and not fence.group(1).strip():
            blocks.append((info, start, "\n".join(body) + "\n"))
            info = None
        else:
            body.append(line)
    return blocks


def is_complete_kernel(code: str) -> bool:
    """A whole kernel, not an excerpt: it opens with `kernel`, closes its braces, elides nothing."""
    lines = [line for line in code.splitlines() if line.strip() and not line.strip().startswith("//")]
    return (bool(lines) and re.match(r"kernel \w+", lines[0]) is not None and lines[-1] == "}"
            and "..." not in code and code.count("{") == code.count("}"))


DOC_FILES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DOC_KERNELS = [(path, line, code) for path in DOC_FILES for info, line, code in fenced_blocks(path)
               if info.split()[:1] in ([], ["tma"]) and is_complete_kernel(code)]


def test_the_docs_kernels_are_found():
    where = {(p.name, code.split("(")[0].split()[-1]) for p, _, code in DOC_KERNELS}
    assert {("language.md", "copy_explicit"), ("README.md", "tma_copy"), ("tutorial.md", "saxpy")} <= where
    assert not is_complete_kernel("kernel k(x: f32[M]) { ... }\n")


@pytest.mark.parametrize("ctas", [1, 3])
@pytest.mark.parametrize("path,line,code", DOC_KERNELS, ids=[f"{p.stem}-{line}" for p, line, _ in DOC_KERNELS])
def test_docs_kernel_verifies(path, line, code, ctas, tmp_path):
    source = tmp_path / f"{path.stem}_{line}.tma"
    source.write_text(code)
    kernel = tmalang.compile_file(source, arch=example_arch(source))
    dims = {d: DIMS.get(d, FIXTURE_DIM) for d in _symbols(kernel)}
    _assert_no_false_positive(kernel.verify(*_launch(kernel, dims, seed=line), ctas=ctas))
