"""The backend's stages as the compiler calls them (compiler.py STAGES: ll, ptx, cubin): the final
IR and its launch contract to LLVM IR, LLVM IR to PTX, PTX to a cubin.

Requires: a kernel every pass has run on, and the manifest contract/launch.py derived from it
(the PTX parameters in order; the watchdog's and timeline's sites, in emission order, when on).
Guarantees: the kernel's parameters are the manifest's `ptx_params`, named by `param_name`.
"""

from __future__ import annotations

from llvmlite import ir as llir

from ..contract.manifest import Manifest, TensorMapParam
from ..ir import ops
from ..passes.dispatch_roles import entry_registers
from ..targets.arch import Target
from . import codegen, llvm_to_ptx, ptxas


def llvm_ir(kernel: ops.KernelOp, manifest: Manifest, waits: list, events: list) -> str:
    module = llir.Module(name=kernel.symbol)
    module.triple = llvm_to_ptx.TRIPLE
    params = list(manifest.ptx_params)
    gen = codegen.KernelCodegen(kernel, params, module, {id(o): i for i, (o, _) in enumerate(waits)},
                                {id(o): i for i, (o, _) in enumerate(events)})
    gen.fn.calling_convention = "ptx_kernel"
    for arg, p in zip(gen.fn.args, params):
        arg.name = codegen.param_name(p)
    gen.emit()
    budgeted = any(r.regs for r in ops.roles(kernel))
    return llvm_to_ptx.finish_kernel_text(
        str(module), kernel.symbol, [p.box for p in params if isinstance(p, TensorMapParam)],
        kernel.threads, entry_registers(kernel.threads, kernel.occupancy) if budgeted else 0, kernel.occupancy,
    )


def ptx(llvm_text: str, target: Target) -> tuple[str, str]:
    """(the LLVM IR as NVPTX's pipeline left it, the PTX)."""
    return llvm_to_ptx.llvm_to_ptx(llvm_text, target)


def cubin(ptx_text: str, arch: str) -> tuple[bytes, ptxas.PtxasStats]:
    return ptxas.assemble(ptx_text, arch)
