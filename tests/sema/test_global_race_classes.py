"""Global-memory races the interpreter must prove absent for every grid, not just the one it ran
(interp/globalmem.py, issue 28):

- tiles: two tiles may run in CTAs of two clusters under another grid size or order, so what one
  CTA's own waits did between them in this run orders nothing. Tiles t and t + 4 that overlap sit
  in one CTA on 1, 2 and 4 CTAs (a 4-column tile grid); the race must be found there too, for a
  static walk, a dynamic one, and a store outside the tile loop against the tiles' stores;
- reduces: reduces of one operation commute (atomic per element), reduces of two operations do
  not (max then add is not add then max), so those race unless ordered; in one consume block the
  compiler orders them (passes/order_slot_release.py), as it orders two stores.

Each racy kernel is refused by the compiler first (E580) wherever it can see the race, and the
interpreter finds it (E421) once that check is skipped. The negative twins (disjoint tiles,
one operation from every tile, two operations ordered within one tile) run clean under random
schedules and compute what NumPy says.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError
from tmalang.interp.globalmem import GlobalMemory
from tmalang.interp.races import RaceDetector
from tmalang.interp.state import ProtocolError
from tmalang.sema import global_races

M, N = 150, 200          # 5 x 4 tiles of 32 x 64, the last row of tiles partial
COLUMNS = -(-N // 64)    # 4 tiles per row of tiles
GRIDS = [1, 2, 4]        # tiles t and t + 4 run in one CTA on each of these
SEEDS = [None, 5]

# Each tile copies a box of `rows` rows at its own origin (tiles step by 32 rows) and waits for the
# store's writes before the next tile: 64 rows meet the next tile row's box, 32 rows do not.
COPY = """
kernel copy(src: f32[M, N], dst: f32[M, N]) {{
    grid persistent
    box In   = src[{rows}, 64]
    box Tile = dst[32, 64]
    box Big  = dst[{rows}, 64]
    smem buf: In
    mbarrier loaded(1)
    role main: warp 0 {{
        for tile (m, n) in tiles(dst, Tile){walk} as i {{
            elect {{
                expect_tx loaded, {nbytes}
                load In@[m*32, n*64] -> buf, loaded
                arrive loaded
            }}
            wait loaded, i & 1
            elect {{
                store Big@[m*32, n*64] <- buf
                commit_group
                wait_group 0
            }}
        }}
    }}
}}
"""

# Before its tiles, every CTA stores tile (0, 0) once, and waits for it: tile 0 stores it again.
OUTSIDE = """
kernel outside(src: f32[M, N], dst: f32[M, N]) {
    grid persistent
    box In  = src[32, 64]
    box Out = dst[32, 64]
    smem buf: In
    mbarrier loaded(1)
    role main: warp 0 {
        elect {
            expect_tx loaded, 8192
            load In[0, 0] -> buf, loaded
            arrive loaded
        }
        wait loaded, 0
        elect {
            store Out[0, 0] <- buf
            commit_group
            wait_group 0
        }
        for tile (m, n) in tiles(dst, Out) as i {
            elect {
                expect_tx loaded, 8192
                load In[m, n] -> buf, loaded
                arrive loaded
            }
            wait loaded, (i + 1) & 1
            elect {
                store Out[m, n] <- buf
                commit_group
                wait_group 0
            }
        }
    }
}
"""

# Every tile reduces its x tile into out's only row of tiles twice, `first` then `second`, the
# second after the first's writes (`wait_group 0`): ordered within a tile, not across tiles.
FOLD = """
kernel fold(x: u32[M, N], out: u32[32, N]) {{
    grid persistent
    box X   = x[32, 64]
    box Out = out[32, 64]
    smem buf: X
    mbarrier loaded(1)
    role main: warp 0 {{
        for tile (m, n) in tiles(x, X) as i {{
            elect {{
                expect_tx loaded, 8192
                load X[m, n] -> buf, loaded
                arrive loaded
            }}
            wait loaded, i & 1
            elect {{
                reduce {first} Out[0, n] <- buf
                commit_group
                wait_group 0
                reduce {second} Out[0, n] <- buf
                commit_group
                wait_group 0
            }}
        }}
    }}
}}
"""

# Each tile reduces add, then max, into its own tile of out: `between` is what separates them.
OWN_TILE = """
kernel own(x: u32[M, N], out: u32[M, N]) {{
    grid persistent
    box X   = x[32, 64]
    box Out = out[32, 64]
    smem buf: X
    mbarrier loaded(1)
    role main: warp 0 {{
        for tile (m, n) in tiles(x, X) as i {{
            elect {{
                expect_tx loaded, 8192
                load X[m, n] -> buf, loaded
                arrive loaded
            }}
            wait loaded, i & 1
            elect {{
                reduce add Out[m, n] <- buf
                {between}
                reduce max Out[m, n] <- buf
                commit_group
                wait_group 0
            }}
        }}
    }}
}}
"""


def _copy(rows: int, walk: str = "") -> str:
    return COPY.format(rows=rows, walk=walk, nbytes=rows * 64 * 4)


def _unchecked(source: str, monkeypatch):
    """The kernel the compiler refuses (E580), compiled with that check skipped."""
    with pytest.raises(TmalangError) as refused:
        tmalang.compile(source)
    assert refused.value.code == "E580", refused.value.render()
    monkeypatch.setattr(global_races, "check_kernel", lambda info: None)
    return tmalang.compile(source)


def _floats(rng) -> tuple[np.ndarray, np.ndarray]:
    return rng.standard_normal((M, N)).astype(np.float32), rng.standard_normal((M, N)).astype(np.float32)


def _words(rng, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """u32 values spread over the whole range, so that adds wrap and max sees large values."""
    return (rng.integers(0, 2**32, (M, N), dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 2**32, (rows, N), dtype=np.uint64).astype(np.uint32))


# ---- tiles: a race between two tiles is one whatever CTA ran them ------------------------------


@pytest.mark.parametrize("walk", ["", " dynamic"], ids=["static", "dynamic"])
@pytest.mark.parametrize("ctas", GRIDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_overlapping_tiles_race_even_in_one_cta(walk, ctas, seed, monkeypatch):
    kernel = _unchecked(_copy(64, walk), monkeypatch)
    with pytest.raises(TmalangError) as raced:
        kernel.interpret(*_floats(np.random.default_rng(1)), dims={"M": M, "N": N}, ctas=ctas, seed=seed)
    message = raced.value.render()
    assert raced.value.code == "E421", message
    tiles = [int(t) for t in re.findall(r"for tile (\d+)", raced.value.message)]
    assert len(tiles) == 2 and tiles[0] != tiles[1], message
    assert abs(tiles[0] - tiles[1]) == COLUMNS, message    # tiles (m, n) and (m + 1, n)
    if ctas == 1:     # the only CTA ran both: only the tile rule can see the race
        assert "may run in CTAs of different clusters" in message


def test_a_store_outside_the_tile_loop_races_the_tiles_even_in_one_cta(monkeypatch):
    kernel = _unchecked(OUTSIDE, monkeypatch)
    for ctas in (1, 2):
        with pytest.raises(TmalangError) as raced:
            kernel.interpret(*_floats(np.random.default_rng(2)), dims={"M": M, "N": N}, ctas=ctas)
        assert raced.value.code == "E421" and "outside the tile loop" in raced.value.message, raced.value.render()
        assert "for tile 0" in raced.value.message


@pytest.mark.parametrize("walk", ["", " dynamic"], ids=["static", "dynamic"])
@pytest.mark.parametrize("ctas", GRIDS + [3])
@pytest.mark.parametrize("seed", SEEDS)
def test_disjoint_tiles_run_clean_and_copy(walk, ctas, seed):
    kernel = tmalang.compile(_copy(32, walk))
    src, dst = _floats(np.random.default_rng(3))
    [out] = kernel.interpret(src, dst, dims={"M": M, "N": N}, ctas=ctas, seed=seed)
    np.testing.assert_array_equal(out.astype(np.float64), src.astype(np.float64))


# ---- reduces: one operation commutes, two do not ----------------------------------------------


def _fold_reference(x: np.ndarray, out: np.ndarray, op: str) -> np.ndarray:
    """out's 32 rows combined with every 32-row slab of x (the last one zero-filled past M, as the
    load fills it and the reduce then adds those zeros), twice."""
    slabs = np.zeros((-(-M // 32) * 32, N), np.uint64)
    slabs[:M] = x
    slabs = slabs.reshape(-1, 32, N)
    if op == "add":
        return ((out.astype(np.uint64) + 2 * slabs.sum(axis=0)) % 2**32).astype(np.uint32)
    return np.maximum(out.astype(np.uint64), slabs.max(axis=0)).astype(np.uint32)


@pytest.mark.parametrize("op", ["add", "max"])
@pytest.mark.parametrize("ctas", GRIDS + [3])
@pytest.mark.parametrize("seed", SEEDS)
def test_reduces_of_one_operation_from_every_tile_run_clean(op, ctas, seed):
    kernel = tmalang.compile(FOLD.format(first=op, second=op))
    x, out = _words(np.random.default_rng(4), 32)
    [got] = kernel.interpret(x, out.copy(), dims={"M": M, "N": N}, ctas=ctas, seed=seed)
    np.testing.assert_array_equal(got, _fold_reference(x, out, op))


@pytest.mark.parametrize("first,second", [("add", "max"), ("max", "add"), ("min", "xor")])
@pytest.mark.parametrize("ctas", GRIDS)
def test_reduces_of_two_operations_from_two_tiles_race(first, second, ctas, monkeypatch):
    kernel = _unchecked(FOLD.format(first=first, second=second), monkeypatch)
    with pytest.raises(TmalangError) as raced:
        kernel.interpret(*_words(np.random.default_rng(6), 32), dims={"M": M, "N": N}, ctas=ctas)
    message = raced.value.render()
    assert raced.value.code == "E421" and "for tile" in message, message
    assert f"TMA reduce '{first}'" in message and f"TMA reduce '{second}'" in message, message
    assert "do not commute" in message


def test_two_operations_in_one_bulk_group_race_within_one_tile():
    """The explicit layer: the accesses of one tile are the user's protocol, which sema leaves to
    the interpreter; add and max issued together land in either order."""
    kernel = tmalang.compile(OWN_TILE.format(between=""))
    with pytest.raises(TmalangError) as raced:
        kernel.interpret(*_words(np.random.default_rng(7), M), dims={"M": M, "N": N})
    message = raced.value.render()
    assert raced.value.code == "E421" and "do not commute" in message, message
    assert "for tile" not in message and "wait_group N" in message


@pytest.mark.parametrize("ctas", [1, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_two_operations_ordered_within_one_tile_run_clean(ctas, seed):
    kernel = tmalang.compile(OWN_TILE.format(between="commit_group\n                wait_group 0"))
    x, out = _words(np.random.default_rng(8), M)
    [got] = kernel.interpret(x, out.copy(), dims={"M": M, "N": N}, ctas=ctas, seed=seed)
    added = ((out.astype(np.uint64) + x) % 2**32)
    np.testing.assert_array_equal(got, np.maximum(added, x.astype(np.uint64)).astype(np.uint32))


# ---- the rule itself, on GlobalMemory --------------------------------------------------------

WARP = ("warp", 0, 0)
BOX = ((0, 32), (0, 64))


def _issue(races: RaceDetector):
    """A transfer issued by the warp after it has learnt everything earlier transfers did."""
    for agent in [a for a in races.clocks if a[0] == "tma"]:
        races.acquire_transfer(WARP, agent)
    return races.issue(WARP)


def _access(memory, races, tile, reduce="", write=True):
    memory.access(races, 0, "y", BOX, _issue(races), write, None, f"access of tile {tile}", reduce=reduce, tile=tile)


def test_ordered_accesses_of_two_tiles_race_and_of_one_tile_do_not():
    memory, races = GlobalMemory(), RaceDetector()
    _access(memory, races, tile=0)
    _access(memory, races, tile=0)                   # ordered after the first, same tile: fine
    with pytest.raises(ProtocolError) as raced:
        _access(memory, races, tile=1, write=False)  # ordered by the clocks, but another tile
    assert raced.value.code == "E421" and "for tile 1 reads it" in raced.value.message


def test_a_reduce_stands_only_for_reduces_of_its_operation():
    """max (tile 0), then add covering it (tile 0, ordered): a later add of tile 1 commutes with
    the add but not with the max, so the max must still be there to race with."""
    memory, races = GlobalMemory(), RaceDetector()
    _access(memory, races, tile=0, reduce="max")
    _access(memory, races, tile=0, reduce="add")
    with pytest.raises(ProtocolError) as raced:
        _access(memory, races, tile=1, reduce="add")
    assert "do not commute" in " ".join(raced.value.notes)


def test_reduces_of_one_operation_from_any_tiles_never_race():
    memory, races = GlobalMemory(), RaceDetector()
    for tile in (0, 1, None, 2):
        _access(memory, races, tile=tile, reduce="add")


# ---- the compiler orders reduces of two operations in one consume block ------------------------

# Each tile of x adds into its own tile of out, then takes the max there, in one consume block.
CONSUME_TWO_OPS = """
kernel twice(x: u32[M, N], out: u32[M, N]) {
    grid persistent
    box X   = x[32, 64]
    box Out = out[32, 64]
    pipeline ring[2] { t: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(x, X) { produce ring as s { load X[m, n] -> s.t } }
    }
    role consumer: warps 1..4 {
        for tile (m, n) in tiles(x, X) {
            consume ring as s {
                reduce add Out[m, n] <- s.t
                reduce max Out[m, n] <- s.t
            }
        }
    }
}
"""


def test_the_compiler_waits_between_reduces_of_two_operations_in_one_consume_block():
    """order_slot_release waits for the add's writes before the max (as before a second store),
    and sema (E580) counts on that wait: the kernel compiles, and runs clean and right."""
    kernel = tmalang.compile(CONSUME_TWO_OPS)
    ir = kernel.ir      # the final IR, as text
    add, top = ir.index("reduce=add"), ir.index("reduce=max")
    assert "bulk_wait pending=0 read=false" in ir[add:top], ir[add:top]
    x, out = _words(np.random.default_rng(9), M)
    for ctas, seed in [(1, None), (2, 3), (3, 4)]:
        [got] = kernel.interpret(x, out.copy(), dims={"M": M, "N": N}, ctas=ctas, seed=seed)
        added = (out.astype(np.uint64) + x) % 2**32
        np.testing.assert_array_equal(got, np.maximum(added, x.astype(np.uint64)).astype(np.uint32))
