"""Verification: the kernel's protocol checked for every schedule of one launch, not a sample.

    verdict = verify(kernel_ir, manifest, *arrays, dims=None, ctas=None)

How (docs/interpreter.md, "Verification"):
1. record.py: one interpreted run records each warp's and each transfer's synchronisation
   events. The interpreter checks that run whole: races, fences, bytes, exits.
2. happens_before.py: checks on that run's happens-before order prove that every schedule takes
   every event in its recorded phase; then no schedule deadlocks, and the recorded run's race
   verdict holds for all of them. A failed check is shown by a schedule (schedule.py) replayed
   on the model of the events (model.py), reported in the interpreter's words with a Perfetto
   trace (report.py): E401, E402, E403, E409, E533, and E425 (an event whose phase depends on
   the schedule). explore.py searches the model's states instead, to check the first method.
3. certificate.py: what a verified launch proved, for the independent certificate_check.py.
4. launches.py / sweep.py: a stated set of launches (trip counts, grids), each verified.

The stages, in order: check.py (one launch), sweep.py (a set of them).
"""

from .check import METHODS, SCHEDULE_DEPENDENT, Verdict, verify
from .sweep import Sweep, verify_base_launches, verify_sweep

__all__ = ["METHODS", "SCHEDULE_DEPENDENT", "Sweep", "Verdict", "verify", "verify_base_launches", "verify_sweep"]
