"""Kernel parameters in the form cuLaunchKernelEx reads them.

The driver wants `void *kernelParams[]`: one pointer per PTX parameter, each pointing at that
parameter's value, and it copies the values during the launch call. We lay all values out in
one ctypes arena, each at its natural alignment (64 bytes for tensor maps, which PTX declares
`.param .align 64 .b8 [128]`), and pass the address of the pointer array as a plain int, the
form of kernelParams cuda-bindings forwards untouched.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Sequence

from ..contract.binding import Binding
from ..contract.errors import MANIFEST, LaunchError
from ..contract.manifest import BulkParam, BulkStrideParam, CounterParam, DimParam, IndexParam, ScalarParam, TensorMapParam

TENSOR_MAP_ALIGN = 64


class KernelParams:
    """Parameter values and the void*[] array pointing at them; keep it alive over the launch."""

    def __init__(self, values: Sequence[tuple[bytes, int]]) -> None:
        """`values`: (raw bytes, required alignment) per parameter, in PTX order."""
        offsets, end = [], 0
        for raw, align in values:
            end = -(-end // align) * align
            offsets.append(end)
            end += len(raw)
        self._arena = ctypes.create_string_buffer(end + TENSOR_MAP_ALIGN)
        base = ctypes.addressof(self._arena)
        base += -base % TENSOR_MAP_ALIGN
        for (raw, _), offset in zip(values, offsets):
            ctypes.memmove(base + offset, raw, len(raw))
        self._sizes = [len(raw) for raw, _ in values]
        self._pointers = (ctypes.c_void_p * len(values))(*(base + o for o in offsets))

    @property
    def address(self) -> int:
        """The `void **kernelParams` to pass to the driver."""
        return ctypes.addressof(self._pointers)

    def __len__(self) -> int:
        return len(self._sizes)

    def pointer(self, index: int) -> int:
        return self._pointers[index]

    def value(self, index: int) -> bytes:
        """The bytes parameter `index` points at (what the driver will copy)."""
        return ctypes.string_at(self._pointers[index], self._sizes[index])


def pack_params(
    binding: Binding, tensor_map: Callable[[TensorMapParam], bytes],
    device_ptr: Callable[[str], int] | None = None,
) -> KernelParams:
    """The parameters of `binding.manifest.ptx_params`, tensor maps made by `tensor_map`, a bulk
    box's or index tensor's address by `device_ptr` (tensor name -> address; needed only with bulk
    boxes or gathered copies; given the CounterParam itself, the address of the tile counter of
    this launch's (context, stream))."""
    return KernelParams([_param_value(p, binding, tensor_map, device_ptr) for p in binding.manifest.ptx_params])


def _param_value(param, binding: Binding, tensor_map, device_ptr) -> tuple[bytes, int]:
    if isinstance(param, TensorMapParam):
        return tensor_map(param), TENSOR_MAP_ALIGN
    if isinstance(param, (BulkParam, IndexParam)):
        return struct.pack("<Q", device_ptr(param.tensor)), 8
    if isinstance(param, CounterParam):   # not a tensor: the launcher's counter for this stream
        return struct.pack("<Q", device_ptr(param)), 8
    if isinstance(param, BulkStrideParam):
        return struct.pack("<Q", binding.views[param.tensor].strides[param.axis]), 8
    if isinstance(param, DimParam):
        return struct.pack("<I", binding.symbols[param.symbol]), 4
    if isinstance(param, ScalarParam):
        scalar = binding.scalars[param.name]
        return scalar.tobytes(), scalar.dtype.itemsize
    raise LaunchError(MANIFEST, f"unknown PTX parameter kind {type(param).__name__}")
