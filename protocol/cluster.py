"""The cluster as the engine sees it: the controller's broker registry, topic configs, every
broker process (alive or crashed), and the partitions. It routes each event to the
partitions it reaches and collects the output rows.

A Cluster can hold all partitions (the in-process engine) or one bucket of them (the Spark
engine): broker- and topic-scoped events are applied to every bucket's own copy of the
registry, so each partition sees the same world either way. Rows that belong to no
partition (admin rows of broker registrations, rejections of broker-scoped rows) are
emitted only by the Cluster with `emit_global=True`.
"""
from __future__ import annotations

from collections import defaultdict

from .config import ConfigError, EngineConfig, topic_config_error, validate_topic_config
from .invariants import Invariants
from .partition import NO_LEADER, ONLINE, PREFERRED, RECOVERED, UNCLEAN, Partition
from .log import runs_prefix
from .replica import LEADER, Replica

PARTITION_TYPES = frozenset({
    "CreatePartition", "Reassign", "ElectLeaders", "PartitionRecord", "ReplicaSnapshot", "ReplicaLogLoss",
    "AlterPartitionArrive", "AlterPartitionResponse", "Produce", "Fetch", "ListOffsets", "ConsumerFetch"})
BROKER_TYPES = frozenset({"BrokerRegister", "BrokerUnfence", "BrokerFence", "BrokerControlledShutdown",
                          "BrokerCrash", "MetadataSync", "Tick"})
TOPIC_TYPES = frozenset({"AlterConfig"})
EVENT_TYPES = PARTITION_TYPES | BROKER_TYPES | TOPIC_TYPES


# org.apache.kafka.common.protocol.Errors default messages (kafka-clients 4.4.0), used where the
# controller answers `new ApiError(error)` without a message.
_ERROR_MESSAGES = {
    "ELECTION_NOT_NEEDED": "Leader election not needed for topic partition.",
    "PREFERRED_LEADER_NOT_AVAILABLE": "The preferred leader was not available.",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "Eligible topic partition leaders are not available.",
    "NO_REASSIGNMENT_IN_PROGRESS": "No partition reassignment is in progress.",
}


def order_reject_reason(typ: str, seq: int, ts: int, last_seq: int, max_ts: int) -> str | None:
    """SPEC §2: seq strictly increases, ts_ms never decreases; the reason a row breaking that is dropped."""
    if seq <= last_seq:
        return (f"{typ} row seq {seq}: seq {seq} is not after the last applied seq "
                f"{last_seq} (duplicate or out of order); dropped")
    if ts < max_ts:
        return (f"{typ} row seq {seq}: ts_ms {ts} goes back before the stream's time "
                f"{max_ts} (ts_ms must not decrease with seq); dropped")
    return None


class Broker:
    """Controller registration (epoch, fenced, in controlled shutdown), the controller's heartbeat
    session of the broker, and the process's truth.

    Session (BrokerHeartbeatTracker, Kafka 4.4.0): the controller tracks the last contact of
    (broker id, broker epoch); a registration starts it, every heartbeat renews it, and it expires
    once more than `broker.session.timeout.ms` passed since the last contact (#isExpired:
    now > contact + timeout). A running broker process heartbeats continuously, so the engine
    models the session as renewed while the process runs; the heartbeats stop at its BrokerCrash
    (or, for a restart the stream gives without a BrokerCrash, at the new process's BrokerRegister)."""
    __slots__ = ("id", "epoch", "fenced", "in_cs", "registered", "alive", "proc_epoch",
                 "sess_epoch", "sess_last", "sess_seq", "pend", "pend_unfence", "retry_epoch")

    def __init__(self, bid: int):
        self.id = bid
        self.epoch = -1
        self.fenced = True
        self.in_cs = False
        self.registered = False
        self.alive = False
        self.proc_epoch = -1
        self.sess_epoch = -1        # epoch whose session the controller tracks (-1: none)
        self.sess_last = None       # last contact once heartbeats stopped; None: still heartbeating
        self.sess_seq = 0           # seq of the row that last changed the session (rows it causes)
        self.pend = None            # (seq, broker_epoch, previous_broker_epoch) of a refused registration
        self.pend_unfence = False   # the refused incarnation asked to be unfenced meanwhile
        self.retry_epoch = -1       # epoch accepted by the broker's retry (a recorded retry row is a no-op)

    def reg(self) -> tuple:
        return (self.epoch, self.fenced, self.in_cs, self.registered)

    def sess_expiry(self, timeout: int) -> int | None:
        """The first time the session counts as expired (None: none, or still heartbeating)."""
        if timeout <= 0 or self.sess_epoch < 0 or self.sess_last is None:
            return None
        return self.sess_last + timeout + 1

    def session_valid(self, timeout: int, ts: int) -> bool:
        """BrokerHeartbeatTracker#hasValidSession for the registered epoch at `ts`."""
        if timeout <= 0:
            return self.registered and not self.fenced
        if self.sess_epoch < 0 or self.sess_epoch != self.epoch:
            return False
        exp = self.sess_expiry(timeout)
        return exp is None or ts < exp

    def to_tuple(self):
        return (self.id, self.epoch, self.fenced, self.in_cs, self.registered, self.alive, self.proc_epoch,
                self.sess_epoch, self.sess_last, self.sess_seq, self.pend, self.pend_unfence, self.retry_epoch)

    def from_tuple(self, t) -> None:
        (_, self.epoch, self.fenced, self.in_cs, self.registered, self.alive, self.proc_epoch,
         self.sess_epoch, self.sess_last, self.sess_seq, pend, self.pend_unfence, self.retry_epoch) = t
        self.pend = tuple(pend) if pend is not None else None


