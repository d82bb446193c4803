"""Broker life cycle, as the controller and the processes see it (ClusterControlManager,
BrokerHeartbeatManager and ReplicationControlManager#handleBroker*, Kafka 4.4.0): registration
(clean or unclean restart, refused duplicates and their retry), unfencing, fencing, controlled
shutdown, crashes, heartbeat sessions and their expiry, metadata syncs and ticks. Each handler
updates the registry, then visits every partition hosting the broker: the controller's decision
for that partition (controller.replication) and the broker process's own effect (broker.leader).

Handlers take the Cluster (`cl`) and the event; they are listed in cluster.EVENTS.
"""
from __future__ import annotations
from typing import Any

from . import channels
from .broker import leader, storage
from .controller import replication
from .messages import LEADER, NO_LEADER, PendingRegistration
from .registry import Broker


class Reject(Exception):
    """An input row the engine cannot apply; the message is the `rejected.reason`."""


def set_sess_next(cl) -> None:
    to = cl.config.session_timeout_ms
    best = None
    for br in cl.brokers.values():
        e = br.sess_expiry(to)
        if e is not None and (best is None or e < best):
            best = e
    cl.sess_next = best


def sess_touch(cl, br: Broker, seq: int, ts: int, running: bool) -> None:
    """A contact from broker br (registration or heartbeat): its session is (re)opened for its
    registered epoch (ClusterControlManager#trackBrokerHeartbeat)."""
    br.sess_epoch = br.epoch
    br.sess_last = None if running else ts
    br.sess_seq = seq
    set_sess_next(cl)


def sess_stop(cl, br: Broker, seq: int, ts: int) -> None:
    """The broker process stops heartbeating at ts: the session now runs out."""
    if br.sess_epoch >= 0 and br.sess_last is None:
        br.sess_last = ts
        br.sess_seq = seq
        set_sess_next(cl)


def sess_close(cl, br: Broker) -> None:
    br.sess_epoch = -1
    br.sess_last = None
    set_sess_next(cl)


def expire_sessions(cl, ts: int) -> None:
    """Every session expiring at or before ts, in (time, broker) order.
    ReplicationControlManager#maybeFenceOneStaleBroker (4.4.0): the expired tracker entry is
    removed; if it is the broker's registered epoch the broker is fenced (handleBrokerFenced:
    ISR removals, then BROKER_REGISTRATION_CHANGE_RECORD {fenced: 1}) - even when it is already
    fenced (seen on a real cluster after a controlled shutdown). A registration refused
    DUPLICATE_BROKER_REGISTRATION meanwhile is retried by the broker (every second) and
    accepted right after (modelled at the expiry time)."""
    to = cl.config.session_timeout_ms
    while True:
        due = []
        for br in cl.brokers.values():
            e = br.sess_expiry(to)
            if e is not None and e <= ts:
                due.append((e, br.id))
        if not due:
            break
        t, b = min(due)
        br = cl.brokers[b]
        cl.catch_up(b, t)
        old_epoch, seq = br.sess_epoch, br.sess_seq
        sess_close(cl, br)
        if br.registered and br.epoch == old_epoch:
            if cl.emit_global:
                cl.emit_at("admin", {"type": "BrokerFence", "broker": b, "result": "NONE",
                                       "detail": f"Fencing broker {b} at epoch {old_epoch} because its session "
                                                 f"has timed out."}, None, None, seq, t)
            fence(cl, br, seq, t, timer=True)
        if br.pend is not None:
            accept_pending(cl, br, br.pend.seq, t, timer=True)
    set_sess_next(cl)


