"""`tmalang.gemm`: C = alpha · A · B at every shape, on the kernels of gemm_sm90.tma.

    c = tmalang.gemm(a, w.t())              # torch's convention: a [M, K], b [K, N]
    c = tmalang.gemm(a, b, out_dtype=torch.float32, alpha=0.5)
    tmalang.gemm_config(a, b).describe()     # what a call with these operands runs

A is row-major; B is K-major (`w.t()` of a row-major [N, K] weight, the layout of nn.Linear and
of `torch._scaled_mm`) or N-major (a row-major [K, N]): the strides tell which. Inputs bf16,
f16, f8e4m3 or f8e5m2 (both the same), f32 accumulation, output bf16 (the default for fp8),
f16 or f32. fp8 has no N-major form on the tensor cores, so an N-major fp8 B is transposed into
a K-major copy first. Operands TMA cannot address (a row stride or base address that is not a
multiple of 16 bytes, a column-major A) are copied into aligned buffers first, and so is an
output whose rows TMA cannot write; nothing the caller passed is modified except `out`.

The configuration comes from the rule in library/configs.py, or with `tune=True` from timing
the first TUNE_CANDIDATES of its ranking on the call's own operands (torch CUDA events), once per
shape, dtype and layout, remembered on disk ($TMALANG_CACHE_DIR/gemm/choices.json) for later
processes. A split of K is deterministic: the parts are summed in a fixed order by splitk_sum.
torch tensors launch on the GPU on `stream` (default: torch's current stream); NumPy arrays run
on the reference interpreter, which makes every configuration testable without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import struct
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

from ..api import compile as compile_source
from ..contract.errors import LAUNCH_OPTION, LaunchError
from ..caches.disk import default_root
from ..tuning import read_json, time_launches, write_json
from . import configs
from ..runtime.launch import stream_handle, torch_current_stream
from .operands import (Operands, finite_f32, is_torch_type, operand_output_dtype, prepare, torch_workspace,
                       used_by)

SOURCE = Path(__file__).with_name("gemm_sm90.tma")
TUNE_CANDIDATES = 4
TUNE_MARGIN = 0.05           # how much faster than the rule's pick a tuned choice must be
INTERPRETER_SMS = 132          # NumPy operands: choose as for an H100
REPEAT_ENTRIES = 16          # recent calls whose plan is reused without checks (as runtime/launch.py)
WORKSPACES = 4               # per Repeat, the (alpha, C, workspace) whose launches are repeated as they are
_kernels: dict[tuple, object] = {}
_repeats: OrderedDict[tuple, tuple] = OrderedDict()
_tuned: dict[str, tuple] = {}


@dataclass(frozen=True)
class Plan:
    """A call's configuration and the dtypes it binds."""

    config: configs.Config
    dtype: str
    out_dtype: str

    def describe(self) -> str:
        return f"{self.config.describe()}, {self.dtype} -> {self.out_dtype}"


def gemm(a, b, out=None, *, alpha: float = 1.0, out_dtype=None, tune: bool = False, stream=None,
         config: configs.Config | None = None):
    """C = alpha · a · b (see the module docstring); returns C (`out` when given). `config` pins a
    configuration (one of `configs.candidates(...)`) instead of choosing one."""
    fresh = _fresh_key(a, b, alpha, out_dtype, tune, config, stream) if out is None else None
    if out is None:
        entry = _fresh.get(fresh) if fresh is not None else None
        if entry is not None:          # a recent call's operands, alpha and stream: its result's kind,
            out = entry.allocate(stream)   # and per result address the launch that wrote it
            launch = entry.launches.get(out.data_ptr())
            if launch is not None:
                launch()
                return out
        else:
            out = _fresh_output(a, b, out_dtype, stream)   # C as `prepare` would allocate it, where that is cheap
    signature = _signature(a, b, out, alpha, out_dtype, tune, config, stream)
    repeat = _repeats.get(signature) if signature is not None else None
    if repeat is not None and finite_f32(alpha):   # the same operands and stream as a recent call:
        repeat(a, b, out, float(alpha), stream)     # nothing to check or choose
        if fresh is not None and repeat.exact is not None and repeat.exact[0] == _bits(float(alpha)):
            _remember_fresh(fresh, out, repeat.exact[1])
        return out
    with _on(stream, a):        # the call's own copies queue on the stream its kernels run on
        ops = prepare(a, b, out, out_dtype, alpha)
        if ops.empty:
            return ops.finish()
        plan = Plan(config, ops.dtype, ops.out_dtype) if config is not None else _plan(ops, tune, stream)
        launched = _run(plan, ops, stream)
        if signature is not None and ops.in_place():
            exact = None if launched is None else (_bits(ops.alpha), launched)
            _remember(signature, Repeat.of(plan, ops.n_major, exact))
            if fresh is not None and exact is not None:
                _remember_fresh(fresh, out, exact[1])
        elif signature is not None and ops.staged_output():
            _remember(signature, StagedRepeat(Repeat.of(plan, ops.n_major), ops.c.stride(0)))
        return ops.finish()