class Out:
    """Output rows by table, drained by the driver."""
    __slots__ = ("tables",)

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = defaultdict(list)

    def add(self, table: str, row: dict) -> None:
        self.tables[table].append(row)

    def drain(self) -> dict[str, list[dict]]:
        t = self.tables
        self.tables = defaultdict(list)
        return dict(t)


class Reject(Exception):
    """An input row the engine cannot apply; the message is the `rejected.reason`."""


class Cluster:
    def __init__(self, config: EngineConfig, emit_global: bool = True, owns=None):
        self.config = config
        self.emit_global = emit_global
        self.owns = owns                  # predicate (topic, partition) -> bool; None: all
        self.brokers: dict[int, Broker] = {}
        self.topic_cfg: dict[str, dict[str, str]] = {}
        self.partitions: dict[tuple, Partition] = {}
        self.by_broker: dict[int, set] = defaultdict(set)
        self.by_topic: dict[str, set] = defaultdict(set)
        self.reg_log: list[tuple] = []              # (seq, broker, reg) for explicit metadata delivery
        self.reg_base: dict[int, tuple] = {}        # registrations folded out of reg_log (seen by all)
        self.views: dict[int, dict[int, tuple]] = {}  # broker -> its metadata cache of registrations
        self.view_seq: dict[int, int] = {}
        self.last_seq = 0
        self.max_ts = 0
        self.touched: set = set()
        self.out = Out()
        self.applied = 0
        self.rejected = 0
        self.sess_next = None       # earliest broker-session expiry (None: none pending)
        self._handlers = {t: getattr(self, "_" + t) for t in EVENT_TYPES}
        self._regview = _RegView(self.brokers)

    # ------------------------------------------------------------------ indexes
    def reindex(self, p: Partition) -> None:
        key = p.key
        now = p.hosts()
        for b in now:
            self.by_broker[b].add(key)
        for b, keys in self.by_broker.items():
            if b not in now:
                keys.discard(key)

    def hosted(self, b: int) -> list[Partition]:
        parts = self.partitions
        return [parts[k] for k in sorted(self.by_broker.get(b, ()))]

    def view_of(self, b: int) -> dict[int, tuple]:
        """Broker b's metadata cache of registrations (explicit delivery), else the controller's."""
        if self.config.md_immediate:
            return self._regview
        return self.views.get(b, {})

    def _log_reg(self, seq: int, br: Broker, timer: bool = False) -> None:
        if self.config.md_immediate:
            return
        entry = (seq, br.id, br.reg())
        if not timer:
            self.reg_log.append(entry)
            return
        # a broker-session timer's change carries the seq of the row that set the timer: keep the
        # log in seq order, and brokers that already synced past that seq see it at once
        i = len(self.reg_log)
        while i > 0 and self.reg_log[i - 1][0] > seq:
            i -= 1
        self.reg_log.insert(i, entry)
        for b, view in self.views.items():
            if self.view_seq.get(b, -1) >= seq:
                view[br.id] = entry[2]

    # ------------------------------------------------------------------ rows
    def emit_at(self, table: str, row: dict, topic, partition, seq, ts, idx=0) -> None:
        row.update(topic=topic, partition=partition, seq=seq, idx=idx, ts_ms=ts)
        self.out.add(table, row)

    def reject(self, ev: dict, raw: str | None, reason: str, scoped: bool) -> None:
        self.rejected += 1
        if scoped or self.emit_global:
            self.out.add("rejected", {"topic": ev.get("topic"), "partition": ev.get("partition"),
                                      "seq": ev.get("seq"), "idx": 0, "ts_ms": ev.get("ts_ms"),
                                      "raw": raw, "reason": reason})

    # ------------------------------------------------------------------ driving
    def begin(self, p: Partition, seq: int, ts: int) -> None:
        """An event reaches p: fire its due timers first, then set the row context."""
        if ts > p.tdone:
            p.advance(ts)
        p.cur_seq = seq
        p.now = ts
        p.idx = 0
        p.last_seq = seq
        self.touched.add(p.key)
        if p.retry is not None:
            b, pid = p.retry
            p.retry = None
            rep = p.reps.get(b)
            if rep is not None and rep.pending is not None and rep.pending.pid == pid:
                p._send_ap(rep, pid, rep.pending.change, rep.pending.proposed)

    def end(self, p: Partition) -> None:
        p.inv.after_event(p)

    def apply(self, ev: dict, raw: str | None = None) -> None:
        """Apply one validated event (schemas.events normalized dict)."""
        seq = ev["seq"]
        ts = ev["ts_ms"]
        typ = ev["type"]
        scoped = typ in PARTITION_TYPES or (typ in TOPIC_TYPES and ev.get("partition") is not None)
        bad = order_reject_reason(typ, seq, ts, self.last_seq, self.max_ts) if (
            seq <= self.last_seq or ts < self.max_ts) else None
        if bad:
            self.reject(ev, raw, bad, scoped)
            return
        if scoped and self.owns is not None and not self.owns((ev["topic"], ev["partition"])):
            self.last_seq = seq
            self.max_ts = ts
            return
        if self.sess_next is not None and ts >= self.sess_next:
            self.expire_sessions(ts)
        try:
            self._handlers[typ](ev)
        except Reject as r:
            self.reject(ev, raw, f"{typ} row seq {seq}: {r}", scoped)
        else:
            if scoped or self.emit_global:
                self.applied += 1
        self.last_seq = seq
        self.max_ts = ts

    def finish(self, ts: int | None = None) -> None:
        """Fire every timer due by `ts` (default: the stream's latest time) on every partition."""
        ts = self.max_ts if ts is None else ts
        if self.sess_next is not None and ts >= self.sess_next:
            self.expire_sessions(ts)
        for key in sorted(self.partitions):
            p = self.partitions[key]
            if p.tdone < ts:
                p.advance(ts)
                self.touched.add(key)
                p.inv.after_event(p)

    def drain(self) -> dict[str, list[dict]]:
        return self.out.drain()

    def next_due(self) -> int | None:
        """The earliest time a timer is due on any partition here (None: none pending)."""
        best = None
        far = 1 << 62
        for p in self.partitions.values():
            lo = p.tdone + 1
            nt = p.next_timer([lo, lo, lo], far)
            if nt is not None and (best is None or nt[0] < best):
                best = nt[0]
        if self.sess_next is not None and (best is None or self.sess_next < best):
            best = self.sess_next
        return best

    # ------------------------------------------------------------------ broker sessions
    def set_sess_next(self) -> None:
        to = self.config.session_timeout_ms
        best = None
        for br in self.brokers.values():
            e = br.sess_expiry(to)
            if e is not None and (best is None or e < best):
                best = e
        self.sess_next = best

    def _sess_touch(self, br: Broker, seq: int, ts: int, running: bool) -> None:
        """A contact from broker br (registration or heartbeat): its session is (re)opened for its
        registered epoch (ClusterControlManager#trackBrokerHeartbeat)."""
        br.sess_epoch = br.epoch
        br.sess_last = None if running else ts
        br.sess_seq = seq
        self.set_sess_next()

    def _sess_stop(self, br: Broker, seq: int, ts: int) -> None:
        """The broker process stops heartbeating at ts: the session now runs out."""
        if br.sess_epoch >= 0 and br.sess_last is None:
            br.sess_last = ts
            br.sess_seq = seq
            self.set_sess_next()

    def _sess_close(self, br: Broker) -> None:
        br.sess_epoch = -1
        br.sess_last = None
        self.set_sess_next()

    def expire_sessions(self, ts: int) -> None:
        """Every session expiring at or before ts, in (time, broker) order.
        ReplicationControlManager#maybeFenceOneStaleBroker (4.4.0): the expired tracker entry is
        removed; if it is the broker's registered epoch the broker is fenced (handleBrokerFenced:
        ISR removals, then BROKER_REGISTRATION_CHANGE_RECORD {fenced: 1}) - even when it is already
        fenced (seen on a real cluster after a controlled shutdown). A registration refused
        DUPLICATE_BROKER_REGISTRATION meanwhile is retried by the broker (every second) and
        accepted right after (modelled at the expiry time)."""
        to = self.config.session_timeout_ms
        while True:
            due = []
            for br in self.brokers.values():
                e = br.sess_expiry(to)
                if e is not None and e <= ts:
                    due.append((e, br.id))
            if not due:
                break
            t, b = min(due)
            br = self.brokers[b]
            old_epoch, seq = br.sess_epoch, br.sess_seq
            self._sess_close(br)
            if br.registered and br.epoch == old_epoch:
                if self.emit_global:
                    self.emit_at("admin", {"type": "BrokerFence", "broker": b, "result": "NONE",
                                           "detail": f"Fencing broker {b} at epoch {old_epoch} because its session "
                                                     f"has timed out."}, None, None, seq, t)
                self._fence(br, seq, t, timer=True)
            if br.pend is not None:
                self._accept_pending(br, br.pend[0], t, timer=True)
        self.set_sess_next()

    def _at(self, p: Partition, seq: int, ts: int, timer: bool) -> None:
        """Row context for p: an event (begin), or a broker-session timer at ts, whose rows carry
        the timer's time and the seq of p's latest event (SPEC §3)."""
        if not timer:
            self.begin(p, seq, ts)
            return
        if ts > p.tdone:
            p.advance(ts)
        p.cur_seq = p.last_seq
        p.now = ts
        self.touched.add(p.key)

    # ------------------------------------------------------------------ lookups
    def _part(self, ev: dict) -> Partition:
        p = self.partitions.get((ev["topic"], ev["partition"]))
        if p is None:
            raise Reject(f"unknown partition {ev['topic']}-{ev['partition']} (not created in this stream)")
        return p

    def _broker(self, ev: dict, b=None) -> Broker:
        b = ev["broker"] if b is None else b
        br = self.brokers.get(b)
        if br is None:
            raise Reject(f"broker {b} has never registered (BrokerRegister must come first)")
        return br

    def _new_partition(self, topic: str, partition: int, ts: int) -> Partition:
        p = Partition(self, topic, partition)
        p.inv = Invariants()
        p.tdone = ts
        p.set_t_next()
        self.partitions[p.key] = p
        self.by_topic[topic].add(p.key)
        p.refresh_conf()
        return p

    # ================================================================== control plane
    def _CreatePartition(self, ev):
        """ReplicationControlManager#createTopic with a manual assignment (isrflow creates one
        partition per row). Refusals are answers (an `admin` row, state unchanged), in Kafka's
        order: the partition exists; the config (checked before the assignment); the assignment
        (#validateManualPartitionAssignment); no active replica."""
        topic, part, seq, ts = ev["topic"], ev["partition"], ev["seq"], ev["ts_ms"]
        replicas = list(ev["replicas"])

        def fail(err, detail):
            self.emit_at("admin", {"type": "CreatePartition", "broker": None, "result": err, "detail": detail},
                         topic, part, seq, ts)
        if (topic, part) in self.partitions:
            return fail("TOPIC_ALREADY_EXISTS", f"Partition {topic}-{part} already exists.")
        cfg = {}
        if ev.get("config"):
            bad = topic_config_error(ev["config"])
            if bad:
                return fail(*bad)
            cfg = validate_topic_config(ev["config"])
        bad = self._assignment_error(replicas)
        if bad:
            return fail("INVALID_REPLICA_ASSIGNMENT", bad)
        # A2: ISR = active replicas (registered, unfenced, not shutting down), replica order
        isr = [r for r in replicas if not self.brokers[r].fenced and not self.brokers[r].in_cs]
        if not isr:
            return fail("INVALID_REPLICA_ASSIGNMENT", f"All brokers specified in the manual partition assignment for "
                                                      f"partition {part} are fenced or in controlled shutdown.")
        p = self._new_partition(topic, part, ts)
        p.config = cfg
        p.refresh_conf()
        self.begin(p, seq, ts)
        p.replicas, p.isr, p.leader = replicas, isr, isr[0]
        p.leader_epoch = p.partition_epoch = 0
        self.reindex(p)
        p.emit("admin", {"type": "CreatePartition", "broker": None, "result": "NONE", "detail": None})
        p.log_registration("CreatePartition")
        p.inv.on_registration(p, None)
        p.publish()
        self.end(p)

    def _assignment_error(self, replicas: list) -> str | None:
        """ReplicationControlManager#validateManualPartitionAssignment (INVALID_REPLICA_ASSIGNMENT):
        empty list; then, in ascending id order, an unregistered broker or a repeated one."""
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        prev = None
        for r in sorted(replicas):
            br = self.brokers.get(r)
            if br is None or not br.registered:
                return f"The manual partition assignment includes broker {r}, but no such broker is registered."
            if r == prev:
                return f"The manual partition assignment includes the broker {r} more than once."
            prev = r
        return None

    def _unknown_partition(self, ev, typ: str, topic_msg: str, part_msg: str) -> None:
        """An admin request for a partition this stream never created: UNKNOWN_TOPIC_OR_PARTITION."""
        topic, part = ev["topic"], ev["partition"]
        msg = part_msg if self.by_topic.get(topic) else topic_msg
        self.emit_at("admin", {"type": typ, "broker": ev.get("target") if typ == "ElectLeaders" else None,
                               "result": "UNKNOWN_TOPIC_OR_PARTITION", "detail": msg},
                     topic, part, ev["seq"], ev["ts_ms"])

    def _PartitionRecord(self, ev):
        topic, part, seq, ts = ev["topic"], ev["partition"], ev["seq"], ev["ts_ms"]
        replicas = list(ev["replicas"])
        isr = list(ev["isr"])
        elr = list(ev.get("elr") or [])
        lke = list(ev.get("last_known_elr") or [])
        leader = ev["leader"]
        if not set(isr) <= set(replicas) or not set(elr) <= set(replicas):
            raise Reject(f"isr {isr} / elr {elr} must be subsets of replicas {replicas}")
        if leader != NO_LEADER and leader not in replicas:
            raise Reject(f"leader {leader} is not one of replicas {replicas}")
        p = self.partitions.get((topic, part))
        if p is not None and (ev["partition_epoch"] <= p.partition_epoch or ev["leader_epoch"] < p.leader_epoch):
            raise Reject(f"partition epoch {ev['partition_epoch']} / leader epoch {ev['leader_epoch']} is not after "
                         f"the current {p.partition_epoch} / {p.leader_epoch} (epoch going backwards)")
        cfg = {}
        if ev.get("config"):
            try:
                cfg = validate_topic_config(ev["config"])
            except ConfigError as e:
                raise Reject(str(e)) from None
        if p is None:
            p = self._new_partition(topic, part, ts)
        p.config.update(cfg)
        p.refresh_conf()
        self.begin(p, seq, ts)
        p.replicas, p.isr, p.elr, p.lke, p.leader = replicas, isr, elr, lke, leader
        p.leader_epoch, p.partition_epoch = ev["leader_epoch"], ev["partition_epoch"]
        p.lrs = ev.get("leader_recovery_state") or RECOVERED
        p.adding, p.removing = [], []
        self.reindex(p)
        p.log_registration("PartitionRecord")
        p.inv.on_registration(p, None)
        p.publish()
        self.end(p)

    def _ReplicaSnapshot(self, ev):
        p = self._part(ev)
        b = ev["broker"]
        if b not in p.replicas:
            raise Reject(f"broker {b} is not a replica of {p.topic}-{p.partition} (replicas {p.replicas})")
        starts = {int(k): int(v) for k, v in ev["epoch_start_offsets"].items()}
        leo, hwm = ev["log_end_offset"], ev["hwm"]
        prev = -1
        for e in sorted(starts):
            if starts[e] < prev:
                raise Reject(f"epoch_start_offsets {starts}: start offsets must not decrease as epochs increase")
            prev = starts[e]
        if prev > leo:
            raise Reject(f"epoch start offset {prev} is beyond log_end_offset {leo}")
        if hwm > leo:
            raise Reject(f"hwm {hwm} is beyond log_end_offset {leo}")
        self.begin(p, ev["seq"], ev["ts_ms"])
        rep = p.reps.get(b)
        if rep is None:
            rep = p.reps[b] = Replica(b)
            self.reindex(p)
        rep.log.load_snapshot(starts, leo, hwm)
        if rep.role == LEADER:
            # the leader was made before its log arrived: its epoch start is the loaded one (or LEO)
            le = rep.leader_epoch
            rep.leso = starts.get(le, leo)
            rep.log.assign(le, rep.leso)
        inv = p.inv
        if hwm > inv.committed_end:
            inv.committed = runs_prefix(rep.log.runs, hwm)
            inv.committed_end = hwm
        inv.on_log_change(p, rep)
        self.end(p)

    def _AlterConfig(self, ev):
        topic = ev["topic"]
        if not topic:
            raise Reject("AlterConfig needs a topic")
        bad = topic_config_error(ev.get("config") or {})
        if bad:
            cfg = None
            err = bad
        else:
            cfg = validate_topic_config(ev.get("config") or {})
        if ev.get("partition") is not None:
            if (topic, ev["partition"]) not in self.partitions:
                return self._unknown_partition(ev, "AlterConfig", f"No such topic as {topic}",
                                               f"No such partition as {topic}-{ev['partition']}")
            p = self._part(ev)
            self.begin(p, ev["seq"], ev["ts_ms"])
            if cfg is None:
                p.emit("admin", {"type": "AlterConfig", "broker": None, "result": err[0], "detail": err[1]})
            else:
                changed = self._min_isr_changed(p.config, cfg)
                p.config.update(cfg)
                p.refresh_conf()
                p.emit("admin", {"type": "AlterConfig", "broker": None, "result": "NONE", "detail": None})
                if changed:
                    p.clear_elr(f"min.insync.replicas of {topic}-{p.partition} set to {cfg['min.insync.replicas']}")
            self.end(p)
            return
        if self.emit_global:
            self.emit_at("admin", {"type": "AlterConfig", "broker": None,
                                   "result": "NONE" if cfg is not None else err[0],
                                   "detail": None if cfg is not None else err[1]}, topic, None, ev["seq"], ev["ts_ms"])
        if cfg is None:
            return
        tcfg = self.topic_cfg.setdefault(topic, {})
        changed = self._min_isr_changed(tcfg, cfg)
        tcfg.update(cfg)
        for key in sorted(self.by_topic.get(topic, ())):
            p = self.partitions[key]
            self.begin(p, ev["seq"], ev["ts_ms"])
            p.refresh_conf()
            if changed:
                p.clear_elr(f"min.insync.replicas of topic {topic} set to {cfg['min.insync.replicas']}")
            self.end(p)

    def _min_isr_changed(self, old: dict, new: dict) -> bool:
        """Does this config change write a CLEAR_ELR_RECORD? ConfigurationControlManager
        #incrementalAlterConfigResource writes a topic CONFIG_RECORD only when the value changes
        (`!Objects.equals(currentValue, newValue)`), and #createClearElrRecordsAsNeeded adds
        ClearElrRecord{topicName} for every min.insync.replicas CONFIG_RECORD while ELR is enabled."""
        return (self.config.elr and "min.insync.replicas" in new
                and old.get("min.insync.replicas") != new["min.insync.replicas"])

    def _Reassign(self, ev):
        """ReplicationControlManager#alterPartitionReassignment: refusals are answers (admin rows)."""
        if (ev["topic"], ev["partition"]) not in self.partitions:
            return self._unknown_partition(ev, "Reassign", f"Unable to find a topic named {ev['topic']}.",
                                           f"Unable to find partition {ev['topic']}:{ev['partition']}.")
        p = self._part(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        target = ev.get("replicas")

        def admin(result, detail=None):
            p.emit("admin", {"type": "Reassign", "broker": None, "result": result, "detail": detail})
        if target is None:
            # A22 cancel (PartitionReassignmentRevert)
            if not p.adding and not p.removing:
                admin("NO_REASSIGNMENT_IN_PROGRESS", "No partition reassignment is in progress.")
            else:
                reps = [r for r in p.replicas if r not in p.adding]
                isr = [r for r in p.isr if r not in p.adding]
                unclean = not isr
                if unclean:
                    isr = [reps[0]]
                if unclean and not p.conf.unclean:
                    admin("INVALID_REPLICA_ASSIGNMENT", f"Unable to revert partition assignment for {p.topic}:"
                                                        f"{p.partition} because it would require an unclean leader "
                                                        "election.")
                else:
                    admin("NONE")
                    p.change("Reassign", "reassignment cancelled", target_replicas=reps, target_isr=isr,
                             target_adding=[], target_removing=[], election=UNCLEAN if unclean else ONLINE)
        else:
            target = list(target)
            bad = self._assignment_error(target)     # #changePartitionReassignment validates like creation
            if bad:
                admin("INVALID_REPLICA_ASSIGNMENT", bad)
            else:
                cur = list(p.replicas)
                removing = sorted(set(cur) - set(target))
                adding = sorted(set(target) - set(cur))
                admin("NONE")
                p.change("Reassign", f"reassignment to {target}", target_replicas=target + removing,
                         target_adding=adding, target_removing=removing,
                         election=UNCLEAN if p.conf.unclean else ONLINE)
        self.end(p)

    def _ElectLeaders(self, ev):
        """ReplicationControlManager#electLeader: refusals are answers with the Errors' default messages."""
        if (ev["topic"], ev["partition"]) not in self.partitions:
            return self._unknown_partition(ev, "ElectLeaders", f"No such topic as {ev['topic']}",
                                           f"No such partition as {ev['topic']}-{ev['partition']}")
        p = self._part(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        kind = ev["election_type"]
        target = ev.get("target")

        def admin(result, detail=None):
            p.emit("admin", {"type": "ElectLeaders", "broker": target, "result": result,
                             "detail": detail if detail is not None else _ERROR_MESSAGES.get(result)})
        reason = f"ElectLeaders {kind}" + (f" target {target}" if target is not None else "")
        if kind == "PREFERRED":
            if p.replicas and p.leader == p.replicas[0]:
                admin("ELECTION_NOT_NEEDED")
            elif p.change("ElectLeaders", reason, election=PREFERRED):
                admin("NONE")
            else:
                admin("PREFERRED_LEADER_NOT_AVAILABLE")
        elif kind == "UNCLEAN":
            if p.leader != NO_LEADER:
                admin("ELECTION_NOT_NEEDED")
            elif p.change("ElectLeaders", reason, election=UNCLEAN):
                admin("NONE")
            else:
                admin("ELIGIBLE_LEADERS_NOT_AVAILABLE")
        else:  # DESIGNATED (KIP-966): only for a leaderless partition
            if p.leader != NO_LEADER:
                admin("ELECTION_NOT_NEEDED")
            elif target not in p.replicas:
                admin("INVALID_REQUEST", f"target {target} is not a replica of {p.replicas}")
            elif not p.acceptable_fn()(target):
                admin("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"target {target} is fenced, shutting down or unregistered")
            elif p.change("ElectLeaders", reason, designated=target):
                admin("NONE")
            else:
                admin("ELIGIBLE_LEADERS_NOT_AVAILABLE")
        self.end(p)

    # ================================================================== brokers
    def _BrokerRegister(self, ev):
        b, be, seq, ts = ev["broker"], ev["broker_epoch"], ev["seq"], ev["ts_ms"]
        pbe = ev.get("previous_broker_epoch")
        br = self.brokers.get(b)
        if br is not None and br.retry_epoch >= 0 and be == br.retry_epoch:
            # the recorded retry of a registration the broker's retry loop already got accepted
            if self.emit_global:
                self.emit_at("admin", {"type": "BrokerRegister", "broker": b, "result": "NONE",
                                       "detail": f"retry: epoch {be} was registered when the previous session "
                                                 "expired"}, None, None, seq, ts)
            return
        if br is not None and br.epoch >= 0 and be <= br.epoch:
            raise Reject(f"broker_epoch {be} is not above broker {b}'s current epoch {br.epoch} "
                         "(epoch going backwards)")
        to = self.config.session_timeout_ms
        if br is not None and br.registered:
            if to > 0 and br.sess_last is None and br.sess_epoch == br.epoch:
                # a new process is starting: the old one has stopped heartbeating by now
                self._sess_stop(br, seq, ts)
            if br.session_valid(to, ts):
                # ClusterControlManager#registerBroker (4.4.0): a new incarnation while the
                # previous one's session is valid (BrokerHeartbeatTracker#hasValidSession, fenced
                # or not) is refused; the broker retries until the session expired.
                if self.emit_global:
                    self.emit_at("admin", {"type": "BrokerRegister", "broker": b,
                                           "result": "DUPLICATE_BROKER_REGISTRATION",
                                           "detail": "Another broker is registered with that broker id. If the "
                                                     "broker was recently restarted this should self-resolve once "
                                                     "the heartbeat manager expires the broker's session."},
                                 None, None, seq, ts)
                if to > 0:
                    br.pend = (seq, be, pbe)
                    br.pend_unfence = False
                return
        self._register(b, be, pbe, seq, ts, timer=False)

    def _register(self, b: int, be: int, pbe, seq: int, ts: int, timer: bool) -> None:
        br = self.brokers.get(b)
        if br is None:
            br = self.brokers[b] = Broker(b)
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
        self._sess_touch(br, seq, ts, running=True)
        self._log_reg(seq, br, timer)
        if self.emit_global:
            self.emit_at("admin", {"type": "BrokerRegister", "broker": b, "result": "NONE",
                                   "detail": "first registration" if first else
                                   ("clean restart" if clean else "unclean restart")}, None, None, seq, ts)
        for p in self.hosted(b):
            self._at(p, seq, ts, timer)
            rep = p.reps.get(b)
            if rep is not None:
                if rep.role == LEADER:
                    p.resign(rep, "NETWORK_EXCEPTION")
                rep.reset_memory()
            if not clean and (b in p.isr or b in p.elr):
                # A17 handleBrokerUncleanShutdown
                p.change("BrokerRegister", f"broker {b} restarted after an unclean shutdown",
                         target_isr=[r for r in p.isr if r != b], unclean_shutdown=(b,),
                         acc=p.acceptable_fn(removed={b}), election=UNCLEAN if p.conf.unclean else ONLINE)
            if self.config.md_immediate and b in p.replicas:
                p.apply_metadata(b, p.snapshot(), p.cur_seq)
            self.end(p)

    def _heartbeat_broker(self, ev, what: str) -> Broker | None:
        """The broker of a heartbeat-carried request (BrokerUnfence, BrokerControlledShutdown).
        ClusterControlManager#checkBrokerEpoch answers a broker with no registration
        STALE_BROKER_EPOCH "No broker registration found for broker id N" (an admin row)."""
        b = ev["broker"]
        br = self.brokers.get(b)
        if br is None or not br.registered:
            if self.emit_global:
                self.emit_at("admin", {"type": what, "broker": b, "result": "STALE_BROKER_EPOCH",
                                       "detail": f"No broker registration found for broker id {b}"},
                             None, None, ev["seq"], ev["ts_ms"])
            return None
        return br

    def _BrokerUnfence(self, ev):
        br = self.brokers.get(ev["broker"])
        if br is not None and br.pend is not None:
            # the new incarnation is still retrying its registration: unfenced once accepted
            br.pend_unfence = True
            return
        br = self._heartbeat_broker(ev, "BrokerUnfence")
        if br is None:
            return
        self._sess_touch(br, ev["seq"], ev["ts_ms"], running=br.alive)
        self._unfence(br, ev["seq"], ev["ts_ms"], timer=False)

    def _unfence(self, br: Broker, seq: int, ts: int, timer: bool) -> None:
        br.fenced = False
        self._log_reg(seq, br, timer)
        b = br.id
        for p in self.hosted(b):
            self._at(p, seq, ts, timer)
            if p.leader == NO_LEADER and b in p.replicas:
                # A15: leaderless partitions try an election with b acceptable
                p.change("BrokerUnfence", f"broker {b} unfenced",
                         election=UNCLEAN if p.conf.unclean else ONLINE, acc=p.acceptable_fn(unfenced={b}))
            self.end(p)

    def _BrokerFence(self, ev):
        br = self._broker(ev)
        if br.fenced or not br.in_cs:
            # a session-timeout fence (also the second fence of an already fenced epoch): the
            # tracker entry is gone. A fence that ends a controlled shutdown (SHUTDOWN_NOW) keeps it.
            self._sess_close(br)
        self._fence(br, ev["seq"], ev["ts_ms"], timer=False)
        if br.pend is not None and br.sess_epoch < 0:
            self._accept_pending(br, ev["seq"], ev["ts_ms"], timer=False)

    def _accept_pending(self, br: Broker, seq: int, ts: int, timer: bool) -> None:
        """The refused registration's retry, once the old session is gone (the broker retries
        every second; modelled at the moment the session ends)."""
        _, be, pbe = br.pend
        unf = br.pend_unfence
        br.pend = None
        br.pend_unfence = False
        self._register(br.id, be, pbe, seq, ts, timer=timer)
        br.retry_epoch = be
        if unf:
            self._sess_touch(br, seq, ts, running=True)
            self._unfence(br, seq, ts, timer=timer)

    def _fence(self, br: Broker, seq: int, ts: int, timer: bool) -> None:
        br.fenced = True
        self._log_reg(seq, br, timer)
        b = br.id
        for p in self.hosted(b):
            self._at(p, seq, ts, timer)
            if b in p.isr:
                # A14: out of every ISR; re-elect without b
                p.change("BrokerFence", f"broker {b} fenced" + (" (session expired)" if timer else ""),
                         target_isr=[r for r in p.isr if r != b],
                         election=UNCLEAN if p.conf.unclean else ONLINE, acc=p.acceptable_fn(removed={b}))
            self.end(p)

    def _BrokerControlledShutdown(self, ev):
        br = self._heartbeat_broker(ev, "BrokerControlledShutdown")
        if br is None:
            return
        if br.alive:
            self._sess_touch(br, ev["seq"], ev["ts_ms"], running=True)
        b = br.id
        if not br.fenced:
            br.in_cs = True     # A16: CONTROLLED_SHUTDOWN (or SHUTDOWN_NOW: same effect on partitions)
            self._log_reg(ev["seq"], br)
        for p in self.hosted(b):
            self.begin(p, ev["seq"], ev["ts_ms"])
            if b in p.isr:
                p.change("BrokerControlledShutdown", f"broker {b} controlled shutdown",
                         target_isr=[r for r in p.isr if r != b],
                         election=UNCLEAN if p.conf.unclean else ONLINE, acc=p.acceptable_fn(removed={b}))
            self.end(p)

    def _BrokerCrash(self, ev):
        br = self._broker(ev)
        b = br.id
        clean = bool(ev.get("clean"))
        br.alive = False
        self._sess_stop(br, ev["seq"], ev["ts_ms"])
        if br.pend is not None:
            # the new process stopped before its registration was accepted: no more retries
            br.pend = None
            br.pend_unfence = False
        for p in self.hosted(b):
            self.begin(p, ev["seq"], ev["ts_ms"])
            rep = p.reps.get(b)
            if rep is not None:
                if rep.role == LEADER:
                    p.resign(rep, "NETWORK_EXCEPTION")   # parked produces never get an answer
                rep.reset_memory()
                if not clean:
                    p.unclean[b] = ev["seq"]
                p.inv.dirty = True
            self.end(p)

    def _ReplicaLogLoss(self, ev):
        p = self._part(ev)
        b = ev["broker"]
        rep = p.reps.get(b)
        if rep is None:
            raise Reject(f"broker {b} has no replica of {p.topic}-{p.partition}")
        br = self.brokers.get(b)
        if br is not None and br.alive:
            raise Reject(f"broker {b} is running; ReplicaLogLoss must follow its BrokerCrash")
        self.begin(p, ev["seq"], ev["ts_ms"])
        if ev["log_end_offset"] < rep.log.leo:
            rep.log.truncate_to(ev["log_end_offset"])
            p.inv.on_log_change(p, rep)
        self.end(p)

    def _MetadataSync(self, ev):
        br = self._broker(ev)
        b = br.id
        up_to = ev.get("up_to_seq")
        if not br.alive:
            for p in self.hosted(b):
                self.begin(p, ev["seq"], ev["ts_ms"])
                self.end(p)
            return
        if not self.config.md_immediate:
            if b not in self.views:
                self.views[b] = dict(self.reg_base)
            view = self.views[b]
            start = self.view_seq.get(b, -1)
            for s, rb, reg in self.reg_log:
                if s > start and (up_to is None or s <= up_to):
                    view[rb] = reg
            self.view_seq[b] = max(start, up_to if up_to is not None else ev["seq"])
            # entries every broker has seen are no longer needed
            low = min((self.view_seq.get(x, -1) for x in self.brokers), default=-1)
            if self.reg_log and self.reg_log[0][0] <= low:
                for sq, rb, reg in self.reg_log:
                    if sq <= low:
                        self.reg_base[rb] = reg
                self.reg_log = [r for r in self.reg_log if r[0] > low]
        for p in self.hosted(b):
            self.begin(p, ev["seq"], ev["ts_ms"])
            if not self.config.md_immediate:
                p.sync_broker(b, up_to)
            self.end(p)

    def _Tick(self, ev):
        b = ev.get("broker")
        if b is None:
            parts = [self.partitions[k] for k in sorted(self.partitions)]
        else:
            self._broker(ev)
            parts = self.hosted(b)
        for p in parts:
            self.begin(p, ev["seq"], ev["ts_ms"])
            for rep in list(p.reps.values()):
                if rep.role == LEADER and (b is None or rep.broker == b):
                    br = self.brokers.get(rep.broker)
                    if br is not None and br.alive:
                        p.maybe_shrink(rep)
            self.end(p)

    # ================================================================== messages and data
    def _AlterPartitionArrive(self, ev):
        p = self._part(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.deliver_ap_request()
        self.end(p)

    def _AlterPartitionResponse(self, ev):
        p = self._part(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.deliver_ap_response()
        self.end(p)

    def _Produce(self, ev):
        p = self.partitions.get((ev["topic"], ev["partition"])) or self._part(ev)
        if ev["broker"] not in self.brokers:
            self._broker(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.produce(ev)
        if p.inv.dirty:
            p.inv.after_event(p)

    def _Fetch(self, ev):
        p = self.partitions.get((ev["topic"], ev["partition"])) or self._part(ev)
        if ev["broker"] not in self.brokers:
            self._broker(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.fetch(ev)
        if p.inv.dirty:
            p.inv.after_event(p)

    def _ListOffsets(self, ev):
        p = self._part(ev)
        self._broker(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.list_offsets(ev)
        self.end(p)

    def _ConsumerFetch(self, ev):
        p = self._part(ev)
        self._broker(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        p.consumer_fetch(ev)
        self.end(p)

    # ================================================================== state table
    def partition_state_rows(self, keys=None) -> list[dict]:
        rows = []
        for key in sorted(self.partitions if keys is None else keys):
            p = self.partitions.get(key)
            if p is None:
                continue
            lrep = p.reps.get(p.leader) if p.leader >= 0 else None
            lead = lrep if lrep is not None and lrep.role == LEADER else None
            reps = []
            for b in sorted(p.reps):
                r = p.reps[b]
                br = self.brokers.get(b)
                reps.append({"broker": b, "alive": bool(br and br.alive), "fenced": bool(br.fenced) if br else None,
                             "broker_epoch": br.epoch if br else None, "role": r.role, "leo": r.log.leo,
                             "hwm": r.log.hwm, "leader_epoch": r.leader_epoch})
            pend = None
            if lead is not None and lead.pending is not None:
                pend = f"{lead.pending.change} {list(lead.pending.proposed)}"
            rows.append({
                "topic": p.topic, "partition": p.partition, "seq": p.last_seq, "idx": 0, "ts_ms": p.now,
                "leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
                "last_known_elr": list(p.lke), "adding": list(p.adding), "removing": list(p.removing),
                "leader_recovery_state": p.lrs,
                "leader_hwm": lead.log.hwm if lead else None, "leader_leo": lead.log.leo if lead else None,
                "leader_leso": lead.leso if lead else None,
                "maximal_isr": list(lead.maximal_isr) if lead else None,
                "pending_alter_partition": pend, "replica_states": reps})
        return rows


class _RegView:
    """The controller's registry seen as a metadata cache: broker -> (epoch, fenced, in_cs, registered)."""
    __slots__ = ("brokers",)

    def __init__(self, brokers):
        self.brokers = brokers

    def get(self, b, default=None):
        br = self.brokers.get(b)
        if br is None:
            return default
        return (br.epoch, br.fenced, br.in_cs, br.registered)
