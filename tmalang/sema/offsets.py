"""Element coordinates: `load T@[r, c]`, `store T@[r, c]`, `reduce OP T@[r, c]`, `prefetch T@[r, c]`
(docs §13c). The coordinates are signed 32-bit element indices (integer literals beyond that
range are E028, as everywhere), and the box may sit anywhere:
across the tensor's edge or before its start (a load fills what lies outside with the box's
`oob` value, a store skips it), overlapping other boxes.

Whether boxes at element coordinates overlap, across tiles, CTAs and roles, is decided for every
access alike by global_races (E580): two stores of different tiles whose boxes overlap race,
while boxes that leave gaps, or interleave by element strides, do not.

Two rules come from the H100 itself, which faults (illegal instruction) rather than fill or clip
(tests/sema/test_offsets.py probes it with hand-written PTX): the innermost coordinate of every copy
at element coordinates must be a multiple of 16 bytes (E476), and a store's or reduce's
coordinates must not be negative (E461). Both are checked on the coordinate's linear form, so an
expression sema cannot see through is refused rather than trusted.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets import tma
from .declarations import Box, KernelInfo
from .scope import Scope


def _whole_chunks(box: Box, s) -> None:
    if box.bulk:
        raise error("E460", f"bulk box '{box.name}' takes chunk coordinates, not element coordinates", s.span,
                    f"a bulk copy moves whole chunks of the innermost dimension: write `{box.name}[...]`")
    if box.im2col:
        raise error("E460", f"im2col box '{box.name}' takes its own element coordinates, without `@`", s.span,
                    f"an im2col load's coordinates are always elements (N, spatial..., C): write `{box.name}[...]`")
    if box.interleave != "none":
        raise error("E460", f"interleaved box '{box.name}' takes tile coordinates, not element coordinates", s.span,
                    "an interleaved tensor map moves whole channel slices, and element offsets on it are not "
                    "measured on the H100: declare a plain box for the element-offset copy")


def check_load(box: Box, s: ast.Load) -> None:
    if box.im2col and not s.elements:   # element coordinates by nature: the channel start is the innermost
        check_inner_alignment(box, s.coords)
    if not s.elements:
        return
    _whole_chunks(box, s)
    if s.multicast or box.pair:
        what = "a multicast load" if s.multicast else f"pair box '{box.name}'"
        raise error("E460", f"{what} takes tile coordinates, not element coordinates", s.span,
                    "each CTA loads its slice of the box at a tile-derived row; write `"
                    f"{box.name}[...]`, or declare a plain box for the element-offset load")
    check_inner_alignment(box, s.coords)


def check_prefetch(box: Box, s: ast.Prefetch) -> None:
    if box.im2col and not s.elements:   # element coordinates by nature, as an im2col load's
        check_inner_alignment(box, s.coords)
    if s.elements:
        _whole_chunks(box, s)
        check_inner_alignment(box, s.coords)


def check_inner_alignment(box: Box, coords: list) -> None:
    """The innermost element coordinate is a multiple of 16 bytes whatever its variables hold (E476)."""
    step = max(1, tma.INNER_START_ALIGNMENT // box.dtype.itemsize)
    inner = coords[-1]
    if _multiple_of(inner, step):
        return
    form = _linear(inner)
    if form is None:
        why = "sema cannot see through it"
    else:
        bad = [n if k == 1 else f"{k}*{n}" for n, k in form[0].items() if k % step]
        bad += [str(form[1])] if form[1] % step else []
        why = f"its term{'s' * (len(bad) > 1)} {', '.join(bad)} {'are' if len(bad) > 1 else 'is'} not"
    raise error("E476", f"innermost element coordinate `{ast.expr_text(inner)}` must be a multiple of {step} "
                f"{box.dtype.name} elements (16 bytes) whatever its variables hold: {why}", inner.span,
                "the H100's TMA unit faults on a copy whose innermost start is not 16-byte aligned: shift "
                f"by whole multiples of {step} along the innermost dimension (e.g. load a wider box and "
                "read inside it), or shift along an outer dimension")


def _multiple_of(e, step: int) -> bool:
    """Whether integer expression `e` is a multiple of `step` whatever its variables hold: a
    literal that is; a sum or difference of such; a product with one such factor; `a % b` with
    both such (a - b*trunc(a/b))."""
    if isinstance(e, ast.Number):
        return isinstance(e.value, int) and e.value % step == 0
    if isinstance(e, ast.Neg):
        return _multiple_of(e.operand, step)
    if not isinstance(e, ast.BinOp):
        return False
    lhs, rhs = _multiple_of(e.lhs, step), _multiple_of(e.rhs, step)
    if e.op == "*":
        return lhs or rhs
    return e.op in "+-%" and lhs and rhs


def _check_not_negative(coords: list, ints: frozenset, what: str) -> None:
    """Every coordinate is a sum of non-negative multiples of loop indices and a constant >= 0 (E461)."""
    for coord in coords:
        form = _linear(coord)
        if form is not None and form[1] >= 0 and all(k > 0 and n in ints for n, k in form[0].items()):
            continue
        raise error("E461", f"{what} at element coordinate `{ast.expr_text(coord)}`, which sema cannot show is never "
                    "negative", coord.span,
                    "the H100 faults on a tensor store or reduce at a negative coordinate (a load is "
                    "filled instead): write a loop index times a positive constant plus a constant >= 0")


def check_store(info: KernelInfo, box: Box, s: ast.Store, scope: Scope) -> None:
    """A store or reduce at element coordinates starts 16-byte aligned innermost (E476) and at no
    negative coordinate (E461). Whether stores of different tiles overlap is global_races' (E580)."""
    if not s.elements:
        return
    _whole_chunks(box, s)
    if box.pair:
        raise error("E460", f"pair box '{box.name}' takes tile coordinates, not element coordinates", s.span)
    check_inner_alignment(box, s.coords)
    _check_not_negative(s.coords, scope.ints, "a reduce" if s.reduce else "a store")


def _linear(e) -> tuple[dict, int] | None:
    """`e` as ({name: coefficient}, constant) over integer literals and plain names, or None."""
    if isinstance(e, ast.Number):
        return ({}, e.value) if isinstance(e.value, int) else None
    if isinstance(e, ast.Ref):
        return ({e.name: 1}, 0) if e.field is None and e.block is None else None
    if isinstance(e, ast.Neg):
        inner = _linear(e.operand)
        return None if inner is None else _scale(inner, -1)
    if not isinstance(e, ast.BinOp) or e.op not in "+-*":
        return None
    lhs, rhs = _linear(e.lhs), _linear(e.rhs)
    if lhs is None or rhs is None:
        return None
    if e.op == "*":
        if lhs[0] and rhs[0]:
            return None
        return _scale(rhs, lhs[1]) if not lhs[0] else _scale(lhs, rhs[1])
    sign = 1 if e.op == "+" else -1
    names = dict(lhs[0])
    for name, k in rhs[0].items():
        names[name] = names.get(name, 0) + sign * k
    return {n: k for n, k in names.items() if k}, lhs[1] + sign * rhs[1]


def _scale(form: tuple[dict, int], k: int) -> tuple[dict, int]:
    return {n: c * k for n, c in form[0].items() if c * k}, form[1] * k
