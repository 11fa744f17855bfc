"""The stage order, visible in one place (like Triton's make_ttir → make_ttgir → make_llir → make_ptx).

STAGES below is that order as data, its names from stages.py (the one vocabulary of
`compile_source(until=...)`, `tmalangc --emit`, `--time-passes` and the caches).

    (the target: --arch → Target                   targets/, the facts every stage below reads)
    ast     text → AST                             syntax/
    sema    AST → KernelInfo                       sema/ (the target's rules at the user's line)
    lower   KernelInfo → high-level IR             lower/ (and the launch grid, from the tile loop)
    ir      high-level IR → final IR + manifest    passes/ (PIPELINE, verified after each), contract/launch.py
    ll      final IR → LLVM IR                     backend/codegen.py
    ptx     LLVM IR → PTX                          backend/llvm_to_ptx.py
    cubin   PTX → cubin                            backend/ptxas.py

A compile enters at `ast` from .tma text (`compile_source`) or at `ir` from final IR text
(`compile_ir`: `tmalangc K.ir --emit ptx`). The backend is imported only by the stages after
`ir`, so a kernel compiled to interpret loads no LLVM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import stages
from .contract.launch import derive_manifest, grid_spec
from .contract.manifest import GridSpec, Manifest
from .contract.watchdog import enabled_by_default as watchdog_enabled_by_default
from .diagnostics import TmalangError, error
from .ir import ops
from .ir.entry import read_kernel, check_target
from .ir.verifier import verify_input
from .lower import lower_kernel
from .passes import PassLog, applicable, run_passes
from .sema import check
from .sema.available import check_available
from .sema.declarations import KernelInfo
from .syntax import ast
from .syntax.constants import Uses
from .syntax.parser import parse
from .targets.arch import DEFAULT, TARGETS, Target, target_named

ARCHS = tuple(TARGETS)


@dataclass
class Options:
    arch: str | Target = DEFAULT.name  # a name from target.TARGETS, or a Target object
    kernel: str | None = None          # which kernel of a multi-kernel file
    log: PassLog = field(default_factory=PassLog)
    constants: dict = field(default_factory=dict)   # the chosen kernel's compile-time constants (§2a)
    binder: str = "compile(constants=...)"          # where they were bound, for notes ("-D" on the CLI)
    # a watchdog in every mbarrier wait loop (backend/watchdog_codegen.py); TMALANG_WATCHDOG=1 makes
    # the default on
    watchdog: bool = field(default_factory=watchdog_enabled_by_default)
    # %globaltimer stamps at waits, arrivals, TMA issues and MMA commits (backend/timeline_codegen.py),
    # for Kernel.profile(); off unless asked for
    timeline: bool = False


@dataclass
class Compilation:
    """Every artifact of one kernel, filled stage by stage."""

    options: Options
    target: Target
    ast: ast.Program | None = None
    info: KernelInfo | None = None
    ir: ops.KernelOp | None = None
    llvm_ir: str = ""
    ptx: str = ""
    manifest: Manifest | None = None
    cubin: bytes = b""
    stats: object = None                            # backend.ptxas.PtxasStats, with the cubin
    uses: Uses = field(default_factory=Uses)        # every constant's uses, for notes on later errors
    constants: dict = field(default_factory=dict)   # the chosen kernel's constants: name -> value
    source_name: str = "<string>"
    text: str = ""                                  # the .tma source (empty when entered from IR)
    grid: GridSpec | None = None                    # from the tile loop (None when entered from IR)
    done: str = ""                                  # the last stage that ran
    waits: list = field(default_factory=list)       # (mbar_wait op, WaitSite) the watchdog watches
    events: list = field(default_factory=list)      # (op, EventSite) the timeline stamps


def make_ast(c: Compilation) -> None:
    c.ast = parse(c.text, c.source_name, c.options.constants, c.options.binder, c.options.kernel)
    c.uses = c.ast.uses
    chosen = [k for k in c.ast.kernels if c.options.kernel in (None, k.name)][:1]
    c.constants = {d.name: d.value for k in chosen for d in k.constants}


def make_checked(c: Compilation) -> None:
    infos = check(c.ast, c.target)
    wanted = c.options.kernel
    chosen = [i for i in infos if wanted is None or i.node.name == wanted]
    if not chosen:
        raise error("E005", f"no kernel named '{wanted}'", None, f"kernels: {', '.join(i.node.name for i in infos)}")
    c.info = chosen[0]
    check_available(c.info)


def make_ir(c: Compilation) -> None:
    c.ir = lower_kernel(c.info)
    c.grid = grid_spec(c.ir)   # from the tile loop, before lower_tile_walk turns it into arithmetic


def make_final_ir(c: Compilation) -> None:
    run_passes(c.ir, c.target, c.options.log)   # times each pass itself
    _derive_contract(c)


def _derive_contract(c: Compilation) -> None:
    c.manifest, c.waits, c.events = derive_manifest(c.ir, c.target.name, c.grid, c.source_name,
                                                    c.options.watchdog, c.options.timeline)


def make_llir(c: Compilation) -> None:
    from .backend.stages import llvm_ir   # LLVM is loaded by the first stage that needs it
    c.llvm_ir = llvm_ir(c.ir, c.manifest, c.waits, c.events)


def make_ptx(c: Compilation) -> None:
    from .backend.stages import ptx
    c.llvm_ir, c.ptx = ptx(c.llvm_ir, c.target)


def make_cubin(c: Compilation) -> None:
    from .backend.stages import cubin
    c.cubin, c.stats = cubin(c.ptx, c.target.name)


@dataclass(frozen=True)
class Stage:
    """One stage: its name (stages.py), the artifact of a Compilation it fills, and the function
    that fills it. `timed` is False for the stage whose passes time themselves."""

    name: str
    fills: str
    run: Callable[[Compilation], None]
    timed: bool = True


_RUNS = {"ast": ("ast", make_ast), "sema": ("info", make_checked), "lower": ("ir", make_ir),
         "ir": ("manifest", make_final_ir), "ll": ("llvm_ir", make_llir), "ptx": ("ptx", make_ptx),
         "cubin": ("cubin", make_cubin)}
STAGES = tuple(Stage(name, *_RUNS[name], timed=name != "ir") for name in stages.NAMES)
STAGE_NAMES = stages.NAMES


def compile_source(text: str, name: str = "<string>", options: Options | None = None,
                   until: str = "ptx") -> Compilation:
    """Run the stages from .tma text up to `until` (a name of STAGES)."""
    options = options or Options()
    c = Compilation(options, target_named(options.arch), source_name=name, text=text)
    return advance(c, until)


def compile_ir(text: str, name: str = "<string>", options: Options | None = None,
               until: str = "ptx") -> Compilation:
    """Enter at the final IR (one kernel's IR text as `--emit ir` prints it: E090, E431), check it
    against the target (E434) and the verifier's rules after every pass (E432), derive its launch
    contract (without a grid: the tile loop is written out by then) and run the stages after `ir`
    up to `until`."""
    options = options or Options()
    c = Compilation(options, target_named(options.arch), source_name=name)
    c.ir = read_kernel(text, name)
    check_target(c.ir, c.target)
    verify_input(c.ir, ["lower", *applicable(c.target)], None)
    _derive_contract(c)
    c.done = "ir"
    return advance(c, until)


def advance(c: Compilation, until: str) -> Compilation:
    """Run the stages after `c.done` up to `until`; an error after the AST at a constant's use
    gets a note of the constant's value (§2a)."""
    first = STAGE_NAMES.index(c.done) + 1 if c.done else 0
    for stage in STAGES[first: STAGE_NAMES.index(until) + 1]:
        try:
            _run(stage, c)
        except TmalangError as exc:
            raise (exc if stage.name == "ast" else c.uses.annotate(exc)) from None
        c.done = stage.name
    return c


def _run(stage: Stage, c: Compilation) -> None:
    start = time.perf_counter()
    stage.run(c)
    if stage.timed:
        c.options.log.timings.append((stage.name, time.perf_counter() - start))
