"""Multicast loads: one box shared by a set of the cluster's CTAs, each loading a slice along
dim 0 into all of them (docs/language.md §16).

The set is the whole cluster (`multicast`), or with `multicast(n)` the CTAs whose tiles differ
only in the named tile indices: a cluster row (`multicast(n)`, n the second index) or column
(`multicast(m)`) of a 2-D cluster, named as in targets/cluster.py. Sema resolves the set once per
box (one tensor map, one slice size) and records it in `info.multicast_sets` for lowering.
"""

from __future__ import annotations

import re

from ..diagnostics import error
from ..syntax import ast
from ..targets import cluster
from .declarations import Box, KernelInfo
from .scope import Scope, mentions


def check_load(info: KernelInfo, s: ast.Load, box: Box, scope: Scope) -> None:
    """A multicast load: every CTA of a set of the cluster's CTAs loads one slice along dim 0 into
    all of them. The set is the whole cluster, or with `multicast(n)` the CTAs whose tiles differ
    only in the named tile indices (a row or a column of a 2-D cluster)."""
    used = info.multicast_boxes.setdefault(box.name, s.multicast)
    if used != s.multicast:
        raise error("E059", f"box '{box.name}' is loaded both with and without multicast", s.span,
                    "a multicast box's tensor map describes one CTA's slice; declare a second box")
    if not s.multicast:
        return
    if info.cluster == 1:
        raise error("E059", "multicast needs a cluster", s.span, "declare `cluster 2` (or 4, 8)")
    if info.cta_group == 2:
        raise error("E060", "multicast loads in a cta_group 2 kernel are not in v0", s.span,
                    "load a pair box instead: each CTA of the pair loads half of it")
    if scope.pipeline is None:
        raise error("E059", "multicast loads belong in produce blocks (v0)", s.span)
    axes = _multicast_axes(info, s, scope)
    ctas = _cta_set(info, axes)
    earlier = info.multicast_sets.setdefault(box.name, ctas)
    if earlier != ctas:
        raise error("E463", f"box '{box.name}' is multicast to the CTAs of a {_set_name(ctas)} here and of a "
                    f"{_set_name(earlier)} before", s.span, "its tensor map covers one CTA's slice of one set: declare "
                    "a second box for the second set")
    rows, size = box.shape[0], cluster.size(_shape(info), ctas)
    if box.strides[0] != 1:
        raise error("E059", f"box '{box.name}' strides its rows, which multicast splits between the CTAs", s.span,
                    "a multicast box takes every row (strides [1, ...])")
    if rows % size or (box.swizzle != "none" and (rows // size) % 8):
        raise error("E059", f"box '{box.name}' has {rows} rows, which do not split into {size} slices"
                    + (" of whole 8-row swizzle atoms" if box.swizzle != "none" else ""), s.span)
    varying = [scope.tile_vars[a] for a in axes if a < len(scope.tile_vars)]
    varying += ["cluster.rank"] + [f"cluster.{'xy'[a]}" for a in axes]
    for name in varying:
        if any(mentions(c, name) for c in s.coords):
            raise error("E059", f"a multicast load must be the same in every CTA of the {_set_name(ctas)}, but '{name}' "
                        "differs between them", s.span, _WALK_NOTE[ctas])
    _check_same_trip_counts(s, scope, varying, ctas)


def _check_same_trip_counts(s: ast.Load, scope: Scope, varying: list[str], ctas: str) -> None:
    """Every CTA of the set fills (and releases) a multicast slot together, so each must run the
    loops around the load as often as the others: no steps extent may use what differs between
    them, or one CTA waits forever for a slice or a release its partner never sends."""
    for loop in scope.nest:
        used = set(re.findall(r"[A-Za-z_][\w.]*", loop[1])) if loop[0] == "steps" else set()
        name = next((v for v in varying if v in used), None)
        if name is not None:
            raise error("E059", f"a multicast load under a steps loop whose extent uses '{name}', which differs "
                        f"between the CTAs of the {_set_name(ctas)}", s.span,
                        "their trip counts would differ, and a CTA would wait forever for a slice or a release "
                        "its partner never sends: make the extent the same in every CTA of the set")


_WALK_NOTE = {"cluster": "the cluster's CTAs walk adjacent tiles along the first tile index",
              "row": "the CTAs of a cluster row take adjacent tiles along the second tile index",
              "column": "the CTAs of a cluster column take adjacent tiles along the first tile index"}


def _set_name(ctas: str) -> str:
    return ctas if ctas == "cluster" else f"cluster {ctas}"


def _shape(info: KernelInfo) -> tuple[int, int]:
    return info.cluster // info.cluster_cols, info.cluster_cols


def _multicast_axes(info: KernelInfo, s: ast.Load, scope: Scope) -> list[int]:
    """The cluster axes along which the load's CTA set extends: those of `multicast(...)`'s tile
    indices (axis 0: the first tile index, 1: the second), or every axis of extent > 1."""
    shape = _shape(info)
    if not s.multicast_over:
        return [a for a in (0, 1) if shape[a] > 1]
    axes = []
    for ref in s.multicast_over:
        if ref.name not in scope.tile_vars[:2]:
            indices = " and ".join(f"'{v}'" for v in scope.tile_vars[:2]) or "none here"
            raise error("E463", f"multicast({ref.name}): '{ref.name}' is not the first or second index of the "
                        "enclosing tile loop", ref.span, f"the cluster's axes are its tile indices: {indices}")
        axis = scope.tile_vars.index(ref.name)
        if axis in axes:
            raise error("E463", f"multicast names '{ref.name}' twice", ref.span)
        if shape[axis] == 1:
            raise error("E463", f"the {shape[0]}x{shape[1]} cluster has one CTA along '{ref.name}': "
                        f"multicast({ref.name}) would reach this CTA alone", ref.span,
                        "a multicast set needs at least two CTAs; load without multicast")
        axes.append(axis)
    return sorted(axes)


def _cta_set(info: KernelInfo, axes: list[int]) -> str:
    """The named set (targets/cluster.py) spanned by `axes`: a row spans axis 1, a column axis 0."""
    shape = _shape(info)
    spanned = [a for a in (0, 1) if shape[a] > 1]
    if axes == spanned:
        return "cluster"
    return "row" if axes == [1] else "column"