def _remember(signature: tuple, repeat) -> None:
    _repeats[signature] = repeat
    while len(_repeats) > REPEAT_ENTRIES:
        _repeats.popitem(last=False)


@contextlib.contextmanager
def _on(stream, a):
    """torch's current stream made `stream` while a call copies operands into aligned buffers and
    its result out of one, so that those copies stay in order with its kernels, which run on
    `stream`; nothing to do without one (the kernels run on the current stream) or for NumPy."""
    if stream is None or not is_torch_type(type(a)) or not a.is_cuda:     # prepare refuses a CPU tensor
        yield
        return
    torch = sys.modules["torch"]
    if not isinstance(stream, torch.cuda.Stream):
        stream = torch.cuda.ExternalStream(stream_handle(stream), device=a.device)
    with torch.cuda.stream(stream):
        yield


@dataclass(frozen=True)
class StagedRepeat:
    """A checked call whose `out` TMA cannot write (its rows are not whole 16-byte units), run
    again: the plan on a fresh C of aligned rows (torch's caching allocator, which hands the same
    block back call after call, so the plan's launches repeat as they are), then C copied into
    `out`, on the call's stream."""

    inner: Repeat
    row: int                 # C's row stride, in elements
    exact: ClassVar[None] = None     # no launch is repeated for the call as a whole: C's address is the allocator's

    @property
    def launches(self) -> dict:
        return self.inner.parts

    def __call__(self, a, b, out, alpha: float, stream) -> None:
        torch = sys.modules["torch"]
        m, n = out.shape
        with _on(stream, a):     # C from the pool of the stream that writes it, and copied there
            c = torch.empty_strided((m, n), (self.row, 1), dtype=out.dtype, device=out.device)   # no slice: ~2 µs
            self.inner(a, b, c, alpha, stream)
            out.copy_(c)


@dataclass
class FreshRepeat:
    """A call without `out`: the result it allocates, and per result address (torch's caching
    allocator hands a freed result's block to the next call) the one launch that wrote it."""

    shape: tuple
    dtype: object
    device: object
    launches: dict = field(default_factory=dict)

    def allocate(self, stream):
        # empty_strided parses its arguments faster than empty (about half a microsecond a call)
        return used_by(sys.modules["torch"].empty_strided(self.shape, (self.shape[1], 1), dtype=self.dtype,
                                                          device=self.device), stream)


_fresh: OrderedDict[tuple, FreshRepeat] = OrderedDict()


def _fresh_key(a, b, alpha, out_dtype, tune, config, stream) -> tuple | None:
    """What a call without `out` depends on besides its result's address: the operands' addresses
    and layouts, alpha's bits, the options and the stream (None where calls are not repeated so)."""
    if type(alpha) is not float and type(alpha) is not int or not finite_f32(alpha):
        return None
    inputs = _inputs(a, b, alpha, out_dtype, tune, config, stream)
    return None if inputs is None else (*inputs, _bits(float(alpha)))


def _remember_fresh(key: tuple, out, launch) -> None:
    entry = _fresh.get(key)
    if entry is None:
        entry = _fresh[key] = FreshRepeat(tuple(out.shape), out.dtype, out.device)
        while len(_fresh) > REPEAT_ENTRIES:
            _fresh.popitem(last=False)
    if len(entry.launches) < WORKSPACES:
        entry.launches[out.data_ptr()] = launch


def _fresh_output(a, b, out_dtype, stream=None):
    """An uninitialised C for torch operands, allocated as `prepare` would (contiguous [M, N]),
    when its rows are whole 16-byte units; None otherwise (prepare pads it, and checks the call)."""
    if not is_torch_type(type(a)) or type(b) is not type(a) or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    try:
        dtype = _output_dtype(a.dtype, out_dtype)
    except TypeError:          # an unhashable out_dtype: prepare reports it
        return None
    if dtype is None or b.shape[1] * dtype.itemsize % 16:
        return None
    return used_by(sys.modules["torch"].empty((a.shape[0], b.shape[1]), dtype=dtype, device=a.device), stream)


@functools.lru_cache(maxsize=64)
def _output_dtype(input_dtype, out_dtype):
    """The torch dtype of C for inputs of `input_dtype` (None where prepare must judge the call)."""
    try:
        named = operand_output_dtype(input_dtype, out_dtype)
    except LaunchError:
        return None
    return getattr(sys.modules["torch"], named, None)


