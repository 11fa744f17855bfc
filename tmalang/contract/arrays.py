"""Adapting user arrays to one `ArrayView`.

A kernel argument may be a NumPy array (host memory, staged to the GPU for the launch), a
PyTorch tensor, a CuPy array or anything else exporting `__cuda_array_interface__`, or a DLPack
producer. All of them are reduced here to an address, a shape, byte strides and a tmalang dtype
name, so that validation (binding.py) and tensor-map encoding never care where an array came
from. No framework is imported: PyTorch tensors are recognised by duck typing, so the runtime
works where torch is absent.

For a GPU launch, CUDA-array-interface producers are read by cuda.core's `StridedMemoryView`
where cuda.core (1.2 or later) is installed: it performs the protocol's stream handshake on the
GPU (the launch stream waits on an event recorded on the producer's stream), where tmalang's
own reader can only wait on the host. DLPack producers are read by tmalang's reader, which does
DLPack's handshake itself (the producer is told the launch stream, dlpack.export): measured on
the H100 (bench/repeat_launch.py, 2026-11-23), a saxpy launch over DLPack took 298 µs through
it and 487 µs through StridedMemoryView. tmalang's readers also remain for machines without
cuda.core, for what it cannot read (CUDA array interface v2) and for the interpreter, which has
no stream. NumPy arrays and torch tensors
are always read natively: that is faster, and torch's bf16 and fp8 need no protocol at all.
"""

from __future__ import annotations

import re
import sys

import numpy as np

from ..targets import dtypes
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
        view = _through_cuda_core(obj, name, stream, "from_cuda_array_interface")
        if view is None:
            view = from_cuda_array_interface(obj.__cuda_array_interface__, name)
        return view
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
    if device_type in dlpack.CUDA_DEVICE_TYPES:   # not through cuda.core: see the module docstring
        return dlpack.read_capsule(dlpack.export(obj, stream), name, device_id)
    raise LaunchError(
        DEVICE, f"argument '{name}': DLPack device type {device_type} is neither host nor CUDA"
    )


# cuda.core's StridedMemoryView class: _UNLOADED until first needed, None where cuda.core is
# absent or too old (tests set None here to hide it).
_UNLOADED = object()
StridedMemoryView: object = _UNLOADED
CUDA_CORE_MINIMUM = (1, 2)


def strided_memory_view_class():
    """cuda.core's StridedMemoryView, or None. Imported on the first GPU launch that needs it
    rather than with this module: importing cuda.core costs ~0.2 s, which processes that only pass
    NumPy arrays and torch tensors, or only run the interpreter, should not pay."""
    global StridedMemoryView
    if StridedMemoryView is _UNLOADED:
        StridedMemoryView = _import_strided_memory_view()
    return StridedMemoryView


def _import_strided_memory_view():
    """The class where cuda.core >= 1.2 imports; None otherwise. Before 1.2 a DLPack view's `ptr`
    leaves out the DLTensor's byte_offset, which would point a kernel at the wrong element."""
    try:
        import cuda.core
    except ImportError:   # also cuda.core's answer where cuda.bindings is missing
        return None
    found = re.match(r"(\d+)\.(\d+)", getattr(cuda.core, "__version__", ""))
    if found is None or (int(found[1]), int(found[2])) < CUDA_CORE_MINIMUM:
        return None
    try:
        from cuda.core.utils import StridedMemoryView as view_class
    except ImportError:
        return None
    return view_class


def _through_cuda_core(obj, name: str, stream: int | None, protocol: str) -> ArrayView | None:
    """The view of a CUDA-array-interface producer (`protocol` "from_cuda_array_interface") read by
    StridedMemoryView with the launch stream as the consumer stream; None where the caller's own
    reader must do it: no launch stream (the interpreter), no
    cuda.core, or anything cuda.core refuses or cannot express.

    cuda.core's refusals are many and loosely typed (BufferError for CUDA array interface v2 and
    masks, TypeError for fp8 codes and producers without a stream argument, ValueError for
    strides that are no whole number of elements, AssertionError for a producer stream of 0,
    CUDAError or RuntimeError from the driver, ...), so
    every Exception falls back: tmalang's reader then accepts the array, or reports what is wrong
    with it as a LaunchError.
    """
    if stream is None:
        return None
    view_class = strided_memory_view_class()
    if view_class is None:
        return None
    try:
        view = getattr(view_class, protocol)(obj, stream_ptr=_consumer_stream(stream))
        described = (view.dtype, tuple(view.shape), view.strides)   # computed lazily: may refuse too
    except Exception:
        return None
    return _from_strided_memory_view(view, name, *described)


