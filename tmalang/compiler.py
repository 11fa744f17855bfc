"""The stage order, visible in one place (like Triton's make_ttir → make_ttgir → make_llir → make_ptx).

    resolve the target: --arch → Target          targets/ (the facts every stage below reads)
    make_ast      text → AST                       syntax/
    make_checked  AST → KernelInfo                 sema/ (the target's rules at the user's line)
    make_ir       KernelInfo → high-level IR       lower/
    make_final_ir high-level IR → explicit IR      passes/ (PIPELINE, verified after each pass)
    make_llir     explicit IR → LLVM IR            backend/codegen.py
    make_ptx      LLVM IR → PTX                    backend/llvm_to_ptx.py
    make_cubin    PTX → cubin                      backend/ptxas.py
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from llvmlite import ir as llir

from .backend import assumptions, codegen, llvm_to_ptx, ptxas, timeline_codegen, watchdog_codegen
from .contract.manifest import GridSpec, Manifest, ScalarArg, TensorArg
from .contract.watchdog import enabled_by_default as watchdog_enabled_by_default
from .diagnostics import TmalangError, error
from .ir import exprs as ex
from .ir import ops
from .lower import lower_kernel
from .passes import PassLog, run_passes
from .passes.dispatch_roles import entry_registers
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
    stats: ptxas.PtxasStats | None = None
    uses: Uses = field(default_factory=Uses)        # every constant's uses, for notes on later errors
    constants: dict = field(default_factory=dict)   # the chosen kernel's constants: name -> value
    source_name: str = "<string>"
    waits: list = field(default_factory=list)       # (mbar_wait op, WaitSite) the watchdog watches
    events: list = field(default_factory=list)      # (op, EventSite) the timeline stamps


def make_ast(text: str, name: str, c: Compilation) -> None:
    c.source_name = name
    c.ast = parse(text, name, c.options.constants, c.options.binder, c.options.kernel)
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


def make_final_ir(c: Compilation) -> None:
    grid = grid_spec(c.ir)   # from the tile loop, before lower_tile_walk turns it into arithmetic
    run_passes(c.ir, c.target, c.options.log)
    c.manifest = build_manifest(c.ir, c.target.name, grid)
    if c.options.watchdog:
        c.waits = watchdog_codegen.wait_sites(c.ir, c.source_name)
        c.manifest = dataclasses.replace(c.manifest, waits=tuple(site for _, site in c.waits))
    if c.options.timeline:
        c.events = timeline_codegen.event_sites(c.ir)
        c.manifest = dataclasses.replace(c.manifest, events=tuple(site for _, site in c.events))


def make_llir(c: Compilation) -> None:
    module = llir.Module(name=c.ir.symbol)
    module.triple = llvm_to_ptx.TRIPLE
    params = list(c.manifest.ptx_params)
    gen = codegen.KernelCodegen(c.ir, params, module, {id(o): i for i, (o, _) in enumerate(c.waits)},
                                {id(o): i for i, (o, _) in enumerate(c.events)})
    gen.fn.calling_convention = "ptx_kernel"
    for arg, p in zip(gen.fn.args, params):
        arg.name = codegen.param_name(p)
    gen.emit()
    budgeted = any(r.regs for r in ops.roles(c.ir))
    c.llvm_ir = llvm_to_ptx.finish_kernel_text(
        str(module), c.ir.symbol, [p.box for p in params if isinstance(p, codegen.TensorMapParam)],
        c.ir.threads, entry_registers(c.ir.threads) if budgeted else 0,
    )


def make_ptx(c: Compilation) -> None:
    c.llvm_ir, c.ptx = llvm_to_ptx.llvm_to_ptx(c.llvm_ir, c.target)


def make_cubin(c: Compilation) -> None:
    c.cubin, c.stats = ptxas.assemble(c.ptx, c.target.name)


def compile_source(text: str, name: str = "<string>", options: Options | None = None,
                   until: str = "ptx") -> Compilation:
    """Run the stages up to `until` (ast, ir, ll, ptx, cubin)."""
    options = options or Options()
    c = Compilation(options, target_named(options.arch))
    timed = _Timer(options.log)
    timed("parse", make_ast, text, name, c)
    if until == "ast":
        return c
    try:
        _compile_checked(c, timed, until)
    except TmalangError as exc:
        raise c.uses.annotate(exc) from None
    return c


def _compile_checked(c: Compilation, timed, until: str) -> None:
    """The stages after the AST; an error at a constant's use gets a note of its value (§2a)."""
    timed("sema", make_checked, c)
    timed("lower", make_ir, c)
    make_final_ir(c)  # times each pass itself
    if until == "ir":
        return
    timed("llvm_codegen", make_llir, c)
    if until == "ll":
        return
    timed("llvm_to_ptx", make_ptx, c)
    if until == "cubin":
        timed("ptxas", make_cubin, c)


class _Timer:
    def __init__(self, log: PassLog):
        self.log = log

    def __call__(self, name: str, stage, *args) -> None:
        start = time.perf_counter()
        stage(*args)
        self.log.timings.append((name, time.perf_counter() - start))

def grid_spec(kernel: ops.KernelOp) -> GridSpec:
    """The launch grid: the tiles of the kernel's tile loops (sema makes them all walk one space)."""
    loop = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.ForTiles))
    tensor = ops.decls(kernel, ops.TensorDecl)[loop.tensor]
    split = loop.split.value if isinstance(loop.split, ex.Const) else loop.split.name
    stream = ()
    if loop.stream:   # its extent is a literal or launch-bound (sema)
        stream = (loop.extent.value if isinstance(loop.extent, ex.Const) else loop.extent.name, loop.chunk)
    return GridSpec(kernel.grid, tuple(zip(tensor.shape, ops.decls(kernel, ops.BoxDecl)[loop.box].shape)), split,
                    stream)


def build_manifest(kernel: ops.KernelOp, arch: str, grid: GridSpec) -> Manifest:
    boxes = ops.decls(kernel, ops.BoxDecl)
    stored = {boxes[o.box].tensor for o in ops.walk(kernel.body) if isinstance(o, ops.TmaStore)}
    loaded = {boxes[o.box].tensor for o in ops.walk(kernel.body) if isinstance(o, ops.TmaLoad)}
    args = []
    for o in kernel.body:
        if isinstance(o, ops.TensorDecl):
            args.append(TensorArg(o.symbol, o.dtype, tuple(o.shape), o.symbol in stored, o.symbol in loaded))
        elif isinstance(o, ops.ScalarDecl):
            args.append(ScalarArg(o.symbol, o.dtype))
    return Manifest(kernel.symbol, arch, tuple(args), tuple(codegen.ptx_params(kernel)), kernel.threads,
                    kernel.smem_bytes, grid, cluster=(kernel.cluster, 1, 1),
                    assumptions=assumptions.manifest_assumptions(kernel))
