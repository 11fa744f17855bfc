"""The IR verifier, run after lowering, after every pass, and on `tmalangc opt`'s input.

Each op checks its own invariants in its hook (verify_ops.VERIFY); the walk here gives the hooks
their scope and checks what every op's operands share: variables defined before use, launch
values that exist, tiles, accumulators and row registers that resolve, constant stages within
their tile. Stage rules, what a pass has established (see each pass's docstring), are in one
table, `STAGE_RULES`, and apply once their pass has run: the pass order itself lives only in
passes.PIPELINE.

After a stage a failure is a compiler bug (E999, naming the stage); on opt's input, the input's
(E432). Either points at the op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..diagnostics import TmalangError, error
from . import exprs as ex
from . import ops
from .verify_ops import VERIFY, Scope

# (stage, ops, what holds of each once the stage has run, the message when it does not)
STAGE_RULES = [
    ("stage_stores", ops.StagedStore, lambda o: False, "none may remain"),
    ("expand_pipelines", (ops.PipelineDecl, ops.Produce, ops.Consume), lambda o: False, "none may remain"),
    ("order_turns", ops.Turn, lambda o: False, "none may remain"),
    ("schedule_barriers", ops.MbarrierDecl, lambda o: o.count >= 1, "no arrival count"),
    ("plan_tmem", ops.TmemDecl, lambda o: o.column >= 0, "no column"),
    ("plan_smem", (ops.BufferDecl, ops.MbarrierDecl, ops.TmemAlloc), lambda o: o.offset >= 0, "no smem offset"),
    ("claim_tiles", ops.ForTiles, lambda o: not o.dynamic, "a dynamic tile loop remains"),
    ("claim_tiles", ops.TileQueueDecl, lambda o: o.offset >= 0, "no smem offset"),
    ("plan_smem", ops.KernelOp, lambda o: _placed_apart_within(o), "shared memory: a placed buffer, barrier, "
     "TMEM address word or tile queue overlaps another or ends past smem_bytes"),
    ("plan_tmem", ops.KernelOp, lambda o: _tmem_allocated(o), "Tensor Memory: the tmem tiles need one tmem_alloc "
     "at the kernel's top, of at least their columns, and one tmem_dealloc of as many"),
    ("dispatch_roles", ops.KernelOp, lambda o: o.threads > 0, "no block size"),
    ("dispatch_roles", ops.KernelOp, lambda o: _roles_within_block(o), "a role's warps lie past the block's threads"),
    ("lower_tile_walk", ops.ForTiles, lambda o: False, "none may remain"),
]


class Verifier(Scope):
    """The walk over one kernel."""

    def __init__(self, kernel: ops.KernelOp, done: Sequence[str], fail: Callable[[str, ops.Op], TmalangError]):
        super().__init__(kernel, fail)
        self.done = set(done)
        self.params = {d for t in kernel.body if isinstance(t, ops.TensorDecl) for d in t.shape if isinstance(d, str)}

    def run(self) -> None:
        for o in self.kernel.body:
            symbol = getattr(o, "symbol", None)
            if symbol is not None:
                if symbol in self.symbols:
                    self.fail(f"symbol '@{symbol}' declared twice", o)
                self.symbols[symbol] = o
        self.params |= {s.symbol for s in self.kernel.body if isinstance(s, ops.ScalarDecl)}
        self.op(self.kernel, set())

    def op(self, o: ops.Op, defined: set[str]) -> None:
        hook = VERIFY.get(type(o))
        if hook is None:
            self.fail(f"'{o.name}' has no verify hook", o)
        hook(self, o)
        for value in o.expressions():
            self.expr(value, defined, o)
        if isinstance(o, (ops.Let, ops.Val, ops.TileTake)):
            defined.add(o.var)
        if isinstance(o, ops.RoleOp):
            inner_ops = list(ops.walk(o.body))
            self.role = o
            self.accs = {a.symbol for a in inner_ops if isinstance(a, ops.AccDecl)}
            self.rows = {r.symbol for r in inner_ops if isinstance(r, ops.RowDecl)}
        self.parents.append(o)
        for region in o.regions():
            inner = defined | _binds(o)
            for child in region:
                self.op(child, inner)
        self.parents.pop()
        if isinstance(o, ops.RoleOp):
            self.role = None
        for stage, kinds, holds, message in STAGE_RULES:   # after the regions: the kernel's rule comes last
            if stage in self.done and isinstance(o, kinds) and not holds(o):
                self.fail(f"{_named(o)}: {message} after {stage}", o)

    def index_tensor(self, name: str) -> bool:
        tensor = ops.decls(self.kernel, ops.TensorDecl).get(name)
        return tensor is not None and len(tensor.shape) == 1 and tensor.dtype == "i32"

    def expr(self, e: ex.Expr, defined: set[str], o: ops.Op) -> None:
        for node in ex.walk(e):
            if isinstance(node, ex.Var) and node.name not in defined:
                self.fail(f"%{node.name} is used before it is defined", o)
            elif isinstance(node, ex.Sreg) and node.name not in ex.SREGS:
                self.fail(f"sreg({node.name}) is no special register the IR reads", o)
            elif isinstance(node, ex.Param) and node.name not in self.params:
                self.fail(f"${node.name} is neither a tensor dimension nor a scalar parameter", o)
            elif isinstance(node, ex.Elem) and not self.index_tensor(node.tensor):
                self.fail(f"${node.tensor}[..] reads no 1-D i32 tensor parameter", o)
            elif isinstance(node, ex.BufferRef):
                self.stage_index(node, o)
            elif isinstance(node, ex.TmemRef) and self.tile_kind(node.tile.name) != "tmem":
                self.fail(f"tmem({node.tile}, ..) does not read a tmem tile", o)
            elif isinstance(node, ex.AccRef) and node.name not in self.accs:
                self.fail(f"!{node.name} is not an accumulator of the role", o)
            elif isinstance(node, ex.RowVar) and node.name not in self.rows:
                self.fail(f"^{node.name} is not a row register of the role", o)
            elif isinstance(node, ex.Bin) and node.op not in ex.BINARY_OPS:
                self.fail(f"unknown operator '{node.op}'", o)
            elif isinstance(node, ex.Call) and ex.ROW_FUNCTIONS.get(node.func) != len(node.args):
                self.fail(f"{node.func} with {len(node.args)} argument(s) is not a row-math function", o)

    def stage_index(self, ref: ex.BufferRef, o: ops.Op) -> None:
        """The ref names a tile, and a constant stage lies within it."""
        if self.tile_kind(ref.name) is None:
            self.fail(f"@{ref.name} does not name a buffer, mbarrier or tmem tile", o)
        decl = self.symbols.get(ref.name) or self.symbols[ref.name.partition(".")[0]]
        if isinstance(ref.index, ex.Const) and not 0 <= ref.index.value < decl.stages:
            self.fail(f"{ref} is outside the {decl.stages} stage(s) of @{ref.name}", o)


def _placed_apart_within(kernel: ops.KernelOp) -> bool:
    """No two placed ranges overlap and every one ends within the kernel's dynamic smem."""
    ranges = sorted((start, end) for start, end, _ in ops.smem_ranges(kernel))
    apart = all(end <= start for (_, end), (start, _) in zip(ranges, ranges[1:]))
    return apart and all(end <= kernel.smem_bytes for _, end in ranges)


