"""`tmalang.conv2d`: a 2-D convolution forward as an implicit GEMM (conv2d_sm90.tma.j2).

    y = tmalang.conv2d(x, w, stride=1, padding=1)              # x [N, C, H, W], w [K, C, R, S]
    y = tmalang.conv2d(x, w, stride=2, padding=3, bias=b, activation="relu")

As torch.nn.functional.conv2d (groups 1): stride, padding and dilation are an int or a pair,
bias a [K] vector, activation None or "relu" (fused into the epilogue). bf16 or f16, f32
accumulation, the result in the input's dtype, [N, K, P, Q] in channels_last memory. torch
tensors go through the operator torch.ops.tmalang.conv2d (conv2d_op.py): CUDA tensors run on
the GPU on torch's current stream, CPU tensors on the reference interpreter, and torch.compile
records a call as one op. NumPy arrays (ml_dtypes.bfloat16 or float16, same shapes) run on the
interpreter. The kernels, layouts and configuration are conv2d_kernels.py's.
"""

from __future__ import annotations

from .conv2d_kernels import pair, relu_of, run, split_count


def conv2d(x, w, *, stride=1, padding=0, dilation=1, bias=None, activation=None, split: int | None = None):
    """y = activation(conv2d(x, w) + bias) (see the module docstring). `split` pins the number of
    parts K is split into (None: the rule, `split_of`). torch tensors go through the operator
    torch.ops.tmalang.conv2d (conv2d_op.py), which torch.compile records as one op."""
    if type(x).__module__.startswith("torch"):
        return _operator().call(x, w, bias, stride, padding, dilation, activation, split)
    return run(x, w, bias, pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation"),
               relu_of(activation), split_count(split) or None)


def _operator():
    """library/conv2d_op.py, imported where a torch tensor first arrives (it imports torch), then
    kept: an import statement per call is host time a repeat call feels."""
    global _op
    if _op is None:
        from . import conv2d_op
        _op = conv2d_op
    return _op


_op = None

__all__ = ["conv2d"]
