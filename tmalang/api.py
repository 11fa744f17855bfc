"""The Python embedding: `tmalang.compile(src)` → a Kernel you can launch and inspect."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import metadata
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .backend import ptxas
from .compiler import Compilation, Options, advance, compile_source
from .passes import PassLog
from .contract.errors import LAUNCH_OPTION, LaunchError
from .contract.manifest import Manifest
from .diagnostics import error
from .explain import explain
from .interp import interpret
from .verify import Verdict, verify
from .verify.certificate import write as write_certificate
from .verify.explore import DEFAULT_STATE_LIMIT
from .contract.verification import enabled_by_default as verify_by_default
from .verify import METHODS, verify_base_launches
from .contract.trace import Trace
from .ir.printer import print_ir
from .runtime import Launcher
from .caches.disk import DiskCache
from .syntax.encoding import decode
from .version import VERSION
from .torch_op import TorchOp, make as make_torch_op
from .targets.arch import DEFAULT


class Kernel:
    """A compiled kernel: artifacts (`ptx`, `ir`, `llvm_ir`, `manifest`, `cubin`) and a launcher."""

    def __init__(self, compilation: Compilation, source: str):
        self._c = compilation
        self.source = source
        self.name = compilation.ir.symbol
        self.ir = print_ir(compilation.ir)
        self.manifest: Manifest = compilation.manifest
        # every compile-time constant's value: an int, or a str naming a size or a dtype (JSON as it is)
        self.constants: dict[str, int | str] = dict(compilation.constants)
        self._cubin: bytes | None = None
        self._launcher = None
        self._profiled = None      # the Launcher of this kernel compiled with the timeline

    @property
    def ptx(self) -> str:
        """The PTX, made on first use: a kernel only interpreted never loads LLVM."""
        return advance(self._c, "ptx").ptx

    @property
    def llvm_ir(self) -> str:
        """The LLVM IR as NVPTX's pipeline left it (made with the PTX)."""
        return advance(self._c, "ptx").llvm_ir

    def explain(self) -> str:
        return explain(self._c.ir, self._c.target, self._c.manifest.grid)

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
            self._launcher = Launcher(self.manifest, self.cubin)
        self._launcher(*args, dims=dims, stream=stream)

    def launch_repeatable(self, *args, dims: dict[str, int] | None = None, stream=None):
        """Launch as `k(...)` does, and return a callable that launches again with the very same
        arguments (addresses, shapes, strides, scalar values, stream) without checking or encoding
        them again; None where they cannot be repeated (NumPy arrays are staged per call)."""
        if self._launcher is None:
            self._launcher = Launcher(self.manifest, self.cubin)
        repeat = self._launcher(*args, dims=dims, stream=stream)
        return None if repeat is None else repeat.again

    def profile(self, *args, dims: dict[str, int] | None = None, stream=None, ctas: int = 1) -> Trace:
        """Run once on the GPU with the hardware timeline: %globaltimer stamps at each warp's waits
        (slices), arrivals, TMA issues and MMA commits (instants) in the first `ctas` CTAs. Returns
        the trace the interpreter writes (`.to_json()` opens in Perfetto) beside `interpret(...,
        trace=...)`'s. The kernel is compiled once more with the stamps (the launch itself is as
        `k(...)`)."""
        if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < 1:
            raise LaunchError(LAUNCH_OPTION, f"ctas must be a positive int, got {ctas!r}")
        if self._profiled is None:
            options = dataclasses.replace(self._c.options, timeline=True, log=PassLog())
            timed = compile_source(self.source, self._c.source_name, options)
            self._profiled = Launcher(timed.manifest, ptxas.assemble(timed.ptx, timed.manifest.arch)[0])
        return self._profiled.profile(args, dims, stream, ctas)

    def resident_ctas(self, device: int = 0) -> int:
        """CTAs of this kernel that can be resident on GPU `device` at once: the CTAs a `grid
        persistent` launch starts, and what sizes a split of work into rounds (loads the kernel)."""
        if self._launcher is None:
            self._launcher = Launcher(self.manifest, self.cubin)
        return self._launcher.resident(device)

    def synchronize(self, stream=None) -> None:
        """Wait until this kernel's launches on `stream` (default: the stream of its latest launch)
        are done. A launch with device arrays returns at once; if its kernel hung, this is where its
        watchdog's E218 is raised (a later launch raises it too)."""
        if self._launcher is None:
            self._launcher = Launcher(self.manifest, self.cubin)
        self._launcher.synchronize(stream)

    def interpret(self, *args, dims: dict[str, int] | None = None, seed: int | None = None, explore: int = 0,
                  ctas: int | None = None, trace=None):
        """Run on the reference interpreter (NumPy arrays); returns the written tensors.

        seed: randomise warp interleaving and TMA latency; explore=N: N schedules from `seed`;
        trace: an interp.trace.Trace to fill with the run's timeline (Chrome trace JSON).
        Protocol violations (deadlock, surplus arrivals, tx mismatch, ...) raise TmalangError.
        """
        _check_interpret_options(seed, explore, ctas, trace)
        return interpret(self._c.ir, self.manifest, *args, dims=dims, seed=seed, explore=explore, ctas=ctas,
                         trace=trace)

    def verify(self, *args, dims: dict[str, int] | None = None, ctas: int | None = None,
               states: int = DEFAULT_STATE_LIMIT, certificate: str | Path | None = None,
               method: str = "order") -> Verdict:
        """Every schedule of this launch (NumPy arrays, as for `interpret`): a Verdict, `verified`
        when no schedule breaks the protocol, else `error` (a schedule that does, in the
        interpreter's words) and `trace` (that schedule, for Perfetto). The caller's arrays are not
        written. `method`: "order" (checks on one recorded run's happens-before order) or "explore"
        (a search of the states, exponential, bounded by `states`); docs/interpreter.md,
        "Verification".
        `certificate`: a file to write what was proved to, when verified (nothing is written
        otherwise); `python -m tmalang.tools.certificate_check FILE` re-validates it."""
        _check_interpret_options(None, 0, ctas, None)
        if method not in METHODS:
            raise error("E212", f"verify(): method must be one of {', '.join(METHODS)}, got {method!r}")
        if certificate is not None and method != "order":
            raise error("E212", "verify(): a certificate records the happens-before checks: use method='order'")
        verdict = verify(self._c.ir, self.manifest, *args, dims=dims, ctas=ctas, limit=states,
                         certificate=certificate is not None, method=method)
        if verdict.certificate is not None:
            write_certificate(verdict.certificate, certificate)
        return verdict

    def as_torch_op(self, name: str | None = None, *, dims: dict[str, int] | None = None) -> TorchOp:
        """This kernel as the torch custom operator `torch.ops.tmalang.NAME` (torch_op.py): it works
        inside `torch.compile(fullgraph=True)` and CUDA graphs, runs CUDA tensors on the GPU (torch's
        current stream) and CPU tensors on the interpreter. It takes the kernel's arguments in order,
        writes the kernel's output tensors in place and returns nothing. NAME defaults to the
        kernel's name and a digest of its PTX (each binding of its constants is an operator)."""
        identity = hashlib.sha256((self.ptx + repr(sorted((dims or {}).items()))).encode()).hexdigest()
        return make_torch_op(name or f"{self.name}_{identity[:10]}", identity, self.manifest, self,
                             self.interpret, dims)

    def __repr__(self) -> str:
        return f"<tmalang.Kernel {self.name} {self.manifest.arch} {self.manifest.block_threads} threads>"


