"""A follower fetch, both ends of the wire in one exchange: the follower's request
(follower.fetch_request), the leader serving it (C1-C3, B3), the follower applying the answer
(C6-C8), then the leader's ISR expansion and high watermark (B7, B6) -- in Kafka's order, split
the way Kafka splits it (Partition.scala at the leader, AbstractFetcherThread at the follower).

`steady_request` is the fast path of the common fetch (a modelled request by a follower of a
live leader in the same leader epoch, on the leader's latest epoch and not past its LEO): it
proves that fetch_request, fetch_error and check_fetch_position would pass the request through,
without running them. Everything after those checks is the same code for both paths.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..messages import FOLLOWER, LEADER
from ..replica import Replica
if TYPE_CHECKING:
    from ..partition import Partition
from . import follower, leader

_fetch_row = follower.fetch_row
_emit = follower.emit_fetch
_update_follower_state = leader.update_follower_state
_apply_records = follower.apply_records
_fetcher_epoch_stale = leader.fetcher_epoch_stale


def steady_request(p: Partition, ev: dict, b: int, frep: Optional[Replica], brokers: dict) -> Optional[Replica]:
    """The leader's replica when the fast path holds, else None (the full path decides). Holds
    when: the row records none of the request's columns but perhaps its target, and that one
    is frep's leader (fetch_request takes the rest from the model: offset = its LEO, last fetched
    epoch = its latest epoch, current leader epoch = its leader epoch; a matching target is no
    drift), frep follows a live leader other than b whose
    replica leads in that leader epoch (C1 passes) and has b as a follower (C2), and the
    follower is not past the leader's LEO (C3 in range; a LEO is never negative) with either
    both logs' latest epochs equal (C3: no divergence) or no epoch in the follower's log at all
    (last fetched epoch -1: C3 has no epoch to check). The last case is every fetch of a
    follower whose leader has taken no produce yet, so most fetches early in a stream and, in a
    large cluster, most fetches of a partition's first seconds."""
    if frep is None or frep.role != FOLLOWER:
        return None
    if (ev["fetch_offset"] is not None or ev["last_fetched_epoch"] is not None
            or ev["current_leader_epoch"] is not None or ev["broker_epoch"] is not None):
        return None
    target = frep.leader
    t = ev["target"]
    if (t is not None and t != target) or target == b:
        return None
    tbr = brokers.get(target)
    if tbr is None or not tbr.alive:
        return None
    lrep = p.reps.get(target)
    if lrep is None or lrep.role != LEADER or lrep.leader_epoch != frep.leader_epoch or frep.leader_epoch < 0:
        return None
    if b not in lrep.followers:
        return None
    fcache = frep.log.cache
    if fcache:
        lcache = lrep.log.cache
        if not lcache or fcache[-1][0] != lcache[-1][0]:
            return None
    if frep.log.leo > lrep.log.leo:
        return None
    return lrep


def fetch(p: Partition, ev: dict) -> None:
    b = ev["broker"]
    brokers = p.cl.brokers
    br = brokers.get(b)
    frep = p.reps.get(b)
    if br is None or not br.alive:
        _emit(p, _fetch_row(b, ev.get("target"), ev.get("fetch_offset")), "NOOP", None)
        return
    slrep = steady_request(p, ev, b, frep, brokers)
    if slrep is not None and frep is not None:
        serve(p, b, frep, slrep, frep.leader, frep.log.leo, br.proc_epoch)
        return
    target, off, lfe, cle, bepoch = follower.fetch_request(p, ev, frep, br)
    if target is None or target == b:
        _emit(p, _fetch_row(b, target, off), "NOOP", frep)
        return
    tbr = brokers.get(target)
    if tbr is None or not tbr.alive:
        _emit(p, _fetch_row(b, target, off), "NOOP", frep)   # nobody answers: the fetcher backs off
        return
    lrep: Any = p.reps.get(target)
    err = leader.fetch_error(lrep, b, cle)
    if err is not None:
        _emit(p, _fetch_row(b, target, off), err, frep)
        return
    llog = lrep.log
    pos = leader.check_fetch_position(llog, lfe, off)
    if pos is not None:
        row = _fetch_row(b, target, off)
        if pos is leader.OUT_OF_RANGE:
            follower.out_of_range(p, row, frep, llog)
            return
        row["diverging_epoch"], row["diverging_end_offset"] = pos
        if frep is not None:
            follower.truncate_on_divergence(p, frep, pos[0], pos[1], row)
        _emit(p, row, "DIVERGING_EPOCH", frep)
        return
    serve(p, b, frep, lrep, target, off, bepoch)


def serve(p: Partition, b: int, frep: Optional[Replica], lrep: Replica, target: int, off: int, bepoch: Any) -> None:
    """A fetch the leader answers with records (C1-C3 passed): B3 broker-epoch check, the
    leader's follower state, the follower's append (C8), then B7 and B6 at the leader."""
    if _fetcher_epoch_stale(p, target, b, bepoch):
        _emit(p, _fetch_row(b, target, off), "NOT_LEADER_OR_FOLLOWER", frep)
        return
    llog = lrep.log
    resp_hw = llog.hwm
    leader_leo = llog.leo
    fs = lrep.followers[b]
    leo_changed = _update_follower_state(p, fs, off, leader_leo, bepoch)
    if frep is not None:
        _apply_records(frep.log, llog, off, leader_leo, resp_hw)
    # B7 then B6 at the leader (maybe_expand holds B7's own conditions: no pending change, b not in the ISR)
    leader.maybe_expand(p, lrep, b, fs)
    if leo_changed:
        leader.maybe_increment_hw(p, lrep, "Fetch")
    if p.cl.config.fetch_all:
        _emit(p, _fetch_row(b, target, off), "OK", frep)
