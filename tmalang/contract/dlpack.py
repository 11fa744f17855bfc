"""Reading DLPack producers (JAX, TensorFlow, ... anything with `__dlpack__`).

For a GPU launch, cuda.core's StridedMemoryView reads CUDA producers first where it is installed
(arrays.py); this reader is what remains without it, for the interpreter, and for what it cannot
express (fp8 codes).

Host (kDLCPU) tensors go through `numpy.from_dlpack`, which shares their memory. For CUDA
tensors we read the capsule's DLTensor with ctypes: there is no NumPy for device memory, and
the layout is a small, frozen C struct. We call `__dlpack__()` without `max_version`, which
asks for the classic unversioned "dltensor" capsule every producer supports, and we do not
rename the capsule to "used_dltensor": it keeps ownership, so its destructor frees the tensor
once the ArrayView holding it is gone.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..targets import dtypes
from .errors import ARG_KIND, LaunchError
from .view import ArrayView, c_strides, checked_dtype

KDL_CPU = 1
CUDA_DEVICE_TYPES = (2, 13)  # kDLCUDA, kDLCUDAManaged


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """The head of DLManagedTensor, which is all we read."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# Our own prototype rather than ctypes.pythonapi.PyCapsule_GetPointer, whose restype other
# libraries may set differently.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


LEGACY_DEFAULT_STREAM = 1   # DLPack's number for CUDA's legacy default stream (handle 0)


def export(obj, stream: int | None) -> object:
    """`obj.__dlpack__`, told the stream the kernel will run on (the DLPack stream handshake): the
    producer then orders that stream after its pending writes to the tensor, on the GPU, with no
    host wait. Asked without a stream, a producer must assume the legacy default stream, which
    orders nothing for a launch on any other stream. Producers older than the stream argument
    are asked without it."""
    if stream is None:
        return obj.__dlpack__()
    try:
        return obj.__dlpack__(stream=LEGACY_DEFAULT_STREAM if stream == 0 else stream)
    except TypeError:
        return obj.__dlpack__()


def read_capsule(capsule: object, name: str, device: int) -> ArrayView:
    """Describe the DLTensor inside a "dltensor" capsule; the view keeps the capsule alive."""
    try:
        address = _capsule_pointer(capsule, b"dltensor")
    except ValueError as exc:  # wrong capsule name: versioned or already consumed
        raise LaunchError(ARG_KIND, f"argument '{name}': unusable DLPack capsule ({exc})") from None
    tensor = _DLTensor.from_address(address)
    kind = (tensor.dtype.code, tensor.dtype.bits)
    native = f"DLPack(code={kind[0]}, bits={kind[1]}, lanes={tensor.dtype.lanes})"
    known = dtypes.DLPACK.get(kind) if tensor.dtype.lanes == 1 else None
    dtype = checked_dtype(known, native, name)
    size = dtypes.itemsize(dtype)
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = (
        tuple(tensor.strides[i] * size for i in range(tensor.ndim))
        if tensor.strides
        else c_strides(shape, size)
    )
    return ArrayView(
        ptr=(tensor.data or 0) + tensor.byte_offset,
        shape=shape,
        strides=strides,
        dtype=dtype,
        device=device,
        native_dtype=native,
        owner=capsule,
    )


def host_array(obj: object, name: str) -> np.ndarray:
    try:
        return np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError) as exc:
        raise LaunchError(
            ARG_KIND, f"argument '{name}': cannot read host DLPack tensor as NumPy ({exc})"
        ) from None
