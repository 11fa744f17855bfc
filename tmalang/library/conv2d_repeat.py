"""Repeated calls of `tmalang.conv2d` on CUDA tensors: what a checked call learnt, kept so that a
call with the same addresses, layouts, options and stream skips the checks, the layouts and the
choice (conv2d_kernels.run consults `find` first).

A repeat holds no tensor of the caller's: equal addresses and layouts make its launches exact for
whatever tensors lie there now. It allocates each call's result (and a split's workspace) from
torch's caching allocator, and launches as the first call did, through `Kernel.launch_repeatable`,
for every result (and workspace) address the allocator hands out. Only calls whose activation
and weights the kernels read where they lie, without a bias and with K a multiple of 8, repeat.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..runtime.launch import torch_stream_of
from .gemm import gemm, launch_of
from .operands import is_torch_type

ENTRIES = 16                 # calls remembered, and result addresses per call
_repeats: dict[tuple, object] = {}


def key_of(x, w, bias, stride, padding, dilation, relu, split) -> tuple | None:
    """What a repeat depends on, for calls on plain CUDA tensors without a bias (None otherwise)."""
    if bias is not None or not is_torch_type(type(x)) or not is_torch_type(type(w)) or not x.is_cuda \
            or not w.is_cuda:
        return None
    device = x.get_device()
    return (x.data_ptr(), x.shape, x.stride(), x.dtype, w.data_ptr(), w.shape, w.stride(), w.dtype,
            stride, padding, dilation, relu, split, device, torch_stream_of(device))


def find(key: tuple | None):
    return _repeats.get(key) if key is not None else None


def remember(key: tuple, repeat):
    _repeats[key] = repeat
    while len(_repeats) > ENTRIES:
        del _repeats[next(iter(_repeats))]
    return repeat


def clear() -> None:
    _repeats.clear()


def _result_layout(g) -> tuple:
    """The shape and strides of the result: [N, K, P, Q] in channels_last memory, as the caller
    gets it; its NHWC rows are the bytes the kernels write."""
    return (g.n, g.k, g.p, g.q), (g.p * g.q * g.k, 1, g.q * g.k, g.k)


def _result(layout: tuple, x):
    return sys.modules["torch"].empty_strided(*layout, dtype=x.dtype, device=x.device)


def _rows(y, g):
    return y.permute(0, 2, 3, 1).reshape(g.n * g.p * g.q, g.k)


@dataclass
class Repeat:
    """The im2col kernel, in one launch or, split in `parts`, two (`total` adds the f32 slabs)."""

    g: object                   # conv2d_kernels.Geometry
    kernel: object
    total: object | None = None
    parts: int = 1
    launches: dict = field(default_factory=dict)   # result (and workspace) address -> launches

    def __post_init__(self) -> None:
        self.layout = _result_layout(self.g)      # worked out once: a repeat call's host time

    def __call__(self, x, w):
        g, torch = self.g, sys.modules["torch"]
        y = _result(self.layout, x)
        workspace = None
        if self.parts > 1:
            workspace = torch.empty((self.parts, g.n * g.p * g.q, g.k), dtype=torch.float32, device=x.device)
        address = y.data_ptr() if workspace is None else (y.data_ptr(), workspace.data_ptr())
        launches = self.launches.get(address)
        if launches is None:
            launches = self._launched(x, w, y, workspace)
            if None not in launches and len(self.launches) < ENTRIES:
                self.launches[address] = launches
            return y
        for launch in launches:
            launch()
        return y

    def _launched(self, x, w, y, workspace) -> tuple:
        g = self.g
        operands = (x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1).reshape(g.k, g.r * g.s * g.c))
        if workspace is None:
            return (self.kernel.launch_repeatable(*operands, _rows(y, g)),)
        return (self.kernel.launch_repeatable(*operands, self.parts, workspace, _rows(y, g)),
                self.total.launch_repeatable(self.parts, workspace, _rows(y, g)))


@dataclass
class PointwiseRepeat:
    """A 1x1 convolution on `tmalang.gemm` (conv2d_kernels.by_gemm): per result address, the GEMM's
    own launch (`gemm.launch_of`), repeated without the views and the GEMM's front."""

    g: object
    launches: dict = field(default_factory=dict)   # result address -> the GEMM's launch

    def __post_init__(self) -> None:
        self.layout = _result_layout(self.g)

    def __call__(self, x, w):
        g = self.g
        y = _result(self.layout, x)
        launch = self.launches.get(y.data_ptr())
        if launch is not None:
            launch()
            return y
        operands = (x.permute(0, 2, 3, 1).reshape(g.n * g.h * g.w, g.c), w.reshape(g.k, g.c).t(), _rows(y, g))
        gemm(*operands)
        views = operands[0].data_ptr() == x.data_ptr() and operands[1].data_ptr() == w.data_ptr()
        launch = launch_of(*operands) if views else None    # a reshape that copied: a temporary's address
        if launch is not None and len(self.launches) < ENTRIES:
            self.launches[y.data_ptr()] = launch
        return y


__all__ = ["key_of", "find", "remember", "clear", "Repeat", "PointwiseRepeat"]
