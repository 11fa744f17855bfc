"""Global-memory races across roles, tiles and CTAs (E580, tmalang/sema/global_races.py).

Every fixture of tests/global_races/ is refused or accepted, and the interpreter, which defines
what a program does, agrees: a refused program races there (E421) once the check is skipped; an
accepted one runs clean under random schedules at shapes that are not multiples of its boxes and
computes what a NumPy float64 reference says. The whole analysis is checked against enumerated
footprints of random strided boxes (the solver alone: tests/sema/test_lattice.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.diagnostics import TmalangError
from tmalang.sema import check, global_races
from tmalang.syntax.parser import parse
from tmalang.targets.arch import target_named

FIXTURES = ROOT / "tests" / "global_races"
DIMS = {"M": 130, "N": 196, "K": 200}     # 3 x 4 tiles of 64 x 64, partial at both edges (rows of 16-byte
                                          # multiples, as TMA needs); 4 K steps

REFUSED = ["two_roles_one_tile", "store_and_reduce_one_tile", "box_larger_than_step", "halo_overlap",
           "overlap_add_and_store", "ignores_steps_index", "strided_rows_overlap", "load_while_reducing",
           "store_then_reload"]


def _in_tile(lo: int, hi: int):
    """The indices i of a dimension of n with lo <= i mod 64 < hi: a window of every 64-wide tile."""
    return lambda n: (np.arange(n) % 64 >= lo) & (np.arange(n) % 64 < hi)


def _copy_where(rows=None, cols=None):
    """y keeps its old values except where the mask of rows and columns says x was copied."""
    def reference(inputs):
        x, y = inputs["x"], inputs["y"].copy()
        m, n = x.shape
        keep = np.outer(rows(m) if rows else np.ones(m, bool), cols(n) if cols else np.ones(n, bool))
        y[keep] = x[keep]
        return {"y": y}
    return reference


def _overlap_add(inputs):
    """Each row gets its own tile's add, and a tile's first 16 rows the previous tile's too."""
    x, y = inputs["x"].astype(np.float64), inputs["y"].astype(np.float64)
    r = np.arange(x.shape[0])
    count = 1 + ((r >= 64) & (r % 64 < 16))
    return {"y": y + count[:, None] * x}


def _shifted_one_row(inputs):
    x, y = inputs["x"], inputs["y"].copy()
    y[1:] = x[:-1]
    return {"y": y}


def _skewed(inputs):
    """Column block n of y is x shifted down by n rows."""
    x, y = inputs["x"], inputs["y"].copy()
    for n in range(0, x.shape[1], 64):
        shift = n // 64
        y[shift:, n:n + 64] = x[: x.shape[0] - shift, n:n + 64]
    return {"y": y}


ACCEPTED = {
    "box_equal_step": _copy_where(),
    "box_smaller_than_step": _copy_where(rows=_in_tile(16, 48)),
    "halo_inside": _copy_where(cols=_in_tile(4, 60)),
    "overlap_add": _overlap_add,
    "strided_rows_two_roles": _copy_where(),
    "shifted_by_one_row": _shifted_one_row,
    "moves_with_other_index": _skewed,
    "in_place": lambda inputs: {"y": inputs["a"] * inputs["y"].astype(np.float64)},
    "store_wait_reload": lambda inputs: {"tmp": inputs["x"], "out": inputs["x"]},
}


def _source(name: str) -> str:
    return (FIXTURES / f"{name}.tma").read_text()


def test_every_fixture_is_classified():
    names = {p.stem for p in FIXTURES.glob("*.tma")}
    assert names == set(REFUSED) | set(ACCEPTED) and not set(REFUSED) & set(ACCEPTED)


