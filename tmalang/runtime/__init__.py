"""The tmalang GPU runtime: validating arguments and launching compiled kernels.

Importing it needs no GPU and no CUDA driver; only a launch does, and reports their absence
as a `LaunchError` (E210).
"""

from ..contract.binding import Binding, bind
from ..contract.errors import LaunchError
from .launch import Launcher

__all__ = ["Binding", "LaunchError", "Launcher", "bind"]
