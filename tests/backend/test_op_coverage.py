"""Every op that can remain after the passes has a backend emitter and interpreter semantics, and
every emitter family has a filecheck case in tests/backend/ir.

The ops that can remain are those of the final IR (the `ir` stage) of some example for some target
it fits (conftest.example_archs). Each must be in the backend's table (backend/codegen.py
EMITTERS) and the interpreter's (interp/machine.py SEMANTICS), unless the walk of that table's
user handles it where it stands, which the code does in exactly these places:

- backend: `KernelCodegen._emit` emits the kernel body's statements and passes over the
  declarations, which codegen and the launch contract read by symbol (`ops.decls`); the `loop`
  emitter (claim_codegen.py) turns a `leave_if` standing directly in its body into a branch.
- interpreter: `CTA.program` runs the roles, at the kernel's top or in a warpgroups block, and
  the warpgroups blocks themselves, passes over the declarations, and runs only these other
  statements at the kernel's top: elect, sync, fence, tmem_alloc and tmem_dealloc.

The backend's part is also checked by running it: each op of each example's final IR reaches an
emitter, or is one of the above where it stands.
"""

from __future__ import annotations

import functools
from pathlib import Path

from conftest import ROOT, example_archs
from tmalang.backend import codegen
from tmalang.backend.codegen import EMITTERS
from tmalang.backend.stages import llvm_ir
from tmalang.compiler import Compilation, Options, compile_source
from tmalang.interp.machine import SEMANTICS
from tmalang.ir import ops
from tmalang.ir.entry import read_kernel

EXAMPLES = sorted((ROOT / "examples").glob("*.tma"))
CASES = sorted((ROOT / "tests" / "backend" / "ir").glob("*.ir"))
BACKEND = Path(codegen.__file__).parent

# Declarations emit nothing: codegen, the interpreter and the launch contract read them by symbol.
DECLARATIONS = (ops.TensorDecl, ops.ScalarDecl, ops.AssumeDecl, ops.BoxDecl, ops.BufferDecl, ops.MbarrierDecl,
                ops.TmemDecl, ops.TileQueueDecl)
TOP = {decl: (ops.KernelOp,) for decl in DECLARATIONS}
# op class -> the parents where the walk itself handles it, bypassing the table
BACKEND_STRUCTURAL = {**TOP, ops.LeaveIf: (ops.Loop,)}
INTERP_STRUCTURAL = {**TOP, ops.RoleOp: (ops.KernelOp, ops.WarpgroupBlock), ops.WarpgroupBlock: (ops.KernelOp,)}
INTERP_KERNEL_STATEMENTS = (ops.Elect, ops.Sync, ops.Fence, ops.TmemAlloc, ops.TmemDealloc)   # CTA.program
# Case-name families of the core table (codegen.py, with tile_math.py and conversions.py), besides
# one per *_codegen.py module and per module whose emitters the table merges.
CORE_FAMILIES = ("tma", "mbarrier", "dsmem", "fence", "sync", "control", "tile", "conversions")


@functools.cache
def final_irs() -> tuple[tuple[str, Compilation], ...]:
    """(example@target, its compilation to the final IR) for every example and target it fits."""
    return tuple((f"{path.stem}@{arch}", compile_source(path.read_text(), str(path), Options(arch=arch, watchdog=False),
                                                        until="ir"))
                 for path in EXAMPLES for arch in example_archs(path))


def placed(parent: ops.Op):
    """(op, the op whose region holds it) for every op under `parent`."""
    for region in parent.regions():
        for o in region:
            yield o, parent
            yield from placed(o)


@functools.cache
def remaining_ops() -> dict[type, set[tuple[str, type]]]:
    """Op class -> {(example@target, class of the op holding it)} over every final IR."""
    found: dict[type, set[tuple[str, type]]] = {}
    for name, c in final_irs():
        for o, parent in placed(c.ir):
            found.setdefault(type(o), set()).add((name, type(parent)))
    assert found, "no example compiled to final IR"
    return found


def unhandled(table: dict, structural: dict, top: tuple = ()) -> dict[str, list[str]]:
    """Op class name -> where it stands without an entry in `table` nor structural handling there.
    `top`, when given, bounds the table's ops at the kernel's top to these classes."""
    missing = {}
    for cls, places in remaining_ops().items():
        bad = sorted(f"{name} in {parent.__name__}" for name, parent in places
                     if not _handled(cls, parent, table, structural, top))
        if bad:
            missing[cls.__name__] = bad
    return missing


def _handled(cls: type, parent: type, table: dict, structural: dict, top: tuple) -> bool:
    if parent in structural.get(cls, ()):
        return True
    return cls in table and not (top and parent is ops.KernelOp and not issubclass(cls, top))


def test_every_remaining_op_has_an_emitter():
    assert unhandled(EMITTERS, BACKEND_STRUCTURAL) == {}


def test_every_remaining_op_has_interpreter_semantics():
    assert unhandled(SEMANTICS, INTERP_STRUCTURAL, INTERP_KERNEL_STATEMENTS) == {}


def test_codegen_reaches_every_op_but_the_structural_ones(monkeypatch):
    """Run the backend on every final IR with each emitter recording its op: the ops it never
    saw are exactly declarations at the top and leave_ifs in their loop."""
    emitted: set[int] = set()

    def recording(emit):
        def record(g, o):
            emitted.add(id(o))
            return emit(g, o)
        return record

    monkeypatch.setattr(codegen, "EMITTERS", {cls: recording(emit) for cls, emit in EMITTERS.items()})
    unreached = set()
    for name, c in final_irs():
        emitted.clear()
        llvm_ir(c.ir, c.manifest, c.waits, c.events)
        unreached |= {(name, type(o).__name__, type(parent).__name__) for o, parent in placed(c.ir)
                      if id(o) not in emitted and type(parent) not in BACKEND_STRUCTURAL.get(type(o), ())}
    assert unreached == set()


def emitter_families() -> set[str]:
    """One family per *_codegen.py module of the backend and per module that defines an emitter
    of the table (the core table's own are codegen.py's: CORE_FAMILIES name its cases)."""
    modules = {emit.__module__.rpartition(".")[2] for emit in EMITTERS.values()}
    modules |= {path.stem for path in BACKEND.glob("*_codegen.py")}
    return {module.removesuffix("_codegen") for module in modules} - {"codegen"}


def test_every_emitter_family_has_a_filecheck_case():
    assert {"mma", "tcgen05", "pair", "row", "claim"} <= emitter_families()   # the tables codegen merges
    missing = sorted(family for family in emitter_families() if not any(p.name.startswith(f"{family}_") for p in CASES))
    assert missing == [], f"no tests/backend/ir/<family>_*.ir case for {missing}"


def test_every_case_is_named_after_its_family():
    families = emitter_families() | set(CORE_FAMILIES)
    strays = [p.name for p in CASES if not any(p.name.startswith(f"{family}_") for family in families)]
    assert strays == [], f"cases whose name starts with no family of {sorted(families)}"


def test_every_emitter_has_a_filecheck_case():
    exercised = {type(o) for path in CASES for o in ops.walk(read_kernel(path.read_text(), path.name).body)}
    assert sorted(cls.__name__ for cls in set(EMITTERS) - exercised) == []
