"""order_turns: each `turn` becomes named-barrier handoffs between the role's warpgroups.

Requires: every op the passes before it insert already in place (order_wgmma's fences, commits,
waits and role syncs, the slot releases of order_slot_release, the counted barriers of
schedule_barriers, the deferred releases of defer_mma_release), so that what ends up inside a
turn is final.
The roles a `by warpgroup` role became (one warpgroup each, `group` naming it) form one chain,
as the warpgroups of one role do. Guarantees, for a role of n >= 2 whole warpgroups that has turns: its warpgroups g = 0..n-1 get
named barrier ids B_g (after the ids 1..R the roles' `sync` uses, B_g = 1 + R + earlier turn
roles' warpgroups + g), each with count 256: the 128 threads of warpgroup g that sync on it
and the 128 of warpgroup g - 1 that arrive. Then
  - the role starts with warpgroup n - 1 arriving on B_0, so that warpgroup 0 goes first;
  - each turn's entry is `bar.sync B_g, 256` in warpgroup g (`in_warpgroup g`);
  - its exit, `bar.arrive B_(g+1) mod n, 256` in warpgroup g, stands right after the last op of
    the turn's block that holds a `wgmma_commit`: what follows (the `wgmma_wait`, the slot
    release, counter updates, anything written after the last mma) runs after the exit, so the
    next warpgroup issues its MMAs while this one's are still running. Without a commit the exit
    ends the block.
All the turns of a role share the one chain, so together they run in one order: warpgroup g's
k-th entry into any turn of the role follows warpgroup g - 1's k-th exit, and warpgroup 0's
(k+1)-th follows warpgroup n - 1's k-th.
Refused (E531, at the turn): in a role of several warpgroups, a `sync` left between entry and
exit, which would wait for warpgroups that wait for this one (the passes insert one before a slot
release whose slot the threads touched, or before a write into a tile a wgmma read; what orders
writes made before the turn, fence_proxy_writes puts before it). A one-warpgroup role of a `by
warpgroup` chain syncs its own 128 threads, which wait for no one: its turns may hold syncs.
A turn inside another (E527);
more than 16 named barrier ids in the CTA (E532).
"""

from __future__ import annotations

from ..diagnostics import error
from ..ir import ops
from ..targets.arch import Target

THREADS = 256    # a warpgroup's 128 threads sync on B_g, the previous warpgroup's 128 arrive
WARPGROUP = 4    # warps


def run(kernel: ops.KernelOp, target: Target) -> None:
    roles = ops.roles(kernel)
    next_id = 1 + len(roles)            # ids 1..R: the roles' own `sync` (backend/codegen.py)
    for chain in _chains(roles):
        turns = [o for role, _ in chain for o in ops.walk(role.body) if isinstance(o, ops.Turn)]
        if not turns:
            continue
        n = sum((role.last_warp - role.first_warp + 1) // WARPGROUP for role, _ in chain)
        ids = list(range(next_id, next_id + n))
        next_id += n
        if ids[-1] >= ops.NAMED_BARRIERS:
            raise error("E532", f"the turns of role '{chain[0][0].group or chain[0][0].symbol}' need named barriers "
                        f"{ids[0]}..{ids[-1]}, but a CTA has {ops.NAMED_BARRIERS} (0..{ops.NAMED_BARRIERS - 1})",
                        turns[0].span, f"block syncs use 0 and the {len(roles)} roles' syncs 1..{len(roles)}; each "
                        "warpgroup of a role with turns takes one more")
        for role, first in chain:
            last = (role.last_warp - role.first_warp + 1) // WARPGROUP - 1
            role.body = _region(role.body, ids, range(first, first + last + 1))
            if first + last == n - 1:   # the chain's last warpgroup lets the first one in
                start = next(i for i, o in enumerate(role.body) if not isinstance(o, (ops.AccDecl, ops.RowDecl)))
                role.body.insert(start, _in(last, ops.NamedBarArrive(ids[0], THREADS, span=turns[0].span)))


def _chains(roles: list[ops.RoleOp]) -> list[list[tuple[ops.RoleOp, int]]]:
    """The warpgroups that take turns together, as (role, its first warpgroup's place in the
    chain): a role's own warpgroups, or the one-warpgroup roles a `by warpgroup` role became."""
    chains: dict[str, list] = {}
    for role in roles:
        chain = chains.setdefault(role.group or f"@{role.symbol}", [])
        chain.append((role, sum((r.last_warp - r.first_warp + 1) // WARPGROUP for r, _ in chain)))
    return list(chains.values())


def _region(region: list[ops.Op], ids: list[int], places: range) -> list[ops.Op]:
    out: list[ops.Op] = []
    for o in region:
        if isinstance(o, ops.Turn):
            out += _lowered(o, ids, places)
            continue
        for r in o.regions():
            r[:] = _region(r, ids, places)
        out.append(o)
    return out


def _lowered(turn: ops.Turn, ids: list[int], places: range) -> list[ops.Op]:
    """The turn in a role whose warpgroup w holds place places[w] of the chain of len(ids)."""
    nested = next((o for o in ops.walk(turn.body) if isinstance(o, ops.Turn)), None)
    if nested is not None:
        raise error("E527", "turns cannot nest: the inner turn would wait for warpgroups that wait for the "
                    "outer one", nested.span)
    cut = _exit_point(turn.body)
    inside, after = turn.body[:cut], turn.body[cut:]
    if len(places) > 1:     # a one-warpgroup role's sync (a `by warpgroup` tile's) waits for no one else
        _refuse_role_wide(turn, inside)
    n = len(ids)
    entry = [_in(w, ops.NamedBarSync(ids[p], THREADS, span=turn.span)) for w, p in enumerate(places)]
    leave = [_in(w, ops.NamedBarArrive(ids[(p + 1) % n], THREADS, span=turn.span)) for w, p in enumerate(places)]
    return [*entry, *inside, *leave, *after]


def _exit_point(body: list[ops.Op]) -> int:
    """The index right after the last op of the block that holds a wgmma_commit (the block's
    length when none does)."""
    holds = [i for i, o in enumerate(body) if any(isinstance(x, ops.WgmmaCommit) for x in ops.walk([o]))]
    return holds[-1] + 1 if holds else len(body)


def _refuse_role_wide(turn: ops.Turn, inside: list[ops.Op]) -> None:
    sync = next((o for o in ops.walk(inside) if isinstance(o, ops.Sync)), None)
    if sync is None:
        return
    where = sync.span.location() if sync.span else "?"
    raise error("E531", f"this turn would hold a {sync.scope}-wide sync, which waits for the warpgroups that "
                f"wait for this turn to end (a hang)", turn.span,
                f"the compiler orders the statement at {where} with a sync: a slot release after threads "
                "touched the slot, or a write into a tile a wgmma read; keep only the mma work in the turn")


def _in(group: int, o: ops.Op) -> ops.InWarpgroup:
    return ops.InWarpgroup(group, [o], span=o.span)
