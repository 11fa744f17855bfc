"""Thin helpers over `cuda.bindings.driver`.

Every driver call of the runtime goes through `call`, which turns a failing CUresult into a
LaunchError naming the call and the driver's error. `api()` is the single gate to the driver:
it imports the bindings and loads libcuda on first use, so that importing tmalang works on a
machine without a GPU and only a launch reports "no CUDA driver found".

We use each device's primary context, the one the CUDA runtime (and so PyTorch, CuPy, JAX)
uses, so device pointers from those libraries are valid in our launches. It is retained once
and kept for the life of the process, like the runtime does.
"""

from __future__ import annotations

import functools
import os

from ..contract.errors import DRIVER_CALL, NO_DRIVER, LaunchError


# launches may overlap the kernel before them on the stream (backend/prior_grid.py) unless this is 0
OVERLAP_PRIOR = os.environ.get("TMALANG_OVERLAP", "1") != "0"


@functools.cache
def api():
    """The `cuda.bindings.driver` module, with libcuda loaded; LaunchError if either is missing."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise LaunchError(
            NO_DRIVER, f"no CUDA driver bindings: {exc}", "install the 'cuda-bindings' package"
        ) from None
    try:
        driver.cuDriverGetVersion()  # the first call loads libcuda
    except (RuntimeError, OSError) as exc:
        raise LaunchError(NO_DRIVER, f"no CUDA driver found: {exc}") from None
    return driver


def call(name: str, *args):
    """`cuda.bindings.driver.<name>(*args)`'s outputs (None, one value or a tuple)."""
    err, *outputs = getattr(api(), name)(*args)
    if err != api().CUresult.CUDA_SUCCESS:
        raise LaunchError(DRIVER_CALL, f"{name} failed: {error_text(err)}")
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def error_text(err) -> str:
    """'CUDA_ERROR_X: description' for a CUresult."""
    status, description = api().cuGetErrorString(err)
    if status != api().CUresult.CUDA_SUCCESS:
        return err.name
    return f"{err.name}: {description.decode(errors='replace')}"


@functools.cache
def init() -> None:
    """cuInit, once; a machine with a driver but no GPU is reported like one without a driver."""
    (err,) = api().cuInit(0)
    if err == api().CUresult.CUDA_ERROR_NO_DEVICE:
        raise LaunchError(NO_DRIVER, "no CUDA device found")
    if err != api().CUresult.CUDA_SUCCESS:
        raise LaunchError(DRIVER_CALL, f"cuInit failed: {error_text(err)}")


@functools.cache
def _primary_context(device: int):
    init()
    return call("cuDevicePrimaryCtxRetain", call("cuDeviceGet", device))


def activate(device: int) -> None:
    """Make the primary context of `device` current on this thread."""
    _checked("cuCtxSetCurrent", _hot().set_current(_primary_context(device)))


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device that owns `ptr`, or None if it is not CUDA memory."""
    init()
    attribute = api().CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, ordinal = api().cuPointerGetAttribute(attribute, ptr)
    return int(ordinal) if err == api().CUresult.CUDA_SUCCESS else None


def alloc(nbytes: int) -> int:
    return int(call("cuMemAlloc", nbytes))


def alloc_while_capturing(nbytes: int) -> int:
    """cuMemAlloc from a thread whose stream may be capturing a CUDA graph: capture's global mode
    refuses the call, so this thread switches to relaxed mode for it (as torch's allocator does)."""
    relaxed = api().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    mode = call("cuThreadExchangeStreamCaptureMode", relaxed)
    try:
        return alloc(nbytes)
    finally:
        call("cuThreadExchangeStreamCaptureMode", mode)


def alloc_zeroed(nbytes: int) -> int:
    """Device memory set to 0 (synchronously: it is zero before any later launch reads it)."""
    ptr = alloc(nbytes)
    call("cuMemsetD8", ptr, 0, nbytes)
    return ptr


def zero_async(ptr: int, nbytes: int, stream: int) -> None:
    """Set device memory to 0 in `stream`'s order: before the stream's later launches, and as a
    node of the graph when the stream is being captured."""
    call("cuMemsetD8Async", ptr, 0, nbytes, stream)


def free(ptr: int) -> None:
    call("cuMemFree", ptr)


def upload(device_ptr: int, host_ptr: int, nbytes: int, stream: int) -> None:
    call("cuMemcpyHtoDAsync", device_ptr, host_ptr, nbytes, stream)


def download(host_ptr: int, device_ptr: int, nbytes: int, stream: int) -> None:
    call("cuMemcpyDtoHAsync", host_ptr, device_ptr, nbytes, stream)


def synchronize(stream: int) -> None:
    call("cuStreamSynchronize", stream)


def write_global(module, name: str, data: bytes) -> int:
    """Write `data` into module global `name`, which must be exactly that large (else the kernel
    and the runtime disagree on its layout: a tmalang bug); its device address."""
    address, size = call("cuModuleGetGlobal", module, name.encode())
    if int(size) != len(data):
        raise LaunchError(DRIVER_CALL, f"the kernel's {name} is {int(size)} bytes, expected {len(data)}")
    call("cuMemcpyHtoD", int(address), data, len(data))
    return int(address)


def write(address: int, data: bytes) -> None:
    call("cuMemcpyHtoD", address, data, len(data))


def load_function(image: bytes, name: str):
    """(module, function) for kernel `name` of a cubin loaded into the current context.

    The module is returned too: the caller keeps it, since unloading it frees the function.
    """
    module = call("cuModuleLoadData", image)
    return module, call("cuModuleGetFunction", module, name.encode())


def set_max_dynamic_smem(function, nbytes: int) -> None:
    """Opt in to more than 48 KiB of dynamic shared memory, which needs an explicit request."""
    attribute = api().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    call("cuFuncSetAttribute", function, attribute, nbytes)


def multiprocessor_count(device: int) -> int:
    attribute = api().CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    return int(call("cuDeviceGetAttribute", attribute, call("cuDeviceGet", device)))


def compute_capability(device: int) -> tuple[int, int]:
    attribute = api().CUdevice_attribute
    handle = call("cuDeviceGet", device)
    return (int(call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)),
            int(call("cuDeviceGetAttribute", attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)))


