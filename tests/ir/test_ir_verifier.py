"""The IR verifier checks each op: every symbol an op names resolves to a declaration of the right
kind, whatever the stage; the stage rules follow the stages that have run (the pass list is the
only list of passes)."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT
from tmalang.compiler import Options, compile_ir, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.ops import OPS
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.ir.verify_ops import VERIFY
from tmalang.passes import PASS_NAMES, PassLog


def _ir_after(stage: str, example: str = "tma_copy", arch: str = "sm_90a") -> str:
    log = PassLog(print_after={stage})
    source = (ROOT / "examples" / f"{example}.tma").read_text()
    compile_source(source, f"{example}.tma", Options(arch=arch, log=log), until="ir")
    return log.snapshots[0][1]


def _check(text: str, stage: str) -> None:
    [kernel] = parse_ir(text)
    verify(kernel, stage, ["lower", *PASS_NAMES[: PASS_NAMES.index(stage) + 1]])


@pytest.mark.parametrize("stage,old,new,message", [
    ("dispatch_roles", "tma_load box=In", "tma_load box=Nope", "tma_load box=Nope does not name a BoxDecl"),
    ("dispatch_roles", "tma_store box=Out", "tma_store box=ring.t", "tma_store box=ring.t does not name a BoxDecl"),
    ("dispatch_roles", "tensor=dst box=Out", "tensor=Out box=Out", "for_tiles tensor=Out does not name a TensorDecl"),
    ("expand_pipelines", "buffer @ring.t box=In", "buffer @ring.t box=src", "buffer box=src does not name a BoxDecl"),
])
def test_an_op_naming_a_missing_declaration_is_an_internal_error(stage, old, new, message):
    text = _ir_after(stage)
    _check(text, stage)
    assert old in text
    with pytest.raises(TmalangError, match=f"E999.*{message}"):
        _check(text.replace(old, new, 1), stage)


def test_a_produce_block_must_name_a_pipeline():
    text = _ir_after(PASS_NAMES[0])          # before expand_pipelines: produce blocks remain
    assert "produce pipeline=ring" in text
    [kernel] = parse_ir(text.replace("produce pipeline=ring", "produce pipeline=In", 1))
    with pytest.raises(TmalangError, match="E999.*produce pipeline=In does not name a PipelineDecl"):
        verify(kernel, "lower", ["lower"])


def test_stage_rules_follow_the_stages_that_ran():
    """A rule applies once its pass has run, and not before: no second copy of the pass order."""
    text = _ir_after("schedule_barriers")
    [kernel] = parse_ir(text)
    verify(kernel, "schedule_barriers", ["lower", *PASS_NAMES[: PASS_NAMES.index("schedule_barriers") + 1]])
    with pytest.raises(TmalangError, match="E999.*no smem offset"):
        verify(kernel, "plan_smem", ["lower", *PASS_NAMES])


def test_every_op_has_a_verify_hook():
    assert set(OPS.values()) <= set(VERIFY)


FINAL = "dispatch_roles"


@pytest.mark.parametrize("example,old,new,message", [
    # symbols name the right kind of tile, and a constant stage lies within it
    ("tma_copy", "dest=@ring.t[%s] barrier=@ring.full[%s]", "dest=@ring.full[%s] barrier=@ring.full[%s]",
     r"tma_load dest=@ring.full\[%s\] is not an smem tile"),
    ("tma_copy", "mbar_wait barrier=@ring.empty[%s]", "mbar_wait barrier=@ring.t[%s]",
     r"mbar_wait barrier=@ring.t\[%s\] is not an mbarrier tile"),
    ("tma_copy", "mbar_init barrier=@ring.full[3]", "mbar_init barrier=@ring.full[4]",
     r"@ring.full\[4\] is outside the 4 stage\(s\) of @ring.full"),
    ("gemm_sm90", "acc_zero acc=acc", "acc_zero acc=nope", "acc_zero acc=nope: not an accumulator of the role"),
    ("gemm_sm90", "value=cvt.bf16(!acc)", "value=cvt.bf16(!other)", "!other is not an accumulator of the role"),
    # fields in range
    ("gemm_sm100", "tmem_alloc columns=512", "tmem_alloc columns=48", "tmem_alloc columns=48: not a power of two"),
    ("tma_copy", "fence kind=mbarrier_init", "fence kind=mbarrier_fini", "fence kind=mbarrier_fini: unknown"),
    ("tma_copy", "setmaxnreg action=dec regs=40", "setmaxnreg action=dec regs=41", "setmaxnreg regs=41"),
    ("tma_copy", "mbarrier @ring.full stages=4 count=1 tx_bytes=32768 offset=131072",
     "mbarrier @ring.full stages=4 count=1 tx_bytes=32768 offset=131073", "offset=131073: not 8-byte aligned"),
    ("tma_copy", "for_tiles vars=[m, n] tensor=src", "for_tiles vars=[m] tensor=src",
     r"for_tiles vars=\[m\]: not one variable per box dimension"),
    ("tma_copy", "tma_store box=Out coords=[%m, %n]", "tma_store box=Out coords=[%m]", "tma_store coords="),
    # where an op may stand
    ("tma_copy", "sync scope=block\n  warpgroups", "tma_store box=Out coords=[0, 0] source=@ring.t[0]\n  warpgroups",
     "tma_store stands outside every role"),
    ("tma_copy", "  warpgroups first=0 last=0 {\n    setmaxnreg action=dec regs=40\n",
     "  warpgroups first=0 last=0 {\n", "a warpgroups block holds one setmaxnreg, then roles"),
    ("tma_copy", "elect scope=role {\n          mbar_wait", "elect scope=role {\n          elect scope=role {\n"
     "          }\n          mbar_wait", "elect inside elect"),
    ("tma_copy", "role @consumer first_warp=4", "role @consumer first_warp=3", "warps outside warpgroups 1..1"),
    # CTA sets of a 2 x 2 cluster (targets/cluster.py): known, proper, and as large as the box's slices
    ("gemm_cluster2x2_sm90", "ctas=row", "ctas=cross", "tma_load ctas=cross: not one of cluster, row, column"),
    ("gemm_cluster2x2_sm90", "ctas=column", "ctas=cluster", "tma_load ctas=cluster: 4 CTAs, but box @B has 2 slices"),
    ("gemm_cluster2x2_sm90", "ctas=cross", "ctas=diagonal", "mbar_arrive_cluster ctas=diagonal: not one of"),
    ("gemm_cluster2x2_sm90", "cluster_cols=2 {", "cluster_cols=3 {",
     "cluster_cols=3: not 1, 2, 4 or 8 CTAs dividing the cluster"),
    ("gemm_sm90", "mbar_arrive_cluster barrier=@ring.empty[%ring.prev]",
     "mbar_arrive_cluster barrier=@ring.empty[%ring.prev] ctas=row", "a row of a 2x1 cluster is one CTA or the whole"),
])
def test_each_op_checks_its_own_invariants(example, old, new, message):
    text = _ir_after(FINAL, example, "sm_100a" if "sm100" in example else "sm_90a")
    _check(text, FINAL)
    assert old in text
    with pytest.raises(TmalangError, match=f"E999.*{message}"):
        _check(text.replace(old, new, 1), FINAL)


def test_a_failure_points_at_the_op_in_the_ir_text():
    text = _ir_after(FINAL).replace("fence kind=mbarrier_init", "fence kind=nope")
    with pytest.raises(TmalangError) as caught:
        _check(text, FINAL)
    line = text.splitlines().index("    fence kind=nope") + 1
    assert caught.value.span.line == line and caught.value.span.col == 5
    assert "^^^^^^^^^^^^^^^" in caught.value.render()


# What the last passes establish, held of final IR text given to `tmalangc K.ir --emit ptx`
# (compiler.compile_ir): a hand-written kernel that breaks one is E432, not a backend crash or a
# launch whose copies write past its shared memory.
def _final_ir(example: str, arch: str) -> str:
    path = ROOT / "examples" / f"{example}.tma"
    return print_ir(compile_source(path.read_text(), path.name, Options(arch=arch), until="ir").ir)


@pytest.mark.parametrize("example, arch, edit, message", [
    ("tma_copy", "sm_90a", lambda t: re.sub(r"smem_bytes=\d+", "smem_bytes=16", t, count=1),
     "overlaps another or ends past smem_bytes"),
    ("tma_copy", "sm_90a", lambda t: re.sub(r"(@ring.full stages=\d+ count=\d+ tx_bytes=\d+ offset=)\d+", r"\g<1>0", t,
                                            count=1), "overlaps another"),
    ("tma_copy", "sm_90a", lambda t: re.sub(r"threads=\d+", "threads=32", t, count=1),
     "a role's warps lie past the block's threads"),
    ("gemm_sm100", "sm_100a", lambda t: re.sub(r"\n *tmem_alloc [^\n]*", "", t, count=1), "one tmem_alloc"),
    ("gemm_sm100", "sm_100a", lambda t: t.replace("tmem_alloc columns=512", "tmem_alloc columns=32", 1),
     "of at least their columns"),
], ids=["smem_too_small", "overlapping_barrier", "role_outside_the_block", "no_tmem_alloc", "tmem_alloc_too_small"])
def test_final_ir_text_is_held_to_what_the_last_passes_establish(example, arch, edit, message):
    text = _final_ir(example, arch)
    compile_ir(text, "k.ir", Options(arch=arch), until="ir")   # the kernel as compiled is accepted
    changed = edit(text)
    assert changed != text
    with pytest.raises(TmalangError, match="E432") as caught:
        compile_ir(changed, "k.ir", Options(arch=arch), until="ir")
    assert message in str(caught.value)
