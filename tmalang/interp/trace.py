"""The interpreter's timeline is the Chrome/Perfetto trace of contract/trace.py, shared with the
GPU's hardware timeline (runtime/timeline.py); this name stays for code that imports it here."""

from ..contract.trace import ENGINE_TRACK, SCHEDULE_PIDS, Trace

__all__ = ["ENGINE_TRACK", "SCHEDULE_PIDS", "Trace"]
