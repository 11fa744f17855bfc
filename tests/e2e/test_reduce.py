"""TMA reduce (`reduce OP Box[c..] <- src`): every operation and element type through the
interpreter against NumPy, with several CTAs reducing into one output tile at shapes that are
not box multiples; the race rules; the IR field; ptxas; and on the H100, each operation against
NumPy and the interpreter (bit for bit wherever the result does not depend on the order)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES
from tmalang.targets.dtypes import NUMPY

# x's 64-row slabs all reduce into out's first box row: out[r] = op(out[r], x[64 t + r]) for every
# slab t; out has 50 rows (the box's last 14 are clipped) and N = 45 columns (a partial box).
FOLD = """
kernel fold(x: {dt}[K, N], out: {dt}[R, N]) {{
    grid {grid}
    box In  = x[64, 32]
    box Out = out[64, 32]
    pipeline ring[2] {{ t: In }}
    role producer: warp 0 {{
        for tile (k, n) in tiles(x, In) {{ produce ring as s {{ load In[k, n] -> s.t }} }}
    }}
    role consumer: warp 1 {{
        for tile (k, n) in tiles(x, In) {{ consume ring as s {{ reduce {op} Out[0, n] <- s.t }} }}
    }}
}}
"""
K, N, R = 197, 45, 50           # 4 slabs (the last of 5 rows) x 2 column tiles: 8 tiles, 4 per output tile

# Every (operation, dtype) pair the PTX ISA admits for cp.reduce.async.bulk.tensor.
PAIRS = ([("add", d) for d in ("u32", "i32", "u64", "f32", "f16", "bf16")]
         + [(op, d) for op in ("min", "max") for d in ("u32", "i32", "u64", "i64", "f16", "bf16")]
         + [(op, "u32") for op in ("inc", "dec")]
         + [(op, d) for op in ("and", "or", "xor") for d in ("i32", "u32", "u64")])
IDS = [f"{op}-{d}" for op, d in PAIRS]
TOLERANCE = {"f32": 1e-5, "f16": 2e-2, "bf16": 1e-1}   # float add lands in the order of the reduces


def fold_kernel(op: str, dtype: str, grid: str = "tiles"):
    return tmalang.compile(FOLD.format(dt=dtype, op=op, grid=grid), name=f"fold_{op}_{dtype}.tma")


def aligned(values: np.ndarray) -> np.ndarray:
    """A copy of a 2-D array whose rows start 16-byte aligned (a view into padded rows)."""
    rows, cols = values.shape
    per_row = 16 // values.itemsize
    base = np.zeros((rows, -(-cols // per_row) * per_row), dtype=values.dtype)
    base[:, :cols] = values
    return base[:, :cols]


def inputs(op: str, dtype: str, rng, k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """x and out. inc and dec get small values, every slab of x the same values and whole slabs
    only (K rounded down to 64 rows), so that all reduces into one element apply the same function
    and the result does not depend on their order. (A partial last slab would reduce its zero-filled
    rows too, and inc(old, 0) = 0 does not commute with inc(old, b): measured on the H100, the
    reduces of different CTAs land in any order.)"""
    np_dtype = NUMPY[dtype]
    if op in ("inc", "dec"):
        k = max(64, k // 64 * 64)
    if dtype in TOLERANCE:
        return (aligned(rng.standard_normal((k, N)).astype(np_dtype)),
                aligned(rng.standard_normal((R, N)).astype(np_dtype)))
    if op in ("inc", "dec"):
        slab = rng.integers(0, 12, (64, N), dtype=np_dtype)
        return aligned(np.tile(slab, (-(-k // 64), 1))[:k]), aligned(rng.integers(0, 12, (R, N), dtype=np_dtype))
    info = np.iinfo(np_dtype)
    return (aligned(rng.integers(info.min, info.max, (k, N), dtype=np_dtype, endpoint=True)),
            aligned(rng.integers(info.min, info.max, (R, N), dtype=np_dtype, endpoint=True)))


# The reference, written from the PTX ISA independently of tmalang/interp/reduce.py.
REFERENCE = {
    "add": lambda a, b: a + b,
    "min": np.minimum, "max": np.maximum,
    "inc": lambda a, b: np.where(a >= b, 0, a + 1).astype(a.dtype),
    "dec": lambda a, b: np.where((a == 0) | (a > b), b, a - 1).astype(a.dtype),
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}


def expected(op: str, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Slab by slab; float add in float64 (compared with a tolerance unless one slab). The last
    slab's rows past x's end are loaded as zeros, and reduce like any other row."""
    result = out.astype(np.float64) if out.dtype.kind == "f" or out.dtype == ml_dtypes.bfloat16 else out.copy()
    for start in range(0, x.shape[0], 64):
        slab = np.zeros((64, x.shape[1]), dtype=result.dtype)
        part = x[start:start + 64]
        slab[: part.shape[0]] = part
        result[...] = REFERENCE[op](result, slab[: result.shape[0]])
    return result


def check(op, dtype, got, want, exact=False):
    if dtype in TOLERANCE and not exact:
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    elif dtype in TOLERANCE:
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    else:
        np.testing.assert_array_equal(got, want)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


