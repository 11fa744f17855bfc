"""Interleaving: which warp runs next, and when the TMA engine completes a transfer.

Deterministic by default (warps round-robin, each transfer lands one step after issue). With a
seed, both the next warp and each transfer's latency are random, so `explore=N` runs N
different legal interleavings; a failure reports its seed to replay it.
"""

from __future__ import annotations

from .machine import CTA, Blocked
from .state import ProtocolError


def run_cta(cta: CTA, rng) -> None:
    if cta.trace is not None:
        cta.trace.name_tracks(cta.cta, cta.warps)
    programs = {w.index: cta.program(w) for w in cta.warps}
    blocked: dict[int, Blocked] = {}
    order = list(programs)
    turn = 0
    while programs or cta.in_flight:
        cta.step += 1
        landed = [t for t in cta.in_flight if t.due <= cta.step]
        for t in landed if rng is None else _shuffled(landed, rng):
            _complete(cta, t)
        runnable = [i for i in order if i in programs and (i not in blocked or blocked[i].ready())]
        if not runnable:
            if cta.in_flight:
                cta.step = min(t.due for t in cta.in_flight) - 1   # idle until the engine delivers
                continue
            raise _deadlock(cta, blocked)
        if rng is None:
            index = runnable[turn % len(runnable)]
            turn += 1
        else:
            index = runnable[int(rng.integers(len(runnable)))]
        blocked.pop(index, None)
        try:
            event = next(programs[index])
        except StopIteration:
            del programs[index]
            if not programs:
                _check_exit(cta)
            continue
        if isinstance(event, Blocked):
            blocked[index] = event


def _check_exit(cta: CTA) -> None:
    """Every warp has exited: a load nobody waited for may still be landing in freed smem.

    Judged by the protocol, not by this run's timing: the load's phase must have been observed
    by a successful wait, whatever the engine's latency happened to be.
    """
    for key, (phase, load) in cta.fed.items():
        if cta.observed.get(key, 0) <= phase:
            raise ProtocolError("E412", f"CTA {cta.cta} may exit with a TMA load in flight: no wait observes "
                                f"phase {phase} of mbarrier '{key[0]}[{key[1]}]'", load.span,
                                ["wait on the barrier (parity of that phase) before the kernel ends"])


def _complete(cta: CTA, transfer) -> None:
    cta.in_flight.remove(transfer)
    transfer.apply()
    transfer.finished = True
    if cta.trace is not None:
        where = transfer.span.location() if transfer.span else ""
        cta.trace.transfer(cta.cta, transfer.kind, transfer.issued, cta.step, transfer.nbytes, where)


def _shuffled(items, rng):
    items = list(items)
    rng.shuffle(items)
    return items


def _deadlock(cta: CTA, blocked: dict[int, Blocked]) -> ProtocolError:
    notes = []
    for index, b in sorted(blocked.items()):
        warp = cta.warps[index]
        where = b.op.span.location() if b.op.span else "?"
        notes.append(f"{cta.who(warp)} waits at {where} on {b.what}")
    first = blocked[min(blocked)].op.span if blocked else None
    return ProtocolError("E401", f"deadlock in CTA {cta.cta}: every live warp is blocked and no copy is in flight",
                         first, notes)
