"""Pipelines that one role both produces and consumes: the multistage loop of `cuda::pipeline`.

The same threads fill a slot and later drain it, so nobody else frees the ring for them. That
is sound when every slot the role produces is consumed by the same statement list, after the
produce block: then the compiler can run the role's loads ahead of its consumption by up to the
ring's depth (passes/prefetch_own_pipelines.py) and never wait on a slot only a later
statement of its own would free. Any other arrangement is refused here (E103):
  - a consume block with no produce block of the pipeline before it in the same block: the
    role would wait for a slot it fills only later (or in another loop);
  - a produce block with no consume block after it in the same block: its slots are consumed
    elsewhere, so once the ring is full the role waits for itself;
  - two produce (or consume) blocks of the pipeline in one block: one pair per loop body keeps
    the ring's order plain (write the loop once and let `steps` repeat it).
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .declarations import KernelInfo, Pipeline, Role

_PAIR_NOTE = ("a role that produces and consumes a pipeline pairs the blocks in one block, produce first: "
              "`produce P as s { load ... }` then `consume P as s { ... }`")


def check_role(info: KernelInfo, role: Role) -> None:
    own = [p for p in info.symbols.values()
           if isinstance(p, Pipeline) and role.name in p.producers and role.name in p.consumers]
    for pipe in own:
        _check_lists(role.decl.body, pipe)


def _check_lists(body: list, pipe: Pipeline) -> None:
    _check_list(body, pipe)
    for stmt in body:
        inner = getattr(stmt, "body", None)
        if inner:
            _check_lists(inner, pipe)


def _check_list(body: list, pipe: Pipeline) -> None:
    blocks = [s for s in body if isinstance(s, (ast.Produce, ast.Consume)) and s.pipeline.name == pipe.name]
    produced = False
    for s in blocks:
        if isinstance(s, ast.Produce):
            if produced:
                raise error("E103", f"a second produce block of pipeline '{pipe.name}' in this block, in a role "
                            "that also consumes it", s.span, "one produce and one consume block per loop body",
                            _PAIR_NOTE)
            produced = True
        elif not produced:
            raise error("E103", f"this role consumes pipeline '{pipe.name}' here without producing it earlier "
                        "in the same block", s.span,
                        "the role would wait for a slot that only it fills, later: a hang", _PAIR_NOTE)
        elif s is not blocks[1]:
            raise error("E103", f"a second consume block of pipeline '{pipe.name}' in this block, in a role "
                        "that also produces it", s.span, "one produce and one consume block per loop body",
                        _PAIR_NOTE)
    if produced and len(blocks) < 2:
        raise error("E103", f"this role produces pipeline '{pipe.name}' here but consumes it in another block",
                    blocks[0].span, "once the ring is full the role would wait for a slot only it frees: a hang",
                    _PAIR_NOTE)