def broker_register(cl, ev):
    b, be, seq, ts = ev["broker"], ev["broker_epoch"], ev["seq"], ev["ts_ms"]
    pbe = ev.get("previous_broker_epoch")
    br = cl.brokers.get(b)
    if br is not None and br.retry_epoch >= 0 and be == br.retry_epoch:
        # the recorded retry of a registration the broker's retry loop already got accepted
        if cl.emit_global:
            cl.emit_at("admin", {"type": "BrokerRegister", "broker": b, "result": "NONE",
                                   "detail": f"retry: epoch {be} was registered when the previous session "
                                             "expired"}, None, None, seq, ts)
        return
    if br is not None and br.epoch >= 0 and be <= br.epoch:
        raise Reject(f"broker_epoch {be} is not above broker {b}'s current epoch {br.epoch} "
                     "(epoch going backwards)")
    to = cl.config.session_timeout_ms
    if br is not None and br.registered:
        if to > 0 and br.sess_last is None and br.sess_epoch == br.epoch:
            # a new process is starting: the old one has stopped heartbeating by now
            sess_stop(cl, br, seq, ts)
        if br.session_valid(to, ts):
            # ClusterControlManager#registerBroker (4.4.0): a new incarnation while the
            # previous one's session is valid (BrokerHeartbeatTracker#hasValidSession, fenced
            # or not) is refused; the broker retries until the session expired.
            if cl.emit_global:
                cl.emit_at("admin", {"type": "BrokerRegister", "broker": b,
                                       "result": "DUPLICATE_BROKER_REGISTRATION",
                                       "detail": "Another broker is registered with that broker id. If the "
                                                 "broker was recently restarted this should self-resolve once "
                                                 "the heartbeat manager expires the broker's session."},
                             None, None, seq, ts)
            if to > 0:
                br.pend = PendingRegistration(seq, be, pbe)
                br.pend_unfence = False
            return
    register(cl, b, be, pbe, seq, ts, timer=False)


def register(cl, b: int, be: int, pbe, seq: int, ts: int, timer: bool) -> None:
    br = cl.brokers.get(b)
    if br is None:
        br = cl.brokers[b] = Broker(b)
    # SPEC §4 (KIP-966): clean iff the clean-shutdown file carried the registered epoch
    clean = pbe is not None and pbe >= 0 and pbe == br.epoch
    first = not br.registered
    br.epoch = be
    br.fenced = True
    br.in_cs = False
    br.registered = True
    br.alive = True
    br.proc_epoch = be
    br.pend = None
    br.retry_epoch = -1
    sess_touch(cl, br, seq, ts, running=True)
    cl.log_broker_change(seq, br, timer)
    if cl.emit_global:
        cl.emit_at("admin", {"type": "BrokerRegister", "broker": b, "result": "NONE",
                               "detail": "first registration" if first else
                               ("clean restart" if clean else "unclean restart")}, None, None, seq, ts)
    for p in cl.hosted(b):
        cl.frame(p, seq, ts, timer)
        rep = p.reps.get(b)
        if rep is not None:
            storage.process_stopped(p, rep)
        if not clean and (b in p.isr or b in p.elr):
            # A17 handleBrokerUncleanShutdown
            replication.leave_isr(p, b, "BrokerRegister", f"broker {b} restarted after an unclean shutdown",
                                  unclean_shutdown=True)
        if cl.config.md_immediate and b in p.replicas:
            channels.apply_current(p, b)
        cl.end(p)


def heartbeat_broker(cl, ev, what: str) -> Broker | None:
    """The broker of a heartbeat-carried request (BrokerUnfence, BrokerControlledShutdown).
    ClusterControlManager#checkBrokerEpoch answers a broker with no registration
    STALE_BROKER_EPOCH "No broker registration found for broker id N" (an admin row)."""
    b = ev["broker"]
    br = cl.brokers.get(b)
    if br is None or not br.registered:
        if cl.emit_global:
            cl.emit_at("admin", {"type": what, "broker": b, "result": "STALE_BROKER_EPOCH",
                                   "detail": f"No broker registration found for broker id {b}"},
                         None, None, ev["seq"], ev["ts_ms"])
        return None
    return br