@dataclass(frozen=True)
class Repeat:
    """A checked call's plan, run again on operands of the same memory layout: the kernels, B's
    layout and the split (a fresh workspace per call, from torch's caching allocator)."""

    main: object
    total: object
    n_major: bool
    split: int
    exact: tuple | None = None   # (alpha's bits, its launch repeated as is: Kernel.launch_repeatable)
    # the launches repeated as they are, per (alpha's bits, C's address, the workspace's address):
    # torch's caching allocator hands a call's workspace (and a staged C) back to the next call
    parts: dict = field(default_factory=dict, compare=False)

    @staticmethod
    def of(plan: Plan, n_major: bool, exact: tuple | None = None) -> "Repeat":
        config = plan.config
        main = kernel(config.kernel, config.constants, plan.dtype, plan.out_dtype)
        total = kernel("splitk_sum", (), plan.dtype, plan.out_dtype) if config.split > 1 else None
        return Repeat(main, total, n_major, config.split, exact)

    def __call__(self, a, b, out, alpha: float, stream) -> None:
        if self.exact is not None and self.exact[0] == _bits(alpha):
            self.exact[1]()      # the signature holds every address, layout and the stream: as launched
            return
        workspace = None
        if self.split > 1:
            m, n = out.shape
            with _on(stream, a):      # from the pool of the stream that writes it, whatever its kind
                workspace = torch_workspace(out.device, self.split, m, n)
        key = (_bits(alpha), out.data_ptr(), workspace.data_ptr() if workspace is not None else None)
        launches = self.parts.get(key)
        if launches is not None:       # the signature holds every other address, layout and the stream
            for launch in launches:
                launch()
            return
        launches = self._launched(a, b if self.n_major else b.t(), out, workspace, alpha, stream)
        if None not in launches and len(self.parts) < WORKSPACES:
            self.parts[key] = launches

    def _launched(self, a, b, out, workspace, alpha: float, stream) -> tuple:
        """Launch the plan (stream None: torch's current stream); its launches' repeats."""
        if workspace is None:
            return (self.main.launch_repeatable(alpha, a, b, out, stream=stream),)
        return (self.main.launch_repeatable(self.split, a, b, workspace, out, stream=stream),
                self.total.launch_repeatable(self.split, alpha, workspace, out, stream=stream))


def _signature(a, b, out, alpha, out_dtype, tune, config, stream) -> tuple | None:
    """What a call's plan and launches depend on, for torch calls with `out`: every operand's
    address, shape, strides and dtype (alignment and layout decide copies and kernels) and the
    stream (alpha's value is the Repeat's to judge). Equal signatures mean equal launches, whatever
    tensor objects carry them, so nothing is held on to."""
    if out is None or not is_torch_type(type(out)):
        return None
    inputs = _inputs(a, b, alpha, out_dtype, tune, config, stream)
    return None if inputs is None else (*inputs, out.data_ptr(), out.shape, out.stride(), out.dtype)


def _inputs(a, b, alpha, out_dtype, tune, config, stream) -> tuple | None:
    """A signature's part without C: the operands' addresses and layouts, the options and the
    stream handle (None where the call is not repeated: not torch tensors, an unhashable option)."""
    if not is_torch_type(type(a)) or not is_torch_type(type(b)):
        return None
    try:
        handle = stream_handle(stream if stream is not None else torch_current_stream((a,)))
    except LaunchError:
        return None
    if out_dtype is not None:
        try:
            hash(out_dtype)
        except TypeError:      # prepare reports it
            return None
    return (a.data_ptr(), a.shape, a.stride(), a.dtype, b.data_ptr(), b.shape, b.stride(), b.dtype,
            type(alpha), out_dtype, tune, config, handle)


def launch_of(a, b, out):
    """The one launch a checked `gemm(a, b, out)` on torch tensors (alpha 1, torch's current stream)
    made, as a callable that repeats it exactly (`Kernel.launch_repeatable`): the same kernel, the
    same addresses, layouts and stream, nothing checked. None where the call took two launches (a
    split) or is not repeatable. For callers that hold the addresses fixed themselves (a 1x1
    convolution's repeat, conv2d_repeat.py)."""
    repeat = _repeats.get(_signature(a, b, out, 1.0, None, False, None, None))
    if repeat is None or repeat.exact is None or repeat.exact[0] != _bits(1.0):
        return None
    return repeat.exact[1]


def _bits(alpha: float) -> bytes:
    """alpha's bits: equal bits, equal launches (0.0 and -0.0 are different ones)."""
    return struct.pack("<d", alpha)


