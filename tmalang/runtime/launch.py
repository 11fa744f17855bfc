"""Launching a compiled kernel.

A call runs these steps in order; everything that can be checked without the driver is
checked first (binding.py), so a bad argument never leaves half-done driver work behind:

1. bind and validate the arguments against the manifest;
2. pick the device (that of the arrays, device 0 for host-only launches), make its primary
   context current, load the cubin there once;
   (after checking that the device is the one the kernel's target names: arch-specific
   targets like sm_90a run on exactly their compute capability);
3. size the grid from the bound dimensions;
4. stage NumPy arrays, encode the tensor maps, pack the parameters, launch;
5. for NumPy outputs, wait and copy back; free the staging buffers.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..contract.binding import Binding, bind, common_device
from ..contract.errors import DEVICE, GRID, LAUNCH_OPTION, MANIFEST, WRONG_TARGET, LaunchError
from ..contract.manifest import CounterParam, Manifest, TensorMapParam
from ..contract.trace import Trace
from ..targets.arch import target_named
from . import driver, timeline, watchdog
from .params import pack_params
from .staging import Staging
from .tensormap import encode_tensor_map

STATIC_SMEM_LIMIT = 48 * 1024   # more dynamic shared memory needs an explicit opt-in
MAX_GRID_X = 2**31 - 1


@dataclass(frozen=True)
class _Loaded:
    """The kernel loaded into one device's context, and how many CTAs fit there at once."""

    module: object
    function: object
    capacity: int | None        # resident CTAs on the whole device; persistent grids only
    watchdog: int | None        # the tag runtime/watchdog.py armed the module with (None: no watchdog)


REPEAT_ENTRIES = 8   # launches remembered for the fast path


@dataclass(frozen=True)
class RepeatLaunch:
    """A launch whose arguments were bound, checked and encoded: launching it again is a context
    switch and cuLaunchKernelEx. Only the launcher makes one, for device arrays and scalars, whose
    addresses, shapes, strides and values it stands for (`_device_signature`)."""

    launcher: "Launcher"
    device: int
    function: object
    config: object
    params: object      # KernelParams: the encoded tensor maps and scalars
    stream: int
    launch: Callable[[], None] = field(default=None, compare=False, repr=False)   # driver.bound_launch

    def __post_init__(self) -> None:
        object.__setattr__(self, "launch", driver.bound_launch(self.device, self.function, self.config,
                                                                 self.params.address))

    def again(self) -> None:
        watchdog.check()
        self.launcher._last_device = self.device
        self.launch()
        self.launcher._launched(self.device, self.stream)