def _consumer_stream(stream: int) -> int:
    """The consumer stream handed to cuda.core. Handle 0 becomes 1 (CU_STREAM_LEGACY, the same
    stream): cuda.core would turn 0 into `__dlpack__(stream=None)`, which DLPack reads as the
    legacy default stream too, but 1 says so explicitly, as dlpack.export does."""
    return dlpack.LEGACY_DEFAULT_STREAM if stream == 0 else stream


def _from_strided_memory_view(view, name: str, np_dtype, shape, counts) -> ArrayView:
    """An ArrayView of a StridedMemoryView whose (dtype, shape, strides) were already read. Its
    strides count elements (None: C-contiguous); ours are bytes."""
    native = str(np_dtype)
    dtype = checked_dtype(dtypes.from_numpy(np_dtype), native, name)
    size = dtypes.itemsize(dtype)
    strides = c_strides(shape, size) if counts is None else tuple(n * size for n in counts)
    return ArrayView(
        ptr=view.ptr,
        shape=shape,
        strides=strides,
        dtype=dtype,
        device=view.device_id if view.device_id >= 0 else None,
        native_dtype=native,
        readonly=bool(view.readonly),
        # None even for a CUDA array interface v3 producer with a stream: StridedMemoryView has
        # already made the launch stream wait for it on the GPU (cuStreamWaitEvent), so the
        # launcher's host synchronize of that stream (_wait_for_producers) would only stall the
        # host. tmalang's own reader keeps the stream, and the launcher still waits for it.
        stream=None,
        # the view owns the DLPack capsule (its deleter runs when the view is freed) and holds
        # the producer: the memory stays valid while the binding holds this ArrayView
        owner=view,
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


def unobserved_torch_call(args) -> bool:
    """Whether a custom operator called on `args` would be seen by its CUDA implementation alone:
    plain torch CUDA tensors (at least one) that need no gradient, outside torch.compile, the JIT
    tracer, torch.func transforms (vmap, grad, functionalize) and any dispatch or torch-function
    mode (fake tensors, a dispatch-mode profiler). Then calling that implementation directly
    computes what the operator would, without the dispatcher's few microseconds of host time
    (torch.profiler then shows the kernel, not the operator's record). torch must already be
    imported."""
    probes = _observers()
    tensor = probes[0]
    seen = False
    for a in args:
        kind = type(a)
        if kind is tensor:
            if not a.is_cuda or a.requires_grad:
                return False
            seen = True
        elif isinstance(a, tensor):       # a subclass (a fake tensor, a parameter): the operator
            return False
    compiling, dispatch_modes, function_modes, tracing, transforms = probes[1:]
    return seen and not compiling() and dispatch_modes() == 0 and not function_modes() \
        and tracing() is None and transforms() is None


_probes: tuple | None = None


def _observers() -> tuple:
    """torch.Tensor and the five functions that tell whether anything observes a call, looked up
    once: the attribute chains cost a repeat call's host time otherwise."""
    global _probes
    if _probes is None:
        torch = sys.modules["torch"]
        C = torch._C
        _probes = (torch.Tensor, torch.compiler.is_compiling, C._len_torch_dispatch_stack,
                   C._is_torch_function_mode_enabled, C._get_tracing_state, C._functorch.peek_interpreter_stack)
    return _probes


def torch_host_array(tensor, dtype: str) -> np.ndarray:
    """A NumPy array sharing the memory of a CPU tensor (so outputs are written in place).

    The tensor is first viewed as a same-width integer type, because `Tensor.numpy()` refuses
    bf16 and fp8; the NumPy side then reinterprets the bits as the ml_dtypes type.
    """
    torch = sys.modules["torch"]
    np_dtype = dtypes.NUMPY[dtype]
    same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[np_dtype.itemsize]
    return tensor.detach().view(same_width).numpy().view(np_dtype)
