"""Adapting user arrays to one `ArrayView`.

A kernel argument may be a NumPy array (host memory, staged to the GPU for the launch), a
PyTorch tensor, a CuPy array or anything else exporting `__cuda_array_interface__`, or a DLPack
producer. All of them are reduced here to an address, a shape, byte strides and a tmalang dtype
name, so that validation (binding.py) and tensor-map encoding never care where an array came
from. No framework is imported: PyTorch tensors are recognised by duck typing, so the runtime
works where torch is absent.
"""

from __future__ import annotations

import sys

import numpy as np

from ..target import dtypes
from . import dlpack
from .errors import ARG_KIND, DEVICE, LaunchError
from .view import ArrayView, c_strides, checked_dtype


def array_view(obj: object, name: str, stream: int | None = None) -> ArrayView:
    """The ArrayView of `obj`, passed as kernel argument `name` to a launch on the CUstream handle
    `stream` (None: not a GPU launch); LaunchError if it is no array."""
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, name)
    if _is_torch_tensor(obj):
        return _from_torch(obj, name)
    if hasattr(obj, "__cuda_array_interface__"):
        return from_cuda_array_interface(obj.__cuda_array_interface__, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, name, stream)
    raise LaunchError(
        ARG_KIND,
        f"argument '{name}': expected an array, got {type(obj).__name__}",
        "pass a NumPy array, a PyTorch tensor, a CuPy array, or any object with "
        "__cuda_array_interface__ or __dlpack__",
    )


def is_array_like(obj: object) -> bool:
    """True for anything array_view would treat as an array (used to reject them as scalars)."""
    if isinstance(obj, np.ndarray):
        return obj.ndim > 0
    if isinstance(obj, np.generic):  # NumPy scalars carry __array_interface__ too
        return False
    return isinstance(obj, (list, tuple)) or any(
        hasattr(obj, attr)
        for attr in ("__cuda_array_interface__", "__dlpack__", "__array_interface__")
    )


def _from_numpy(arr: np.ndarray, name: str) -> ArrayView:
    if isinstance(arr, np.ma.MaskedArray):  # TMA would read and write the masked elements too
        raise LaunchError(
            ARG_KIND,
            f"argument '{name}': masked arrays are not supported (the kernel would ignore the mask)",
            "pass arr.filled(value) for an input, or a plain array for an output",
        )
    native = str(arr.dtype)
    return ArrayView(
        ptr=arr.ctypes.data,
        shape=tuple(arr.shape),
        strides=tuple(arr.strides),
        dtype=checked_dtype(dtypes.from_numpy(arr.dtype), native, name),
        device=None,
        host=arr,
        native_dtype=native,
        readonly=not arr.flags.writeable,
    )


def from_cuda_array_interface(cai: dict, name: str) -> ArrayView:
    """An ArrayView of device memory described by a `__cuda_array_interface__` dict (v2 or v3)."""
    if cai.get("mask") is not None:
        raise LaunchError(ARG_KIND, f"argument '{name}': masked arrays are not supported")
    native = cai["typestr"]
    dtype = checked_dtype(dtypes.from_typestr(native), native, name)
    shape = tuple(int(n) for n in cai["shape"])
    strides = cai.get("strides")
    if not strides:
        strides = c_strides(shape, dtypes.itemsize(dtype))
    ptr, readonly = cai["data"]
    return ArrayView(
        ptr=int(ptr or 0),
        shape=shape,
        strides=tuple(int(s) for s in strides),
        dtype=dtype,
        device=None,
        native_dtype=native,
        readonly=bool(readonly),
        stream=cai.get("stream") if cai.get("version", 0) >= 3 else None,
    )


def _from_dlpack(obj, name: str, stream: int | None) -> ArrayView:
    device_type, device_id = obj.__dlpack_device__()
    if device_type == dlpack.KDL_CPU:
        return _from_numpy(dlpack.host_array(obj, name), name)
    if device_type in dlpack.CUDA_DEVICE_TYPES:
        return dlpack.read_capsule(dlpack.export(obj, stream), name, device_id)
    raise LaunchError(
        DEVICE, f"argument '{name}': DLPack device type {device_type} is neither host nor CUDA"
    )


def _is_torch_tensor(obj: object) -> bool:
    return type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr")


def _from_torch(tensor, name: str) -> ArrayView:
    """Read a torch tensor natively: its CUDA array interface refuses bf16 and fp8."""
    native = str(tensor.dtype)
    dtype = checked_dtype(dtypes.TORCH.get(native), native, name)
    device = tensor.device
    if device.type == "cpu":
        return _from_numpy(torch_host_array(tensor, dtype), name)
    if device.type != "cuda":
        raise LaunchError(
            DEVICE, f"argument '{name}': tensor is on device '{device}'; tmalang needs CUDA or CPU"
        )
    size = tensor.element_size()
    return ArrayView(
        ptr=tensor.data_ptr(),
        shape=tuple(tensor.shape),
        strides=tuple(s * size for s in tensor.stride()),
        dtype=dtype,
        device=device.index,
        native_dtype=native,
    )


def torch_host_array(tensor, dtype: str) -> np.ndarray:
    """A NumPy array sharing the memory of a CPU tensor (so outputs are written in place).

    The tensor is first viewed as a same-width integer type, because `Tensor.numpy()` refuses
    bf16 and fp8; the NumPy side then reinterprets the bits as the ml_dtypes type.
    """
    torch = sys.modules["torch"]
    np_dtype = dtypes.NUMPY[dtype]
    same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[np_dtype.itemsize]
    return tensor.detach().view(same_width).numpy().view(np_dtype)
