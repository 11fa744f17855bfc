"""No input may crash the compiler: every failure is a located `TmalangError`.

A property test mutates the example programs token by token (delete a token, duplicate one,
swap two, replace a number by another number, replace a name by another name of the same file)
and compiles the result up to LLVM IR. Compiling may succeed or raise `TmalangError`; any other
exception is a compiler bug (a traceback shown to the user instead of a diagnostic).

`KNOWN_CRASHES` keeps minimal inputs that crashed the compiler when this file was written (the
comments say where, in the code of that time). All are diagnosed now; they stay as regression
tests.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, example_arch
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError

SOURCES = {path.name: path.read_text() for path in EXAMPLES}
ARCH = {path.name: example_arch(path) for path in EXAMPLES}

# Tokens of the surface syntax; comments are skipped so mutations hit code.
_TOKEN = re.compile(
    r"(?P<comment>//[^\n]*)"
    r"|(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?B?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<punct>->|<-|\.\.|[{}()\[\],:=.+\-*/%&])"
)
NUMBERS = ["0", "1", "3", "8", "16", "32", "64", "128", "256", "257", "1000000"]


def tokens(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, text) of every non-comment token."""
    return [(m.start(), m.end(), m.lastgroup, m.group()) for m in _TOKEN.finditer(text) if m.lastgroup != "comment"]


def splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Apply non-overlapping (start, end, replacement) edits."""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def mutate(text: str, kind: str, a: int, b: int, pick: int) -> str:
    """One mutation of `text`; a, b and pick are arbitrary non-negative ints chosen by the caller."""
    toks = tokens(text)
    if not toks:
        return text
    if kind == "delete":
        s, e, _, _ = toks[a % len(toks)]
        return splice(text, [(s, e, "")])
    if kind == "duplicate":
        s, e, _, t = toks[a % len(toks)]
        return splice(text, [(e, e, " " + t)])
    if kind == "swap":
        i, j = sorted((a % len(toks), b % len(toks)))
        if i == j:
            return text
        (si, ei, _, ti), (sj, ej, _, tj) = toks[i], toks[j]
        return splice(text, [(si, ei, tj), (sj, ej, ti)])
    if kind == "number":
        numbers = [t for t in toks if t[2] == "number" and not t[3].endswith("B")]
        if not numbers:
            return text
        s, e, _, _ = numbers[a % len(numbers)]
        return splice(text, [(s, e, NUMBERS[pick % len(NUMBERS)])])
    if kind == "name":
        names = [t for t in toks if t[2] == "name"]
        vocabulary = sorted({t[3] for t in names})
        s, e, _, _ = names[a % len(names)]
        return splice(text, [(s, e, vocabulary[pick % len(vocabulary)])])
    raise ValueError(kind)


KINDS = ["delete", "duplicate", "swap", "number", "name"]
# Deleting, duplicating or swapping tokens mostly yields syntax errors; number and name
# replacements keep the program parseable and reach sema, the passes and the backend.
_WEIGHTED_KINDS = ["delete", "duplicate", "swap"] + ["number"] * 3 + ["name"] * 4
_index = st.integers(min_value=0, max_value=10_000)
mutations = st.lists(st.tuples(st.sampled_from(_WEIGHTED_KINDS), _index, _index, _index), min_size=1, max_size=2)


def check_compiles_or_diagnoses(text: str, arch: str = "sm_90a") -> None:
    try:
        compile_source(text, "fuzz.tma", Options(arch=arch), until="ll")
    except TmalangError as e:
        first = e.render().splitlines()[0]
        assert first.startswith(("fuzz.tma:", "error[")), first
        assert e.code != "E999", f"internal compiler error instead of a user diagnostic:\n{e.render()}"
    # any other exception propagates: that is the bug this file looks for


@pytest.mark.slow   # a hypothesis sweep of mutants
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SOURCES)), steps=mutations)
def test_mutated_examples_never_crash(name, steps):
    text = SOURCES[name]
    for kind, a, b, pick in steps:
        text = mutate(text, kind, a, b, pick)
    check_compiles_or_diagnoses(text, ARCH[name])


def test_unmutated_examples_compile():
    for name, text in SOURCES.items():
        compile_source(text, "fuzz.tma", Options(arch=ARCH[name]), until="ll")


# Minimal inputs that raised a Python exception instead of a TmalangError (see module docstring).
_COPY = """\
kernel copy(src: f32[M, N], dst: f32[M, N]) {
    box In  = src[64, 64]
    box Out = dst[64, 64]
    pipeline ring[4] { t: In }
    role producer: warp 0 {
        for tile (m, n) in tiles(src, In) {
            produce ring as s { load In[m, n] -> s.t }
        }
    }
    role consumers: warps 4..7 {
        for tile (m, n) in tiles(dst, Out) {
            consume ring as s { store Out[m, n] <- s.t }
        }
    }
}
"""
_SAXPY = SOURCES["saxpy.tma"]

KNOWN_CRASHES = {
    # KeyError: 'm' in backend/codegen.py KernelCodegen.expr: lowering (lower/kernel.py int_expr) turns
    # the tile index 'm' into a kernel parameter because a role is also named 'm'. Any kernel-level
    # name (tensor, box, pipeline, role) used as a loop variable crashes the same way.
    "loop_var_named_like_role": _COPY.replace("role consumers:", "role m:"),
    # ValueError: Operands must be the same type, got (float, i32) in codegen's tile walk: tensor
    # dims are not in the symbol table, so dim 'a' silently shares its name with scalar 'a'.
    "dim_named_like_scalar": _SAXPY.replace("out: f32[M, N]", "out: f32[M, a]"),
    # E999 internal compiler error after expand_pipelines: field 'full' of pipeline 'ring' makes a
    # buffer '@ring.full' that collides with the pipeline's own mbarrier '@ring.full'.
    "pipeline_field_named_full": _COPY.replace("{ t: In }", "{ full: In }").replace("s.t", "s.full"),
}


@pytest.mark.parametrize("text", list(KNOWN_CRASHES.values()), ids=list(KNOWN_CRASHES))
def test_known_crash_inputs(text):
    check_compiles_or_diagnoses(text)


# --- limits of the syntax: a located E008/E028 instead of a RecursionError or a ValueError -----

_BODY = "s.ys = a * s.xs + s.ys"


def _nest(depth: int) -> str:
    return _SAXPY.replace(_BODY, "elect { " * depth + "store O[m, n] <- s.ys" + " }" * depth)


def _sum(terms: int) -> str:
    return _SAXPY.replace(_BODY, "s.ys = " + " + ".join(["s.xs"] * terms))


def _negations(count: int) -> str:
    return _SAXPY.replace(_BODY, "s.ys = " + "-" * count + "s.xs")


@pytest.mark.parametrize("text", [_nest(300), _sum(500), _negations(1000), _nest(3000), _sum(20000)],
                         ids=["nest300", "sum500", "neg1000", "nest3000", "sum20000"])
def test_deep_nesting_is_a_located_e008(text):
    with pytest.raises(TmalangError) as info:
        compile_source(text, "deep.tma", Options())
    assert info.value.code == "E008" and info.value.span is not None
    assert "nest too deeply" in info.value.message


def _deep_stack(frames: int, call):
    """Run `call` under `frames` extra Python frames (a caller's stack, e.g. pytest's or an app's)."""
    return call() if frames == 0 else _deep_stack(frames - 1, call)


@pytest.mark.parametrize("text", [_sum(190), _negations(190)], ids=["sum190", "neg190"])
def test_nesting_just_below_the_limit_runs_through_every_stage(text):
    import numpy as np

    from tmalang.api import Kernel

    c = _deep_stack(150, lambda: compile_source(text, "deep.tma", Options()))
    x, y, out = (np.ones((64, 64), np.float32) for _ in range(3))
    _deep_stack(150, lambda: Kernel(c, text).interpret(np.float32(2), x, y, out))


@pytest.mark.parametrize("literal", ["9" * 5000, str(2**64), "0" * 30 + str(2**64), str(2**31)])
def test_huge_integer_literals_are_a_located_e028(literal):
    with pytest.raises(TmalangError) as info:
        compile_source(_COPY.replace("ring[4]", f"ring[{literal}]"), "big.tma", Options())
    assert info.value.code == "E028" and info.value.span.line == 4
    assert "does not fit in 32 bits" in info.value.message


def test_the_largest_32_bit_literal_reaches_sema():
    with pytest.raises(TmalangError) as info:
        compile_source(_COPY.replace("ring[4]", f"ring[{2**31 - 1}]"), "big.tma", Options())
    assert info.value.code == "E030"
