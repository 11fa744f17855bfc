"""tmalang: a small language and compiler for Hopper/Blackwell asynchronous kernels.

    import tmalang
    k = tmalang.compile(SRC)        # or tmalang.compile_file("x.tma")
    k(a, b, out)                    # launch on the GPU
    k.ptx, k.ir, k.explain()
    g = tmalang.autotune(SRC, configs=[{"BN": 256}, {"BN": 128, "STAGES": 6}])  # fastest binding per shape
    c = tmalang.gemm(a, w.t())      # C = A · B at every shape: bf16, f16, fp8 (library/gemm.py)
    tmalang.get_include()           # the folder of tmalang_runtime.h, for `tmalangc --emit header` users
"""

from pathlib import Path as _Path

from .api import VERSION as __version__
from .api import Kernel, compile, compile_file
from .diagnostics import TmalangError
from .library.gemm import gemm, gemm_config
from .tuning import Autotuner, autotune



def get_include() -> str:
    """The folder holding tmalang_runtime.h, the header-only C++ runtime that the launch headers of
    `tmalangc --emit header` include: pass it as `-I` (it ships in the wheel)."""
    return str(_Path(__file__).with_name("include"))


__all__ = ["get_include", "compile", "compile_file", "autotune", "Autotuner", "gemm", "gemm_config", "Kernel", "TmalangError", "__version__"]
