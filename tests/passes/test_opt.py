"""`tmalangc opt`: IR text in, IR text out; bad pass names, IR text and IR are located diagnostics."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, ROOT, example_arch
from tmalang.cli.main import main
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.cli.opt import optimize
from tmalang.ir.printer import print_ir
from tmalang.passes import PASS_NAMES, PassLog, applicable
from tmalang.targets.arch import SM_90A, target_named


def _snapshots(path) -> dict[str, str]:
    log = PassLog(print_after={"all"})
    c = compile_source(path.read_text(), path.name, Options(arch=example_arch(path), log=log), until="ir")
    return dict(log.snapshots) | {"final": print_ir(c.ir)}


def _opt(tmp_path, capsys, text: str, *flags: str) -> tuple[int, str, str]:
    path = tmp_path / "k.ir"
    path.write_text(text)
    code = main(["opt", str(path), *flags])
    out, err = capsys.readouterr()
    return code, out, err.replace(f"{tmp_path}/", "")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_rest_of_the_pipeline_on_printed_ir_gives_the_compilers_ir(path, tmp_path, capsys):
    """IR printed after confine_idle_waits, run through every later pass of its target, is the
    compiler's final IR."""
    ir = _snapshots(path)
    arch = example_arch(path)
    names = applicable(target_named(arch))
    rest = names[names.index("confine_idle_waits") + 1:]
    code, out, err = _opt(tmp_path, capsys, ir["confine_idle_waits"], f"--passes={','.join(rest)}", f"--arch={arch}")
    assert (code, err) == (0, "")
    assert out == ir["final"]


def test_one_pass_at_a_time_and_output_file(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "gemm_sm90.tma")
    names = applicable(SM_90A)
    for before, name in zip(names, names[1:]):
        code, out, _ = _opt(tmp_path, capsys, ir[before], f"--passes={name}", "-o", str(tmp_path / "out.ir"))
        assert code == 0 and out == ""
        assert (tmp_path / "out.ir").read_text() == ir[name], name