class Launcher:
    """A callable compiled kernel: `launcher(*args, dims=None, stream=None)`."""

    def __init__(self, manifest: Manifest, cubin: bytes) -> None:
        self.manifest = manifest
        self._cubin = cubin
        self._loaded: dict[int, _Loaded] = {}
        # signature -> (device, function, config, params) of recent launches, most recent last:
        # several entries, so alternating between input sets (double buffering) stays fast
        self._repeats: OrderedDict[tuple, tuple] = OrderedDict()
        # (device, stream) -> the tile counter of a dynamic tile loop there: zeroed once, and each
        # launch leaves it at 0 for the next on its stream (passes/claim_tiles.py); launches on two
        # streams may overlap, so each stream has its own. Freed with the primary context.
        self._counters: dict[tuple[int, int], int] = {}
        self._last_device, self._last_stream = 0, 0   # where the latest launch went

    def synchronize(self, stream=None) -> None:
        """Wait for `stream` (default: the stream of the latest launch) on the device this kernel
        last launched on; E218 if a watchdog fired."""
        driver.activate(self._last_device)
        watchdog.wait(self._last_stream if stream is None else stream_handle(stream))

    def profile(self, args: tuple, dims, stream, ctas: int) -> Trace:
        """Launch once with the hardware timeline recording `ctas` CTAs; their trace."""
        m = self.manifest
        handle = stream_handle(stream if stream is not None else torch_current_stream(args))
        device = launch_device(bind(m, args, dims, handle))
        driver.activate(device)
        loaded = self._load(device)
        buffer = timeline.arm(loaded.module, m, ctas)
        try:
            self(*args, dims=dims, stream=stream)
            watchdog.wait(handle)
        finally:
            timeline.disarm(loaded.module)
        return timeline.read(buffer, m)

    def __call__(self, *args, dims: dict[str, int] | None = None, stream=None) -> RepeatLaunch | None:
        """Launch; the launch as a RepeatLaunch when its arguments can be repeated exactly (device
        arrays and scalars), else None."""
        watchdog.check()   # a hang an earlier launch reported, before anything else runs
        if stream is None:
            stream = torch_current_stream(args)
        signature = _device_signature(args, dims, stream)
        repeat = self._repeats.get(signature) if signature is not None else None
        if repeat is not None:
            # the very arguments of a recent launch: already validated and encoded
            self._repeats.move_to_end(signature)
            repeat.again()
            return repeat
        m = self.manifest
        handle = stream_handle(stream)
        binding = bind(m, args, dims, handle)
        device = self._last_device = launch_device(binding)
        driver.activate(device)
        loaded = self._load(device)
        _wait_for_producers(binding, handle)
        grid = grid_size(m.grid.kind, binding.tile_count(), m.cluster, lambda: loaded.capacity)
        config = driver.launch_config(grid, m.block_threads, m.smem_bytes, handle, m.cluster,
                                      m.overlaps_prior and driver.OVERLAP_PRIOR)
        with Staging(binding, handle) as staging:
            staging.upload()

            def tensor_map(param: TensorMapParam) -> bytes:
                view = binding.views[param.tensor]
                return encode_tensor_map(param, view, staging.device_ptr(param.tensor))

            def address(what) -> int:
                if isinstance(what, CounterParam):
                    return self._counter(device, handle)
                return staging.device_ptr(what)

            params = pack_params(binding, tensor_map, address)
            driver.launch(loaded.function, config, params.address)
            self._launched(device, handle)
            staging.finish()
        if signature is None:
            return None
        repeat = self._repeats[signature] = RepeatLaunch(self, device, loaded.function, config, params, handle)
        if len(self._repeats) > REPEAT_ENTRIES:
            self._repeats.popitem(last=False)
        return repeat

    def _launched(self, device: int, stream: int) -> None:
        self._last_stream = stream
        tag = self._loaded[device].watchdog
        if tag is not None:
            watchdog.launched(device, tag, stream)

    def resident(self, device: int) -> int:
        """CTAs of this kernel that fit on `device` at once (occupancy times multiprocessors)."""
        loaded = self._load(device)
        return loaded.capacity if loaded.capacity is not None else _capacity(self.manifest, loaded.function, device)

    def _counter(self, device: int, stream: int) -> int:
        key = (device, stream)
        if key not in self._counters:   # the stream's first launch may be in a CUDA graph capture, which
            # refuses a plain allocation and a synchronous memset: zeroed in the stream's order instead
            self._counters[key] = driver.alloc_while_capturing(4)
            driver.zero_async(self._counters[key], 4, stream)
        return self._counters[key]

    def _load(self, device: int) -> _Loaded:
        if device not in self._loaded:
            m = self.manifest
            check_device_target(m.arch, device)
            module, function = driver.load_function(self._cubin, m.kernel)
            tag = watchdog.arm(module, m, device)
            if m.smem_bytes > STATIC_SMEM_LIMIT:
                driver.set_max_dynamic_smem(function, m.smem_bytes)
            capacity = _capacity(m, function, device) if m.grid.kind == "persistent" else None
            self._loaded[device] = _Loaded(module, function, capacity, tag)
        return self._loaded[device]


def check_device_target(arch: str, device: int) -> None:
    """An arch-specific cubin (sm_90a, sm_100a) loads on its own compute capability only; say so
    before the driver answers with a bare 'no kernel image' error."""
    wanted = target_named(arch).compute_capability
    found = driver.compute_capability(device)
    if found != wanted:
        raise LaunchError(WRONG_TARGET, f"the kernel is compiled for {arch} (compute capability "
                          f"{wanted[0]}.{wanted[1]}); device {device} has compute capability {found[0]}.{found[1]}",
                          "compile with the --arch of this GPU, or run on a GPU of that target")


def _device_signature(args: tuple, dims, stream) -> tuple | None:
    """What a launch depends on, for device arrays and plain scalars only (None otherwise).

    Equal signatures mean equal pointers, shapes, strides, dtypes and devices, so the previous
    launch's validated parameters and tensor maps are still exact. Host (NumPy) arrays need
    staging every time and are never repeated.
    """
    if dims is not None and not isinstance(dims, Mapping):
        return None   # bind() reports it
    try:
        key = [stream if type(stream) is int else stream_handle(stream),
               None if dims is None else tuple(sorted(dims.items(), key=repr))]
    except LaunchError:
        return None
    for a in args:
        kind = type(a)
        if _is_torch_tensor(kind):
            if not a.is_cuda:
                return None
            # the address names the device (one virtual address space for all of them); torch.Size
            # and the stride tuple compare by value. Four entries, fixed per argument position.
            key += (a.data_ptr(), a.shape, a.stride(), a.dtype)
        elif isinstance(a, (int, float, np.generic)) and kind is not bool:
            key.append(_scalar_key(a))
        elif hasattr(a, "data_ptr") and hasattr(a, "stride") and getattr(a, "is_cuda", False):
            key.append((a.data_ptr(), tuple(a.shape), a.stride(), a.dtype, a.device.index))
        else:
            return None
    return tuple(key)


@functools.cache
def _is_torch_tensor(kind: type) -> bool:
    """torch.Tensor and its subclasses (nn.Parameter), asked once per type: a repeat launch's
    signature is its host cost, and isinstance against a lazily imported torch is not free."""
    torch = sys.modules.get("torch")
    return torch is not None and issubclass(kind, torch.Tensor)