def broker_unfence(cl, ev):
    br = cl.brokers.get(ev["broker"])
    if br is not None and br.pend is not None:
        # the new incarnation is still retrying its registration: unfenced once accepted
        br.pend_unfence = True
        return
    br = heartbeat_broker(cl, ev, "BrokerUnfence")
    if br is None:
        return
    sess_touch(cl, br, ev["seq"], ev["ts_ms"], running=br.alive)
    unfence(cl, br, ev["seq"], ev["ts_ms"], timer=False)


def unfence(cl, br: Broker, seq: int, ts: int, timer: bool) -> None:
    br.fenced = False
    cl.log_broker_change(seq, br, timer)
    b = br.id
    for p in cl.hosted(b):
        cl.frame(p, seq, ts, timer)
        if p.leader == NO_LEADER:     # b a replica or not (a removed one still hosting): A15 below
            replication.on_broker_unfenced(p, b)
        cl.end(p)
    # A15: Kafka runs the election of every leaderless partition, not only of b's
    # (RCM#handleBrokerUnfenced over brokersToIsrs.partitionsWithNoLeader()): one whose topic
    # allows unclean election and has a live replica gets it now, not at the periodic task. Only
    # those with an acceptable replica can get a leader (and only they are decoded in a bucket)
    for p in cl.leaderless_electable(replication.acceptable_fn(cl.brokers)):
        if b in p.indexed or not replication.elects_on_unfence(p, b):
            continue        # b's own were visited above; a partition nothing changes is not visited
        cl.frame(p, seq, ts, timer)
        replication.on_broker_unfenced(p, b)
        cl.end(p)


def broker_fence(cl, ev):
    br = cl.broker_of(ev)
    if br.fenced or not br.in_cs:
        # a session-timeout fence (also the second fence of an already fenced epoch): the
        # tracker entry is gone. A fence that ends a controlled shutdown (SHUTDOWN_NOW) keeps it.
        sess_close(cl, br)
    fence(cl, br, ev["seq"], ev["ts_ms"], timer=False)
    if br.pend is not None and br.sess_epoch < 0:
        accept_pending(cl, br, ev["seq"], ev["ts_ms"], timer=False)


def accept_pending(cl, br: Broker, seq: int, ts: int, timer: bool) -> None:
    """The refused registration's retry, once the old session is gone (the broker retries
    every second; modelled at the moment the session ends)."""
    pend: Any = br.pend
    _, be, pbe = pend
    unf = br.pend_unfence
    br.pend = None
    br.pend_unfence = False
    register(cl, br.id, be, pbe, seq, ts, timer=timer)
    br.retry_epoch = be
    if unf:
        sess_touch(cl, br, seq, ts, running=True)
        unfence(cl, br, seq, ts, timer=timer)


def fence(cl, br: Broker, seq: int, ts: int, timer: bool) -> None:
    br.fenced = True
    cl.log_broker_change(seq, br, timer)
    b = br.id
    for p in cl.hosted(b):
        cl.frame(p, seq, ts, timer)
        if b in p.isr:
            # A14: out of every ISR; re-elect without b
            replication.leave_isr(p, b, "BrokerFence", f"broker {b} fenced" + (" (session expired)" if timer else ""))
        cl.end(p)


def broker_controlled_shutdown(cl, ev):
    br = heartbeat_broker(cl, ev, "BrokerControlledShutdown")
    if br is None:
        return
    if br.alive:
        sess_touch(cl, br, ev["seq"], ev["ts_ms"], running=True)
    b = br.id
    if not br.fenced:
        br.in_cs = True     # A16: CONTROLLED_SHUTDOWN (or SHUTDOWN_NOW: same effect on partitions)
        cl.log_broker_change(ev["seq"], br)
    for p in cl.hosted(b):
        cl.begin(p, ev["seq"], ev["ts_ms"])
        if b in p.isr:
            # A16
            replication.leave_isr(p, b, "BrokerControlledShutdown", f"broker {b} controlled shutdown")
        cl.end(p)