def gemm_config(a, b, out=None, *, out_dtype=None, tune: bool = False) -> Plan:
    """The plan a `gemm` call with these operands would run (tuned plans once they are known)."""
    ops = prepare(a, b, out, out_dtype, 1.0)
    return _plan(ops, tune=False) if not tune else _tuned_plan(ops, None, time=False)


def _plan(ops: Operands, tune: bool, stream=None) -> Plan:
    if tune:
        return _tuned_plan(ops, stream, time=True)
    return Plan(_ranking(ops)[0], ops.dtype, ops.out_dtype)


def _ranking(ops: Operands) -> list[configs.Config]:
    return _ranked(*ops.shape, ops.itemsize, 4 if ops.out_dtype == "f32" else 2, ops.n_major,
                   ops.sms or INTERPRETER_SMS, ops.sectors())


@functools.lru_cache(maxsize=4096)
def _ranked(m: int, n: int, k: int, itemsize: int, out_itemsize: int, n_major: bool, sms: int,
            sectors: bool) -> list:
    """configs.ranked, once per shape: a call's host time is what small GEMMs are bound by."""
    return configs.ranked(m, n, k, itemsize, out_itemsize, n_major=n_major, sms=sms, sectors=sectors)


def _run(plan: Plan, ops: Operands, stream=None):
    """Launch the plan; a single launch's repeat (Kernel.launch_repeatable), else None."""
    config = plan.config
    main = kernel(config.kernel, config.constants, plan.dtype, plan.out_dtype)
    if config.split == 1:
        return ops.launch(main, [ops.alpha, ops.a, ops.b, ops.c], stream)
    workspace = ops.workspace(config.split)
    ops.launch(main, [config.split, ops.a, ops.b, workspace, ops.c], stream, writes="w")
    total = kernel("splitk_sum", (), plan.dtype, plan.out_dtype)
    ops.launch(total, [config.split, ops.alpha, ops.workspace(config.split), ops.c], stream)
    return None


def kernel(name: str, constants: tuple, dtype: str, out_dtype: str):
    """gemm_sm90.tma's kernel `name` bound to `constants` and the dtypes, compiled once per process
    (the cubin is cached on disk across processes)."""
    key = (name, constants, dtype, out_dtype)
    if key not in _kernels:
        bound = {**dict(constants), "OUT": out_dtype}
        if name != "splitk_sum":
            bound["T"] = dtype
        _kernels[key] = compile_source(SOURCE.read_text(), kernel=name, name=str(SOURCE), constants=bound)
    return _kernels[key]


def _tuned_plan(ops: Operands, stream, *, time: bool) -> Plan:
    """The fastest of the ranking's first TUNE_CANDIDATES, timed once per key and remembered."""
    if ops.sms is None and time:
        raise LaunchError(LAUNCH_OPTION, "gemm(tune=True) times launches on the GPU: pass torch CUDA tensors")
    key = ops.key()
    chosen = _tuned.get(key) or _read_choices().get(key)
    ranking = _ranking(ops)
    if chosen is None and time:
        times = {}
        for config in ranking[:TUNE_CANDIDATES]:
            times[config] = time_launches(lambda c=config: _run(Plan(c, ops.dtype, ops.out_dtype), ops, stream))
        best = _fastest(times, ranking[0])
        chosen = [best.kernel, list(best.constants), best.split]
        _write_choice(key, chosen)
    if chosen is None:
        return Plan(ranking[0], ops.dtype, ops.out_dtype)
    _tuned[key] = chosen
    config = configs.Config(chosen[0], tuple(tuple(pair) for pair in chosen[1]), chosen[2])
    return Plan(config, ops.dtype, ops.out_dtype)


def _fastest(times: dict, pick: configs.Config) -> configs.Config:
    """The fastest timed configuration, but the rule's pick unless another beats it by
    TUNE_MARGIN: small problems time within noise, and a noisy win for a split (two launches,
    a workspace) loses on the next call."""
    best = min(times, key=times.get)
    return best if times[best] < times[pick] * (1 - TUNE_MARGIN) else pick


def choices_file() -> Path:
    return default_root() / "gemm" / "choices.json"


def clear_choices() -> None:
    """Forget every tuned choice (this process and the disk)."""
    _tuned.clear()
    choices_file().unlink(missing_ok=True)


def _read_choices() -> dict:
    data = read_json(choices_file())
    return data if isinstance(data, dict) else {}


def _write_choice(key: str, chosen: list) -> None:
    """Merged into what is on disk (another process may have tuned other keys)."""
    write_json(choices_file(), {**_read_choices(), key: chosen})


__all__ = ["gemm", "gemm_config", "clear_choices", "Plan"]
