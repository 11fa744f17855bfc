"""Emitting helpers below the op table, for any builder (the kernel's, or that of a helper
function such as the watchdog's report): inline PTX, special registers, the clock, and module
globals the host writes before a launch (the watchdog's and the timeline's state).

A module global is read with inline PTX that names its symbol (`global_operand`), not through an
LLVM pointer: through a pointer, ptxas materialised the address far from its use (before a
wait's first try) and kept it live in two registers there.
"""

from __future__ import annotations

from llvmlite import ir

I32, I64 = ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()
GLOBALTIMER = "mov.u64 $0, %globaltimer;"


def asm(b: ir.IRBuilder, template: str, constraints: str, args: list, ret: ir.Type = VOID,
        convergent: bool = False) -> ir.Value:
    """`asm volatile` with a memory clobber; `convergent` keeps LLVM from duplicating a
    `.aligned` instruction (bar.sync, wgmma, setmaxnreg) into both arms of a branch, where a warp
    would reach it divergently."""
    constraints = f"{constraints},~{{memory}}" if constraints else "~{memory}"
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return b.call(ir.InlineAsm(fnty, template, constraints, side_effect=True), args,
                  attrs=("convergent",) if convergent else ())


def sreg(b: ir.IRBuilder, name: str, label: str = "") -> ir.Value:
    """The special register %`name` (tid.x, ctaid.x, laneid, ...)."""
    module = b.function.module
    fn = module.globals.get(f"llvm.nvvm.read.ptx.sreg.{name}")
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(I32, []), f"llvm.nvvm.read.ptx.sreg.{name}")
    return b.call(fn, [], name=label)


def define_global(module: ir.Module, name: str, nbytes: int) -> None:
    """`.visible .global .align 8 .b8 name[nbytes]`, zero until the host writes it (once a module)."""
    if module.globals.get(name) is None:
        state = ir.GlobalVariable(module, ir.ArrayType(I64, nbytes // 8), name, addrspace=1)
        state.initializer = ir.Constant(state.value_type, None)
        state.align = 8


def global_operand(name: str, offset: int) -> str:
    """`[name+offset]` as an inline-asm template spells it (a literal `$` is `$$` there)."""
    return f"[{name.replace('$', '$$')}+{offset}]"