def broker_crash(cl, ev):
    br = cl.broker_of(ev)
    b = br.id
    clean = bool(ev.get("clean"))
    br.alive = False
    sess_stop(cl, br, ev["seq"], ev["ts_ms"])
    if br.pend is not None:
        # the new process stopped before its registration was accepted: no more retries
        br.pend = None
        br.pend_unfence = False
    for p in cl.hosted(b):
        cl.begin(p, ev["seq"], ev["ts_ms"])
        rep = p.reps.get(b)
        if rep is not None:
            storage.process_stopped(p, rep)
            if not clean:
                p.unclean[b] = ev["seq"]
            p.inv.dirty = True
        cl.end(p)


def replica_log_loss(cl, ev):
    p = cl.partition_of(ev)
    b = ev["broker"]
    rep = p.reps.get(b)
    if rep is None:
        raise Reject(f"broker {b} has no replica of {p.topic}-{p.partition}")
    br = cl.brokers.get(b)
    if br is not None and br.alive:
        raise Reject(f"broker {b} is running; ReplicaLogLoss must follow its BrokerCrash")
    cl.begin(p, ev["seq"], ev["ts_ms"])
    storage.lose_log_suffix(p, rep, ev["log_end_offset"])
    cl.end(p)


def metadata_sync(cl, ev):
    br = cl.broker_of(ev)
    b = br.id
    up_to = ev.get("up_to_seq")
    if not br.alive:
        for p in cl.hosted(b):
            cl.begin(p, ev["seq"], ev["ts_ms"])
            cl.end(p)
        return
    if not cl.config.md_immediate:
        if b not in cl.views:
            cl.views[b] = dict(cl.reg_base)
        view = cl.views[b]
        start = cl.view_seq.get(b, -1)
        for e in cl.reg_log:
            if e.seq > start and (up_to is None or e.seq <= up_to):
                view[e.broker] = e.reg
        cl.view_seq[b] = max(start, up_to if up_to is not None else ev["seq"])
        # entries every broker has seen are no longer needed
        low = min((cl.view_seq.get(x, -1) for x in cl.brokers), default=-1)
        if cl.reg_log and cl.reg_log[0].seq <= low:
            for e in cl.reg_log:
                if e.seq <= low:
                    cl.reg_base[e.broker] = e.reg
            cl.reg_log = [e for e in cl.reg_log if e.seq > low]
    for p in cl.hosted(b):
        cl.begin(p, ev["seq"], ev["ts_ms"])
        if not cl.config.md_immediate:
            channels.sync_broker(p, b, up_to)
        cl.end(p)


def tick(cl, ev):
    """The leader's ISR-expiration check (Kafka's `isr-expiration` task, `Partition.maybeShrinkIsr`)
    at ts_ms: on `broker`'s leader partitions (no broker: every leader), narrowed to one topic or
    one partition when the row names them. Every partition in scope is visited (its due timers
    fire, it is touched), so a recording that logs each partition's own check (the metadata import
    writes one per leader-made shrink) names the partition: a broker-wide row costs a visit of all
    its partitions."""
    b = ev.get("broker")
    topic, pid = ev.get("topic"), ev.get("partition")
    if b is not None:
        cl.broker_of(ev)
    if pid is not None:
        parts = [cl.partition_of(ev)]
    elif b is None:
        parts = ([cl.part(k) for k in cl.topic_keys(topic)] if topic is not None
                 else cl.all_partitions())
    else:
        parts = cl.hosted(b)
    if topic is not None and pid is None:
        parts = [p for p in parts if p.topic == topic]
    for p in parts:
        cl.begin(p, ev["seq"], ev["ts_ms"])
        for rep in list(p.reps.values()):
            if rep.role == LEADER and (b is None or rep.broker == b):
                br = cl.brokers.get(rep.broker)
                if br is not None and br.alive:
                    leader.maybe_shrink(p, rep)
        cl.end(p)

