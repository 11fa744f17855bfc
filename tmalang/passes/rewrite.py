"""A shared walk for passes that replace single ops: each op (after its regions are rewritten)
becomes the list of ops `expand` returns for it, in every role."""

from __future__ import annotations

from collections.abc import Callable

from ..ir import ops


def rewrite_roles(kernel: ops.KernelOp, expand: Callable[[ops.Op], list[ops.Op]]) -> None:
    for role in ops.roles(kernel):
        role.body = rewrite(role.body, expand)


def rewrite(region: list[ops.Op], expand: Callable[[ops.Op], list[ops.Op]]) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        for r in o.regions():
            r[:] = rewrite(r, expand)
        out += expand(o)
    return out