@pytest.mark.parametrize("op,dtype", PAIRS, ids=IDS)
def test_interpreter_matches_numpy(op, dtype):
    rng = np.random.default_rng(hash((op, dtype)) & 0xFFFF)
    x, out = inputs(op, dtype, rng)
    want = expected(op, x, out)
    fold_kernel(op, dtype).interpret(x, out, seed=3, explore=2)
    check(op, dtype, out, want)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_float_add_with_one_reduce_per_element_rounds_once(dtype):
    """One slab: each element receives one add, rounded to nearest even in the tensor's type."""
    x, out = inputs("add", dtype, np.random.default_rng(2), k=50)
    want = (out.astype(np.float64) + x.astype(np.float64)).astype(out.dtype)
    fold_kernel("add", dtype).interpret(x, out)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_persistent_ctas_reduce_in_either_order_without_a_race():
    """Three persistent CTAs walk the 8 tiles; reduces into one tile from different CTAs and
    iterations are never ordered, and are no race (atomic per element), on any schedule."""
    x, out = inputs("xor", "u32", np.random.default_rng(4))
    want = expected("xor", x, out)
    fold_kernel("xor", "u32", grid="persistent").interpret(x, out, seed=0, explore=16, ctas=3)
    np.testing.assert_array_equal(out, want)


def test_float_min_max_ignore_nan_and_order_signed_zeros():
    """PTX min/max: a NaN operand loses to a number, two NaNs give the canonical NaN; -0 < +0."""
    cases = [(1.0, "nan", 1.0, 1.0), ("nan", -2.0, -2.0, -2.0), ("nan", "nan", "nan", "nan"),
             (0.0, -0.0, -0.0, 0.0), (-0.0, 0.0, -0.0, 0.0), (3.0, -5.0, -5.0, 3.0)]   # old, new, min, max
    for dtype in ("f16", "bf16"):
        t = NUMPY[dtype]
        old = np.array([[float(c[0]) for c in cases]], dtype=t)
        src = np.array([[float(c[1]) for c in cases]], dtype=t)
        for op, col in (("min", 2), ("max", 3)):
            x, out = aligned(np.resize(src, (1, N)).astype(t)), aligned(np.resize(old, (R, N)).astype(t))
            fold_kernel(op, dtype).interpret(x, out)
            want = np.array([float(c[col]) for c in cases], dtype=t)
            got = out[0, : len(cases)]
            assert np.array_equal(np.isnan(got), np.isnan(want))
            finite = ~np.isnan(want)
            np.testing.assert_array_equal(bits(got[finite]), bits(want[finite]))
            assert (bits(got[~finite]) == 0x7FFF).all()


MIXED = """
kernel mixed(x: u32[K, N], out: u32[R, N]) {{
    grid tiles
    box In  = x[64, 32]
    box Xr  = x[64, 32]
    box Out = out[64, 32]
    smem buf: In
    mbarrier loaded(1)
    role main: warp 0 {{
        for tile (k, n) in tiles(x, In) as i {{
            elect {{
                expect_tx loaded, 8192
                load In[k, n] -> buf, loaded
                arrive loaded
            }}
            wait loaded, i & 1
            elect {{
                {second}
                commit_group
                wait_group 0
            }}
        }}
    }}
}}
"""


@pytest.mark.parametrize("second,what", [
    ("reduce add Out[0, n] <- buf\n                store Out[k, n] <- buf", "writes it, unordered with the TMA reduce 'add'"),
    ("reduce add Xr[0, n] <- buf", "unordered with the TMA load|reduces into it, unordered"),
], ids=["store_and_reduce", "load_and_reduce"])
def test_a_reduce_races_an_unordered_store_or_load(second, what, monkeypatch):
    """Atomic only against other reduces: a store or a load of the same elements unordered with
    a reduce is a race, as with two stores (the reduce into row block 0 of every tile k meets tile
    0's store, and tile 0's load, in another CTA). The compiler refuses both (E580,
    sema/global_races.py); the interpreter, which defines the meaning, finds the same race (E421)
    when that check is skipped."""
    source = MIXED.format(second=second)
    with pytest.raises(TmalangError) as refused:
        tmalang.compile(source)
    assert refused.value.code == "E580" and "in two different tiles" in refused.value.message
    from tmalang.sema import global_races
    monkeypatch.setattr(global_races, "check_kernel", lambda info: None)
    k = tmalang.compile(source)
    x, out = inputs("add", "u32", np.random.default_rng(1), k=130)
    with pytest.raises(TmalangError, match=f"E421.*({what})"):
        k.interpret(x, out)


def _ir(source: str):
    return compile_source(source, "fold.tma", Options(arch="sm_90a"), until="ir").ir


def test_ir_prints_reduce_only_when_set_and_round_trips():
    text = print_ir(_ir(FOLD.format(dt="i64", op="max", grid="tiles")))
    assert "tma_store box=Out coords=[0, %n]" in text and "reduce=max" in text
    assert print_ir(parse_ir(text)) == text
    plain = print_ir(_ir(FOLD.format(dt="u32", op="add", grid="tiles").replace("reduce add Out[0, n]", "store Out[k, n]")))
    assert "tma_store" in plain and "reduce=" not in plain


