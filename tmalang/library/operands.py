"""The operands of a `tmalang.gemm` call, checked and put where TMA can read them.

`prepare` checks shapes and dtypes (E212, before any work), decides B's layout from its strides,
and copies an operand into an aligned buffer only when TMA cannot address it as it is: TMA needs
a base address and row strides that are multiples of 16 bytes, and a unit innermost stride.
torch CUDA tensors stay on the GPU (launched on the given stream, else torch's current one);
NumPy arrays (ml_dtypes for bf16/fp8) go through the reference interpreter.
"""

from __future__ import annotations

import functools
import sys

import ml_dtypes
import numpy as np

from ..contract.errors import LAUNCH_OPTION, LaunchError
from ..targets import dtypes, tma

INPUTS = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
OUTPUTS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
ALIGN = tma.GLOBAL_ALIGNMENT   # bytes: a tensor's base address and its row stride
SECTOR = 32                # an L2 sector: what a TMA read moves at least


def _dtype_name(array) -> str:
    return _named(array.dtype)


def _is_torch(array) -> bool:
    return is_torch_type(type(array))


# a call's host time is what small GEMMs are bound by: these answers are kept per dtype and type
@functools.cache
def _named(dtype) -> str:
    return str(dtype).removeprefix("torch.")


@functools.cache
def is_torch_type(kind: type) -> bool:
    return kind.__module__.startswith("torch")


