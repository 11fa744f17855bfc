"""--explain writes each wait's parity in the language's own integer expressions (docs §18), so a
user can copy a derived protocol into the explicit layer (§17): no `^`, which the language lacks.
The producer's parity on `P.empty` is still the opposite of the consumer's on `P.full`."""

from __future__ import annotations

import re

import pytest

from conftest import EXAMPLES, ROOT, example_arch
from tmalang.compiler import Options, compile_source
from tmalang.explain import explain
from tmalang.syntax.parser import parse

VAR = re.compile(r"%([A-Za-z_][\w.]*)")


def _barrier_waits(path) -> dict[str, dict[str, str]]:
    """barrier -> {role: parity} from the explain barrier table of an example."""
    c = compile_source(path.read_text(), str(path.relative_to(ROOT)), Options(arch=example_arch(path)), until="ir")
    lines = explain(c.ir, c.target).splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("barrier "))
    waits_at, arrives_at = lines[top].index("waits (parity)"), lines[top].index("arrives")
    table = {}
    for line in lines[top + 2:]:
        if not line.strip():
            break
        cell = line[waits_at:arrives_at].strip()
        entries = [entry.split(" ", 1) for entry in cell.split("; ")] if cell != "-" else []
        table[line.split()[0]] = {role: parity for role, parity in entries}
    return table


def _as_source(parity: str) -> str:
    return VAR.sub(lambda m: m.group(1).replace(".", "_"), parity)


def _value(parity: str, counter: int) -> int:
    """The parity with every counter at `counter` (all are non-negative: `/` is `//`)."""
    return eval(VAR.sub(str(counter), parity).replace("/", "//"), {"__builtins__": {}})


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_explain_parities_are_language_expressions(path):
    waits = _barrier_waits(path)
    assert waits, "no barrier table"
    for barrier, by_role in waits.items():
        for role, parity in by_role.items():
            source = f"kernel k(x: f32[M]) {{\n role r: warp 0 {{\n  wait b, {_as_source(parity)}\n }}\n}}\n"
            parse(source, f"<{path.stem}: {barrier} waited by {role}>")   # a syntax error fails the test


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_producer_waits_the_opposite_parity(path):
    waits = _barrier_waits(path)
    rings = [name.removesuffix(".empty") for name in waits
             if name.endswith(".empty") and name.replace(".empty", ".full") in waits]
    for ring in rings:
        for full in waits[ring + ".full"].values():
            for empty in waits[ring + ".empty"].values():
                counters = range(2) if "round" in full + empty else range(64)   # a claim's round is a parity
                for i in counters:
                    assert {_value(full, i), _value(empty, i)} == {0, 1}, (ring, i, full, empty)
