"""The `Scope` every verify hook sees (where the op stands, and how to report a failure), and the
checks that hooks of several op families share: an op standing in a role, issued by one thread,
belonging to CTA pairs, naming a CTA set, writing an smem tile, declaring role registers.
"""

from __future__ import annotations

from collections.abc import Callable

from ...diagnostics import TmalangError
from .. import exprs as ex
from .. import ops
from ..printer import format_value

# The values of the IR's own enumerated fields: the scopes of elect (ops/control.py) and sync (ops/barriers.py).
SCOPES = {ops.Elect: ("role", "warpgroup", "block"), ops.Sync: ("role", "block", "cluster")}


class Scope:
    """Where an op stands, as the verifier's walk sees it, and how a hook reports a failure."""

    def __init__(self, kernel: ops.KernelOp, fail: Callable[[str, ops.Op], TmalangError]):
        self.kernel, self._fail = kernel, fail
        self.symbols: dict[str, ops.Op] = {}   # the kernel's declarations (and roles) by symbol
        self.parents: list[ops.Op] = []        # the enclosing ops, innermost last
        self.role: ops.RoleOp | None = None
        self.accs: set[str] = set()            # the accumulators and row registers of `role`
        self.rows: set[str] = set()

    def fail(self, message: str, o: ops.Op):
        raise self._fail(message, o)

    def decl(self, o: ops.Op, field: str, kind: type[ops.Op]) -> ops.Op:
        """The declaration `o.field` names, which must be a `kind`."""
        found = self.symbols.get(getattr(o, field))
        if not isinstance(found, kind):
            self.fail(f"{o.name} {field}={getattr(o, field)} does not name a {kind.__name__}", o)
        return found

    def tile(self, o: ops.Op, field: str, kind: str) -> None:
        """`o.field` is a stage of a declared tile of `kind`: smem, tmem or mbarrier."""
        ref = getattr(o, field)
        if not isinstance(ref, ex.BufferRef) or self.tile_kind(ref.name) != kind:
            self.fail(f"{o.name} {field}={ref} is not {'an' if kind[0] in 'ms' else 'a'} {kind} tile", o)

    def tile_kind(self, name: str) -> str | None:
        decl = self.symbols.get(name)
        kinds = {ops.BufferDecl: "smem", ops.TmemDecl: "tmem", ops.MbarrierDecl: "mbarrier", ops.TileQueueDecl: "queue"}
        if type(decl) in kinds:
            return kinds[type(decl)]
        field = self.pipeline_field(name)
        return None if field is None else "tmem" if field.startswith("tmem:") else "smem"

    def pipeline_field(self, name: str) -> str | None:
        """What field P.f of a declared pipeline P holds: a box name or `tmem:MxN`."""
        pipeline, _, field = name.partition(".")
        decl = self.symbols.get(pipeline)
        if isinstance(decl, ops.PipelineDecl):
            return next((f.partition(":")[2] for f in decl.fields if f.partition(":")[0] == field), None)
        return None

    def check(self, o: ops.Op, field: str, ok: bool, why: str) -> None:
        if not ok:
            self.fail(f"{o.name} {field}={format_value(getattr(o, field))}: {why}", o)

    def within(self, o: ops.Op, *parents: type[ops.Op]) -> None:
        """`o` stands directly in one of `parents` (at the top when none are given)."""
        parent = self.parents[-1] if self.parents else None
        if not (isinstance(parent, parents) if parents else parent is None):
            where = f"inside '{parent.name}'" if parent is not None else "outside a kernel"
            self.fail(f"{o.name} cannot stand {where}", o)

    def in_role(self, o: ops.Op) -> None:
        if self.role is None:
            self.fail(f"{o.name} stands outside every role", o)

    def inside(self, kind: type[ops.Op]) -> bool:
        return any(isinstance(p, kind) for p in self.parents)


def power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def statement(v: Scope, o: ops.Op) -> None:
    """Let, val, if, for_range, for_step, wgmma fences and commits, bulk commits: in a role, nothing else."""
    v.in_role(o)


def pending(v: Scope, o: ops.BulkWait | ops.WgmmaWait) -> None:
    v.in_role(o)
    v.check(o, "pending", o.pending >= 0, "negative")


def one_thread(v: Scope, o: ops.Op) -> None:
    if not v.inside(ops.Elect):
        v.fail(f"{o.name} outside elect: every thread would issue it", o)


def pair_kernel(v: Scope, o: ops.Op) -> None:
    if v.kernel.cta_group != 2:
        v.fail(f"{o.name} belongs to CTA pairs, and the kernel has cta_group={v.kernel.cta_group}", o)


def cta_set(v: Scope, o: ops.Op, allowed: tuple[str, ...]) -> None:
    """A CTA set other than the whole cluster is a proper part of it, of two CTAs or more: a row
    or column of a cluster with more than one of each (a cross, then, too)."""
    v.check(o, "ctas", o.ctas in allowed, f"not one of {', '.join(allowed)}")
    rows, cols = v.kernel.cluster_shape()
    v.check(o, "ctas", o.ctas == "cluster" or (rows > 1 and cols > 1),
            f"a {o.ctas} of a {rows}x{cols} cluster is one CTA or the whole cluster")


def writes_smem(v: Scope, o: ops.TileAssign | ops.AccStore | ops.TmemEpilogue) -> None:
    v.in_role(o)
    v.tile(o, "dest", "smem")


def role_decl(v: Scope, o: ops.AccDecl | ops.RowDecl) -> None:
    v.within(o, ops.RoleOp)
    if isinstance(o, ops.RowDecl):
        v.check(o, "cols", 0 <= o.cols <= 256, "not 0..256")
    else:
        v.check(o, "shape", len(o.shape) == 2 and all(n >= 1 for n in o.shape), "not two extents")


Hook = Callable[[Scope, ops.Op], None]
