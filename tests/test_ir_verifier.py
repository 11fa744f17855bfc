"""The IR verifier checks each op: every symbol an op names resolves to a declaration of the right
kind, whatever the stage; the stage rules follow the stages that have run (the pass list is the
only list of passes)."""

from __future__ import annotations

import pytest

from conftest import ROOT
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES, PassLog


def _ir_after(stage: str) -> str:
    log = PassLog(print_after={stage})
    source = (ROOT / "examples" / "tma_copy.tma").read_text()
    compile_source(source, "tma_copy.tma", Options(log=log), until="ir")
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