def test_print_ir_after_and_list_passes(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    code, out, err = _opt(tmp_path, capsys, ir["prefetch_own_pipelines"], "--passes=expand_pipelines,order_wgmma",
                          "--print-ir-after=expand_pipelines")
    assert code == 0 and out == ir["order_wgmma"]
    assert err == f"// ----- IR after expand_pipelines -----\n{ir['expand_pipelines']}"
    assert main(["opt", "--list-passes"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == PASS_NAMES
    assert listed[2].startswith("expand_pipelines         produce/consume blocks become explicit")


def test_no_passes_verifies_and_prints(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    assert _opt(tmp_path, capsys, ir["final"]) == (0, ir["final"], "")


def test_an_unknown_pass_is_e430_pointing_into_the_option(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    code, out, err = _opt(tmp_path, capsys, ir["final"], "--passes=expand_pipelines,expand_everything")
    assert code == 1 and out == ""
    assert err.splitlines()[:3] == [
        "<command line>:1:27: error[E430]: unknown pass 'expand_everything'",
        "    --passes=expand_pipelines,expand_everything",
        "                              ^^^^^^^^^^^^^^^^^",
    ]


@pytest.mark.parametrize("text,expected", [
    ("kernel @k grid=tiles\n  role\n", "k.ir:1:1: error[E090]: op 'kernel' needs field 'cluster'"),
    ("kernel @k grid=tiles cluster=1 cta_group=1 threads=0 smem_bytes=0 {\n  sync scope=block ?\n",
     "k.ir:2:20: error[E090]: cannot read IR text here"),
    ("kernel @k grid=tiles cluster=1 cta_group=1 threads=0 smem_bytes=0 {\n  elect scope=block {\n  }\n",
     "k.ir:1:1: error[E090]: 'kernel' opens a region that is never closed"),
    ("// nothing\n", "k.ir:1:1: error[E431]: the IR file holds no kernel"),
    ("sync scope=block\n", "k.ir:1:1: error[E431]: an IR file holds one kernel, and this one holds 'sync' outside"),
    ("kernel @k grid=tiles cluster=1 cta_group=1 threads=0 smem_bytes=0 {\n}\n" * 2,
     "k.ir:3:1: error[E431]: an IR file holds one kernel, and this one holds a second kernel"),
])
def test_malformed_ir_text_is_located(tmp_path, capsys, text, expected):
    code, out, err = _opt(tmp_path, capsys, text, "--passes=plan_smem")
    assert code == 1 and out == ""
    assert err.startswith(expected)
    assert "Traceback" not in err


def test_ir_the_verifier_refuses_is_e432_at_the_op(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    bad = ir["expand_pipelines"].replace("tma_load box=In", "tma_load box=Nope")
    code, _, err = _opt(tmp_path, capsys, bad, "--passes=order_wgmma")
    line = next(i for i, text in enumerate(bad.splitlines(), 1) if "box=Nope" in text)
    assert code == 1
    assert err.startswith(f"k.ir:{line}:9: error[E432]: invalid IR after 'expand_pipelines': "
                          "tma_load box=Nope does not name a BoxDecl")


def test_ir_short_of_the_first_passs_stage_is_e432(tmp_path, capsys):
    """The input stands where the first named pass stands: every pass before it has run."""
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    code, _, err = _opt(tmp_path, capsys, ir["expand_pipelines"], "--passes=plan_smem")
    assert code == 1
    assert ("error[E432]: invalid IR after 'order_turns': mbarrier @ring.full: no arrival count after "
            "schedule_barriers") in err
    assert "note: 'plan_smem' takes IR on which every pass before it has run" in err


def test_a_dtype_no_table_knows_is_e432(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    text = ir["prefetch_own_pipelines"].replace("dtype=f32", "dtype=f99")
    code, _, err = _opt(tmp_path, capsys, text, "--passes=expand_pipelines")
    assert code == 1
    assert "k.ir:2:3: error[E432]: invalid IR after 'prefetch_own_pipelines': tensor dtype=f99: not an element type" in err


def test_a_pass_that_cannot_run_on_the_ir_is_e433(tmp_path, capsys, monkeypatch):
    """A pass that fails on IR the verifier accepted is located at the kernel, not a traceback."""
    from tmalang.passes import expand_pipelines

    def broken(kernel, target):
        raise KeyError("f99")

    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    monkeypatch.setattr(expand_pipelines, "run", broken)
    code, _, err = _opt(tmp_path, capsys, ir["prefetch_own_pipelines"], "--passes=expand_pipelines")
    assert code == 1
    assert "k.ir:1:1: error[E433]: pass 'expand_pipelines' cannot run on this IR: KeyError: 'f99'" in err
    assert "Traceback" not in err


def test_a_pass_the_target_cannot_need_is_e434(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    code, out, err = _opt(tmp_path, capsys, ir["final"], "--passes=plan_tmem", "--arch=sm_90a")
    assert code == 1 and out == ""
    assert err.splitlines()[:3] == [
        "<command line>:1:10: error[E434]: pass 'plan_tmem' needs a target with tcgen05, and sm_90a has none",
        "    --passes=plan_tmem",
        "             ^^^^^^^^^",
    ]


def test_a_diagnostic_of_a_pass_points_into_the_ir(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    text = ir["schedule_barriers"].replace("stages=4 bytes=32768", "stages=40 bytes=32768")
    code, _, err = _opt(tmp_path, capsys, text, "--passes=plan_smem")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "stages=40" in t)
    assert code == 1 and f"k.ir:{line}:3: error[E032]: shared memory plan needs" in err


# ---- no IR text crashes opt: it runs, or stops with a located diagnostic -------------------------

_VALUE = re.compile(r"(?<==)(\[[^\]=]*\]|\S+)")   # a field's value: after `=`, up to a blank
_FUZZED = ("tma_copy", "gemm_sm90", "gemm_sm100", "attention_sm100", "gemm_pair_sm100")
_SNAPSHOTS = {name: _snapshots(ROOT / "examples" / f"{name}.tma") for name in _FUZZED}
_JUNK = ["0", "-1", "7", "4096", "none", "true", "[]", "[1, 2]", "@ring.full[0]", "%s", "$M", "(1 + 2)",
         "tmem(@acc.d[0], 0)", "!acc", "^m", "cvt.bf16(0)"]


def _mutate(text: str, data) -> str:
    """Give a field another value of the file (or a junk one), or delete or repeat a line."""
    lines = text.splitlines(keepends=True)
    kind = data.draw(st.sampled_from(["value", "value", "delete", "repeat"]))
    at = data.draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        return "".join(lines[:at] + lines[at + 1:])
    if kind == "repeat":
        return "".join(lines[:at + 1] + lines[at:])
    values = list(_VALUE.finditer(text))
    m = values[data.draw(st.integers(0, len(values) - 1))]
    other = data.draw(st.sampled_from(_JUNK + [v.group() for v in values]))
    return text[:m.start()] + other + text[m.end():]


@pytest.mark.slow   # a hypothesis sweep of mutants
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_ir_never_crashes_opt(data):
    example = data.draw(st.sampled_from(sorted(_SNAPSHOTS)))
    target = target_named(example_arch(ROOT / "examples" / f"{example}.tma"))
    names = applicable(target)
    stage = data.draw(st.sampled_from(names[:-1]))
    text = _SNAPSHOTS[example][stage]
    for _ in range(data.draw(st.integers(1, 3))):
        text = _mutate(text, data)
    rest = names[names.index(stage) + 1:]
    try:
        optimize(text, "k.ir", rest, target)
    except TmalangError:
        pass


@pytest.mark.parametrize("argv", [["opt"], ["opt", "k.ir", "--passes"], ["opt", "k.ir", "--bogus"],
                                  ["opt", "k.ir", "--print-ir-after=bogus"]])
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_an_output_into_a_missing_directory_is_e009(tmp_path, capsys):
    ir = _snapshots(ROOT / "examples" / "tma_copy.tma")
    code, out, err = _opt(tmp_path, capsys, ir["final"], "-o", str(tmp_path / "no" / "out.ir"))
    assert code == 1 and out == "" and "error[E009]: cannot write" in err


@pytest.mark.parametrize("example,arch,op", [("gemm_sm100", "sm_90a", "tmem"), ("gemm_sm90", "sm_100a", "accumulator")])
def test_ir_of_an_instruction_family_the_target_lacks_is_e434(tmp_path, capsys, example, arch, op):
    ir = _snapshots(ROOT / "examples" / f"{example}.tma")
    code, out, err = _opt(tmp_path, capsys, ir["expand_pipelines"], "--passes=fence_proxy_writes", f"--arch={arch}")
    assert code == 1 and out == ""
    first = err.splitlines()[0]
    assert re.match(rf"k\.ir:\d+:\d+: error\[E434\]: '{op}' needs a target with \w+, and {arch} has none", first), first
