"""tmalang: a small language and compiler for Hopper/Blackwell asynchronous kernels.

    import tmalang
    k = tmalang.compile(SRC)        # or tmalang.compile_file("x.tma")
    k(a, b, out)                    # launch on the GPU
    k.ptx, k.ir, k.explain()
"""

from .api import VERSION as __version__
from .api import Kernel, compile, compile_file
from .diagnostics import TmalangError

__all__ = ["compile", "compile_file", "Kernel", "TmalangError", "__version__"]
