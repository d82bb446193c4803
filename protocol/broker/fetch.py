"""A follower fetch, both ends of the wire in one exchange: the follower's request
(follower.fetch_request), the leader serving it (C1-C3, B3), the follower applying the answer
(C6-C8), then the leader's ISR expansion and high watermark (B7, B6) -- in Kafka's order, split
the way Kafka splits it (Partition.scala at the leader, AbstractFetcherThread at the follower).
"""
from __future__ import annotations

from . import follower, leader

_fetch_row = follower.fetch_row
_emit = follower.emit_fetch


def fetch(p, ev: dict) -> None:
    b = ev["broker"]
    brokers = p.cl.brokers
    br = brokers.get(b)
    frep = p.reps.get(b)
    if br is None or not br.alive:
        _emit(p, _fetch_row(b, ev.get("target"), ev.get("fetch_offset")), "NOOP", None)
        return
    target, off, lfe, cle, bepoch = follower.fetch_request(p, ev, frep, br)
    if target is None or target == b:
        _emit(p, _fetch_row(b, target, off), "NOOP", frep)
        return
    tbr = brokers.get(target)
    if tbr is None or not tbr.alive:
        _emit(p, _fetch_row(b, target, off), "NOOP", frep)   # nobody answers: the fetcher backs off
        return
    lrep = p.reps.get(target)
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
    if leader.fetcher_epoch_stale(p, target, b, bepoch):
        _emit(p, _fetch_row(b, target, off), "NOT_LEADER_OR_FOLLOWER", frep)
        return
    resp_hw = llog.hwm
    leader_leo = llog.leo
    fs = lrep.followers[b]
    leo_changed = leader.update_follower_state(p, fs, off, leader_leo, bepoch)
    if frep is not None:
        follower.apply_records(frep.log, llog, off, leader_leo, resp_hw)
    # B7 then B6 at the leader
    st = lrep.isr_state
    if not st.is_pending and b not in st.isr:
        leader.maybe_expand(p, lrep, b, fs)
    if leo_changed:
        leader.maybe_increment_hw(p, lrep, "Fetch")
    if p.cl.config.fetch_all:
        _emit(p, _fetch_row(b, target, off), "OK", frep)
