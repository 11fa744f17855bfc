"""LLVM IR → PTX through llvmlite's NVPTX target.

Two things llvmlite's IR builder cannot spell are added to the printed module here: tensor-map
parameters as `byval([128 x i8]) align 64 "nvvm.grid_constant"` (so the PTX parameter stays in
param space and TMA reads it in place, instead of a copy in local memory), and the kernel's
launch bounds (`.maxntid`, `.minnctapersm 1`, `.maxnreg`: setmaxnreg needs a register cap at
entry).
"""

from __future__ import annotations

import functools
import re

import llvmlite.binding as llvm

from ..targets.arch import Target

TRIPLE = "nvptx64-nvidia-cuda"


@functools.cache
def _target_machine(arch: Target):
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # Tile math must round each operation as NumPy and the interpreter do: no FMA contraction.
    llvm.set_option("tmalang", "--nvptx-fma-level=0")
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch.name, features=arch.ptx_feature, opt=3)


def finish_kernel_text(text: str, kernel: str, tensor_maps: list[str], threads: int, maxnreg: int,
                       occupancy: int = 1) -> str:
    """Give the kernel its parameter attributes and launch bounds."""
    pattern = re.compile(rf'^define ptx_kernel void @"{re.escape(kernel)}"\(.*\)', re.MULTILINE)
    match = pattern.search(text)
    assert match is not None, "kernel definition not found in LLVM text"
    define = match.group(0)
    for name in tensor_maps:
        define = define.replace(f'ptr %"tm.{name}"', f'ptr byval([128 x i8]) align 64 "nvvm.grid_constant" %"tm.{name}"')
    text = text[: match.start()] + define + " #0" + text[match.end():]
    bounds = f'"nvvm.maxntid"="{threads}" "nvvm.minctasm"="{occupancy}"'
    if maxnreg:
        bounds += f' "nvvm.maxnreg"="{maxnreg}"'
    return text + f"\nattributes #0 = {{ {bounds} }}\n"


def llvm_to_ptx(text: str, target: Target) -> tuple[str, str]:
    """Optimise the module; return (optimised LLVM IR, PTX)."""
    machine = _target_machine(target)
    module = llvm.parse_assembly(text)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return str(module), machine.emit_assembly(module)
