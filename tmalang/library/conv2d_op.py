"""`tmalang.conv2d` on torch tensors: the custom operator torch.ops.tmalang.conv2d, so that a call
runs under torch.compile(fullgraph=True) and in CUDA graphs like any torch op.

The operator is functional (a new [N, K, P, Q] channels_last tensor) and its fake implementation
gives the result's shape and strides from the arguments' alone, which is all torch.compile needs
to trace it. CUDA tensors run the kernels (library/conv2d_kernels.py) on torch's current stream; CPU
tensors run them on the reference interpreter (through NumPy), which lets torch.compile and
opcheck be tried on any machine. torch is imported here only.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..contract.arrays import unobserved_torch_call
from . import conv2d_kernels as library

_SCHEMA = ("(Tensor x, Tensor w, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, bool relu, "
           "int split) -> Tensor")
_library = torch.library.Library("tmalang", "FRAGMENT")
_library.define("conv2d" + _SCHEMA)
_NUMPY = {torch.bfloat16: ml_dtypes.bfloat16, torch.float16: np.float16, torch.float32: np.float32}


def call(x, w, bias, stride, padding, dilation, activation, split):
    """The operator on torch tensors (arguments as tmalang.conv2d takes them); a plain eager call
    (`unobserved_torch_call`) runs the operator's CUDA implementation without the dispatcher."""
    if unobserved_torch_call((x, w) if bias is None else (x, w, bias)):
        return library.run(x, w, bias, library.pair(stride, "stride"), library.pair(padding, "padding"),
                           library.pair(dilation, "dilation"), library.relu_of(activation),
                           library.split_count(split) or None)
    return torch.ops.tmalang.conv2d.default(x, w, bias, list(library.pair(stride, "stride")),
                                            list(library.pair(padding, "padding")),
                                            list(library.pair(dilation, "dilation")),
                                            library.relu_of(activation), library.split_count(split))


def _cuda(x, w, bias, stride, padding, dilation, relu, split):
    return library.run(x, w, bias, tuple(stride), tuple(padding), tuple(dilation), relu, split or None)


def _cpu(x, w, bias, stride, padding, dilation, relu, split):
    """On the interpreter: the tensors as NumPy arrays (bf16 as ml_dtypes), the result back."""
    y = library.run(*(None if t is None else _to_numpy(t) for t in (x, w, bias)), tuple(stride), tuple(padding),
                    tuple(dilation), relu, split or None)
    return torch.from_numpy(np.ascontiguousarray(y.astype(np.float32))).to(x.dtype).contiguous(
        memory_format=torch.channels_last)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().astype(_NUMPY[t.dtype])


def _fake(x, w, bias, stride, padding, dilation, relu, split):
    g = library.checked(x, w, tuple(stride), tuple(padding), tuple(dilation), bias, "relu" if relu else None)
    return x.new_empty_strided((g.n, g.k, g.p, g.q), (g.p * g.q * g.k, 1, g.q * g.k, g.k))


_library.impl("conv2d", _cuda, "CUDA")
_library.impl("conv2d", _cpu, "CPU")
torch.library.register_fake("tmalang::conv2d", _fake, lib=_library)
