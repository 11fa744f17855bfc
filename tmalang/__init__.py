"""tmalang: a small language and compiler for Hopper/Blackwell asynchronous kernels.

    import tmalang
    k = tmalang.compile(SRC)        # or tmalang.compile_file("x.tma")
    k(a, b, out)                    # launch on the GPU
    k.ptx, k.ir, k.explain()
    g = tmalang.autotune(SRC, configs=[{"BN": 256}, {"BN": 128, "STAGES": 6}])  # fastest binding per shape
    c = tmalang.gemm(a, w.t())      # C = A · B at every shape: bf16, f16, fp8 (library/gemm.py)
"""

from .api import VERSION as __version__
from .api import Kernel, compile, compile_file
from .diagnostics import TmalangError
from .library.gemm import gemm, gemm_config
from .tuning import Autotuner, autotune

__all__ = ["compile", "compile_file", "autotune", "Autotuner", "gemm", "gemm_config", "Kernel", "TmalangError", "__version__"]
