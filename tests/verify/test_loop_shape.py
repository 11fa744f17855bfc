"""loop_shape.py: the pumping premise read off the IR (issue 28, "Every trip count").

The IR of gemm_sm90 and multistage_sm90 meets it; edits of that IR text that break it are each
refused with the op and the reason: a condition that changes every other iteration, a loop whose
trips grow as a square, a barrier's stage read from the index itself, a counter that
doubles. A prologue of min(4, trips) fills puts the premise's start past 4.
"""

from __future__ import annotations

import pytest

import tmalang
from conftest import ROOT
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.verify.loop_shape import Broken, Premise, premise

GEMM_K = {"dim": "K", "step": 64, "first": 33, "launch": {"M": 65, "N": 129}, "ctas": 2}


def _ir(name: str) -> str:
    return print_ir([tmalang.compile_file(ROOT / "examples" / name)._c.ir])


def _premise(text: str, **over):
    args = dict(GEMM_K, **over)
    return premise(parse_ir(text)[0], args["dim"], args["step"], args["first"], args["launch"], args["ctas"])


def test_gemm_meets_the_premise_with_one_growing_loop_per_role():
    found = _premise(_ir("gemm_sm90.tma"))
    assert isinstance(found, Premise) and found.growing == 1


def test_a_prologue_of_min_stages_and_trips_starts_the_premise_past_it():
    found = premise(tmalang.compile_file(ROOT / "examples" / "multistage_sm90.tma")._c.ir, "K", 64, 33,
                    {"M": 65, "N": 65}, 1)
    assert isinstance(found, Premise) and found.from_trips >= 3      # min(4, 1 + n) is 4 from n = 3


@pytest.mark.parametrize("old, new, why", [
    ("if cond=(%k > 0)", "if cond=((%k % 2) > 0)", "changes from iteration to iteration"),
    ("for_range var=k count=(($K / 64) + (($K % 64) > 0))", "for_range var=k count=(($K / 64) * ($K / 64))",
     "neither is fixed nor grows by whole trips"),
    ("mbar_wait barrier=@ring.full[%s]", "mbar_wait barrier=@ring.full[%k]", "changes with the trips or the iterations"),
    ("let var=ring.it value=(%ring.it + 1)", "let var=ring.it value=((%ring.it * 2) + 1)", "changes with the trips or the iterations"),
])
def test_an_edit_that_breaks_the_premise_is_named(old, new, why):
    text = _ir("gemm_sm90.tma")
    assert old in text
    found = _premise(text.replace(old, new, 1))
    assert isinstance(found, Broken), found
    assert why in str(found) and "at " in str(found)
