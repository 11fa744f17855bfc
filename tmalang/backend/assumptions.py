"""The C++ launch header's check of each of a kernel's assumptions (docs/language.md §2b; the
manifest's Assumptions come from the final IR's `assume` ops in contract/launch.py).

Requires: the manifest's assumptions (each one some launch could break, with its place in the
source). Guarantees: the header computes
each one step per operation, operands left to right, in 64-bit integers with every division and
overflow checked (tmalang_runtime.h), and fails with the message and notes of the Python
runtime's E219 (contract/assumptions.py), before anything is encoded or launched.
"""

from __future__ import annotations

from ..contract import assumptions as checks
from ..contract.manifest import DimParam, Manifest, TensorArg


def cpp_checks(manifest: Manifest, field, quote) -> list[dict]:
    """What launch.h.j2 writes for each assumption: its steps (`t0 = ...`), the two sides, the
    bound names with their C++ values, and the notes' texts. `field` maps a parameter's name to
    its member of KERNEL_args, `quote` a text to a C++ string literal."""
    dims = {d for a in manifest.args if isinstance(a, TensorArg) for d in a.shape if isinstance(d, str)}
    dims |= {p.symbol for p in manifest.ptx_params if isinstance(p, DimParam)}
    out = []
    for a in manifest.assumptions:
        value = {n: f"int64_t(d_{n})" if n in dims else f"int64_t(args.{field(n)})" for n in checks.names(a)}
        steps: list[str] = []
        sides = [_steps(side, value, steps, quote) for side in (a.lhs, a.rhs)]
        out.append({"written": a.written, "where": f"{a.file}:{a.line}:{a.col}", "steps": steps,
                    "lhs": sides[0], "rhs": sides[1], "compare": a.compare,
                    "bound": [(n, value[n]) for n in checks.names(a)],
                    "texts": [checks.text(side) if isinstance(side, tuple) else None for side in (a.lhs, a.rhs)]})
    return out


# the operations that can go wrong, each a checked call of tmalang_runtime.h; & min max cannot
_CHECKED = {"+": "tmalang::assumed_add", "-": "tmalang::assumed_sub", "*": "tmalang::assumed_mul",
            "/": "tmalang::assumed_quotient", "%": "tmalang::assumed_remainder"}
_PLAIN = {"&": "{} & {}", "min": "std::min({}, {})", "max": "std::max({}, {})"}


def _steps(tree, value: dict, steps: list[str], quote) -> str:
    """The C++ operand for `tree`, after appending the steps that compute it (one per operation,
    in contract/assumptions.evaluate's order, so that the first trouble is the same one)."""
    if isinstance(tree, int):
        return f"int64_t({tree})"
    if isinstance(tree, str):
        return value[tree]
    op, *operands = tree
    args = [_steps(x, value, steps, quote) for x in operands]
    where = quote(checks.text(tree))
    if op == "neg":
        made = f"tmalang::assumed_neg({args[0]}, {where}, &trouble)"
    elif op in _CHECKED:
        made = f"{_CHECKED[op]}({args[0]}, {args[1]}, {where}, &trouble)"
    else:
        made = _PLAIN[op].format(*args)
    steps.append(f"t{len(steps)} = {made}")
    return f"t{len(steps) - 1}"

