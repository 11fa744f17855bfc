"""Instructions that exist on some targets only, refused at the user's line.

Run on the kernel being compiled (not on every kernel of its file: a file may hold kernels for
several architectures, each compiled with its own --arch). Sema records the sites as it checks
the kernel: Tensor Memory declarations (tcgen05), mma statements on register accumulators
(wgmma) and row coordinates that name an index tensor (TMA gather4 / scatter4).
"""

from __future__ import annotations

from ..diagnostics import error
from ..targets.arch import TARGETS
from .declarations import KernelInfo


def check_available(info: KernelInfo) -> None:
    target = info.target
    if info.tmem_sites and not target.has_tcgen05:
        raise error("E097", f"Tensor Memory exists on {_offering('has_tcgen05')}, not {target.name}",
                    info.tmem_sites[0], f"compile with --arch {_offering('has_tcgen05')}")
    if info.wgmma_sites and not target.has_wgmma:
        raise error("E091", f"mma on register accumulators is wgmma, which exists on {_offering('has_wgmma')} only, "
                    f"not {target.name}", info.wgmma_sites[0], f"compile with --arch {_offering('has_wgmma')}")
    if info.gather_sites and not target.has_gather4:
        raise error("E490", f"gathered rows are TMA's .tile::gather4 / .tile::scatter4, which exist on "
                    f"{_offering('has_gather4')} only, not {target.name}", info.gather_sites[0],
                    f"compile with --arch {_offering('has_gather4')}")


def _offering(feature: str) -> str:
    """The known targets that have `feature`, e.g. 'sm_100a'."""
    return " or ".join(t.name for t in TARGETS.values() if getattr(t, feature))
