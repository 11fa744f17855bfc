"""The Python embedding: `tmalang.compile(src)` → a Kernel you can launch and inspect."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import llvmlite

from .backend import ptxas
from .backend.manifest import Manifest
from .compiler import Compilation, Options, compile_source
from .explain import explain
from .ir.printer import print_ir

VERSION = "0.1.0"


class Kernel:
    """A compiled kernel: artifacts (`ptx`, `ir`, `llvm_ir`, `manifest`, `cubin`) and a launcher."""

    def __init__(self, compilation: Compilation, source: str):
        self._c = compilation
        self.source = source
        self.name = compilation.ir.symbol
        self.ptx = compilation.ptx
        self.ir = print_ir(compilation.ir)
        self.llvm_ir = compilation.llvm_ir
        self.manifest: Manifest = compilation.manifest
        self._cubin: bytes | None = None
        self._launcher = None

    def explain(self) -> str:
        return explain(self._c.ir)

    @property
    def cubin(self) -> bytes:
        if self._cubin is None:
            self._cubin = _cached_cubin(self)
        return self._cubin

    def stats(self) -> ptxas.PtxasStats:
        _, stats = ptxas.assemble(self.ptx, self.manifest.arch)
        return stats

    def __call__(self, *args, dims: dict[str, int] | None = None, stream=None) -> None:
        """Launch on the GPU. Arrays: torch/CuPy/DLPack/__cuda_array_interface__, or NumPy (copied)."""
        if self._launcher is None:
            from .runtime import Launcher

            self._launcher = Launcher(self.manifest, self.cubin)
        self._launcher(*args, dims=dims, stream=stream)

    def interpret(self, *args, dims: dict[str, int] | None = None, seed: int | None = None, explore: int = 0,
                  ctas: int | None = None, trace=None):
        """Run on the reference interpreter (NumPy arrays); returns the written tensors.

        seed: randomise warp interleaving and TMA latency; explore=N: N schedules from `seed`;
        trace: an interp.trace.Trace to fill with the run's timeline (Chrome trace JSON).
        Protocol violations (deadlock, surplus arrivals, tx mismatch, ...) raise TmalangError.
        """
        from .interp import interpret

        return interpret(self._c.ir, self.manifest, *args, dims=dims, seed=seed, explore=explore, ctas=ctas,
                         trace=trace)

    def __repr__(self) -> str:
        return f"<tmalang.Kernel {self.name} {self.manifest.arch} {self.manifest.block_threads} threads>"


def compile(source: str, *, arch: str = "sm_90a", kernel: str | None = None, name: str = "<string>") -> Kernel:
    c = compile_source(source, name, Options(arch=arch, kernel=kernel))
    return Kernel(c, source)


def compile_file(path: str | Path, *, arch: str = "sm_90a", kernel: str | None = None) -> Kernel:
    path = Path(path)
    return compile(path.read_text(), arch=arch, kernel=kernel, name=str(path))


def _cached_cubin(k: Kernel) -> bytes:
    """ptxas is the slow stage; its output is kept on disk, keyed by everything that shapes it."""
    from .runtime.cache import DiskCache

    cache = DiskCache()
    versions = {"tmalang": VERSION, "llvmlite": llvmlite.__version__, "ptxas": ptxas.ptxas_version(),
                # a compiler edit without a version bump must not serve a stale cubin
                "ptx_sha256": hashlib.sha256(k.ptx.encode()).hexdigest()}
    key = cache.key(k.source, {"arch": k.manifest.arch, "kernel": k.name}, versions)
    hit = cache.get(key)
    if hit is not None and "kernel.cubin" in hit:
        return hit["kernel.cubin"]
    cubin, _ = ptxas.assemble(k.ptx, k.manifest.arch)
    cache.put(key, {"kernel.cubin": cubin, "manifest.json": json.dumps(k.manifest.to_json()).encode()})
    return cubin
