"""tmalang: a small language and compiler for Hopper/Blackwell asynchronous kernels.

    import tmalang
    k = tmalang.compile(SRC)        # or tmalang.compile_file("x.tma")
    k(a, b, out)                    # launch on the GPU
    k.ptx, k.ir, k.explain()
    op = k.as_torch_op()            # torch.ops.tmalang.*: torch.compile(fullgraph=True), CUDA graphs
    g = tmalang.autotune(SRC, configs=[{"BN": 256}, {"BN": 128, "STAGES": 6}])  # fastest binding per shape
    c = tmalang.gemm(a, w.t())      # C = A · B at every shape: bf16, f16, fp8 (library/gemm.py)
    y = tmalang.conv2d(x, w, stride=1, padding=1)   # implicit-GEMM convolution (library/conv2d.py)
    y = tmalang.copy(x)             # a tensor's bytes by TMA, a box that fits its layout (library/copy.py)
    o = tmalang.attention(q, k, v, causal=True)   # with autograd on torch tensors (library/attention.py)
    tmalang.get_include()           # the folder of tmalang_runtime.h, for `tmalangc --emit header` users
    tmalang.get_cuda_include()      # cuda.h's folder, through cuda-pathfinder
    tmalang.get_cmake_dir()         # tmalangConfig.cmake: tmalang_add_kernel(...) in a CMake project
    k.interpret(..., trace=tmalang.Trace())   # the interpreter's timeline, for Perfetto

`import tmalang` loads almost nothing: the compiler (lark, llvmlite, NumPy) is imported by the
first use of a name below, so a program that only asks for the version or the include folder,
or the CLI answering from its cache, does not pay for it.
"""

from __future__ import annotations

import importlib
import os as _os
from pathlib import Path as _Path
from typing import TYPE_CHECKING

from .diagnostics import TmalangError
from .version import VERSION as __version__

if TYPE_CHECKING:   # what the lazy names are, for type checkers and readers
    from .api import Kernel, compile, compile_file
    from .library.attention import attention, attention_backward
    from .library.attention_decode import attention_decode
    from .library.attention_varlen import attention_varlen
    from .library.attention_varlen_bwd import attention_varlen_backward
    from .library.conv2d import conv2d
    from .library.copy import copy
    from .library.gemm import gemm, gemm_config
    from .contract.trace import Trace
    from .tuning import Autotuner, autotune

_LAZY = {"compile": "api", "compile_file": "api", "Kernel": "api", "gemm": "library.gemm", "conv2d": "library.conv2d", "copy": "library.copy",
         "gemm_config": "library.gemm", "attention": "library.attention", "attention_backward": "library.attention",
         "attention_varlen": "library.attention_varlen",
         "attention_varlen_backward": "library.attention_varlen_bwd", "attention_decode": "library.attention_decode", "Autotuner": "tuning", "autotune": "tuning", "Trace": "contract.trace"}


def __getattr__(name: str):
    """The public names that need the compiler, imported on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'tmalang' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def get_include() -> str:
    """The folder holding tmalang_runtime.h, the header-only C++ runtime that the launch headers of
    `tmalangc --emit header` include: pass it as `-I` (it ships in the wheel)."""
    return _runtime_folder("include", "tmalang_runtime.h")


def get_cuda_include() -> str | None:
    """The folder of the CUDA driver header (cuda.h) that a C++ host program built on a launch
    header needs: found by cuda-pathfinder (installed with cuda-bindings: the nvidia wheels, conda,
    $CUDA_HOME/$CUDA_PATH), else $CUDA_HOME/include or /usr/local/cuda/include; None if none has it."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudart")
    except (ImportError, RuntimeError):
        found = None
    homes = [_os.environ.get("CUDA_HOME"), _os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for folder in [found, *(str(_Path(h) / "include") for h in homes if h)]:
        if folder and (_Path(folder) / "cuda.h").is_file():
            return folder
    return None


def get_cmake_dir() -> str:
    """The folder of tmalangConfig.cmake and tmalang.cmake (`tmalang_add_kernel`): pass it as
    -Dtmalang_DIR=... to CMake for find_package(tmalang CONFIG) (docs/cpp.md)."""
    return _runtime_folder("cmake", "tmalangConfig.cmake")


def _runtime_folder(name: str, holds: str, module: str = __file__) -> str:
    """The C/C++ runtime lives in the checkout's top-level runtime/ and ships inside the wheel as
    tmalang/include and tmalang/cmake (pyproject's force-include), as grammar/ does. The wheel's
    folder counts only if it holds the file: a checkout may keep an old, emptied tmalang/include."""
    packaged = _Path(module).with_name(name)
    return str(packaged if (packaged / holds).is_file() else _Path(module).resolve().parents[1] / "runtime" / name)


__all__ = ["get_include", "get_cmake_dir", "get_cuda_include", "Trace", "compile", "compile_file", "autotune", "Autotuner", "gemm", "gemm_config", "conv2d", "copy", "attention", "attention_backward", "attention_varlen", "attention_varlen_backward", "attention_decode", "Kernel",
           "TmalangError", "__version__"]
