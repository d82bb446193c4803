"""Timers on event time (SPEC §4). Periodic tasks fire at multiples of their interval; an acks=all
produce times out at its deadline. Each partition has fired every timer due at or before
`p.tdone`; `advance(p, ts)` fires the rest up to ts, in time order (ties in TimerKind order).

A timer's rows carry the timer's time and the seq of the partition's latest event.
"""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from .partition import Partition

from .broker import leader as _leader
from .controller import admin as _admin
from .messages import LEADER, NO_LEADER, Timer, TimerKind

ISR, REBALANCE, UNCLEAN, PRODUCE = (TimerKind.ISR_EXPIRATION, TimerKind.LEADER_REBALANCE,
                                    TimerKind.UNCLEAN_ELECTION, TimerKind.PRODUCE_TIMEOUT)


_FAR = 1 << 62


def _ceil_to(t: int, iv: int) -> int:
    return -(-t // iv) * iv


def next_timer(p: Partition, los: list, hi: int) -> Timer | None:
    """The earliest due timer or None. Periodic kinds fire at multiples of their interval in
    [los[kind], hi]; produce deadlines at any time <= hi."""
    cfg = p.cl.config
    best = None
    brokers = p.cl.brokers
    for rep in p.reps.values():
        if rep.role != LEADER:
            continue
        br = brokers.get(rep.broker)
        if br is None or not br.alive:
            continue
        if cfg.isr_interval_ms > 0:
            t = _leader.shrink_due(p, rep, los[ISR])
            if t is not None:
                t = _ceil_to(t, cfg.isr_interval_ms)
                if t <= hi and (best is None or (t, ISR) < best[:2]):
                    best = Timer(t, ISR, rep.broker)
        for pr in rep.purgatory:
            if pr.deadline <= hi and (best is None or (pr.deadline, PRODUCE) < best[:2]):
                best = Timer(pr.deadline, PRODUCE, rep.broker)
    if cfg.auto_rebalance and p.replicas and p.leader != p.replicas[0]:
        t = _ceil_to(los[REBALANCE], cfg.rebalance_interval_ms)
        if t <= hi and (best is None or (t, REBALANCE) < best[:2]) and _admin.preferred_possible(p):
            best = Timer(t, REBALANCE, None)
    if p.conf.unclean and p.leader == NO_LEADER and p.replicas:
        t = _ceil_to(los[UNCLEAN], cfg.unclean_interval_ms)
        if t <= hi and (best is None or (t, UNCLEAN) < best[:2]):
            best = Timer(t, UNCLEAN, None)
    return best


def fire(p, timer: Timer) -> None:
    kind = timer.kind
    if kind is ISR:
        _leader.maybe_shrink(p, p.reps[timer.broker])
    elif kind is REBALANCE:
        _admin.auto_leader_rebalance(p)
    elif kind is UNCLEAN:
        _admin.periodic_unclean_election(p)
    else:
        _leader.expire_produces(p, p.reps[timer.broker], timer.time)


def advance(p: Partition, ts: int) -> None:
    """Fire every timer due at or before `ts`, in time order."""
    td = p.tdone
    if ts <= td:
        return
    # fast path: no periodic multiple crossed and no parked produce due. p.t_wake is at most the
    # deadline of every parked produce (set here from all of them, lowered when one is parked;
    # removals keep it a bound), so ts below it proves the loop below would find none due.
    if ts < p.t_next:
        if ts < p.t_wake:
            p.tdone = ts
            return
        wake = _FAR
        for rep in p.reps.values():
            purg = rep.purgatory
            if purg and purg[0].deadline <= ts:
                break
            for pr in purg:
                if pr.deadline < wake:
                    wake = pr.deadline
        else:
            p.t_wake = wake
            p.tdone = ts
            return
    los = [td + 1] * 3
    while True:
        timer = next_timer(p, los, ts)
        if timer is None:
            break
        p.now = timer.time
        p.cur_seq = p.last_seq
        fire(p, timer)
        p.inv.after_event(p)
        if timer.kind is not PRODUCE:
            los[timer.kind] = timer.time + 1     # a periodic task fires once per multiple
    p.tdone = ts
    set_t_next(p)


def set_t_next(p: Partition) -> None:
    """The first periodic multiple after tdone (the fast path of advance)."""
    cfg = p.cl.config
    td = p.tdone
    t = (td // cfg.rebalance_interval_ms + 1) * cfg.rebalance_interval_ms
    u = (td // cfg.unclean_interval_ms + 1) * cfg.unclean_interval_ms
    if u < t:
        t = u
    iv = cfg.isr_interval_ms
    if iv:
        i = (td // iv + 1) * iv
        if i < t:
            t = i
    p.t_next = t


def next_due(p: Partition, far: int) -> int | None:
    lo = p.tdone + 1
    nt = next_timer(p, [lo, lo, lo], far)
    return None if nt is None else nt.time
