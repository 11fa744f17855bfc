"""One kernel's IR text as the input of a compile stage (`tmalangc opt`, `tmalangc K.ir --emit
ptx`): parsed into one kernel (E090, E431) and checked against the target's instruction families
(E434). The verifier (ir/verifier.py verify_input) then holds it to the rules of the stages taken
to have run (E432).
"""

from __future__ import annotations

from ..diagnostics import Source, Span, error
from ..targets.arch import Target
from . import ops
from .parser import parse_ir

# The ops that exist only where the target has an instruction family (sema/available.py refuses
# the source forms of the same things).
NEEDS = {
    "has_tcgen05": (ops.TmemDecl, ops.TmemAlloc, ops.TmemDealloc, ops.Tcgen05Mma, ops.Tcgen05Cp, ops.TmemZero,
                    ops.Tcgen05Commit, ops.TmemEpilogue),
    "has_wgmma": (ops.AccDecl, ops.AccZero, ops.Wgmma, ops.WgmmaFence, ops.WgmmaCommit, ops.WgmmaWait, ops.AccStore),
    "has_gather4": (ops.GatherLoad, ops.ScatterStore, ops.GatherPrefetch),
    "has_im2col_w": (),  # a field, not an op: a box with wide= (_needs)
}


def _needs(o: ops.Op, feature: str) -> bool:
    if feature == "has_im2col_w":
        return isinstance(o, ops.BoxDecl) and bool(o.wide)
    return isinstance(o, NEEDS[feature])


def check_target(kernel: ops.KernelOp, target: Target) -> None:
    """E434 at the first op of an instruction family `target` lacks."""
    for feature in NEEDS:
        if getattr(target, feature):
            continue
        found = next((o for o in ops.walk(kernel.body) if _needs(o, feature)), None)
        if found is not None:
            raise error("E434", f"'{found.name}' needs a target with {feature.removeprefix('has_')}, "
                        f"and {target.name} has none", found.span, "choose another --arch")


def read_kernel(text: str, path: str) -> ops.KernelOp:
    """The one kernel of an IR file; E431 at the first op that is not it."""
    found = parse_ir(text, path)
    if len(found) == 1 and isinstance(found[0], ops.KernelOp):
        return found[0]
    if not found:
        raise error("E431", "the IR file holds no kernel", Span(Source(text, path), 1, 1, 1, 2))
    other = next((o for o in found if not isinstance(o, ops.KernelOp)), found[-1])
    what = "a second kernel" if isinstance(other, ops.KernelOp) else f"'{other.name}' outside the kernel"
    raise error("E431", f"an IR file holds one kernel, and this one holds {what}", other.span)