def _scalar_key(value) -> tuple:
    """A key equal only for scalars with equal bits: 0.0 and -0.0 compare equal as numbers,
    but they are different kernel parameters."""
    if isinstance(value, float):
        return (float, struct.pack("<d", value))
    if isinstance(value, np.generic):
        return (type(value), value.tobytes())
    return (type(value), value)


def _capacity(m: Manifest, function, device: int) -> int:
    """CTAs of this kernel that can be resident on `device` at once."""
    cluster_size = m.cluster[0] * m.cluster[1] * m.cluster[2]
    if cluster_size == 1:
        per_sm = driver.max_active_blocks(function, m.block_threads, m.smem_bytes)
        return per_sm * driver.multiprocessor_count(device)
    config = driver.launch_config(m.cluster[0], m.block_threads, m.smem_bytes, 0, m.cluster)
    return driver.max_active_clusters(function, config) * cluster_size


def grid_size(
    kind: str, tiles: int, cluster: tuple[int, int, int], capacity: Callable[[], int | None]
) -> int:
    """CTAs to launch (a 1-D grid) for `tiles` tiles.

    "tiles": one CTA per tile. "persistent": no more CTAs than can be resident, each striding
    over the tiles; rounded up to whole clusters, which a striding kernel tolerates (the extra
    CTAs find no tile). A "tiles" grid must already be whole clusters: its CTAs map one to one
    onto tiles, so padding it would hand the kernel tiles that do not exist.
    """
    if cluster[1:] != (1, 1):
        raise LaunchError(MANIFEST, f"cluster {cluster} needs a multi-dimensional grid")
    if kind == "tiles":
        ctas = tiles
    elif kind == "persistent":
        resident = capacity() or 0
        if resident < 1:
            raise LaunchError(GRID, "the kernel cannot be resident on this device (occupancy 0)")
        ctas = -(-min(tiles, resident) // cluster[0]) * cluster[0]
    else:
        raise LaunchError(MANIFEST, f"unknown grid kind {kind!r}")
    if ctas % cluster[0]:
        raise LaunchError(
            GRID,
            f"{ctas} tiles is not a multiple of the cluster size {cluster[0]}",
            "choose sizes whose tile count divides evenly into clusters",
        )
    if ctas > MAX_GRID_X:
        raise LaunchError(GRID, f"{ctas} CTAs exceed the CUDA grid limit of {MAX_GRID_X}")
    return ctas


def launch_device(binding: Binding) -> int:
    """The device that holds the device arrays (asking the driver where producers did not say);
    device 0 when all arrays are on the host."""
    devices = {}
    for name, view in binding.views.items():
        if view.on_host:
            continue
        device = view.device if view.device is not None else driver.pointer_device(view.ptr)
        if device is None:
            raise LaunchError(
                DEVICE, f"argument '{name}': address {view.ptr:#x} is not CUDA device memory"
            )
        devices[name] = device
    found = common_device(devices)
    return 0 if found is None else found


def torch_current_stream(args: tuple):
    """torch's current stream on the device of the first torch CUDA tensor among `args` (None
    without one): where the tensors' producers queued their work, and what `torch.cuda.graph`
    captures. A launch given no stream goes there, as torch's own operations do."""
    for a in args:
        if _is_torch_tensor(type(a)) and a.is_cuda:
            return torch_stream_of(a.get_device())
    return None


def torch_stream_of(device: int):
    """torch's current stream on CUDA device `device`, as torch_current_stream finds it for a
    tensor there (for callers that know the device already)."""
    raw = _raw_stream_getter()
    return raw(device) if raw is not None else sys.modules["torch"].cuda.current_stream(device)


@functools.cache
def _raw_stream_getter():
    """torch's current stream as a handle, without a Stream object (~0.3 µs instead of ~9 per
    launch); None in a torch without it."""
    return getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", None)


def stream_handle(stream) -> int:
    """The CUstream handle of `stream`: None (default stream), an int, a CUstream, or a
    stream object of PyTorch (`.cuda_stream`), CuPy (`.ptr`) or cuda.core (`__cuda_stream__`)."""
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    if isinstance(stream, driver.api().CUstream):
        return int(stream)
    for attribute in ("cuda_stream", "ptr"):
        if isinstance(getattr(stream, attribute, None), int):
            return getattr(stream, attribute)
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise LaunchError(
        LAUNCH_OPTION,
        f"stream must be None, an int handle, a CUstream or a CUDA stream object; "
        f"got {type(stream).__name__}",
    )


def _wait_for_producers(binding: Binding, stream: int) -> None:
    """Honour CUDA array interface v3: data is only ready once its producer's stream is done.

    Only views read by tmalang's own reader carry a producer stream here. Those read through
    cuda.core's StridedMemoryView have none: it made the launch stream wait for the producer's on
    the GPU already (arrays.py), and a host synchronize on top would only stall the host."""
    for producer in {v.stream for v in binding.views.values() if v.stream is not None}:
        if producer != stream:
            driver.synchronize(producer)
