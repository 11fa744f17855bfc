"""PTX → cubin with ptxas, and the resource report (--stats).

ptxas is looked up in this order: $TMALANG_PTXAS; cuda-pathfinder (installed with cuda-bindings),
which finds the nvidia-cuda-nvcc wheel that pyproject installs (nvidia/cu13/bin/ptxas, works on a
CPU-only machine), conda and $CUDA_HOME; that wheel directly (without cuda-pathfinder); PATH;
/usr/local/cuda.
A $TMALANG_PTXAS that is not an executable file is E301 (it is never silently skipped), and a
ptxas that runs past $TMALANG_PTXAS_TIMEOUT seconds (default 300) is killed: E302.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import error


DEFAULT_TIMEOUT = 300.0   # seconds; the largest examples assemble in about one
# Keep the PTX's .loc lines as the cubin's line table (.debug_line, .nv_debug_line_sass) for
# Nsight Compute and compute-sanitizer. The SASS is the same with and without it (every example,
# byte for byte); CUDA 13's ptxas keeps the table even unasked, older ones may not.
LINE_INFO = "--generate-line-info"


@functools.cache
def find_ptxas() -> str | None:
    explicit = os.environ.get("TMALANG_PTXAS")
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise error("E301", f"TMALANG_PTXAS is '{explicit}', which is not an executable file",
                        None, "point it at ptxas, or unset it to use the one of the nvidia-cuda-nvcc package")
        return explicit
    return _pathfinder_ptxas() or _wheel_ptxas() or shutil.which("ptxas") or next(
        (str(p) for p in [Path("/usr/local/cuda/bin/ptxas")] if p.exists()), None
    )


def _pathfinder_ptxas() -> str | None:
    """ptxas as cuda-pathfinder finds it (installed with cuda-bindings): the nvidia-cuda-nvcc wheel,
    conda, $CUDA_HOME/$CUDA_PATH, in the order NVIDIA's own Python tools use."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        return find_nvidia_binary_utility("ptxas")
    except (ImportError, RuntimeError):
        return None


def _wheel_ptxas() -> str | None:
    """The nvidia-cuda-nvcc wheel's ptxas, for a base install without cuda-pathfinder."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for candidate in sorted(Path(root).glob("cu*/bin/ptxas"), reverse=True):
            return str(candidate)
    return None


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
    out = _run([exe, "--version"]).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def assemble(ptx: str, arch: str) -> tuple[bytes, PtxasStats]:
    exe = find_ptxas()
    if exe is None:
        raise error("E301", "ptxas not found: install the 'nvidia-cuda-nvcc' package or set TMALANG_PTXAS")
    with tempfile.TemporaryDirectory(prefix="tmalang-") as tmp:
        src, dst = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        src.write_text(ptx)
        run = _run([exe, f"-arch={arch}", "-v", LINE_INFO, str(src), "-o", str(dst)])
        if run.returncode != 0:
            raise error("E300", f"ptxas rejected the generated PTX (a compiler bug):\n{run.stderr.strip()}")
        return dst.read_bytes(), parse_stats(run.stdout + run.stderr)


def timeout() -> float:
    """$TMALANG_PTXAS_TIMEOUT in seconds (read at each call), or the default."""
    text = os.environ.get("TMALANG_PTXAS_TIMEOUT", "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise error("E302", f"TMALANG_PTXAS_TIMEOUT is '{text}'; it must be a positive number of seconds")
    return value


def _run(command: list[str]) -> subprocess.CompletedProcess:
    """Run ptxas; E301 if it cannot be started, E302 if it does not finish in time.

    It runs in a session of its own, so that a timeout stops whatever it started too (a wrapper
    script's children would otherwise keep its output pipes open)."""
    limit = timeout()
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                encoding="utf-8", errors="replace", start_new_session=True)
    except OSError as exc:
        raise error("E301", f"cannot run ptxas '{command[0]}': {exc.strerror or exc}") from None
    with proc:
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise error("E302", f"ptxas did not finish within {limit:g} s and was stopped: {command[0]}", None,
                        "set TMALANG_PTXAS_TIMEOUT to allow more time") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


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
