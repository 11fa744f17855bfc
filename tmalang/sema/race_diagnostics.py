"""The words of E580 (sema/global_races.py): which two accesses race, how nothing orders them,
an element both touch with the loop indices that reach it, and what to do about it; or, where the
analysis could not compare the coordinates, why."""

from __future__ import annotations

from ..diagnostics import TmalangError, error
from .accesses import Access

VERBS = {"load": "reads", "store": "writes", "reduce": "reduces into"}
BOTH = {"load": "read", "store": "write", "reduce": "reduce into"}

WHY = {
    "tiles": "tiles run in no order: each may run in another CTA, and CTAs share no barrier",
    "ctas": "CTAs share no barrier, so nothing orders their accesses",
    "stream": "the CTAs that share a stream-K tile run in no order",
    "roles": "the compiler orders two roles' accesses to global memory only through a pipeline: a load "
             "in a produce block comes before what its consumer does from the consume block on",
    "steps": "a TMA store or reduce completes only at its thread's `wait_group 0`: a store of one "
             "iteration is still writing when the next iteration's access runs",
    "order": "a TMA store or reduce completes only at its thread's `wait_group 0` (the compiler adds one "
             "only between two stores, or reduces of two operations, of one consume region, §13)",
}


def _hint(a: Access, b: Access, family: str) -> str:
    if not (a.writes and b.writes):
        return ("a load of elements the kernel is still writing may read the old or the new value: read them "
                "in another launch, or write them only after every read (a tile's load before its store, "
                "through one pipeline)")
    if a.kind == b.kind == "reduce":
        return ("reduces of different operations land in either order and combine differently: reduce "
                "with one operation, or order them")
    if family in ("steps", "order"):
        return "write the elements once, or wait for the first write with `elect { wait_group 0 }` in between"
    if family == "roles":
        return "let one role write these elements, or combine the writes with `reduce add` (atomic per element)"
    return ("give each tile its own elements (tile coordinates that use every tile index, boxes at element "
            "coordinates that stay inside their tile), or combine the writes with `reduce add` (atomic per "
            "element)")


def _placed(a: Access, b: Access) -> tuple[Access, Access]:
    """(the access to point at, the other): the later one in the source."""
    key = lambda x: (x.stmt.span.line, x.stmt.span.col)   # noqa: E731
    return (b, a) if key(a) <= key(b) else (a, b)


def race(problem, model: dict | None) -> TmalangError:
    """Two executions of problem.a and problem.b that touch a common element, unordered."""
    a, b, case = problem.a, problem.b, problem.case
    here, other = _placed(a, b)
    tensor, verb = a.tensor, VERBS[here.kind]
    if a is b:
        what = f"this {a.words()} {verb} the same elements of '{tensor}' {case.words}"
    elif here.kind == other.kind:
        what = (f"this {here.words()} and the {other.words()} both {BOTH[here.kind]} "
                f"elements of '{tensor}' {case.words}")
    else:
        what = (f"this {here.words()} {verb} elements of '{tensor}' that the {other.words()} "
                f"{VERBS[other.kind]}, {case.words}")
    example = _example(problem, model) if model else ""
    notes = [n for n in (example, WHY[case.family], _hint(a, b, case.family)) if n]
    if a is not b:
        notes.insert(0, f"the other access is at {other.stmt.span.location()}")
    return error("E580", f"{what}, and nothing orders them: a race", here.stmt.span, *notes)


def _example(problem, model: dict) -> str:
    """The loop indices of two executions and an element both touch, from a solution."""
    a, b = problem.a, problem.b
    element = []
    for d, run in enumerate(a.runs):
        if run.start is None:
            element.append("?")
            continue
        element.append(str(problem.start("a", run.start).value(model) + run.stride * model.get(f"a.j{d}", 0)))
    if any(r.space for r in a.runs):
        target = f"position [{', '.join(element)}] of the rows named by the index tensor"
    else:
        target = f"{a.tensor}[{', '.join(element)}]"
    sides = {"a": _indices(problem, model, "a", a), "b": _indices(problem, model, "b", b)}
    if a is b:
        at = f" at {sides['a']} and at {sides['b']}" if sides["a"] else ""
    else:
        here = "a" if _placed(a, b)[0] is a else "b"
        there = "b" if here == "a" else "a"
        if sides[here] == sides[there]:
            at = f" at {sides[here]}" if sides[here] else ""
        else:
            at = f": this one at {sides[here] or '(no loop)'}, the other at {sides[there] or '(no loop)'}"
    return f"for example, both touch {target}{at}"


def _indices(problem, model: dict, side: str, x: Access) -> str:
    names = [l.var for l in x.where.loops if l.kind != "count"]
    if not names:
        return ""
    values = problem.values(model, side, names)
    return "(" + ", ".join(f"{n} = {v}" for n, v in zip(names, values)) + ")"


def unprovable(problem) -> TmalangError:
    """Accesses the analysis cannot tell apart (a coordinate that is not affine, rows from an index
    tensor against other rows, a system beyond the solver's budget), taken to overlap."""
    a, b, case = problem.a, problem.b, problem.case
    here, other = _placed(a, b)
    if problem.opaque:
        d, why = problem.opaque[0]
        reason = f"along dimension {d}, {why}"
    else:
        reason = "their index system is beyond the analysis's budget"
    if a is b:
        what = f"this {a.words()} touches different elements of '{a.tensor}' {case.words}"
    else:
        what = (f"this {here.words()} and the {other.words()} touch different "
                f"elements of '{a.tensor}' {case.words}")
    notes = [f"so the analysis takes them to overlap, and {WHY[case.family]}",
             "write coordinates as integer multiples of loop indices plus constants (e.g. `m*64 + 8`), "
             "so that the compiler can tell the elements apart"]
    if a is not b:
        notes.insert(0, f"the other access is at {other.stmt.span.location()}")
    return error("E580", f"cannot show that {what}: {reason}", here.stmt.span, *notes)
