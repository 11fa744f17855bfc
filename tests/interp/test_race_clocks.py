"""The race detector's clocks (interp/races.py) stay the size of what can still race.

Every TMA transfer and wgmma is an agent of its own; before `collect` every clock kept an entry
for every agent it had heard of, and each transfer copied its issuer's clock, so a run of n
transfers held n² entries (a 194-head attention backward ran out of 16 GB in the fuzzer)."""

from __future__ import annotations

import pytest

from tmalang.interp.races import RaceDetector
from tmalang.interp.state import ProtocolError

WARP = ("warp", 0, 4)
SLOT = ("ring.a", 0, 0)


def _ring(races: RaceDetector, n: int) -> None:
    """n loads into one slot, each read by the warp after it observed the load's phase."""
    for i in range(n):
        load = races.issue(WARP)
        races.access(SLOT, load, True, None, None, "the TMA load")
        races.release_to_phase(load, (0, "full", 0, i))
        races.acquire_phase(WARP, (0, "full", 0, i))
        races.access(SLOT, WARP, False, None, None, "warp 4")


@pytest.mark.parametrize("n", [2000, 8000])
def test_a_long_ring_keeps_small_clocks(n):
    """Whatever the run's length: at most a collection period's transfers (256) have clocks, each
    at most the period's entries."""
    races = RaceDetector()
    _ring(races, n)
    assert len(races.clock(WARP)) < 256 + 16 and len(races.clocks) < 256 + 16
    assert sum(len(c) for c in races.clocks.values()) < 256 * 256
    assert len(races.phases) <= 3
    assert races.knows_phase(WARP, (0, "full", 0, n - 1)) and races.knows_phase(WARP, (0, "full", 0, 0))
    assert not races.knows_phase(WARP, (0, "full", 0, n))


def test_collected_clocks_still_find_a_race():
    """After thousands of collected transfers, a load that nothing orders after the warp's last
    read of the slot races with it."""
    races = RaceDetector()
    _ring(races, 3000)
    unordered = RaceDetector.issue(races, ("warp", 0, 0))   # issued by a warp that observed nothing
    with pytest.raises(ProtocolError) as race:
        races.access(SLOT, unordered, True, None, None, "the unordered load")
    assert race.value.code == "E405" and "the unordered load writes it" in race.value.message


def test_reads_ordered_after_earlier_reads_replace_them():
    races = RaceDetector()
    _ring(races, 1)
    for _ in range(100):
        races.access(SLOT, WARP, False, None, None, "warp 4")
    assert len(races.history[SLOT]) == 2        # the load's write and the latest read