@pytest.mark.parametrize("name", REFUSED)
def test_refused_fixture_races_on_the_interpreter(name, monkeypatch):
    with pytest.raises(TmalangError) as refused:
        tmalang.compile(_source(name), name=f"{name}.tma")
    assert refused.value.code == "E580", refused.value.render()
    monkeypatch.setattr(global_races, "check_kernel", lambda info: None)
    kernel = tmalang.compile(_source(name), name=f"{name}.tma")
    codes = []   # the race needs its two tiles in two CTAs, or an unlucky schedule: try a few
    for ctas, seed in itertools.product((2, 3), (None, 1, 2)):
        try:
            kernel.interpret(*_inputs(kernel, np.random.default_rng(5)).values(), dims=_dims(kernel), seed=seed,
                             ctas=ctas)
        except TmalangError as e:
            codes.append(e.code)
            break
    assert codes and codes[0] in ("E421", "E405"), f"{name} ran clean on the interpreter: {codes}"


@pytest.mark.parametrize("name", sorted(ACCEPTED))
@pytest.mark.parametrize("seed", [None, 7])
def test_accepted_fixture_runs_clean_and_matches_numpy(name, seed):
    kernel = tmalang.compile(_source(name), name=f"{name}.tma")
    inputs = _inputs(kernel, np.random.default_rng(11))
    originals = {k: np.array(v, copy=True) for k, v in inputs.items()}
    results = kernel.interpret(*inputs.values(), dims=_dims(kernel), seed=seed)
    written = [a.name for a in kernel.manifest.args if getattr(a, "written", False)]
    want = ACCEPTED[name](originals)
    assert sorted(want) == sorted(written)
    for arg, got in zip(written, results):
        np.testing.assert_array_equal(got, want[arg].astype(got.dtype), err_msg=f"{name}: {arg}")


def _dims(kernel) -> dict:
    used = {d for a in kernel.manifest.args for d in getattr(a, "shape", ()) or () if isinstance(d, str)}
    return {d: v for d, v in DIMS.items() if d in used}


def _inputs(kernel, rng) -> dict:
    """Integer-valued floats (sums stay exact in f32), a scalar 1.5 for `a`."""
    dims = _dims(kernel)
    out = {}
    for arg in kernel.manifest.args:
        shape = getattr(arg, "shape", None)
        if shape is None:
            out[arg.name] = np.float32(1.5)
            continue
        shape = tuple(dims[d] if isinstance(d, str) else d for d in shape)
        out[arg.name] = rng.integers(-8, 9, shape).astype(np.float32)
    return out


# ---- what the examples rely on ------------------------------------------------------------------


def _accesses(path: str):
    from tmalang.sema.accesses import collect
    [info] = check(parse((ROOT / path).read_text(), path), target_named("sm_90a"))
    return info, collect(info)


def test_stream_k_is_accepted_because_its_writes_are_one_atomic_operation():
    """gemm_streamk_sm90: several CTAs add into one tile of c, which is a race for anything but
    reduces of one operation; the analysis sees those CTAs (the pair is refused once its writes
    are taken for plain stores) and accepts the kernel only because every write to c is
    `reduce add`, and a and b are never written."""
    info, found = _accesses("examples/gemm_streamk_sm90.tma")
    writes = [x for x in found.accesses if x.writes]
    assert writes and {(x.tensor, x.kind, x.op) for x in writes} == {("c", "reduce", "add")}
    facts = global_races._facts(info)
    as_store = dataclasses.replace(writes[0], kind="store", op="")
    with pytest.raises(TmalangError) as caught:
        global_races._check_pair(info, as_store, as_store, found, facts)
    assert caught.value.code == "E580" and "in one tile run by two CTAs" in caught.value.message


def test_split_k_parts_add_into_one_tile():
    """gemm_splitk_sm90: the S parts of a tile add into it (atomic), so only reduces meet."""
    info, found = _accesses("examples/gemm_splitk_sm90.tma")
    assert {(x.tensor, x.kind, x.op) for x in found.accesses if x.writes} == {("c", "reduce", "add")}
    global_races.check_kernel(info)


# ---- the analysis against enumerated footprints ---------------------------------------------------