def _tmem_allocated(kernel: ops.KernelOp) -> bool:
    tiles = ops.decls(kernel, ops.TmemDecl).values()
    if not tiles:
        return True
    allocs = [o for o in kernel.body if isinstance(o, ops.TmemAlloc)]
    frees = [o for o in kernel.body if isinstance(o, ops.TmemDealloc)]
    needed = max(t.column + t.stages * t.pitch() for t in tiles)
    return (len(allocs) == 1 == len(frees) and allocs[0].columns >= needed
            and frees[0].columns == allocs[0].columns)


def _roles_within_block(kernel: ops.KernelOp) -> bool:
    return all(32 * (r.last_warp + 1) <= kernel.threads for r in ops.roles(kernel))


def _named(o: ops.Op) -> str:
    return f"{o.name} @{o.symbol}" if getattr(o, "symbol", None) else o.name


def _binds(o: ops.Op) -> set[str]:
    """The variables an op defines for its region."""
    if isinstance(o, ops.ForTiles):
        return {*o.vars, o.index, *([o.part] if o.part else []), *o.stream}
    if isinstance(o, ops.ForRange):
        return {o.var}
    if isinstance(o, ops.ForStep):
        return {o.var, o.count}
    if isinstance(o, ops.Loop):
        return {o.count}
    if isinstance(o, (ops.Produce, ops.Consume)):
        return {o.slot}
    return set()


def _fail_after(stage: str):
    def make(message: str, o: ops.Op) -> TmalangError:
        return error("E999", f"internal compiler error: IR invalid after '{stage}': {message}", o.span,
                     "please report this with the source file")
    return make


def verify(kernel: ops.KernelOp, stage: str, done: Sequence[str]) -> None:
    """Check `kernel` after `stage`; `done` names every stage that has run (its rules now hold)."""
    Verifier(kernel, done, _fail_after(stage)).run()


def verify_input(kernel: ops.KernelOp, done: Sequence[str], first: str | None) -> None:
    """Check IR text given to `tmalangc opt`, taken to stand after the stages `done`, before `first`."""
    def make(message: str, o: ops.Op) -> TmalangError:
        notes = [f"'{first}' takes IR on which every pass before it has run"] if first else []
        return error("E432", f"invalid IR after '{done[-1]}': {message}", o.span, *notes)
    Verifier(kernel, done, make).run()
