"""Roles storing interleaved rows through strided boxes (issue 28): no false race, no missed one.

Written from docs/language.md alone (§4 `strides`, §11 pipelines, §13d element coordinates, §14
tile math): a producer loads, for each of two or three consumer roles, the rows of every tile
that role owns through a box with element strides, and each role scales its rows by tile math and
stores them through the same kind of box, at element coordinates `m*T + c`. Role r so writes rows
`m*T + c_r + s_r*j`, `j < ceil(e_r / s_r)`, of every tile m. Even and odd rows (stride 2,
offsets 0 and 1), rows by residue mod 3 from three roles, and stride 4 beside stride 2 meet in no
element and must be accepted (sema, E580) and run clean on the interpreter (E421) under several
schedules and CTA counts, matching a float64 reference at shapes that are not multiples of the
box. Whether two roles' rows meet is decided exactly: for random strides, offsets and extents,
sema refuses and the interpreter (with sema's check skipped) reports a race exactly when
enumerating the rows finds one written by two roles.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError
from tmalang.sema import global_races

STEP = 64                 # the tile loop's rows per tile
SHAPE = (197, 196)        # 3 whole row tiles and 5 rows, 3 whole column tiles and 4 columns


def _source(roles: list[tuple[int, int, int]]) -> str:
    """A kernel whose consumer role r stores `2 + r` times x + 1 into rows m*STEP + c + s*j of
    each tile, j < ceil(e / s), for roles[r] = (s, c, e)."""
    boxes, pipes, loads, consumers = [], [], [], []
    for r, (s, c, e) in enumerate(roles):
        boxes.append(f"    box X{r} = x[{e}, 64] strides [{s}, 1]\n    box Y{r} = y[{e}, 64] strides [{s}, 1]")
        pipes.append(f"    pipeline p{r}[2] {{ t: X{r} }}")
        loads.append(f"            produce p{r} as s {{ load X{r}@[m*{STEP} + {c}, n*64] -> s.t }}")
        consumers.append(
            f"    role r{r}: warp {r + 1} {{\n"
            f"        for tile (m, n) in tiles(x, T) {{\n"
            f"            consume p{r} as s {{\n"
            f"                s.t = s.t * {2 + r}.0 + 1.0\n"
            f"                store Y{r}@[m*{STEP} + {c}, n*64] <- s.t\n"
            f"            }}\n        }}\n    }}")
    return "\n".join([
        "kernel rows(x: f32[M, N], y: f32[M, N]) {",
        "    grid persistent",
        f"    box T = x[{STEP}, 64]",
        *boxes, *pipes,
        "    role producer: warp 0 {",
        "        for tile (m, n) in tiles(x, T) {",
        *loads,
        "        }",
        "    }",
        *consumers,
        "}",
    ])


def _rows(roles, rows: int) -> list[set[int]]:
    """The rows each role writes, over every tile, inside a tensor of `rows` rows."""
    tiles = -(-rows // STEP)
    return [{m * STEP + c + s * j for m in range(tiles) for j in range(-(-e // s))} & set(range(rows))
            for s, c, e in roles]


def _reference(roles, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    want = y.astype(np.float64)
    for r, written in enumerate(_rows(roles, x.shape[0])):
        rows = sorted(written)
        want[rows] = x[rows].astype(np.float64) * (2 + r) + 1.0
    return want


def _data(seed: int):
    """Integer-valued floats, so that x * k + 1 is exact in f32 and float64 alike."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-100, 100, SHAPE).astype(np.float32),
            rng.integers(-100, 100, SHAPE).astype(np.float32))


INTERLEAVED = {
    "even_odd": [(2, 0, 64), (2, 1, 63)],
    "even_odd_full_boxes": [(2, 0, 64), (2, 1, 64)],   # the odd box's range reaches the next tile's row 0,
                                                       # but its elements stop at row 63
    "thirds": [(3, 0, 64), (3, 1, 63), (3, 2, 62)],
    "stride_4_beside_2": [(2, 0, 64), (4, 1, 63), (4, 3, 61)],
}


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_interleaved_rows_are_accepted_and_match_float64(name):
    roles = INTERLEAVED[name]
    kernel = tmalang.compile(_source(roles), name=f"{name}.tma")
    x, y = _data(len(name))
    want = _reference(roles, x, y)
    for ctas, seed in itertools.product((1, 2, 3), (None, 5)):
        [got] = kernel.interpret(x, y.copy(), ctas=ctas, seed=seed)
        np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=f"{name}, ctas={ctas}, seed={seed}")
    assert set().union(*_rows(roles, SHAPE[0])) == set(range(SHAPE[0])) or name == "stride_4_beside_2"