@pytest.mark.parametrize("old,new,message", [
    ("reduce=max", "reduce=mul", "tma_store reduce=mul: not one of add, min, max"),
    ("reduce=max", "reduce=add", "tma_store reduce=add: does not reduce box @Out.s i64 elements"),
])
def test_verifier_checks_the_reduce_field(old, new, message):
    [kernel] = parse_ir(print_ir(_ir(FOLD.format(dt="i64", op="max", grid="tiles"))).replace(old, new))
    with pytest.raises(TmalangError, match=f"E999.*{message}"):
        verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])


@pytest.mark.parametrize("op,dtype", PAIRS, ids=IDS)
def test_ptxas_assembles_every_operation(op, dtype):
    c = compile_source(FOLD.format(dt=dtype, op=op, grid="persistent"), "fold.tma", Options(arch="sm_90a"))
    assert f"cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group" in c.ptx
    cubin, _ = ptxas.assemble(c.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"


# ---- on the H100 ------------------------------------------------------------------------------

ORDER_FREE = {"min", "max", "inc", "dec", "and", "or", "xor"}


@pytest.mark.gpu
@pytest.mark.parametrize("op,dtype", PAIRS, ids=IDS)
def test_h100_matches_numpy_and_the_interpreter(op, dtype):
    """Integers bit-exact against NumPy; float add within its tolerance (the GPU's order). The
    interpreter equals the GPU bit for bit wherever the order cannot matter (all but float add)."""
    rng = np.random.default_rng(hash((op, dtype, "gpu")) & 0xFFFF)
    x, out = inputs(op, dtype, rng)
    gpu_out, interp_out = aligned(out), aligned(out)
    want = expected(op, x, out)
    k = fold_kernel(op, dtype)
    k(x, gpu_out)
    k.interpret(x, interp_out, seed=1)
    check(op, dtype, gpu_out, want)
    if op in ORDER_FREE or dtype not in TOLERANCE:
        np.testing.assert_array_equal(bits(gpu_out), bits(interp_out))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_h100_float_add_once_per_element_equals_the_interpreter(dtype):
    x, out = inputs("add", dtype, np.random.default_rng(8), k=50)
    gpu_out, interp_out = aligned(out), aligned(out)
    k = fold_kernel("add", dtype)
    k(x, gpu_out)
    k.interpret(x, interp_out)
    np.testing.assert_array_equal(bits(gpu_out), bits((out.astype(np.float64) + x.astype(np.float64)).astype(out.dtype)))
    np.testing.assert_array_equal(bits(gpu_out), bits(interp_out))


@pytest.mark.gpu
def test_h100_float_min_max_edge_cases_equal_the_interpreter():
    """NaN operands and signed zeros: the interpreter's definition (interp/reduce.py) is the GPU's."""
    values = np.array([1.0, np.nan, np.nan, 0.0, -0.0, 3.0, -np.inf, np.inf], dtype=np.float32)
    others = np.array([np.nan, -2.0, np.nan, -0.0, 0.0, -5.0, 1.0, 1.0], dtype=np.float32)
    for dtype in ("f16", "bf16"):
        t = NUMPY[dtype]
        for op in ("min", "max"):
            x, base = aligned(np.resize(others.astype(t), (1, N))), aligned(np.resize(values.astype(t), (R, N)))
            gpu_out, interp_out = aligned(base), aligned(base)
            k = fold_kernel(op, dtype)
            k(x, gpu_out)
            k.interpret(x, interp_out)
            np.testing.assert_array_equal(bits(gpu_out), bits(interp_out))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(197, 330), (1000, 1000), (4099, 257)], ids=["197x330", "1000x1000", "4099x257"])
def test_h100_reduce_rows_example_matches_numpy(shape):
    """The split-K-style example: many CTAs add their slabs into the same output tile."""
    from conftest import ROOT
    from references import CASES, check as check_example

    k = tmalang.compile_file(ROOT / "examples" / "reduce_rows_sm90.tma")
    args, want = CASES["reduce_rows"](np.random.default_rng(6), shape)
    k(*args)
    check_example("reduce_rows", args[-1], want)


@pytest.mark.parametrize("op,dtype", [("add", "f32"), ("xor", "u64"), ("min", "bf16")])
def test_a_reduce_through_a_box_with_a_cache_policy_assembles(op, dtype):
    """The two TMA store modifiers meet: cp.reduce...bulk_group.L2::cache_hint, the policy last."""
    source = FOLD.format(dt=dtype, op=op, grid="tiles").replace("box Out = out[64, 32]",
                                                                 "box Out = out[64, 32] cache evict_first")
    c = compile_source(source, "fold.tma", Options(arch="sm_90a"))
    assert f".{op}.tile.bulk_group.L2::cache_hint" in c.ptx and "createpolicy.fractional.L2::evict_first" in c.ptx
    cubin, _ = ptxas.assemble(c.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"