def compile(source: str | bytes, *, arch: str = DEFAULT.name, kernel: str | None = None,
            name: str = "<string>", constants: dict | None = None, watchdog: bool | None = None,
            verify: bool | None = None, _binder: str = "compile(constants=...)") -> Kernel:
    """Compile tmalang source text (str, or UTF-8 bytes) to a Kernel; TmalangError if it is wrong.
    `constants` binds the kernel's compile-time constants by name (docs/language.md §2a).
    `watchdog` (default: off unless TMALANG_WATCHDOG=1): a hang on the GPU stops the kernel and
    raises E218 naming the barrier, instead of hanging the process.
    `verify` (default: off unless TMALANG_VERIFY=1): also prove the protocol for every schedule of
    the base launches of a sweep (two boxes and a tail per dim, 1..3 CTAs; docs/interpreter.md,
    "Verification"); a violation raises its TmalangError. Off by default: it costs about a third of
    a cold compile of gemm_sm90 (bench/results/verify-examples-*.json)."""
    if not isinstance(name, str):
        raise error("E009", f"compile(): name must be a str, got {type(name).__name__}")
    if isinstance(source, (bytes, bytearray, memoryview)):
        source = decode(bytes(source), name)
    for what, value, allowed in (("source", source, (str,)), ("arch", arch, (str,)),
                                 ("kernel", kernel, (str, type(None))), ("watchdog", watchdog, (bool, type(None))),
                                 ("verify", verify, (bool, type(None)))):
        if not isinstance(value, allowed):
            raise error("E009", f"compile(): {what} must be a {' or '.join(t.__name__ for t in allowed)}, "
                        f"got {type(value).__name__}")
    constants = _check_constants(constants, _binder)
    options = Options(arch=arch, kernel=kernel, constants=constants, binder=_binder)
    if watchdog is not None:
        options.watchdog = watchdog
    c = compile_source(source, name, options, until="ir")   # the PTX is made when first asked for
    if verify if verify is not None else verify_by_default():
        verify_base_launches(c.ir, c.manifest)
    return Kernel(c, source)


