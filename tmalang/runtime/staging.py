"""Device copies of the NumPy arguments of one launch.

A NumPy array is copied byte for byte from its first to its last element, so the device copy
has exactly the user's strides (already checked to suit TMA) and the tensor map describes both.
Copies run on the launch stream, so they are ordered with the kernel. Written arrays are copied
back only after the kernel finished successfully, and only element by element (through a
temporary), so bytes between the rows of a strided view are never touched.
"""

from __future__ import annotations

import numpy as np

from ..backend.manifest import TensorArg
from . import driver
from .binding import Binding
from .errors import LaunchError


class Staging:
    """Use as a context manager around upload → launch → finish; leaving frees the buffers."""

    def __init__(self, binding: Binding, stream: int) -> None:
        self._binding = binding
        self._stream = stream
        self._buffers: dict[str, int] = {}

    def __enter__(self) -> "Staging":
        return self

    def upload(self) -> None:
        """Allocate and fill a device buffer for every host array."""
        for name, view in self._binding.views.items():
            if view.on_host:
                self._buffers[name] = driver.alloc(view.span_bytes)
                driver.upload(self._buffers[name], view.ptr, view.span_bytes, self._stream)

    def device_ptr(self, name: str) -> int:
        """Where tensor `name` lives on the device: its staging buffer, or its own address."""
        return self._buffers.get(name, self._binding.views[name].ptr)

    def finish(self) -> None:
        """Wait for the kernel, then copy every written host array back into the user's array."""
        outputs = {a.name for a in self._binding.manifest.args if isinstance(a, TensorArg) and a.written}
        written = [(name, view) for name, view in self._binding.views.items() if view.on_host and name in outputs]
        temporaries = []
        for name, view in written:
            temporary = np.empty(view.span_bytes, np.uint8)
            driver.download(temporary.ctypes.data, self._buffers[name], view.span_bytes, self._stream)
            temporaries.append(temporary)
        if self._buffers:
            driver.synchronize(self._stream)
        for (_, view), temporary in zip(written, temporaries):
            result = np.lib.stride_tricks.as_strided(
                temporary.view(view.host.dtype), view.shape, view.strides
            )
            np.copyto(view.host, result)

    def __exit__(self, exc_type, exc, traceback) -> None:
        failed = exc_type is not None
        try:
            if failed and self._buffers:
                driver.synchronize(self._stream)  # let queued copies end before freeing
            for ptr in self._buffers.values():
                driver.free(ptr)
        except LaunchError:
            if not failed:  # never hide the error that got us here
                raise

