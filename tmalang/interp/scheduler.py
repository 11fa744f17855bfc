"""Interleaving: which warp runs next, and when the TMA engine completes a transfer.

Deterministic by default (warps round-robin, each transfer lands one step after issue). With a
seed, both the next warp and each transfer's latency are random, so `explore=N` runs N
different legal interleavings; a failure reports its seed to replay it.
"""

from __future__ import annotations

from ..ir import ops
from .machine import CTA, Blocked
from .state import ProtocolError


def run_cluster(ctas: list[CTA], rng, more=None) -> None:
    """Run the CTAs of one cluster together: their warps interleave, their transfers land. (Or
    the CTAs of several clusters, each with its own: a dynamic kernel's CTAs share a tile counter.)
    `more`, when given, is asked before every step for CTAs to start now, given those so far (a
    grid of tiles whose CTAs start as room frees up, and may be canceled while they wait)."""
    ctas = list(ctas)
    programs: dict[tuple, object] = {}
    order: list[tuple] = []
    for cta in ctas:
        _start(ctas, cta, programs, order)
    blocked: dict[tuple, Blocked] = {}
    turn, step = 0, 0
    while True:
        for cta in more(ctas) if more is not None else ():
            ctas.append(cta)
            _start(ctas, cta, programs, order)
        if not programs and not any(c.in_flight for c in ctas):
            break
        step += 1
        for c in ctas:
            c.step = step
        landed = [(c, t) for c in ctas for t in c.in_flight if t.due <= step]
        for c, t in landed if rng is None else _shuffled(landed, rng):
            c.launch.observer.acting(("transfer", t))
            _complete(c, t)
        runnable = [k for k in order if k in programs and (k not in blocked or blocked[k].ready())]
        if not runnable:
            pending = [t.due for c in ctas for t in c.in_flight]
            if pending:
                step = min(pending) - 1   # idle until the engine delivers
                continue
            raise _deadlock(ctas, blocked)
        if rng is None:
            key = runnable[turn % len(runnable)]
            turn += 1
        else:
            key = runnable[int(rng.integers(len(runnable)))]
        blocked.pop(key, None)
        ctas[key[0]].launch.observer.acting(("warp", ctas[key[0]], ctas[key[0]].warps[key[1]]))
        try:
            event = next(programs[key])
        except StopIteration:
            del programs[key]
            if not any(k[0] == key[0] for k in programs):
                _check_exit(ctas[key[0]])
            continue
        if isinstance(event, Blocked):
            blocked[key] = event


def _start(ctas: list[CTA], cta: CTA, programs: dict, order: list) -> None:
    """Its warps join the programs the scheduler picks from (keyed by the CTA's place in `ctas`)."""
    if cta.trace is not None:
        cta.trace.name_tracks(cta.cta, cta.warps)
    i = ctas.index(cta)
    for w in cta.warps:
        programs[(i, w.index)] = cta.program(w)
        order.append((i, w.index))


def _check_exit(cta: CTA) -> None:
    """Every warp has exited: a load nobody waited for may still be landing in freed smem, and a
    tcgen05.commit may still arrive on a freed barrier.

    Judged by the protocol, not by this run's timing: the phase the load (or commit) fed must
    have been observed by a successful wait, whatever the engine's latency happened to be.
    """
    cta.exited = True
    for key, (phase, op) in cta.fed.items():
        if cta.observed.get(key, 0) <= phase:
            what = ("a TMA load" if isinstance(op, ops.TensorLoad) else "a bulk push" if isinstance(op, ops.BulkPush)
                    else "a tcgen05.commit")
            raise ProtocolError("E412", f"CTA {cta.cta} may exit with {what} in flight: no wait observes "
                                f"phase {phase} of mbarrier '{key[0]}[{key[1]}]'", op.span,
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


def _deadlock(ctas: list[CTA], blocked: dict[tuple, Blocked]) -> ProtocolError:
    notes = []
    for (position, index), b in sorted(blocked.items()):
        cta = ctas[position]
        where = b.op.span.location() if b.op.span else "?"
        prefix = f"CTA {cta.cta}: " if len(ctas) > 1 else ""
        notes.append(f"{prefix}{cta.who(cta.warps[index])} waits at {where} on {b.what}")
    first = blocked[min(blocked)].op.span if blocked else None
    where = f"CTA {ctas[0].cta}" if len(ctas) == 1 else f"the cluster of CTAs {ctas[0].cta}..{ctas[-1].cta}"
    return ProtocolError("E401", f"deadlock in {where}: every live warp is blocked and no copy is in flight",
                         first, notes)
