"""PTX → cubin with ptxas, and the resource report (--stats).

ptxas is looked up in this order: $TMALANG_PTXAS; the nvidia-cuda-nvcc wheel that pyproject
installs (nvidia/cu13/bin/ptxas, works on a CPU-only machine); PATH; /usr/local/cuda.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import error


@functools.cache
def find_ptxas() -> str | None:
    explicit = os.environ.get("TMALANG_PTXAS")
    if explicit:
        return explicit
    try:
        import nvidia

        for root in nvidia.__path__:
            for candidate in sorted(Path(root).glob("cu*/bin/ptxas"), reverse=True):
                return str(candidate)
    except ImportError:
        pass
    return shutil.which("ptxas") or next(
        (str(p) for p in [Path("/usr/local/cuda/bin/ptxas")] if p.exists()), None
    )


@dataclass(frozen=True)
class PtxasStats:
    registers: int
    smem_static: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    log: str

    def summary(self) -> str:
        return (f"registers={self.registers} static_smem={self.smem_static}B stack={self.stack_frame}B "
                f"spill_stores={self.spill_stores}B spill_loads={self.spill_loads}B")


def ptxas_version() -> str:
    exe = find_ptxas()
    if exe is None:
        return "none"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def assemble(ptx: str, arch: str) -> tuple[bytes, PtxasStats]:
    exe = find_ptxas()
    if exe is None:
        raise error("E301", "ptxas not found: install the 'nvidia-cuda-nvcc' package or set TMALANG_PTXAS")
    with tempfile.TemporaryDirectory(prefix="tmalang-") as tmp:
        src, dst = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        src.write_text(ptx)
        run = subprocess.run([exe, f"-arch={arch}", "-v", str(src), "-o", str(dst)], capture_output=True, text=True)
        if run.returncode != 0:
            raise error("E300", f"ptxas rejected the generated PTX (a compiler bug):\n{run.stderr.strip()}")
        return dst.read_bytes(), parse_stats(run.stdout + run.stderr)


def parse_stats(log: str) -> PtxasStats:
    def number(pattern: str) -> int:
        m = re.search(pattern, log)
        return int(m.group(1)) if m else 0

    return PtxasStats(
        registers=number(r"Used (\d+) registers"),
        smem_static=number(r"(\d+) bytes smem"),
        stack_frame=number(r"(\d+) bytes stack frame"),
        spill_stores=number(r"(\d+) bytes spill stores"),
        spill_loads=number(r"(\d+) bytes spill loads"),
        log=log.strip(),
    )