def compile_file(path: str | Path, *, arch: str = DEFAULT.name, kernel: str | None = None,
                 constants: dict | None = None, watchdog: bool | None = None, verify: bool | None = None) -> Kernel:
    """Compile a .tma file; OSError if it cannot be read, E007 if it is not UTF-8."""
    path = Path(path)
    return compile(decode(path.read_bytes(), str(path)), arch=arch, kernel=kernel, name=str(path),
                   constants=constants, watchdog=watchdog, verify=verify, _binder="compile_file(constants=...)")


def _check_constants(constants, binder: str) -> dict:
    """E009 unless a mapping of names (str) to values; the values are checked against the kernel's
    constants (E541-E543, syntax/constants.py)."""
    what = binder.split("(")[0]
    if constants is None:
        return {}
    if not isinstance(constants, Mapping):
        raise error("E009", f"{what}(): constants must be a dict of name -> value, got {type(constants).__name__}")
    for name in constants:
        if not isinstance(name, str):
            raise error("E009", f"{what}(): constant names must be str, got {name!r}")
    return dict(constants)


def _check_interpret_options(seed, explore, ctas, trace) -> None:
    """E212 for interpreter options of the wrong type or range (before any work)."""
    def integer(value) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))

    if seed is not None and not (integer(seed) and seed >= 0):
        raise LaunchError(LAUNCH_OPTION, f"seed must be None or an integer >= 0, got {seed!r}")
    if not (integer(explore) and explore >= 0):
        raise LaunchError(LAUNCH_OPTION, f"explore must be an integer >= 0, got {explore!r}")
    if ctas is not None and not (integer(ctas) and ctas >= 1):
        raise LaunchError(LAUNCH_OPTION, f"ctas must be None or an integer >= 1, got {ctas!r}")
    if trace is not None and not isinstance(trace, Trace):
        raise LaunchError(LAUNCH_OPTION, f"trace must be None or a tmalang.interp.trace.Trace, "
                          f"got {type(trace).__name__}")


def _cached_cubin(k: Kernel) -> bytes:
    """ptxas is the slow stage; its output is kept on disk, keyed by everything that shapes it."""
    cache = DiskCache()
    versions = {"tmalang": VERSION, "llvmlite": metadata.version("llvmlite"), "ptxas": ptxas.ptxas_version(),
                # a compiler edit without a version bump must not serve a stale cubin
                "ptx_sha256": hashlib.sha256(k.ptx.encode()).hexdigest()}
    # every binding of the kernel's constants is an entry of its own (its PTX differs too, mostly)
    key = cache.key(k.source, {"arch": k.manifest.arch, "kernel": k.name, "constants": k.constants}, versions)
    hit = cache.get(key)
    if hit is not None and "kernel.cubin" in hit:
        return hit["kernel.cubin"]
    cubin, _ = ptxas.assemble(k.ptx, k.manifest.arch)
    cache.put(key, {"kernel.cubin": cubin, "manifest.json": json.dumps(k.manifest.to_json()).encode()})
    return cubin
