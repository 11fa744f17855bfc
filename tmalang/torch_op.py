"""A compiled kernel as a `torch.library` custom operator (`Kernel.as_torch_op`).

torch.compile traces through Python, but a tmalang launch goes to the driver, which Dynamo cannot
see into. A custom operator is the boundary torch understands: a schema (which arguments are
tensors, which scalars, which tensors the kernel writes), an implementation per device, and a
fake implementation that says what the operator does to shapes without running it. The kernel
writes its outputs in place, so the operator mutates them and returns nothing; torch.compile
functionalizes that (it knows from the schema which tensors change).

    CUDA tensors: the kernel launched on torch's current stream (so CUDA graphs capture it)
    CPU tensors:  the reference interpreter, writing into the tensors' memory
    Meta/fake:    nothing to compute (no output is allocated); shapes are checked at launch

torch is imported only here and only when an operator is made: the runtime works without it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

from .contract.arrays import torch_host_array, unobserved_torch_call
from .contract.errors import LAUNCH_OPTION, LaunchError
from .contract.manifest import Manifest, ScalarArg, TensorArg

NAMESPACE = "tmalang"
_NUMBERS = (int, float)
_SCALAR_TYPES = {"f32": "float", "f64": "float", "i32": "int", "u32": "int", "i64": "int", "u64": "int"}
_made: dict[str, tuple[str, "TorchOp"]] = {}   # op name -> (the kernel's identity, its operator)
_libraries: list = []                           # torch.library.Library objects must stay alive


def schema(manifest: Manifest) -> str:
    """The operator's schema: the kernel's parameters in order, written tensors marked mutable
    (`Tensor(a!)`), nothing returned."""
    params = []
    for i, arg in enumerate(manifest.args):
        if isinstance(arg, TensorArg):
            params.append(f"Tensor({_alias(i)}!) {arg.name}" if arg.written else f"Tensor {arg.name}")
        else:
            params.append(f"{_SCALAR_TYPES[arg.dtype]} {arg.name}")
    return f"({', '.join(params)}) -> ()"


def _alias(index: int) -> str:
    """A distinct alias set per mutated tensor: a, b, ..., z, a1, ..."""
    letter = "abcdefghijklmnopqrstuvwxyz"[index % 26]
    return letter if index < 26 else f"{letter}{index // 26}"


class TorchOp:
    """`tmalang::NAME`, callable like the kernel (positional arguments in signature order)."""

    def __init__(self, name: str, manifest: Manifest, launch: Callable, interpret: Callable, dims: dict | None):
        self.name = name
        self.qualname = f"{NAMESPACE}::{name}"
        self.manifest = manifest
        self._launch, self._interpret, self._dims = launch, interpret, dims
        # where the schema takes scalars, found once: a direct call checks only those (host time)
        self._arity = len(manifest.args)
        self._scalars = tuple(i for i, spec in enumerate(manifest.args) if not isinstance(spec, TensorArg))
        self._register(sys.modules.get("torch") or _import_torch())

    def __call__(self, *args) -> None:
        if self._direct(args):      # nothing but the CUDA implementation would see the call
            return self._launch(*args, dims=self._dims)     # as _on_cuda, one call less
        return self._op(*args)

    def _direct(self, args: tuple) -> bool:
        """A plain eager call (`unobserved_torch_call`) whose scalars are Python numbers, as the
        schema would pass them (a 0-dim tensor for a scalar is the dispatcher's to convert)."""
        return len(args) == self._arity and all(type(args[i]) in _NUMBERS for i in self._scalars) \
            and unobserved_torch_call(args)

    @property
    def op(self):
        """The registered operator (torch.ops.tmalang.NAME.default)."""
        return getattr(getattr(sys.modules["torch"].ops, NAMESPACE), self.name).default

    def _register(self, torch) -> None:
        library = torch.library.Library(NAMESPACE, "FRAGMENT")
        _libraries.append(library)
        library.define(self.name + schema(self.manifest))
        library.impl(self.name, self._on_cuda, "CUDA")
        library.impl(self.name, self._on_cpu, "CPU")
        torch.library.register_fake(self.qualname, _no_outputs, lib=library)
        self._op = self.op

    def _on_cuda(self, *args) -> None:
        # no stream given: the runtime launches on torch's current stream (runtime/launch.py)
        self._launch(*args, dims=self._dims)

    def _on_cpu(self, *args) -> None:
        """The interpreter, on NumPy views of the tensors: what it writes lands in their memory."""
        views = [torch_host_array(a, a_spec.dtype) if isinstance(a_spec, TensorArg) else a
                 for a, a_spec in zip(args, self.manifest.args)]
        self._interpret(*views, dims=self._dims)


def _no_outputs(*args) -> None:
    """The fake implementation: the kernel writes into tensors it is given and allocates nothing."""
    return None


def make(name: str, identity: str, manifest: Manifest, launch: Callable, interpret: Callable,
         dims: dict | None) -> TorchOp:
    """The operator `tmalang::name` for one kernel (the same object again for the same kernel);
    E212 for a bad name, or a name another kernel already took in this process."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise LaunchError(LAUNCH_OPTION, f"as_torch_op(): name must be an identifier, got {name!r}")
    for arg in manifest.args:
        if isinstance(arg, ScalarArg) and arg.dtype not in _SCALAR_TYPES:
            raise LaunchError(LAUNCH_OPTION, f"as_torch_op(): scalar '{arg.name}' of type {arg.dtype} has no torch "
                              "schema type")
    known = _made.get(name)
    if known is not None:
        if known[0] != identity:
            raise LaunchError(LAUNCH_OPTION, f"as_torch_op(): '{NAMESPACE}::{name}' is already another kernel's "
                              "operator in this process", "pass name=... to choose another")
        return known[1]
    op = TorchOp(name, manifest, launch, interpret, dims)
    _made[name] = (identity, op)
    return op


def _import_torch():
    try:
        import torch
    except ImportError:
        raise LaunchError(LAUNCH_OPTION, "as_torch_op() needs PyTorch: pip install torch") from None
    return torch
