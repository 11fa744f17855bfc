"""One tmalang GEMM launch to profile with Nsight Compute (ncu), e.g.

    ncu --section SpeedOfLight --section WarpStateStats --kernel-name gemm python bench/profile_gemm.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402

import tmalang  # noqa: E402

size = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
gemm = tmalang.compile_file(Path(__file__).resolve().parents[1] / "examples" / "gemm_sm90.tma")
a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    gemm(a, b, c)
torch.cuda.synchronize()
