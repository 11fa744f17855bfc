"""Turns after tile math (§15e, issue 28): what orders the role's thread writes before a wgmma
that reads them stands before the turn's entry, not inside the turn.

tests/user_kernels/turn_after_tile_math.tma holds three kernels written from the docs: a turn
holding only the mma after tile math on the slot (`scaled`), a turn holding a consume whose mma
reads an smem operand written by tile math before it (`relu_a`), and tiles by warpgroup with
the tile math inside the turn, where the sync is the warpgroup's own (`scaled_by_warpgroup`).
All three were refused with E531. Now they compile, the fence and sync stand where every
warpgroup reaches them, they run clean on the interpreter under several schedules and CTA
counts and match a float64 reference at shapes that are not multiples of the tile; without the
fence or the sync the interpreter reports the race. A sync the turn itself would have to hold
in a role of several warpgroups is still refused (E531), and so is one the user writes (E528).
"""

from __future__ import annotations

import copy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError
from tmalang.interp import interpret
from tmalang.ir import ops
from conftest import ROOT

SOURCE = (ROOT / "tests" / "user_kernels" / "turn_after_tile_math.tma").read_text()
KERNELS = ["scaled", "relu_a", "scaled_by_warpgroup"]
SHAPES = [(200, 136, 200), (128, 64, 64), (77, 40, 136)]
ALPHA = np.float32(0.37)


def _compile(name: str, source: str = SOURCE):
    return tmalang.compile(source, kernel=name, name="turn_after_tile_math.tma")


def _operands(name: str, shape: tuple[int, int, int], seed: int):
    """bf16 A and B (rows padded to 16 bytes), the kernel's scalars, and the float64 product of
    what the kernel multiplies: A as its tile math leaves it (in bf16), times Bᵀ."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((rows, -(-k // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :k] for rows in (m, n))
    if name == "relu_a":
        left, scalars = np.maximum(a.astype(np.float64), 0.0), []
    else:
        left = (ALPHA * a.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float64)
        scalars = [ALPHA]
    return [a, b], scalars, left @ b.astype(np.float64).T


def _error(got, reference) -> float:
    return float(np.abs(np.asarray(got, np.float64) - reference).max() / max(1.0, np.abs(reference).max()))


def _interpret(name, kernel_ir, manifest, shape, data_seed, **schedule):
    (a, b), scalars, reference = _operands(name, shape, data_seed)
    [got] = interpret(kernel_ir, manifest, a, b, np.full(shape[:2], np.nan, np.float32), *scalars, **schedule)
    return got, reference


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", KERNELS)
def test_interpreter_matches_float64(name, shape):
    kernel = _compile(name)
    for ctas in (1, 3):
        got, reference = _interpret(name, kernel._c.ir, kernel.manifest, shape, sum(shape) + ctas, ctas=ctas,
                                    seed=ctas, explore=2)
        assert _error(got, reference) < 1e-5, (name, shape, ctas)


def _consumers(kernel_ir) -> list[ops.RoleOp]:
    return [r for r in ops.roles(kernel_ir) if (r.group or r.symbol) == "consumer"]


def _turn_regions(region: list[ops.Op]):
    """(region, index of its first turn entry, index after its last exit) for every lowered turn."""
    entries = [i for i, o in enumerate(region) if _holds(o, ops.NamedBarSync)]
    exits = [i for i, o in enumerate(region) if _holds(o, ops.NamedBarArrive)]
    if entries:
        yield region, entries[0], max(i for i in exits if i > entries[-1]) + 1
    for o in region:
        for inner in o.regions():
            yield from _turn_regions(inner)


def _holds(o: ops.Op, kind: type) -> bool:
    return isinstance(o, ops.InWarpgroup) and isinstance(o.body[0], kind)


@pytest.mark.parametrize("name", ["scaled", "relu_a"])
def test_fence_and_sync_precede_the_entry(name):
    """Right before warpgroup 0's `bar.sync` on its turn barrier: every thread's proxy fence, then
    the role's sync; between entry and exit no sync and no proxy fence."""
    [role] = _consumers(_compile(name)._c.ir)
    turns = list(_turn_regions(role.body))
    assert len(turns) == 1
    region, entry, leave = turns[0]
    before = region[entry - 2:entry]
    assert [type(o) for o in before] == [ops.Fence, ops.Sync], before
    assert before[0].kind == "proxy_async" and before[1].scope == "role"
    inside = list(ops.walk(region[entry:leave]))
    assert any(isinstance(o, ops.Wgmma) for o in inside)
    assert not any(isinstance(o, ops.Sync) or isinstance(o, ops.Fence) and o.kind == "proxy_async" for o in inside)


