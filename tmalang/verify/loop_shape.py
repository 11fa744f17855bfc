"""The pumping premise, checked on the IR: one more trip is one more iteration of one loop, alike.

Requires: a kernel's final IR, the dim d a family of launches varies, d = step·n + first for
n = 0, 1, … (n counts launches: one trip more each, or `period` trips when tiles are dealt to
`period` CTAs), the other dims and scalars of those launches, and their grid size.

Guarantees: `premise(...)` returns the launch T from which, for every n >= T (t below: the
launch's trip count), (i) every
expression that reads d is a·t + b (every `If` outside a growing loop is then decided, every loop
runs a fixed number of times or t + c), (ii) a loop that runs t + c times (a *growing* loop) is
neither inside nor beside another on one path, and its body's synchronisation depends on its index
only through counters that step by constants, read modulo a constant (a ring's stage, or its
parity (i / S) & 1), and through conditions that compare the index with an a·t + b of slope 0 or 1,
which change once, at a fixed distance from the first or the last iteration; (iii) loops inside a
growing loop run a fixed number of times. Otherwise the op and the reason it breaks the premise.

Then each warp's steps at t + 1 are those at t with one more iteration of the growing loop's
middle run (whose iterations differ only by where on each ring they are), which is the form
pumping.py checks on four runs: docs/interpreter.md, "Every trip count".

Values (`_value`): ("aff", a, b, T): a·n + b for n >= T; ("fix",): the same in every launch, not
known; ("idx", exact): grows by a constant each iteration (the growing loop's index, a counter that
steps by a constant; exact: not divided or scaled), or, after the loop, with the trips; ("quot", S):
an exact one divided by S; ("ring", S): an exact one modulo S (a ring's stage); ("parity", S):
(quot S) & 1 or 1 minus it (a ring's parity); ("thr",): an idx or quot compared with an aff of
slope 0 or 1 (changes once); ("top", why): none of these. A barrier's stage must be fixed or a
ring of its stages, a wait's parity fixed or a parity of them, other synchronising operands fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops
from ..ir.exprs import Bin, BufferRef, Cast, Const, Neg, Param, Sreg, Var
from ..ir.exprs import walk as walk_expr

EXACT = ("idx", True)
COMPARE = {">", "<", ">=", "<=", "==", "!="}
UNROLL = 64
DATA_FIELDS = {"coords", "offsets", "value", "dest", "source", "a", "b", "d", "tile", "lhs", "rhs", "shape", "extent",
               "split"}


@dataclass
class Premise:
    from_trips: int                     # T: the premise holds for every launch n >= T
    growing: int                        # loops that run t + c times


class Broken(Exception):
    def __init__(self, op: ops.Op, why: str, period: int = 0):
        where = op.span.location() if op.span else "?"
        super().__init__(f"{op.name} at {where}: {why}")
        self.period = period              # > 0: the premise may hold taking this many trips per launch


def premise(kernel: ops.KernelOp, dim: str, step: int, first: int, launch: dict, ctas: int,
            defined: list = ()) -> Premise | Broken:
    """`launch`: the other dims' and the scalars' values (every n alike); `defined`: dims that
    assumptions define from others, (name, the assumption's tree as contract/manifest.py has it),
    valued in order."""
    barriers = {name: d.stages for name, d in ops.decls(kernel, ops.MbarrierDecl).items()}
    found = Premise(0, 0)
    try:
        for cta in range(ctas):
            walk = _Walk(dim, step, first, launch, cta, ctas, barriers)
            for name, tree in defined:
                walk.derived[name] = walk.tree_value(tree)
            walk.region(kernel.body, growing=None)
            found.from_trips = max(found.from_trips, walk.from_trips)
            found.growing = max(found.growing, walk.most)
    except Broken as exc:
        return exc
    return found


class _Walk:
    def __init__(self, dim, step, first, launch, cta, ctas, barriers):
        self.dim, self.step, self.first, self.launch = dim, step, first, launch
        self.sregs = {"ctaid.x": cta, "nctaid.x": ctas, "cluster.ctarank": 0}
        self.barriers = barriers
        self.env: dict = {}
        self.derived: dict = {}
        self.slope = 0                  # trips the growing loop gains per launch
        self.from_trips, self.growing, self.most = 0, 0, 0

    # ---- ops
    def region(self, body: list, growing) -> None:
        for o in body:
            self.op(o, growing)

    def op(self, o: ops.Op, growing) -> None:
        if isinstance(o, (ops.Let, ops.Val)):
            self.env[o.var] = self.value(o.value, o)
        elif isinstance(o, ops.If):
            self._if(o, growing)
        elif isinstance(o, ops.ForRange):
            self._range(o, growing)
        elif isinstance(o, ops.ForStep):
            self._for_step(o, growing)
        elif isinstance(o, ops.RoleOp):          # a role's warps run its body only: count its loops alone
            outer = self.growing
            self.region(o.body, growing)
            self.growing = outer
        else:
            self._operands(o)
            for region in o.regions():
                self.region(region, growing)

    def _if(self, o: ops.If, growing) -> None:
        cond = self.value(o.cond, o)
        if cond[0] == "aff" and cond[1] == 0:
            self._after(cond[3])
            if cond[2]:
                self.region(o.body, growing)
        elif cond[0] == "fix" or cond[0] == "thr" and growing is not None and cond[1] in (0, self.slope):
            self.region(o.body, growing)
        else:
            raise Broken(o, "its condition changes from iteration to iteration other than once "
                            f"({_kind(cond)})")

    def _for_step(self, o: ops.ForStep, growing) -> None:
        start, stop, step = (self.value(e, o) for e in (o.start, o.stop, o.step))
        if not all(_fixed(v) for v in (start, step)) or step[2] <= 0 or stop[0] != "aff":
            raise Broken(o, f"its tiles are not a fixed stride from a fixed start ({_kind(stop)})")
        first, stride = start[2], step[2]
        if stop[1] == 0:
            values = list(range(first, stop[2], stride))
            return self._fixed_loop(o, [(v, n) for n, v in enumerate(values)], o.var, o.count, growing, stop[3])
        if stop[1] % stride:
            raise Broken(o, f"its tiles are dealt {stride} ways: one more per {stride} trips", period=stride)
        gap = stop[2] - first           # ceil((a·n + gap) / stride), exact when stride divides a
        count = ("aff", stop[1] // stride, -(-gap // stride), max(stop[3], _nonnegative_from(stop[1], gap)))
        self._growing_loop(o, count, o.var, o.count, growing)

    def _range(self, o: ops.ForRange, growing) -> None:
        count = self.value(o.count, o)
        if _fixed(count):
            return self._fixed_loop(o, [(k, k) for k in range(count[2])], o.var, None, growing, count[3])
        self._growing_loop(o, count, o.var, None, growing)

    def _fixed_loop(self, o, values: list, var: str, counter: str | None, growing, since: int) -> None:
        """A loop whose trips do not change with t: walked once per iteration, its index known."""
        self._after(since)
        if len(values) > UNROLL:
            raise Broken(o, f"a loop of {len(values)} fixed trips (more than {UNROLL} are not walked)")
        for v, n in values:
            self.env.update({var: ("aff", 0, v, 1)} | ({counter: ("aff", 0, n, 1)} if counter else {}))
            self.region(o.regions()[0], growing)

    def _growing_loop(self, o, count, var: str, counter: str | None, growing) -> None:
        if count[0] != "aff" or count[1] < 1:
            raise Broken(o, f"its trip count neither is fixed nor grows by whole trips per launch ({_kind(count)})")
        self.slope = count[1]
        self._after(count[3])
        if growing is not None or self.growing:
            raise Broken(o, "a second loop that runs one more time per trip on one warp's path")
        self.growing += 1
        self.most = max(self.most, self.growing)
        body, entry = o.regions()[0], dict(self.env)
        self.env.update({var: EXACT} | ({counter: EXACT} if counter else {}))
        carried = {x.var for x in ops.walk(body) if isinstance(x, ops.Let) and x.var in entry}
        steps = {v for v in carried if all(_steps(x) for x in ops.walk(body) if isinstance(x, ops.Let) and x.var == v)}
        for v in carried:
            self.env[v] = EXACT if v in steps else entry[v]
        self._silently(body, o)             # what a carried value is by the end of an iteration
        for v in carried - steps:
            self.env[v] = _join(entry[v], self.env[v])
        for v in steps:
            self.env[v] = EXACT
        self.env.update({var: EXACT} | ({counter: EXACT} if counter else {}))
        self.region(body, growing=o)
        for v in steps:                 # after the loop, a counter has stepped once per trip
            self.env[v] = EXACT

    def _silently(self, body: list, o) -> None:
        try:
            self.region(body, growing=o)
        except Broken:
            pass

    def _operands(self, o: ops.Op) -> None:
        """A barrier's stage must be fixed or a ring of its stages, a wait's parity fixed or a parity
        of its barrier's stages, any other synchronising operand (bytes, a count) fixed."""
        for f in o.operand_fields():
            value = getattr(o, f.name)
            for e in value if isinstance(value, list) else [value]:
                if not _is_expr(e):
                    continue
                for ref in (r for r in _refs(e) if r.name in self.barriers):
                    self._synchronising(self.value(ref.index, o), o, f"barrier '{ref.name}''s stage", ref.name, "ring")
                if f.name in DATA_FIELDS or isinstance(e, BufferRef):
                    continue
                stages = getattr(o, "barrier", None)
                kind = "parity" if f.name == "parity" else None
                self._synchronising(self.value(e, o), o, f"its {f.name}", stages.name if stages else None, kind)

    def _synchronising(self, v: tuple, o, what: str, barrier: str | None, kind: str | None) -> None:
        if _fixed(v):
            self._after(v[3] if v[0] == "aff" else 0)
            return
        if kind and v[0] == kind and barrier and v[1] == self.barriers[barrier]:
            return
        raise Broken(o, f"{what} changes with the trips or the iterations ({_kind(v)})")

    def _after(self, trips: int) -> None:
        self.from_trips = max(self.from_trips, trips)

    # ---- values
    def tree_value(self, tree) -> tuple:
        """An assumption's side (an int, a name, or (op, operands...)) as a value."""
        if isinstance(tree, int):
            return ("aff", 0, tree, 1)
        if isinstance(tree, str):
            return self.value(Param(tree), None)
        op, *operands = tree
        if op == "neg":
            return _combine("-", ("aff", 0, 0, 1), self.tree_value(operands[0]))
        return _combine(op, self.tree_value(operands[0]), self.tree_value(operands[1]))

    def value(self, e, o) -> tuple:
        if isinstance(e, Const):
            return ("aff", 0, e.value, 1) if isinstance(e.value, int) else ("top", "a float")
        if isinstance(e, Param):
            if e.name == self.dim:
                return ("aff", self.step, self.first, 0)
            if e.name in self.derived:
                return self.derived[e.name]
            return ("aff", 0, int(self.launch[e.name]), 1) if e.name in self.launch else ("top", f"${e.name}")
        if isinstance(e, Sreg):
            return ("aff", 0, self.sregs.get(e.name, 0), 1)
        if isinstance(e, Var):
            return self.env.get(e.name, ("top", f"'{e.name}' unknown"))
        if isinstance(e, Neg):
            return _combine("-", ("aff", 0, 0, 1), self.value(e.operand, o))
        if isinstance(e, Cast):
            return self.value(e.operand, o)
        if isinstance(e, Bin):
            return _combine(e.op, self.value(e.lhs, o), self.value(e.rhs, o))
        return ("top", type(e).__name__)


def _combine(op: str, x: tuple, y: tuple) -> tuple:
    if x[0] == "top" or y[0] == "top":
        return x if x[0] == "top" else y
    if x[0] == "aff" and y[0] == "aff":
        return _affine(op, x, y)
    if {x[0], y[0]} <= {"fix", "aff"}:
        other = y if x[0] == "fix" else x
        return ("fix",) if _fixed(other) else ("top", f"{op} of a fixed value and the trips")
    const = y[2] if y[0] == "aff" and y[1] == 0 and isinstance(y[2], int) else None
    if x[0] == "idx" and const is not None and const > 0:
        if op in ("%", "urem") and x[1]:
            return ("ring", const)
        if op in ("/", "udiv") and x[1]:
            return ("quot", const)
        if op in ("/", "udiv", "*"):
            return ("idx", False)
    if op in ("+", "-") and _fixed(y) and x[0] == "idx":
        return ("idx", x[1])
    if op == "+" and _fixed(x) and y[0] == "idx":
        return ("idx", y[1])
    if op == "*" and _fixed(x) and y[0] == "idx":
        return ("idx", False)
    if op == "&" and x[0] == "quot" and const == 1:
        return ("parity", x[1])
    if op == "&" and x == EXACT and const == 1:        # a one-stage barrier's parity: i & 1
        return ("parity", 1)
    if op == "-" and x[0] == "aff" and x[1:3] == (0, 1) and y[0] == "parity":
        return y
    if op in COMPARE:
        moving, other = (x, y) if x[0] in ("idx", "quot") else (y, x)
        if moving[0] == "idx" and other[0] == "aff" or moving[0] == "quot" and _fixed(other):
            return ("thr", other[1] if other[0] == "aff" else 0)
        return ("top", f"a comparison of {_kind(x)} and {_kind(y)}")
    return ("top", f"{op} of {_kind(x)} and {_kind(y)}")


def _join(x: tuple, y: tuple) -> tuple:
    """A carried value that is x on entry and y after an iteration."""
    if x[0] == "top" or y[0] == "top":
        return x if x[0] == "top" else y
    if x[:3] == y[:3] or x[0] == "fix" and _fixed(y):
        return x
    for a, b in ((x, y), (y, x)):
        if a[0] == "ring" and b[0] == "aff" and b[1] == 0 and 0 <= b[2] < a[1]:
            return a
        if a[0] == "parity" and b[0] == "aff" and b[1] == 0 and b[2] in (0, 1):
            return a
    return ("top", f"a value carried across iterations as {_kind(x)} then {_kind(y)}")


def _fixed(v: tuple) -> bool:
    return v[0] == "aff" and v[1] == 0 or v[0] == "fix"


def _affine(op: str, x: tuple, y: tuple) -> tuple:
    (_, a1, b1, t1), (_, a2, b2, t2) = x, y
    since = max(t1, t2)
    if op == "+":
        return ("aff", a1 + a2, b1 + b2, since)
    if op == "-":
        return ("aff", a1 - a2, b1 - b2, since)
    if op == "*" and (a1 == 0 or a2 == 0):
        return ("aff", a1 * b2 + a2 * b1, b1 * b2, since)
    if op in ("/", "udiv") and a2 == 0 and b2 > 0 and a1 % b2 == 0:
        return ("aff", a1 // b2, b1 // b2, max(since, _nonnegative_from(a1, b1)))
    if op in ("%", "urem") and a2 == 0 and b2 > 0 and a1 % b2 == 0:
        return ("aff", 0, b1 % b2, max(since, _nonnegative_from(a1, b1)))
    if op in ("min", "umin", "max", "umax"):
        return _extreme(op.lstrip("u"), x, y)
    if op in COMPARE:
        slope, gap = a1 - a2, b1 - b2
        cross = 1 if slope == 0 else max(1, -(-(-gap) // slope) + 1 if slope > 0 else gap // -slope + 1)
        sign = (slope > 0) - (slope < 0) if slope else (gap > 0) - (gap < 0)
        truth = {">": sign > 0, "<": sign < 0, ">=": sign >= 0, "<=": sign <= 0, "==": sign == 0,
                 "!=": sign != 0}[op]
        return ("aff", 0, int(truth), max(since, cross))
    if op in ("&", "|", "^") and a1 == 0 and a2 == 0:
        return ("aff", 0, {"&": b1 & b2, "|": b1 | b2, "^": b1 ^ b2}[op], since)
    return ("top", f"{op} of what grows")


def _extreme(which: str, x: tuple, y: tuple) -> tuple:
    (_, a1, b1, t1), (_, a2, b2, t2) = x, y
    if a1 == a2:
        pick = x if (b1 <= b2) == (which == "min") else y
        return ("aff", pick[1], pick[2], max(t1, t2))
    small, large = (x, y) if a1 < a2 else (y, x)
    pick = small if which == "min" else large
    cross = (small[2] - large[2]) // (large[1] - small[1]) + 1
    return ("aff", pick[1], pick[2], max(t1, t2, cross + 1))


def _nonnegative_from(a: int, b: int) -> int:
    """The first t from which a·t + b >= 0 (integer division is exact there)."""
    return 1 if a <= 0 or b >= 0 else -(-(-b) // a)


def _steps(x: ops.Let) -> bool:
    v = x.value
    return (isinstance(v, Bin) and v.op in ("+", "-") and
            {type(v.lhs), type(v.rhs)} == {Var, Const} and Var(x.var) in (v.lhs, v.rhs))


def _is_expr(e) -> bool:
    return isinstance(e, (Const, Var, Param, Sreg, Bin, Neg, Cast, BufferRef))


def _refs(e) -> list:
    return [x for x in walk_expr(e) if isinstance(x, BufferRef)]


def _kind(v: tuple) -> str:
    if v[0] == "aff":
        return "fixed" if v[1] == 0 else "grows with the trips"
    if v[0] in ("ring", "parity", "quot"):
        return {"ring": "a stage of", "parity": "a parity of", "quot": "the index divided by"}[v[0]] + f" {v[1]}"
    return {"idx": "the loop's index", "fix": "fixed", "thr": "a threshold on the index"}.get(v[0], v[-1])