def max_active_blocks(function, block_threads: int, smem_bytes: int) -> int:
    """Resident CTAs per multiprocessor at this block size and dynamic shared memory."""
    return int(
        call("cuOccupancyMaxActiveBlocksPerMultiprocessor", function, block_threads, smem_bytes)
    )


def max_active_clusters(function, config) -> int:
    """Clusters that can be co-resident on the whole device under launch `config`."""
    return int(call("cuOccupancyMaxActiveClusters", function, config))


def launch_config(grid: int, block: int, smem: int, stream: int, cluster: tuple[int, int, int],
                  overlap_prior: bool = False):
    """A CUlaunchConfig for a 1-D grid, with a cluster-dimension attribute if clustered, and
    programmatic stream serialization if `overlap_prior` (the kernel waits for the one before it
    itself: backend/prior_grid.py)."""
    cu = api()
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = smem
    config.hStream = stream
    attributes = []
    if cluster != (1, 1, 1):
        attribute = cu.CUlaunchAttribute()
        attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        dim = attribute.value.clusterDim
        dim.x, dim.y, dim.z = cluster
        attributes.append(attribute)
    if overlap_prior:
        attribute = cu.CUlaunchAttribute()
        attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attribute.value.programmaticStreamSerializationAllowed = 1
        attributes.append(attribute)
    config.attrs = attributes
    config.numAttrs = len(attributes)
    return config


def launch(function, config, params_address: int) -> None:
    """cuLaunchKernelEx with kernel parameters given as the address of a void*[] array."""
    _checked("cuLaunchKernelEx", _hot().launch(config, function, params_address, 0))


def bound_launch(device: int, function, config, params_address: int):
    """A callable that makes `device`'s primary context current and launches `function` as
    `launch` would: the context, the bound driver calls and the success code looked up once,
    since a repeat launch's host time is all a small kernel's call costs beyond the driver's."""
    hot, context = _hot(), _primary_context(device)
    set_current, launch, success = hot.set_current, hot.launch, hot.success

    def again() -> None:
        result = set_current(context)
        if result[0] != success:
            _checked("cuCtxSetCurrent", result)
        result = launch(config, function, params_address, 0)
        if result[0] != success:
            _checked("cuLaunchKernelEx", result)

    return again


class _HotCalls:
    """The driver calls of every launch, bound once: `call` looks the function and the success
    code up by name each time, which a repeat launch (a few microseconds in all) feels."""

    def __init__(self, driver) -> None:
        self.set_current = driver.cuCtxSetCurrent
        self.launch = driver.cuLaunchKernelEx
        self.success = driver.CUresult.CUDA_SUCCESS


@functools.cache
def _hot() -> _HotCalls:
    return _HotCalls(api())


def _checked(name: str, result: tuple) -> None:
    if result[0] != _hot().success:
        raise LaunchError(DRIVER_CALL, f"{name} failed: {error_text(result[0])}")