def test_a_warpgroups_own_sync_stands_in_its_turn():
    """By warpgroup, each consumer warpgroup is a role of its own: the fence and sync before its
    mma stay inside its turn, and that sync waits for its 128 threads alone."""
    kernel = _compile("scaled_by_warpgroup")
    roles = _consumers(kernel._c.ir)
    assert len(roles) == 2
    for role in roles:
        assert role.last_warp - role.first_warp + 1 == 4
        [(region, entry, leave)] = _turn_regions(role.body)
        assert any(isinstance(o, ops.Sync) for o in ops.walk(region[entry:leave]))
    assert "bar.sync 2, 128;" in kernel.ptx and "bar.sync 3, 128;" in kernel.ptx


def _without_op_before_turn(kernel, kind: type):
    """The final IR less the `kind` op that the compiler placed right before the turn's entry."""
    ir = copy.deepcopy(kernel._c.ir)
    [role] = _consumers(ir)
    [(region, entry, _)] = _turn_regions(role.body)
    at = next(i for i in (entry - 1, entry - 2) if isinstance(region[i], kind))
    del region[at]
    return ir


def _without_sync_in_turn(kernel):
    """The final IR less the warpgroup's sync inside each of its turns (before the wgmma)."""
    ir = copy.deepcopy(kernel._c.ir)
    for role in _consumers(ir):
        [(region, entry, leave)] = _turn_regions(role.body)
        for o in list(ops.walk(region[entry:leave])):
            for inner in o.regions():
                inner[:] = [x for i, x in enumerate(inner) if not (isinstance(x, ops.Sync) and _wgmma_follows(inner, i))]
    return ir


def _wgmma_follows(region: list[ops.Op], at: int) -> bool:
    """Whether a wgmma comes within three ops after position `at` (after its wgmma_fence)."""
    return any(isinstance(o, ops.Wgmma) for o in region[at + 1:at + 4])


@pytest.mark.parametrize("name,drop", [("scaled", ops.Fence), ("scaled", ops.Sync), ("relu_a", ops.Fence),
                                       ("relu_a", ops.Sync), ("scaled_by_warpgroup", "sync in turn")])
def test_without_the_fence_or_sync_the_interpreter_reports_a_race(name, drop):
    """The ops the compiler places are needed: a schedule in which a warp's wgmma reads the tile
    before another warp has written (or fenced) its part is found (E405 / E406)."""
    kernel = _compile(name)
    broken = _without_sync_in_turn(kernel) if drop == "sync in turn" else _without_op_before_turn(kernel, drop)
    with pytest.raises(TmalangError) as caught:
        _interpret(name, broken, kernel.manifest, (200, 136, 200), 1, seed=1, explore=6)
    assert caught.value.code in ("E405", "E406"), caught.value.render()


def _variant(name: str, old: str, new: str) -> str:
    start = SOURCE.index(f"kernel {name}(")
    end = SOURCE.find("\nkernel ", start + 1)
    text = SOURCE[start:end if end > 0 else len(SOURCE)]
    assert old in text
    return text.replace(old, new)


def test_a_sync_the_turn_would_hold_is_still_refused():
    """Tile math inside a turn of two warpgroups, before its mma: the sync it needs would stand
    between entry and exit, waiting for the warpgroup that waits for the turn (E531)."""
    inside = _variant("scaled", "s.a = alpha * s.a\n                    turn { mma acc, s.a, s.b }",
                      "turn {\n s.a = alpha * s.a\n mma acc, s.a, s.b\n }")
    with pytest.raises(TmalangError) as caught:
        _compile("scaled", inside)
    assert caught.value.code == "E531", caught.value.render()


def test_a_sync_written_in_a_turn_is_refused():
    written = _variant("scaled", "turn { mma acc, s.a, s.b }", "turn {\n sync\n mma acc, s.a, s.b\n }")
    with pytest.raises(TmalangError) as caught:
        _compile("scaled", written)
    assert caught.value.code == "E528", caught.value.render()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1032, 264), (4097, 2056, 520), (77, 40, 136)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", KERNELS)
def test_h100_matches_float64_and_the_interpreter(name, shape):
    torch = pytest.importorskip("torch")
    kernel = _compile(name)
    operands, scalars, reference = _operands(name, shape, seed=sum(shape))
    on_device = [torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).cuda()
                 for x in operands]
    c = torch.full(shape[:2], float("nan"), dtype=torch.float32, device="cuda")
    for _ in range(2):    # twice: ring positions and turn barriers start over at every launch
        c.fill_(float("nan"))
        kernel(*on_device, c, *scalars)
        torch.cuda.synchronize()
        got = c.cpu().numpy()
        assert _error(got, reference) < 1e-5, name
    if shape[0] <= 1000:
        interpreted = kernel.interpret(*operands, np.zeros(shape[:2], np.float32), *scalars, ctas=4)[0]
        assert _error(got, interpreted.astype(np.float64)) < 1e-5
