"""The reference interpreter: examples against NumPy, many schedules, and the protocol corpus."""

from __future__ import annotations

import time

import numpy as np
import pytest

import tmalang
from conftest import EXAMPLES, ROOT, example_arch
from references import CASES, check
from split_cases import load_dir

SHAPES = [(100, 300), (1, 64), (257, 129), (130, 4)]
VERIFY = load_dir(ROOT / "tests" / "verify", ROOT)


def _matrix(rng, shape, fill=None):
    rows, cols = shape
    base = np.empty((rows, -(-cols // 4) * 4), dtype=np.float32)
    base[...] = rng.standard_normal(base.shape) if fill is None else fill
    return base[:, :cols]


def _signature_arrays(kernel, rng, shape, k=128) -> list[np.ndarray]:
    """One array per tensor parameter, in signature order, of its dtype, with M, N = shape and
    K = k, rows padded to 16 bytes: random inputs, outputs of 7.0."""
    from tmalang.targets.dtypes import NUMPY

    dims = {"M": shape[0], "N": shape[1], "K": k}
    arrays = []
    for arg in kernel.manifest.args:
        rows, cols = (dims[d] if isinstance(d, str) else d for d in arg.shape)
        dtype = NUMPY[arg.dtype]
        base = np.empty((rows, -(-cols * dtype.itemsize // 16) * 16 // dtype.itemsize), dtype=np.float32)
        base[...] = 7.0 if arg.written else rng.standard_normal(base.shape)
        arrays.append(base.astype(dtype)[:, :cols])
    return arrays


def _run(kernel, rng, shape, **options):
    args, expected = CASES[kernel.name](rng, shape)
    kernel.interpret(*args, **options)
    return args[-1], expected


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_matches_numpy(path, shape):
    kernel = tmalang.compile_file(path, arch=example_arch(path))
    out, expected = _run(kernel, np.random.default_rng(hash(shape) & 0xFFFF), shape)
    check(kernel.name, out, expected)


@pytest.mark.slow   # every example x 64 schedules (3 min); test_verify covers one schedule each
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_no_correct_example_is_flagged_across_64_schedules(path):
    kernel = tmalang.compile_file(path, arch=example_arch(path))
    out, expected = _run(kernel, np.random.default_rng(5), (200, 260), seed=1000, explore=64, ctas=3)
    check(kernel.name, out, expected)


def test_copy_2048_squared_verifies_quickly():
    kernel = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma")
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    out, expected = _run(kernel, rng, (2048, 2048))
    assert time.perf_counter() - start < 5.0
    np.testing.assert_array_equal(out, expected)


STRIP_FENCES = "// verify: without the compiler's proxy fences"


def _strip_compiler_proxy_fences(kernel) -> None:
    """Remove the `fence proxy_async` ops fence_proxy_writes inserted (their span is the op they
    protect, not a `fence` statement): the program then shows, in IR, the missing fence that the
    interpreter must catch should the pass ever miss one."""
    from tmalang.ir import ops

    def inserted(o) -> bool:
        if not (isinstance(o, ops.Fence) and o.kind == "proxy_async"):
            return False
        return not o.span.source.line(o.span.line)[o.span.col - 1:].startswith("fence")

    def strip(region):
        region[:] = [o for o in region if not inserted(o)]
        for o in region:
            for r in o.regions():
                strip(r)

    strip(kernel._c.ir.body)


@pytest.mark.parametrize("case", VERIFY, ids=[c.id for c in VERIFY])
def test_broken_protocol_is_caught(case):
    """Each case of tests/verify/*.tma (format: tests/split_cases.py) compiles cleanly, and the
    interpreter's default schedule reports exactly the error written inline."""
    kernel = tmalang.compile(case.source(), arch=case.arch, name=case.relative)
    if STRIP_FENCES in "\n".join(case.lines):
        _strip_compiler_proxy_fences(kernel)
    arrays = _signature_arrays(kernel, np.random.default_rng(0), (96, 128))
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel.interpret(*arrays)
    assert "error[E2" not in caught.value.render(), "a launch error hides the protocol error the program exists to show"
    written = [a for arg, a in zip(kernel.manifest.args, arrays) if arg.written]
    assert all((a.astype(np.float32) == 7.0).all() for a in written), "a failed run must not write the caller's arrays"
    problem = case.mismatch(caught.value)
    if problem:
        pytest.fail(problem, pytrace=False)


def test_run_cli_writes_a_perfetto_trace(tmp_path, capsys):
    import json

    from tmalang.cli.main import main

    trace = tmp_path / "t.json"
    assert main(["run", str(ROOT / "examples" / "tma_copy.tma"), "--interpret", "--dims", "M=300,N=200", "--seed", "2",
                 "--trace", str(trace)]) == 0
    assert "protocol ok" in capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert all({"name", "ts", "dur", "pid", "tid"} <= e.keys() for e in slices)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"warp 0 (producer)", "warp 4 (consumer)", "TMA engine"} <= names
    assert any(e["name"] == "tma load" for e in slices) and any(e["name"] == "tma store" for e in slices)
    assert any(e["ph"] == "i" and "ring.full[0] phase 0 done" == e["name"] for e in events)
    assert any(e["name"] == "mbar_wait" and e["dur"] > 1 for e in slices), "some wait should block"


def test_an_explored_trace_keeps_each_schedule_on_tracks_of_its_own(tmp_path, capsys):
    import json

    from tmalang.cli.main import main

    one, three = tmp_path / "one.json", tmp_path / "three.json"
    common = ["run", str(ROOT / "examples" / "tma_copy.tma"), "--interpret", "--dims", "M=100,N=130", "--seed", "5"]
    assert main([*common, "--trace", str(one)]) == 0
    assert main([*common, "--explore", "3", "--trace", str(three)]) == 0
    single = json.loads(one.read_text())["traceEvents"]
    events = json.loads(three.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    ctas = {e["pid"] for e in single if e["name"] == "process_name"}
    assert len(processes) == 3 * len(ctas)       # each schedule's CTAs are processes of their own
    assert {name.split(" CTA")[0] for name in processes.values()} == {
        "schedule 0 (seed 5)", "schedule 1 (seed 6)", "schedule 2 (seed 7)"}
    for index in range(3):                       # every schedule's work is on its own processes
        own = {pid for pid, name in processes.items() if name.startswith(f"schedule {index} ")}
        assert any(e["ph"] == "X" and e["name"] == "tma store" and e["pid"] in own for e in events)
    assert {e["pid"] for e in events} <= set(processes)


def test_run_cli_reports_a_deadlock_with_exit_1(tmp_path, capsys):
    from tmalang.cli.main import main

    case = next(c for c in VERIFY if c.name == "broken_constant_parity")
    path = case.write(tmp_path)
    assert main(["run", str(path), "--interpret", "--arch", case.arch, "--seed", "3", "--explore", "2"]) == 1
    err = capsys.readouterr().err
    assert "error[E401]" in err and "replay with seed=3" in err


def test_missing_proxy_fence_is_caught():
    """fence_proxy_writes inserts the fence; without it the interpreter must flag the store (E406)."""
    from tmalang.ir import ops

    kernel = tmalang.compile_file(ROOT / "tests" / "fence_missing_before_store.tma")
    fences = [o for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.Fence) and o.kind == "proxy_async"]
    assert fences, "the compiler should have inserted the fence"
    rng = np.random.default_rng(0)
    src, dst = _matrix(rng, (64, 64)), _matrix(rng, (64, 64), 0.0)
    out = kernel.interpret(src, dst.copy())[0]
    np.testing.assert_array_equal(out, src * np.float32(2))

    def strip(region):
        region[:] = [o for o in region if not (isinstance(o, ops.Fence) and o.kind == "proxy_async")]
        for o in region:
            for r in o.regions():
                strip(r)

    strip(kernel._c.ir.body)
    with pytest.raises(tmalang.TmalangError, match=r"E406.*fence.proxy.async"):
        kernel.interpret(src, dst)


def test_correct_two_role_handoff_runs_clean_across_schedules():
    kernel = tmalang.compile_file(ROOT / "tests" / "handoff_correct.tma")
    rng = np.random.default_rng(2)
    src, dst = _matrix(rng, (200, 300)), _matrix(rng, (200, 300), np.nan)
    kernel.interpret(src, dst, seed=7, explore=32, ctas=3)
    np.testing.assert_array_equal(dst, src)


def test_surplus_arrival_is_caught():
    """schedule_barriers makes static counts agree, so E402 is checked on IR where one arrive site runs
    twice per phase (the same op object listed twice, as a loop that outruns its phase would)."""
    from tmalang.ir import ops

    kernel = tmalang.compile_file(ROOT / "examples" / "copy_explicit.tma")
    for o in ops.walk(kernel._c.ir.body):
        if isinstance(o, ops.Elect):
            arrives = [s for s in o.body if isinstance(s, ops.MbarArrive)]
            if arrives:
                o.body.insert(o.body.index(arrives[0]), arrives[0])
    rng = np.random.default_rng(0)
    with pytest.raises(tmalang.TmalangError, match=r"E402.*more arrivals than its count"):
        kernel.interpret(_matrix(rng, (64, 64)), _matrix(rng, (64, 64), 0.0))


def test_missing_init_fence_is_caught():
    """schedule_barriers always fences barrier init; without it a TMA load must be flagged (E407)."""
    from tmalang.ir import ops

    kernel = tmalang.compile_file(ROOT / "examples" / "copy_explicit.tma")
    init = next(o for o in kernel._c.ir.body if isinstance(o, ops.Elect) and o.scope == "block")
    init.body[:] = [o for o in init.body if not isinstance(o, ops.Fence)]
    rng = np.random.default_rng(0)
    with pytest.raises(tmalang.TmalangError, match=r"E407.*fence.mbarrier_init"):
        kernel.interpret(_matrix(rng, (64, 64)), _matrix(rng, (64, 64), 0.0))


def test_box_semantics_with_element_strides_and_nan_fill():
    """Outer strides pick every s-th row, packed densely; the fill is TMA's NaN (0x7FF77FF7)."""
    from tmalang.interp.tiles import read_box, write_box
    from tmalang.ir import ops

    box = ops.BoxDecl("B", "t", "f32", [5, 4], [2, 1], "none", "nan", "none", 1, False)
    tensor = np.arange(7 * 10, dtype=np.float32).reshape(7, 10)
    tile = read_box(tensor, box, [1, 2])        # rows 5, 7 (outside), 9 (outside); cols 8, 9, 10, 11 (last two outside)
    expected = np.full((3, 4), 0x7FF77FF7, dtype=np.uint32).view(np.float32)
    expected[0, :2] = tensor[5, 8:10]
    np.testing.assert_array_equal(tile.view(np.uint32), expected.view(np.uint32))
    target = np.zeros_like(tensor)
    write_box(target, box, [1, 2], np.ones((3, 4), dtype=np.float32))
    assert target.sum() == 2 and target[5, 8] == 1 and target[5, 9] == 1


@pytest.mark.parametrize("ctas", [0, -1, 2.5, True])
def test_interpreter_refuses_a_grid_of_no_ctas(ctas):
    """ctas=-1 used to run no CTA at all and report nothing: a protocol never executed is no proof.
    The interpreter's own entry point refuses it (Kernel.interpret checks its arguments first)."""
    from tmalang.interp import interpret

    kernel = tmalang.compile_file(ROOT / "tests" / "handoff_correct.tma")
    rng = np.random.default_rng(0)
    src, dst = _matrix(rng, (64, 64)), _matrix(rng, (64, 64), 0.0)
    with pytest.raises(tmalang.TmalangError, match=r"E420.*ctas >= 1"):
        interpret(kernel._c.ir, kernel.manifest, src, dst, ctas=ctas)


@pytest.mark.parametrize("strides", [[1, 1], [3, 1]])
def test_negative_box_coordinates_fill_on_load_and_skip_on_store(strides):
    """TMA coordinates are signed: elements before 0 are out of bounds like those past the end."""
    from tmalang.interp.tiles import box_tile_bytes, read_box, write_box
    from tmalang.ir import ops

    box = ops.BoxDecl("B", "t", "f32", [4, 6], strides, "none", "nan", "none", 1, False)
    tensor = np.arange(7 * 10, dtype=np.float32).reshape(7, 10)
    shape, _ = box_tile_bytes(box)
    rows = [-4 + j * strides[0] for j in range(shape[0])]      # tile row -1 covers -4 .. -1
    cols = [6 + j * strides[1] for j in range(shape[1])]
    expected = np.array([[tensor[r, c] if 0 <= r < 7 and 0 <= c < 10 else np.nan for c in cols] for r in rows],
                        dtype=np.float32)
    tile = read_box(tensor, box, [-1, 1])
    np.testing.assert_array_equal(tile, expected)
    target = np.zeros_like(tensor)
    write_box(target, box, [-1, 1], np.ones(shape, dtype=np.float32))
    assert not target.any(), "a box entirely before row 0 stores nothing"
    write_box(target, box, [0, -1], np.ones(shape, dtype=np.float32))   # cols -6 .. -1: nothing
    assert not target.any()


def test_program_with_negative_tile_coordinates_runs():
    """A shifted copy, `load In[m - 1, n]`: the first tile row loads the zero fill."""
    kernel = tmalang.compile_file(ROOT / "tests" / "verify" / "ok" / "shifted_copy.tma")
    rng = np.random.default_rng(0)
    src, dst = _matrix(rng, (70, 64)), _matrix(rng, (70, 64), 5.0)
    kernel.interpret(src, dst, seed=3, explore=4)
    expected = np.zeros_like(dst)
    expected[32:] = src[:38]
    np.testing.assert_array_equal(dst, expected)


VERIFY_OK = sorted((ROOT / "tests" / "verify" / "ok").glob("*.tma"))


@pytest.mark.parametrize("path", VERIFY_OK, ids=[p.stem for p in VERIFY_OK])
def test_correct_explicit_program_runs_clean_across_schedules(path):
    """tests/verify/ok holds correct hand-written protocols: neither the compiler nor any schedule
    of the interpreter may flag them (each was a false positive or a crash once)."""
    kernel = tmalang.compile_file(path, arch=example_arch(path))
    arrays = _signature_arrays(kernel, np.random.default_rng(1), (100, 130))
    kernel.interpret(*arrays, seed=11, explore=24, ctas=3)


def test_one_barrier_two_transfers_per_tile_computes_the_sum():
    kernel = tmalang.compile_file(ROOT / "tests" / "verify" / "ok" / "two_transfers_one_barrier.tma")
    a, b, out = _signature_arrays(kernel, np.random.default_rng(2), (70, 100))
    kernel.interpret(a, b, out, seed=5, explore=8)
    np.testing.assert_array_equal(out, a + b)