TWO_STRIDED_STORES = """
kernel rows(x: f32[M, N], y: f32[M, N]) {{
    grid persistent
    box T = x[{step}, 64]
    box W1 = x[{b1}, 64] strides [{s1}, 1]
    box Z1 = y[{b1}, 64] strides [{s1}, 1]
    box W2 = x[{b2}, 64] strides [{s2}, 1]
    box Z2 = y[{b2}, 64] strides [{s2}, 1]
    pipeline p1[2] {{ t: W1 }}
    pipeline p2[2] {{ t: W2 }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(x, T) {{
            produce p1 as s {{ load W1@[m*{step}, n*64] -> s.t }}
            produce p2 as s {{ load W2@[m*{step}, n*64] -> s.t }}
        }}
    }}
    role first: warp 1 {{
        for tile (m, n) in tiles(x, T) {{ consume p1 as s {{ store Z1@[m*{step} + {c1}, n*64] <- s.t }} }}
    }}
    role second: warp 2 {{
        for tile (m, n) in tiles(x, T) {{ consume p2 as s {{ {verb} Z2@[m*{step} + {c2}, n*64] <- s.t }} }}
    }}
}}
"""


def _rows(m: int, step: int, box: int, stride: int, offset: int) -> set:
    return {m * step + offset + stride * j for j in range(-(-box // stride))}


def _races(p: dict) -> bool:
    """Two roles store strided row sets in every tile of one column of tiles (other columns are
    other columns): a race iff some tile's set of one meets any tile's set of the other, or some
    role's sets of two different tiles meet."""
    tiles = range(12)
    sets = [[_rows(m, p["step"], p[f"b{i}"], p[f"s{i}"], p[f"c{i}"]) for m in tiles] for i in (1, 2)]
    across = any(a & b for a in sets[0] for b in sets[1])
    within = any(sets[i][m] & sets[i][k] for i in (0, 1) for m in tiles for k in tiles if m < k)
    return across or within


@pytest.mark.parametrize("seed", range(4))
def test_analysis_matches_enumerated_footprints(seed):
    """Random strided boxes at random offsets, stored by two roles in every tile: E580 exactly
    when enumeration finds an element stored twice (the analysis is exact for these forms)."""
    rng = random.Random(seed)
    outcomes = []
    for _ in range(30):
        p = _random_boxes(rng)
        source = TWO_STRIDED_STORES.format(**p)
        try:
            check(parse(source, "rows.tma"), target_named("sm_90a"))
            refused = False
        except TmalangError as e:
            assert e.code == "E580", e.render()
            refused = True
        assert refused == _races(p), (p, refused)
        outcomes.append(refused)
    assert 5 <= sum(outcomes) <= 25, outcomes     # both answers are exercised


def _random_boxes(rng: random.Random) -> dict:
    """Boxes anywhere, or (half the time) interleaved: one stride, offsets apart by less than it."""
    step = rng.choice([16, 32, 64])
    p = {"step": step, "verb": "store"}
    for i in (1, 2):
        p[f"s{i}"] = rng.choice([1, 2, 3, 4])
        p[f"b{i}"] = rng.choice([8, 16, 24, 32, 48, 64, 96])
        p[f"c{i}"] = rng.randrange(0, 2 * step)
    if rng.random() < 0.5:
        stride = rng.choice([2, 3, 4])
        p["s1"] = p["s2"] = stride
        p["c1"] = rng.randrange(0, step // 2)
        p["c2"] = p["c1"] + rng.randrange(1, stride)
        for i in (1, 2):
            p[f"b{i}"] = rng.choice([b for b in (8, 16, 24, 32, 48, 64) if b <= step - p[f"c{i}"]] or [1])
    return p


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_h100_accepted_fixture_matches_numpy(name):
    """On the H100, the accepted fixtures compute what the reference says (and no launch error)."""
    kernel = tmalang.compile(_source(name), name=f"{name}.tma")
    inputs = _inputs(kernel, np.random.default_rng(13))
    originals = {k: np.array(v, copy=True) for k, v in inputs.items()}
    kernel(*inputs.values(), dims=_dims(kernel))       # NumPy outputs are copied back
    want = ACCEPTED[name](originals)
    for arg, expected in want.items():
        np.testing.assert_array_equal(inputs[arg], expected.astype(inputs[arg].dtype), err_msg=f"{name}: {arg}")
