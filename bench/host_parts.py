"""Where a repeat call's host time goes, part by part, without a profiler's per-call overhead
(issue 31's breakdown): each part alone in a loop queued behind a spin kernel, so only the host's
time counts. The parts: the driver calls a launch makes (through cuda-bindings, and the same
calls through ctypes, to see what the bindings add), torch's allocation and stream lookup, the
signature `tmalang.gemm` builds, and whole repeat calls for scale.

    python bench/host_parts.py --out bench/results/host-parts-<date>-h200.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import ctypes  # noqa: E402

import torch  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parent))
from host_cost import host_us, small_calls  # noqa: E402
from timing import arguments, write_report  # noqa: E402

import tmalang  # noqa: E402
from tmalang.library import gemm as gemm_module  # noqa: E402
from tmalang.runtime import driver  # noqa: E402
from tmalang.runtime.launch import torch_current_stream  # noqa: E402

METHOD = ("median over samples of the wall time of 400 back-to-back calls of one part, per call, "
          "queued behind a spin kernel so that the host alone is timed (host_cost.host_us: the parts take "
          "turns within each sample; host-parts-2026-11-29-h200.json timed each part alone)")


def ctypes_driver():
    lib = ctypes.CDLL("libcuda.so.1")
    launch = lib.cuLaunchKernelEx
    launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    set_current = lib.cuCtxSetCurrent
    set_current.argtypes = [ctypes.c_void_p]
    set_current.restype = ctypes.c_int
    get_current = lib.cuCtxGetCurrent
    get_current.argtypes = [ctypes.c_void_p]
    get_current.restype = ctypes.c_int
    return launch, set_current, get_current


def main() -> None:
    args = arguments(samples=15)
    a, b, c, *_, again = small_calls()
    repeat = again.__self__                         # the RepeatLaunch: function, config, params
    tmalang.gemm(a, b, out=c)
    hot = driver._hot()
    context = driver._primary_context(0)
    launch_c, set_current_c, get_current_c = ctypes_driver()
    config_ptr, function_ptr, params = repeat.config.getPtr(), int(repeat.function), repeat.params.address
    context_ptr = int(context)
    slot = ctypes.c_void_p()
    shape = (repeat.config.gridDimX, repeat.config.blockDimX, repeat.config.sharedMemBytes, int(repeat.config.hStream))
    plain = driver.launch_config(*shape, (1, 1, 1), overlap_prior=False)
    overlapping = driver.launch_config(*shape, (1, 1, 1), overlap_prior=True)
    api = driver.api()
    parts = {
        "cuLaunchKernelEx (cuda-bindings)": lambda: hot.launch(repeat.config, repeat.function, params, 0),
        "cuLaunchKernelEx (ctypes)": lambda: launch_c(config_ptr, function_ptr, params, None),
        "cuLaunchKernelEx, no attribute": lambda: hot.launch(plain, repeat.function, params, 0),
        "cuLaunchKernelEx, programmatic serialization": lambda: hot.launch(overlapping, repeat.function, params, 0),
        "cuLaunchKernel (no attributes)": lambda: api.cuLaunchKernel(repeat.function, shape[0], 1, 1, shape[1], 1, 1,
                                                                    shape[2], shape[3], params, 0),
        "cuCtxSetCurrent (cuda-bindings)": lambda: hot.set_current(context),
        "cuCtxSetCurrent (ctypes)": lambda: set_current_c(context_ptr),
        "cuCtxGetCurrent (ctypes)": lambda: get_current_c(ctypes.byref(slot)),
        "torch.cuda.current_device()": torch.cuda.current_device,
        "torch_current_stream((a,))": lambda: torch_current_stream((a,)),
        "torch.empty(128, 128, bf16)": lambda: torch.empty((128, 128), dtype=torch.bfloat16, device=a.device),
        "gemm._signature(a, b, out)": lambda: gemm_module._signature(a, b, c, 1.0, None, False, None, None),
        "RepeatLaunch.again (saxpy)": again,
        "tmalang.gemm(a, b, out=c)": lambda: tmalang.gemm(a, b, out=c),
        "torch.matmul(a, b)": lambda: torch.matmul(a, b),
        "torch.matmul(a, b, out=c)": lambda: torch.matmul(a, b, out=c),
    }
    rows = []
    for name, timed in host_us(parts, args.samples).items():
        rows.append({"part": name, "host_us": timed["median_us"]})
        print(f"{name:40s} {timed['median_us']:6.2f} us", flush=True)
    write_report(args.out, "host cost of a repeat call, part by part", METHOD, rows)


if __name__ == "__main__":
    main()