class Operands:
    """A, B and C as the kernels take them: a [M, K] row-major; b [N, K] (K-major) or [K, N]
    (N-major, `n_major`); c [M, N] aligned (the caller's `out`, or a buffer copied to it at the end)."""

    def __init__(self, a, b, out, out_dtype: str, alpha: float):
        self.torch = _is_torch(a)
        self.dtype = INPUTS[_dtype_name(a)]
        self.itemsize = dtypes.itemsize(self.dtype)
        self.out_dtype = out_dtype
        self.alpha = float(alpha)
        (m, k), n = a.shape, b.shape[1]
        self.shape = (m, n, k)
        self.empty = m == 0 or n == 0 or k == 0
        self.device = a.device if self.torch else None
        b_t = b.t() if self.torch else b.T                 # [N, K]: row-major when B is K-major
        self.n_major = _strides(b)[0] != 1 and not (self.dtype.startswith("f8") or k == 1)
        given_b = b if self.n_major else b_t   # K-major: native, and the only form fp8 has on the tensor cores
        self.b = self._aligned(given_b)
        self.a = self._aligned(a)
        self._given = (a, given_b)
        self.out = out
        self.c = self._output(out, m, n)
        self.sms = _sms(a) if self.torch else None
        self.w = None

    # -- buffers -----------------------------------------------------------------------------
    def _aligned(self, x):
        """x itself if TMA can address it, else an aligned row-major copy."""
        if _addressable(x, self.torch):
            return x
        rows, cols = x.shape
        padded = _empty(self, (rows, _round_up(cols, ALIGN // _itemsize(x))), x.dtype)[:, :cols]
        if self.torch:
            padded.copy_(x)
        else:
            padded[...] = x
        return padded

    def _output(self, out, m: int, n: int):
        if out is not None and _addressable(out, self.torch):
            return out
        size = dtypes.itemsize(self.out_dtype)
        return _empty(self, (m, _round_up(n, ALIGN // size)), _out_dtype(self, self.out_dtype))[:, :n]

    def workspace(self, split: int):
        """The f32 partial sums [split, M, N] of a split of K (one per split: tuning tries several)."""
        if self.w is None or self.w.shape[0] != split:
            m, n, _ = self.shape
            if self.torch:
                self.w = torch_workspace(self.device, split, m, n)
            else:
                self.w = np.zeros(_workspace_shape(split, m, n), dtype=np.float32)[:, :, :n]
        return self.w

    def sectors(self) -> bool:
        """Whether every row of A and B starts on a 32-byte L2 sector (library/configs.py)."""
        return all(_strides(x)[0] * self.itemsize % SECTOR == 0 for x in (self.a, self.b))

    def in_place(self) -> bool:
        """Whether the kernels read and write the caller's own tensors (no aligned copies)."""
        return self.c is self.out and self.a is self._given[0] and self.b is self._given[1]

    def staged_output(self) -> bool:
        """Whether only the caller's `out` is not the kernels' own: A and B are read as they are,
        C is written into an aligned buffer and copied to `out` (torch, `finish`)."""
        return (self.torch and self.out is not None and self.c is not self.out
                and self.a is self._given[0] and self.b is self._given[1])

    # -- running -----------------------------------------------------------------------------
    def launch(self, kernel, args: list, stream, writes: str = "c"):
        """On the GPU (torch; returns the launch's repeat, Kernel.launch_repeatable) or the
        interpreter (NumPy: the written tensor comes back; returns None)."""
        if self.torch:
            return kernel.launch_repeatable(*args, stream=stream)   # None: torch's current stream
        written = kernel.interpret(*args)[0]
        setattr(self, writes, written)
        return None

    def finish(self):
        """C: zeros when K = 0; the caller's `out` (filled) when given; else a contiguous C."""
        m, n, k = self.shape
        if k == 0 and m and n:
            self.c[...] = 0
        if self.out is not None:
            if self.c is not self.out:
                if self.torch:
                    self.out.copy_(self.c)
                else:
                    self.out[...] = self.c
            return self.out
        if self.torch:
            return self.c.contiguous()
        return np.ascontiguousarray(self.c)

    def key(self) -> str:
        m, n, k = self.shape
        layout = "kn" if self.n_major else "nk"
        return f"{m}x{n}x{k} {self.dtype}->{self.out_dtype} {layout} sms={self.sms} sectors={self.sectors()}"


def prepare(a, b, out, out_dtype, alpha) -> Operands:
    """Check the call (E214 with what is wrong) and build its Operands."""
    for name, x in (("a", a), ("b", b)):
        if not (_is_torch(x) or isinstance(x, np.ndarray)):
            raise LaunchError(LAUNCH_OPTION, f"gemm: {name} must be a torch tensor or a NumPy array, "
                              f"got {type(x).__name__}")
        if len(x.shape) != 2:
            raise LaunchError(LAUNCH_OPTION, f"gemm: {name} must be 2-D, got shape {tuple(x.shape)}")
    if _is_torch(a) != _is_torch(b) or (_is_torch(a) and (a.device != b.device or not a.is_cuda)):
        raise LaunchError(LAUNCH_OPTION, "gemm: a and b must both be CUDA torch tensors on one device, "
                          "or both NumPy arrays")
    if a.shape[1] != b.shape[0]:
        raise LaunchError(LAUNCH_OPTION, f"gemm: a is {tuple(a.shape)} and b is {tuple(b.shape)}: "
                          "a's columns must match b's rows (a [M, K], b [K, N])")
    if _dtype_name(a) not in INPUTS or _dtype_name(a) != _dtype_name(b):
        raise LaunchError(LAUNCH_OPTION, f"gemm: a and b must share one dtype of "
                          f"{', '.join(INPUTS)}; got {_dtype_name(a)} and {_dtype_name(b)}")
    result = _result_dtype(_dtype_name(a), out, out_dtype)
    if out is not None:
        if _is_torch(out) != _is_torch(a) or tuple(out.shape) != (a.shape[0], b.shape[1]):
            raise LaunchError(LAUNCH_OPTION, f"gemm: out must be a {'torch tensor' if _is_torch(a) else 'NumPy array'} "
                              f"of shape {(a.shape[0], b.shape[1])}, got {type(out).__name__} {tuple(out.shape)}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise LaunchError(LAUNCH_OPTION, f"gemm: alpha must be a Python number, got {type(alpha).__name__}")
    if not finite_f32(alpha):
        raise LaunchError(LAUNCH_OPTION, f"gemm: alpha must be a finite f32 value, got {str(alpha)[:40]}")
    return Operands(a, b, out, result, alpha)


def operand_output_dtype(input_dtype, out_dtype) -> str:
    """The torch dtype name of C (`float32`, ...) for inputs of `input_dtype` and an `out_dtype`
    (None, a dtype or its name), as a call without `out` makes it; LaunchError where it has none."""
    name = _named(input_dtype)
    if name not in INPUTS:
        raise LaunchError(LAUNCH_OPTION, f"gemm: inputs of {name}")
    result = _result_dtype(name, None, out_dtype)
    return {v: k for k, v in OUTPUTS.items()}[result]


def finite_f32(alpha) -> bool:
    """Whether a number is a finite value of the kernels' f32 alpha."""
    return -3.4e38 <= alpha <= 3.4e38


def _result_dtype(input_name: str, out, out_dtype) -> str:
    """C's dtype (a tmalang name) for inputs named `input_name` (torch/NumPy name: bfloat16, ...)."""
    given = [_dtype_name(x) if hasattr(x, "dtype") else str(x).removeprefix("torch.") for x in (out_dtype,)
             if x is not None]
    if out is not None:
        if given and given[0] != _dtype_name(out):
            raise LaunchError(LAUNCH_OPTION, f"gemm: out is {_dtype_name(out)} but out_dtype is {given[0]}")
        given = [_dtype_name(out)]
    name = given[0] if given else ("bfloat16" if INPUTS[input_name].startswith("f8") else input_name)
    name = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}.get(name, name)
    if name not in OUTPUTS:
        raise LaunchError(LAUNCH_OPTION, f"gemm: the output dtype must be one of {', '.join(OUTPUTS)}, got {name}")
    return OUTPUTS[name]


def _strides(x) -> tuple:
    """Strides in elements (torch and NumPy alike)."""
    if _is_torch(x):
        return tuple(x.stride())
    return tuple(s // x.itemsize for s in x.strides)


def _itemsize(x) -> int:
    return x.element_size() if _is_torch(x) else x.itemsize


def _addressable(x, torch: bool) -> bool:
    rows, cols = x.shape
    row, col = _strides(x)
    address = x.data_ptr() if torch else x.__array_interface__["data"][0]
    size = _itemsize(x)
    return (col == 1 or cols == 1) and (row * size) % ALIGN == 0 and address % ALIGN == 0 and row >= cols


def torch_workspace(device, split: int, m: int, n: int):
    """A split's f32 partial sums [split, M, N] on the GPU, rows padded for TMA, from the pool of
    torch's current stream: gemm allocates it with the call's stream made current (gemm._on), so
    the memory goes back to the stream whose kernels write it, whatever kind of stream that is."""
    torch = sys.modules["torch"]
    _, _, row = _workspace_shape(split, m, n)
    return torch.empty_strided((split, m, n), (m * row, row, 1), dtype=torch.float32, device=device)


def used_by(tensor, stream):
    """`tensor`, with torch's caching allocator told when a torch stream other than the current
    one writes it, so that its memory is not handed out again while that stream's kernels run."""
    if stream is not None and tensor is not None and isinstance(stream, sys.modules["torch"].cuda.Stream):
        tensor.record_stream(stream)
    return tensor


def _workspace_shape(split: int, m: int, n: int) -> tuple:
    return (split, m, _round_up(n, ALIGN // 4))


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _empty(ops: Operands, shape: tuple, dtype):
    if ops.torch:
        return sys.modules["torch"].empty(shape, dtype=dtype, device=ops.device)
    return np.zeros(shape, dtype=dtype)


def _out_dtype(ops: Operands, name: str):
    if ops.torch:
        torch = sys.modules["torch"]
        return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]
    return {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[name]


def _sms(a) -> int:
    return _device_sms(a.device.index)


@functools.cache
def _device_sms(index: int) -> int:
    return sys.modules["torch"].cuda.get_device_properties(index).multi_processor_count