OVERLAPPING = {
    "odd_box_one_stride_late": [(2, 0, 64), (2, 2, 62)],       # rows 2, 4, ... twice
    "stride_4_meets_stride_2": [(2, 0, 64), (4, 2, 62)],       # 4j + 2 is even
    "thirds_two_alike": [(3, 0, 64), (3, 1, 63), (3, 4, 60)],  # residue 1 twice
}


@pytest.mark.parametrize("name", sorted(OVERLAPPING))
def test_overlapping_strided_rows_are_refused_and_race(name, monkeypatch):
    roles = OVERLAPPING[name]
    with pytest.raises(TmalangError) as refused:
        tmalang.compile(_source(roles), name=f"{name}.tma")
    assert refused.value.code == "E580", refused.value.render()
    assert _races_on_interpreter(roles, monkeypatch)


def _races_on_interpreter(roles, monkeypatch) -> bool:
    """Whether the interpreter reports E421 on the kernel, sema's E580 check skipped."""
    monkeypatch.setattr(global_races, "check_kernel", lambda info: None)
    kernel = tmalang.compile(_source(roles), name="rows.tma")
    x, y = _data(1)
    try:
        kernel.interpret(x, y, ctas=1)
    except TmalangError as e:
        assert e.code == "E421", e.render()
        return True
    return False


def _random_roles(rng: random.Random) -> list[tuple[int, int, int]]:
    """Two or three roles, boxes inside their tile: mostly one stride and offsets of distinct
    residues (disjoint), else anything."""
    count = rng.choice([2, 3])
    if rng.random() < 0.6:
        s = rng.choice([2, 3, 4])
        offsets = rng.sample(range(s), min(count, s)) if rng.random() < 0.8 else [rng.randrange(8) for _ in range(count)]
        strides = [s] * len(offsets)
    else:
        strides = [rng.choice([1, 2, 3, 4]) for _ in range(count)]
        offsets = [rng.randrange(8) for _ in range(count)]
    return [(s, c, rng.randrange(1, STEP - c + 1)) for s, c in zip(strides, offsets)]


def _meet(roles) -> bool:
    """Whether two roles write a common element: every box stays inside its tile, so only two
    roles of one tile can meet (and a role's own tiles never do)."""
    written = _rows(roles, 10 * STEP)
    return any(a & b for a, b in itertools.combinations(written, 2))


@pytest.mark.parametrize("seed", range(3))
def test_refused_and_racing_exactly_when_rows_meet(seed, monkeypatch):
    """Random strides, offsets and extents: E580 exactly when enumeration finds a row two roles
    write, the interpreter's E421 likewise, and a clean run computes the float64 reference."""
    rng = random.Random(seed)
    outcomes = []
    for _ in range(12):
        roles = _random_roles(rng)
        meet = _meet(roles)
        try:
            kernel = tmalang.compile(_source(roles), name="rows.tma")
            refused = False
        except TmalangError as e:
            assert e.code == "E580", e.render()
            refused = True
        assert refused == meet, roles
        if refused:
            with monkeypatch.context() as patch:
                assert _races_on_interpreter(roles, patch), roles
        else:
            x, y = _data(seed)
            [got] = kernel.interpret(x, y.copy(), seed=seed)
            np.testing.assert_array_equal(got, _reference(roles, x, y).astype(np.float32), err_msg=str(roles))
        outcomes.append(meet)
    assert any(outcomes) and not all(outcomes), outcomes


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [SHAPE, (1000, 1000)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_h100_interleaved_rows_match_float64(name, shape):
    """On the GPU the roles' strided stores write exactly their rows: y's other rows keep their
    values, every written row equals the float64 reference."""
    torch = pytest.importorskip("torch")
    roles = INTERLEAVED[name]
    kernel = tmalang.compile(_source(roles), name=f"{name}.tma")
    rng = np.random.default_rng(shape[0])
    x, y = (rng.integers(-100, 100, shape).astype(np.float32) for _ in range(2))
    on_device = [torch.from_numpy(a).cuda() for a in (x, y)]
    kernel(*on_device)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(on_device[1].cpu().numpy(), _reference(roles, x, y).astype(np.float32))
