"""Device copies of the NumPy arguments of one launch.

A NumPy array is copied byte for byte from its first to its last element, so the device copy
has exactly the user's strides (already checked to suit TMA) and the tensor map describes both.
Copies run on the launch stream, so they are ordered with the kernel. Written arrays are copied
back only after the kernel finished successfully, and only element by element (through a
temporary), so bytes between the rows of a strided view are never touched.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..contract.binding import Binding
from ..contract.errors import LaunchError
from ..contract.manifest import TensorArg
from . import driver, watchdog


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
        """Wait for the kernel, then copy every written host array back into the user's array
        (not if its watchdog reported a hang: E218, and the arrays are left as they were)."""
        results = {name: self._download(name) for name in self._written_host_arrays()}
        if self._buffers:
            watchdog.wait(self._stream)
        for name, temporary in results.items():
            view = self._binding.views[name]
            staged = as_strided(temporary.view(view.host.dtype), view.shape, view.strides)
            np.copyto(view.host, staged)

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

    def _written_host_arrays(self) -> list[str]:
        views = self._binding.views
        return [
            a.name
            for a in self._binding.manifest.args
            if isinstance(a, TensorArg) and a.written and views[a.name].on_host
        ]

    def _download(self, name: str) -> np.ndarray:
        """Queue the copy of `name`'s staging buffer into a new host temporary."""
        view = self._binding.views[name]
        temporary = np.empty(view.span_bytes, np.uint8)
        driver.download(temporary.ctypes.data, self._buffers[name], view.span_bytes, self._stream)
        return temporary
