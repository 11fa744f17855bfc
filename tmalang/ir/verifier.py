"""The IR verifier, run after lowering and after every pass.

A failure here is a compiler bug, not a user error: it names the pass that broke the invariant.
Structural rules hold at every stage (symbols resolve, variables are defined before use);
stage rules say what each pass has established (see each pass's docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..diagnostics import error
from . import exprs as ex
from . import ops

_DONE_AFTER = {
    "expand_pipelines": "no pipeline, produce or consume remains",
    "schedule_barriers": "every mbarrier has an arrival count",
    "plan_tmem": "every tmem tile has a column",
    "plan_smem": "every buffer and mbarrier has an offset",
    "dispatch_roles": "the block size is known",
    "lower_tile_walk": "no for_tiles remains",
}
# A string field with one of these names refers to a kernel-level declaration of that kind.
_REFERENCES = {"tensor": ops.TensorDecl, "box": ops.BoxDecl, "pipeline": ops.PipelineDecl}


class _Verifier:
    def __init__(self, kernel: ops.KernelOp, stage: str, done: Sequence[str]):
        self.kernel, self.stage, self.done = kernel, stage, set(done)
        self.symbols: dict[str, ops.Op] = {}

    def fail(self, message: str, o: ops.Op | None = None):
        raise error("E999", f"internal compiler error: IR invalid after '{self.stage}': {message}",
                    o.span if o is not None else None, "please report this with the source file")

    def after(self, pass_name: str) -> bool:
        return pass_name in self.done

    def run(self) -> None:
        for o in self.kernel.body:
            symbol = getattr(o, "symbol", None)
            if symbol is not None:
                if symbol in self.symbols:
                    self.fail(f"symbol '@{symbol}' declared twice", o)
                self.symbols[symbol] = o
        for o in self.kernel.body:
            self.declaration(o)
        for o in self.kernel.body:
            if isinstance(o, (ops.RoleOp, ops.Elect, ops.Sync, ops.WarpgroupBlock, ops.Fence)):
                self.region([o], set())
        if self.after("dispatch_roles") and self.kernel.threads <= 0:
            self.fail(_DONE_AFTER["dispatch_roles"])

    def declaration(self, o: ops.Op) -> None:
        self.references(o)
        if isinstance(o, ops.BoxDecl) and o.strides[-1] != 1:
            self.fail(f"box '@{o.symbol}' has innermost element stride {o.strides[-1]}; TMA ignores it (§4)", o)
        if isinstance(o, ops.PipelineDecl) and self.after("expand_pipelines"):
            self.fail(_DONE_AFTER["expand_pipelines"], o)
        if isinstance(o, ops.MbarrierDecl) and self.after("schedule_barriers") and o.count < 1:
            self.fail(f"mbarrier '@{o.symbol}' has no count", o)
        if isinstance(o, (ops.BufferDecl, ops.MbarrierDecl)) and self.after("plan_smem") and o.offset < 0:
            self.fail(f"'@{o.symbol}' has no smem offset", o)
        if isinstance(o, ops.TmemDecl) and self.after("plan_tmem") and o.column < 0:
            self.fail(f"tmem tile '@{o.symbol}' has no column", o)
        if isinstance(o, ops.TmemAlloc) and self.after("plan_smem") and o.offset < 0:
            self.fail("the TMEM base address has no smem slot", o)

    def region(self, region: list[ops.Op], defined: set[str]) -> None:
        for o in region:
            if isinstance(o, (ops.Produce, ops.Consume)) and self.after("expand_pipelines"):
                self.fail(_DONE_AFTER["expand_pipelines"], o)
            if isinstance(o, ops.ForTiles) and self.after("lower_tile_walk"):
                self.fail(_DONE_AFTER["lower_tile_walk"], o)
            self.references(o)
            if self.kernel.cta_group != 2 and (isinstance(o, (ops.InPairLeader, ops.MbarArriveLeader))
                                              or isinstance(o, ops.TmaLoad) and o.pair):
                self.fail(f"{o.name} belongs to CTA pairs, and the kernel has cta_group={self.kernel.cta_group}", o)
            for value in self.operands(o):
                self.expr(value, defined, o)
            if isinstance(o, (ops.Let, ops.Val)):
                defined.add(o.var)
            inner = set(defined)
            if isinstance(o, ops.ForTiles):
                inner |= set(o.vars) | {o.index}
            if isinstance(o, ops.ForRange):
                inner.add(o.var)
            if isinstance(o, ops.ForStep):
                inner |= {o.var, o.count}
            if isinstance(o, (ops.Produce, ops.Consume)):
                inner.add(o.slot)
            for r in o.regions():
                self.region(r, inner)

    def references(self, o: ops.Op) -> None:
        """Every named declaration an op refers to exists and is of the right kind."""
        for f in o.operand_fields():
            kind = _REFERENCES.get(f.name)
            if kind is not None and f.type == "str" and not isinstance(self.symbols.get(getattr(o, f.name)), kind):
                self.fail(f"{o.name} {f.name}={getattr(o, f.name)} does not name a {kind.__name__}", o)

    @staticmethod
    def operands(o: ops.Op):
        for f in o.operand_fields():
            value = getattr(o, f.name)
            if f.type in ("Expr", "BufferRef", "BufferRef | None") and value is not None:
                yield value
            elif f.type == "list[Expr]":
                yield from value

    def expr(self, e: ex.Expr, defined: set[str], o: ops.Op) -> None:
        for node in ex.walk(e):
            if isinstance(node, ex.Var) and node.name not in defined:
                self.fail(f"%{node.name} is used before it is defined", o)
            if isinstance(node, ex.Sreg) and node.name not in ex.SREGS:
                self.fail(f"sreg({node.name}) is no special register the IR reads", o)
            if isinstance(node, ex.BufferRef) and not self.resolves(node.name):
                self.fail(f"@{node.name} does not name a buffer, mbarrier or tmem tile", o)

    def resolves(self, name: str) -> bool:
        if isinstance(self.symbols.get(name), (ops.BufferDecl, ops.MbarrierDecl, ops.TmemDecl)):
            return True
        pipeline, _, field = name.partition(".")
        decl = self.symbols.get(pipeline)
        return isinstance(decl, ops.PipelineDecl) and any(f.split(":")[0] == field for f in decl.fields)


def verify(kernel: ops.KernelOp, stage: str, done: Sequence[str]) -> None:
    """Check `kernel` after `stage`; `done` names every stage that has run (its rules now hold)."""
    _Verifier(kernel, stage, done).run()
