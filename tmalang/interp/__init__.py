"""The reference interpreter: runs the final IR on NumPy arrays and checks the barrier protocol.

    outputs = interpret(kernel_ir, manifest, *arrays, dims=None, seed=None, explore=0)

Arrays are validated with the runtime's own rules (runtime.bind), so what the interpreter
accepts the GPU launch accepts. Written tensors are computed on copies and copied back into the
caller's arrays only when the run succeeded; they are also returned, in signature order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contract.binding import bind
from ..contract.manifest import Manifest, TensorArg
from ..diagnostics import TmalangError
from ..ir import ops
from ..targets.arch import Target, target_named
from ..targets.dtypes import NUMPY
from .globalmem import GlobalMemory
from .machine import CTA, Cluster
from .claims import check_counter
from .scheduler import run_cluster
from .observe import NO_OBSERVER, Observer
from .state import ProtocolError
from ..contract.trace import Trace

DEFAULT_PERSISTENT_CTAS = 2   # enough to exercise striding and multi-pass rings
LAUNCH_DELAY = 128            # a waiting CTA starts with chance 1/128 a step once room frees (a random schedule)


@dataclass
class Launch:
    arrays: dict[str, np.ndarray]
    params: dict[str, int | float]
    rng: np.random.Generator | None
    target: Target
    trace: Trace | None = None
    memory: GlobalMemory = field(default_factory=GlobalMemory)   # what TMA did to global memory, in order
    waiting: list[int] = field(default_factory=list)   # a grid of tiles' CTAs not yet started (claims.py)
    observer: Observer = NO_OBSERVER   # who listens to the synchronisation (tmalang.verify records it)

    @staticmethod
    def np_dtype(name: str) -> np.dtype:
        return NUMPY[name]

    def due(self, step: int) -> int:
        return step + (1 if self.rng is None else int(self.rng.integers(1, 16)))


def interpret(kernel: ops.KernelOp, manifest: Manifest, *args, dims=None, seed=None, explore: int = 0,
              ctas: int | None = None, trace: Trace | None = None, observer: Observer = NO_OBSERVER) -> list[np.ndarray]:
    _check_ctas(ctas)
    binding = bind(manifest, args, dims)
    seeds = [seed] if explore <= 0 else [(seed or 0) + i for i in range(explore)]
    results = None
    for i, s in enumerate(seeds):
        if trace is not None and len(seeds) > 1:
            trace.begin_schedule(i, s)
        results = _run_once(kernel, manifest, args, binding, s, ctas, trace, observer)
    written = [a for a in manifest.args if isinstance(a, TensorArg) and a.written]
    for arg, value in zip(manifest.args, args):
        if isinstance(arg, TensorArg) and arg.written and isinstance(value, np.ndarray):
            value[...] = results[arg.name]
    return [results[a.name] for a in written]


def _check_ctas(ctas) -> None:
    """A persistent grid of no CTA would run nothing and report "protocol ok": refuse it (E420)."""
    if ctas is None:
        return
    if isinstance(ctas, bool) or not isinstance(ctas, (int, np.integer)) or ctas < 1:
        raise TmalangError("E420", f"the interpreter runs a persistent grid on ctas >= 1 CTAs, got {ctas!r}",
                           None, ["leave ctas unset for the default of 2, or pass a positive integer"])


def _run_cancelling(kernel, launch: Launch, count: int, room: int) -> None:
    """A grid of tiles with cluster launch control: at most `room` CTAs run at once (the GPU's
    SMs), the others wait in launch order. Under a random schedule a waiting CTA starts some steps
    after room frees up (CTA 0 first), so some CTAs start on their own while others are canceled."""
    launch.waiting = list(range(count))

    def start(ctas: list[CTA]) -> list[CTA]:
        live = sum(not c.exited for c in ctas)
        delayed = live and launch.rng is not None and launch.rng.integers(LAUNCH_DELAY)   # CTA 0 starts at once
        if not launch.waiting or live >= room or delayed:
            return []
        return [CTA(kernel, launch, launch.waiting.pop(0), count, Cluster())]
    run_cluster([], launch.rng, start)


def grid_size(kernel, manifest, tiles: int, ctas: int | None = None) -> int:
    """The CTAs the interpreter launches: one per tile, or for a persistent grid `ctas` (default
    DEFAULT_PERSISTENT_CTAS) but no more than the tiles; whole clusters, as the runtime launches them."""
    count = tiles if manifest.grid.kind == "tiles" else min(tiles, ctas or DEFAULT_PERSISTENT_CTAS)
    return -(-count // kernel.cluster) * kernel.cluster


def _run_once(kernel, manifest, args, binding, seed, ctas, trace, observer=NO_OBSERVER) -> dict[str, np.ndarray]:
    arrays = {a.name: np.array(v, copy=True) for a, v in zip(manifest.args, args) if isinstance(a, TensorArg)}
    params = dict(binding.symbols)
    params.update(binding.scalars)
    launch = Launch(arrays, params, None if seed is None else np.random.default_rng(seed),
                    target_named(manifest.arch), trace, observer=observer)
    count, size = grid_size(kernel, manifest, binding.tile_count(), ctas), kernel.cluster
    try:
        dynamic = any(isinstance(o, ops.TileClaim) for o in ops.walk(kernel.body))
        cancels = any(isinstance(o, ops.ClcTryCancel) for o in ops.walk(kernel.body))
        if dynamic:   # every CTA at once, so that the schedule decides which CTA claims which tile
            run_cluster([CTA(kernel, launch, cta, count, Cluster()) for cta in range(count)], launch.rng)
            check_counter(launch.memory, kernel)
        if cancels:
            _run_cancelling(kernel, launch, count, ctas or DEFAULT_PERSISTENT_CTAS)
        for first in range(0, count, size) if not (dynamic or cancels) else ():
            cluster = Cluster()
            run_cluster([CTA(kernel, launch, cta, count, cluster) for cta in range(first, first + size)],
                        launch.rng)
    except ProtocolError as exc:
        notes = list(exc.notes)
        if seed is not None:
            notes.append(f"schedule seed {seed} (replay with seed={seed})")
        raise TmalangError(exc.code, exc.message, exc.span, notes) from None
    return arrays
