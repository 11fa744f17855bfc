"""Imports run one way: syntax → sema → lower → passes → {interp, backend} → runtime → api/cli → library,
all standing on targets/, contract/ (over ir/), ir/ and diagnostics; compiler.py strings the stages
(stages.py names them), verify/ stands on the interpreter, and caches/, stages.py and tools/ stand
alone.

Read from the source (ast), so a violation fails here before anyone has to notice an import
circle held together by a function-level import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "tmalang"

# What each layer may import (besides itself). A layer not listed may import anything.
ALLOWED = {
    "diagnostics": set(),
    "caches": {"version"},  # the CLI reads them before loading the compiler
    "tools": set(),         # the certificate checker trusts nothing of the compiler; editor highlighting
    "version": set(),
    "stages": set(),        # the stage names, read by the CLI's front before the compiler loads
    "targets": {"diagnostics"},
    "syntax": {"diagnostics", "targets", "caches"},   # the parser's pickles, read with the cache's owner checks
    "ir": {"diagnostics", "targets"},
    "contract": {"diagnostics", "targets", "ir"},   # contract/launch.py derives the manifest from the final IR
    "sema": {"diagnostics", "targets", "syntax"},
    "lower": {"diagnostics", "targets", "syntax", "sema", "ir"},
    "passes": {"diagnostics", "targets", "ir"},
    "interp": {"diagnostics", "targets", "ir", "contract"},
    "backend": {"diagnostics", "targets", "ir", "contract", "passes"},
    "runtime": {"diagnostics", "targets", "contract"},
    "verify": {"diagnostics", "targets", "ir", "contract", "interp"},   # proofs over the interpreter's runs
    "explain": {"diagnostics", "targets", "ir", "contract", "passes"},
    "compiler": {"diagnostics", "targets", "syntax", "sema", "lower", "ir", "passes", "contract", "stages",
                 "backend"},   # the backend only inside the stages after `ir` (LAZY below)
    "torch_op": {"diagnostics", "targets", "contract"},
    "tuning": {"diagnostics", "api", "caches"},
    "library": {"diagnostics", "targets", "contract", "runtime", "api", "tuning", "caches"},   # on top of the Python face
    # api and cli, the two faces on top, may import anything
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield path, parts[:-1] if parts[-1] == "__init__" else parts, parts[-1] == "__init__"


def _imports(path: Path, name: tuple, is_package: bool):
    """(imported module as a tuple of names, whether it is imported inside a function) for every
    import of a tmalang module."""
    tree = ast.parse(path.read_text())
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = list(name if is_package else name[:-1])
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = tuple(base + (node.module.split(".") if node.module else []))
            else:
                target = tuple((node.module or "").split("."))
            if target[0] == "tmalang":
                if len(target) == 1 or target == tuple(base):   # `from . import x`: x is a module
                    for alias in node.names:
                        yield (*target, alias.name), id(node) in nested
                else:
                    yield target, id(node) in nested
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tmalang":
                    yield tuple(alias.name.split(".")), id(node) in nested


def _layer(module: tuple) -> str:
    return module[1] if len(module) > 1 else "tmalang"


EDGES = [(name, target, inner) for path, name, pkg in _modules() for target, inner in _imports(path, name, pkg)]


def test_the_layers_import_only_what_lies_below_them():
    wrong = [f"{'.'.join(a)} imports {'.'.join(b)}" for a, b, _ in EDGES
             if _layer(a) in ALLOWED and _layer(b) != _layer(a) and _layer(b) not in ALLOWED[_layer(a)]]
    assert not wrong, "\n".join(wrong)


# The only imports allowed inside functions: the CLI's front loads the compiler, the interpreter and
# the pass driver when a command needs them, so that a warm compile (answered from the cache) and
# `--version` start in tens of milliseconds (tmalang/cli/main.py). The circle test below still sees them.
LAZY = {("tmalang", "cli", "main"): {("tmalang", "cli", "compile"), ("tmalang", "cli", "run"),
                                     ("tmalang", "cli", "verify"), ("tmalang", "cli", "opt")},
        ("tmalang", "cli", "compile"): {("tmalang", "verify")},   # --verify loads the verifier (and NumPy)
        # the stages after `ir` load the backend (and LLVM): a kernel compiled to interpret never does
        ("tmalang", "compiler"): {("tmalang", "backend", "stages")},
        # torch only where a torch tensor arrives: the autograd function imports torch at its top
        ("tmalang", "library", "attention"): {("tmalang", "library", "attention_autograd")},
        ("tmalang", "library", "attention_varlen"): {("tmalang", "library", "attention_autograd")},
        ("tmalang", "library", "conv2d"): {("tmalang", "library", "conv2d_op")}}


def test_no_function_level_imports_of_tmalang():
    inner = [f"{'.'.join(a)} imports {'.'.join(b)} inside a function" for a, b, inner in EDGES
             if inner and b not in LAZY.get(a, ())]
    assert not inner, "\n".join(inner)


def test_no_import_circles_between_modules():
    modules = {name for _, name, _ in _modules()}

    def resolve(target: tuple) -> tuple | None:
        while target and target not in modules:
            target = target[:-1]
        return target or None

    graph: dict[tuple, set] = {m: set() for m in modules}
    for a, b, _ in EDGES:
        b = resolve(b)
        if b is not None and b != a:
            graph[a].add(b)
    state: dict[tuple, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = trail[trail.index(nxt):] + [nxt]
                pytest.fail("import circle: " + " -> ".join(".".join(m) for m in cycle))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
