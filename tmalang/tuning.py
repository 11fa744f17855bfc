"""`tmalang.autotune`: one kernel source, several bindings of its compile-time constants, and the
fastest binding per key (the shapes and dtypes of a call), timed on first use of the key and
remembered on disk, so a second process launches the winner without timing again.

    gemm = tmalang.autotune(Path("examples/gemm_sm90.tma"),
                            configs=[{"BN": 256}, {"BN": 128, "STAGES": 6}])
    gemm(a, b, c)              # first call with these shapes: compile and time each, launch the best
    gemm.choices()             # {key: config} chosen so far (this process and earlier ones)
    gemm.clear()               # forget them (memory and disk)

Timing launches each config on the call's own arguments, so it restores every torch tensor
argument afterwards (a kernel that accumulates into its output, like split-K, would otherwise
leave it changed); the real launch follows. It uses torch's CUDA events on the current stream:
the arguments must be torch CUDA tensors (and scalars). A config that does not compile, or fails
to launch, is left out and recorded; if none runs, the first error is raised.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from .api import compile as compile_source
from .caches.disk import default_root

WARMUP, SAMPLES = 2, 10
HEAD_START_CYCLES = 400_000    # ~0.2 ms: longer than the host takes to queue one launch


class Autotuner:
    """A callable kernel whose constants are picked per key (see the module docstring)."""

    def __init__(self, source: str | Path, configs: list[dict], *, key=None, arch: str | None = None,
                 kernel: str | None = None, cache_dir: str | os.PathLike | None = None, timer=None):
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise ValueError("autotune: configs must be a non-empty list of dicts of constants")
        self.path = source if isinstance(source, Path) else None
        self.source = source.read_text() if isinstance(source, Path) else source
        self.configs = [dict(c) for c in configs]
        self.arch, self.kernel = arch, kernel
        self._key = key or default_key
        self._time = timer or time_launches
        self._kernels: dict[int, object] = {}
        self.failures: dict[int, str] = {}          # config index -> why it was left out
        identity = json.dumps([self.source, self.configs, arch, kernel], sort_keys=True)
        self.file = Path(cache_dir or default_root() / "autotune") / f"{hashlib.sha256(identity.encode()).hexdigest()}.json"
        self._chosen: dict[str, int] = self._read()

    def __call__(self, *args, dims: dict[str, int] | None = None, stream=None) -> None:
        key = repr(self._key(args))
        if key not in self._chosen:
            self._chosen[key] = self._tune(args, dims)
            self._write()
        self.compiled(self._chosen[key])(*args, dims=dims, stream=stream)

    def compiled(self, index: int):
        """The kernel of config `index` (compiled once per process; the cubin cache spans them)."""
        if index not in self._kernels:
            options = {"arch": self.arch} if self.arch else {}
            name = str(self.path) if self.path else "<autotune>"
            self._kernels[index] = compile_source(self.source, kernel=self.kernel, name=name,
                                                  constants=self.configs[index], **options)
        return self._kernels[index]

    def choices(self) -> dict[str, dict]:
        return {key: self.configs[index] for key, index in self._chosen.items()}

    def clear(self) -> None:
        self._chosen = {}
        self.file.unlink(missing_ok=True)

    def _tune(self, args, dims) -> int:
        times, first_error = {}, None
        for index in range(len(self.configs)):
            try:
                kernel = self.compiled(index)
                with restored(args):
                    times[index] = self._time(lambda k=kernel: k(*args, dims=dims))
            except Exception as exc:        # a config that cannot run is left out, not fatal
                self.failures[index] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                first_error = first_error or exc
        if not times:
            raise first_error
        return min(times, key=times.get)

    def _read(self) -> dict[str, int]:
        chosen = read_json(self.file)
        valid = isinstance(chosen, dict) and all(isinstance(i, int) and 0 <= i < len(self.configs)
                                                 for i in chosen.values())
        return chosen if valid else {}

    def _write(self) -> None:
        write_json(self.file, self._chosen)


def autotune(source: str | Path, configs: list[dict], **options) -> Autotuner:
    """An Autotuner over `configs` (bindings of the source's compile-time constants); options:
    key (args -> a hashable key), arch, kernel, cache_dir ($TMALANG_CACHE_DIR/autotune by default)."""
    return Autotuner(source, configs, **options)


def default_key(args) -> tuple:
    """The shapes and dtypes of the array arguments and the values of the scalar ones."""
    return tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else a for a in args)


class restored:
    """Puts every torch tensor argument back as it was on entry."""

    def __init__(self, args):
        self.saved = [(a, a.clone()) for a in args if _is_torch(a)]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for tensor, copy in self.saved:
            tensor.copy_(copy)


def time_launches(launch) -> float:
    """Median milliseconds of one launch's GPU work, with torch CUDA events after warm-up. Each
    timed launch follows an L2 flush and is queued behind a short spin kernel, so the events see
    the GPU's work on cold caches and not the host's launch cost (the way bench/ times kernels):
    a choice made here is the one that wins in a stream of real work, where the host runs ahead
    and a kernel's inputs were written long before. torch is the caller's (its tensors are the
    arguments), not a dependency of tmalang."""
    torch = sys.modules.get("torch")
    if torch is None:
        raise RuntimeError("autotune times launches with torch CUDA events: pass torch CUDA tensors")
    flush = torch.empty(2 * torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size,
                        dtype=torch.int8, device="cuda")
    for _ in range(WARMUP):
        launch()
    events = []
    for _ in range(SAMPLES):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(HEAD_START_CYCLES)
        flush.zero_()
        start.record()
        launch()
        stop.record()
        events.append((start, stop))
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(stop) for start, stop in events)


def read_json(path: Path):
    """A remembered choice file's content, or None if it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data) -> None:
    """Atomically: a reader never sees half a file; concurrent writers each leave a whole one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(data, out, sort_keys=True)
    os.replace(temporary, path)


def _is_torch(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "clone")
