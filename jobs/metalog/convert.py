"""From the records of a metadata log to (a) an isrflow input stream and (b) the `kafka_records` table.

The controller's state is replayed exactly as Kafka's ``PartitionRegistration.merge`` does (every
PartitionChangeRecord bumps the partition epoch; a record that sets ``leader`` — even to the same broker or
to -1 — bumps the leader epoch; absent fields mean "no change"; ``ClearElrRecord`` merges
{elr: [], lastKnownElr: []} into every partition of the topic whose ELR or last known ELR is not empty).

Each record is attributed to the exogenous event that made the controller write it (see
docs/metadata-import.md for the rules and their limits): broker lifecycle records, their neighbouring
PartitionChangeRecords in the same batch, admin requests (create, config, reassign, elect), and the leaders'
AlterPartition requests, which the stream expresses as the data-plane facts that make a leader ask for them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

try:
    from protocol.config import TOPIC_KEYS
except Exception:                                   # pragma: no cover
    TOPIC_KEYS = frozenset({"min.insync.replicas", "unclean.leader.election.enable", "unclean.recovery.strategy"})

from .reader import Issue, MetaLog, gc_paused

try:                                                # compact JSON; orjson (a dependency) is ~15x faster
    from orjson import dumps as dumps_bytes

    def _JSON(obj) -> str:
        return dumps_bytes(obj).decode()
except ImportError:                                 # pragma: no cover - same JSON text, slower
    _JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def dumps_bytes(obj) -> bytes:
        return _JSON(obj).encode()

NO_LEADER = -1
LRS = {0: "RECOVERED", 1: "RECOVERING"}

# Settings the imported stream needs so that the engine's leaders ask for exactly the ISR changes the log shows
# (the data plane is not in the metadata log; see docs/metadata-import.md).
IMPORT_SETTINGS = {
    "replica.lag.time.max.ms": "0",          # a follower that did not fetch at the leader's LEO *now* is out
    "isr.expiration.interval.ms": "0",       # ISR expiration only on the imported Tick rows
    "auto.leader.rebalance.enable": "false",  # preferred elections come from the log as ElectLeaders rows
    "delivery.alter_partition": "immediate",
    "delivery.metadata": "immediate",
    # Every session expiry the controller acted on is a fence record in the log, and a registration in the log
    # was accepted: the controller's own session clock (broker.session.timeout.ms, a static controller config
    # the log does not carry) must not refuse or fence anything on top of it. A live 4.4.0 cluster under load
    # accepted a restart 6.26 s after a controlled shutdown with no second fence, which a 9 s model refused.
    "broker.session.timeout.ms": "0",
    # a real log's rows carry wall-clock times, and a cluster may sit idle for weeks between them
    "input.max.time.jump.ms": "0",
}


class Part:
    __slots__ = ("topic", "tid", "pid", "replicas", "isr", "elr", "lkelr", "leader", "le", "pe", "lrs", "adding",
                 "removing", "fetched")

    def __init__(self, topic, tid, pid):
        self.topic, self.tid, self.pid = topic, tid, pid
        self.replicas, self.isr, self.elr, self.lkelr = [], [], [], []
        self.leader, self.le, self.pe, self.lrs = NO_LEADER, 0, 0, 0
        self.adding, self.removing = [], []
        # broker -> the leader epoch in which the stream last had it fetch (catch_up): a follower's
        # first fetch in a leader epoch may find its log diverging from the new leader's
        self.fetched: dict[int, int] = {}

    def snap(self) -> tuple:
        # lists are never changed in place (a change assigns a new list), so a snapshot can share them
        return (self.replicas, self.isr, self.elr, self.lkelr, self.leader, self.le, self.pe, self.lrs,
                self.adding, self.removing)


@dataclass
class Broker:
    epoch: int = -1
    fenced: bool = True
    in_cs: bool = False
    registered: bool = False
    clean_shutdown: bool = False     # the current incarnation went through a controlled shutdown


@dataclass
class Result:
    events: list = field(default_factory=list)
    kafka_records: list = field(default_factory=list)
    issues: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    snapshot_checks: dict = field(default_factory=dict)
    history_start: int | None = None
    kafka_records_table: object = None       # kafka_records as Arrow (set by the importer)


def _pname(p: Part) -> str:
    return f"{p.topic}-{p.pid}"


# PartitionChangeRecord field -> registration attribute, with the field's "no change" encoding
# (PartitionChangeRecord.json: null lists, leader -2, leaderRecoveryState -1)
_MERGE_FIELDS = (("isr", "isr", None), ("leader", "leader", -2), ("replicas", "replicas", None),
                 ("removingReplicas", "removing", None), ("addingReplicas", "adding", None),
                 ("leaderRecoveryState", "lrs", -1), ("eligibleLeaderReplicas", "elr", None),
                 ("lastKnownElr", "lkelr", None))

# the records that change a broker's fenced / controlled-shutdown state
_BROKER_STATE_RECORDS = frozenset({"BrokerRegistrationChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord"})


class Converter:
    def __init__(self):
        self.topics: dict[str, str] = {}          # topic id -> name
        self.parts: dict[tuple, Part] = {}        # (topic id, partition) -> Part
        self.brokers: dict[int, Broker] = {}
        self.topic_config: dict[str, dict] = {}
        self.cluster_config: dict[str, str] = {}
        self.features: dict[str, int] = {}
        self.res = Result()
        self.seq = 0
        self.ts = 0
        self.counts: dict[str, int] = {}
        self.unexplained = 0
        # within a batch (see `batch`)
        self.pending: list = []                   # (rec, before, part, after) PCRs not attributed yet
        self.open_group = None                    # (kind, broker, seq) of a broker event whose PCRs follow its record

    # ------------------------------------------------------------------ output helpers
    def emit(self, ev: dict) -> int:
        self.seq += 1
        ev["seq"] = self.seq
        ev["ts_ms"] = self.ts
        self.res.events.append(ev)
        self.counts[ev["type"]] = self.counts.get(ev["type"], 0) + 1
        return self.seq

    def row(self, r, cause=None, seq_lo=None, seq_hi=None, part: Part | None = None, extra=None,
            after=None) -> dict:
        file, pos, base, offset, epoch, ts, control, type_, _key, version, d, _snap, batch = r
        data = _JSON(d) if d is not None else None
        if part is None:
            row = {"offset": offset, "batch_base_offset": base, "raft_epoch": epoch, "append_ms": ts,
                   "file": file, "position": pos, "batch": batch, "control": control, "record_type": type_,
                   "version": version, "data": data, "cause": cause, "seq_first": seq_lo, "seq_last": seq_hi}
        else:
            repl, isr, elr, lk, leader, le, pe, lrs, add, rem = part.snap() if after is None else after
            row = {"offset": offset, "batch_base_offset": base, "raft_epoch": epoch, "append_ms": ts,
                   "file": file, "position": pos, "batch": batch, "control": control, "record_type": type_,
                   "version": version, "data": data, "cause": cause, "seq_first": seq_lo, "seq_last": seq_hi,
                   "topic": part.topic, "topic_id": part.tid, "partition": part.pid, "leader": leader, "isr": isr,
                   "elr": elr, "last_known_elr": lk, "replicas": repl, "adding": add, "removing": rem,
                   "leader_recovery_state": LRS.get(lrs) or str(lrs), "leader_epoch": le, "partition_epoch": pe}
        if extra:
            row.update(extra)
        return row

    def add_row(self, row):
        self.res.kafka_records.append(row)

    # ------------------------------------------------------------------ state replay (Kafka's merge)
    def part_of(self, d) -> Part | None:
        return self.parts.get((d.get("topicId"), d.get("partitionId")))

    def apply_pr(self, d) -> Part:
        tid, pid = d.get("topicId"), d.get("partitionId")
        p = Part(self.topics.get(tid, tid), tid, pid)
        p.replicas = list(d.get("replicas") or [])
        p.isr = list(d.get("isr") or [])
        p.elr = list(d.get("eligibleLeaderReplicas") or [])
        p.lkelr = list(d.get("lastKnownElr") or [])
        p.adding = list(d.get("addingReplicas") or [])
        p.removing = list(d.get("removingReplicas") or [])
        p.leader = d.get("leader", NO_LEADER)
        p.le = d.get("leaderEpoch", 0)
        p.pe = d.get("partitionEpoch", 0)
        p.lrs = d.get("leaderRecoveryState", 0)
        self.parts[(tid, pid)] = p
        return p

    @staticmethod
    def merge(p: Part, d) -> None:
        """PartitionRegistration.merge: a field at its "no change" value leaves the registration as it
        is; a leader change (even to the same leader, or to -1) bumps the leader epoch; every change
        record bumps the partition epoch."""
        for field, attr, no_change in _MERGE_FIELDS:
            v = d.get(field, no_change)
            if v != no_change:
                setattr(p, attr, v)
        if d.get("leader", -2) != -2:
            p.le += 1
        p.pe += 1

    # ------------------------------------------------------------------ snapshots
    def load_snapshot(self, recs) -> None:
        """A snapshot as the starting state: its records replayed, and PartitionRecord/BrokerRegister rows
        so that the engine starts from the same state."""
        for r in recs:
            if r.control or r.data is None:
                continue
            t, d = r.type, r.data
            if t == "TopicRecord":
                self.topics[d["topicId"]] = d["name"]
            elif t == "ConfigRecord":
                self.apply_config(d)
            elif t == "FeatureLevelRecord":
                self.features[d["name"]] = d["featureLevel"]
            elif t == "RegisterBrokerRecord":
                b = self.brokers.setdefault(d["brokerId"], Broker())
                b.epoch, b.registered = d["brokerEpoch"], True
                b.fenced, b.in_cs = d.get("fenced", True), d.get("inControlledShutdown", False)
        if recs:
            self.ts = recs[0].ts
        for bid, b in sorted(self.brokers.items()):
            self.emit({"type": "BrokerRegister", "broker": bid, "broker_epoch": max(b.epoch, 0),
                       "previous_broker_epoch": -1})
            if not b.fenced:
                self.emit({"type": "BrokerUnfence", "broker": bid})
            else:       # fenced in the snapshot: its session is over (a later registration is a new incarnation)
                self.emit({"type": "BrokerFence", "broker": bid})
            if b.in_cs:
                self.emit({"type": "BrokerControlledShutdown", "broker": bid})
        loaded: set[str] = set()
        for r in recs:
            if r.type == "PartitionRecord" and r.data is not None:
                p = self.apply_pr(r.data)
                ev = {"type": "PartitionRecord", "topic": p.topic, "partition": p.pid, "replicas": p.replicas,
                      "isr": p.isr, "elr": p.elr, "last_known_elr": p.lkelr, "leader": p.leader,
                      "leader_epoch": p.le, "partition_epoch": p.pe, "leader_recovery_state": LRS.get(p.lrs)}
                if p.topic not in loaded:
                    # the topic's first partition carries the topic's configs (as CreateTopics' first
                    # partition does): an AlterConfig before it would find no topic, as in Kafka
                    loaded.add(p.topic)
                    cfg = self.topic_cfg(p.topic)
                    if cfg:
                        ev["config"] = cfg
                s = self.emit(ev)
                self.add_row(self.row(r, "Snapshot", s, s, p, {"in_snapshot": True}))
                self.follow(p, p.snap())

    def check_snapshot(self, end_offset: int, recs) -> None:
        """Computed epochs and state against a snapshot taken at `end_offset`."""
        checked = mism = 0
        for r in recs:
            if r.type != "PartitionRecord" or r.data is None:
                continue
            d = r.data
            p = self.part_of(d)
            checked += 1
            if p is None:
                mism += 1
                continue
            exp = (d.get("leader"), d.get("leaderEpoch"), d.get("partitionEpoch"), d.get("isr") or [],
                   d.get("eligibleLeaderReplicas") or [], d.get("lastKnownElr") or [], d.get("replicas") or [])
            got = (p.leader, p.le, p.pe, p.isr, p.elr, p.lkelr, p.replicas)
            if exp != got:
                mism += 1
                if mism <= 5:
                    self.res.issues.append(Issue(r.file, None, "snapshot-mismatch",
                                                 f"{_pname(p)} at offset {end_offset}: snapshot has (leader, "
                                                 f"leader epoch, partition epoch, isr, elr, lkelr, replicas) = "
                                                 f"{exp}, the replayed log {got}"))
        self.res.snapshot_checks[end_offset] = {"partitions": checked, "mismatches": mism}

    # ------------------------------------------------------------------ configs
    def topic_cfg(self, topic) -> dict:
        return {k: v for k, v in self.topic_config.get(topic, {}).items() if k in TOPIC_KEYS}

    def apply_config(self, d) -> None:
        rt, rn, name, value = d.get("resourceType"), d.get("resourceName"), d.get("name"), d.get("value")
        if rt == 2:
            cfg = self.topic_config.setdefault(rn, {})
        elif rt == 4 and rn == "":
            cfg = self.cluster_config
        else:
            return
        if value is None:
            cfg.pop(name, None)
        else:
            cfg[name] = value

    # ------------------------------------------------------------------ the log
    def run(self, ml: MetaLog, snapshot_end: dict) -> Result:
        recs = ml.records
        checks = sorted((end, recs_) for end, recs_ in snapshot_end.items())
        ci = 0
        i = 0
        n = len(recs)
        txn = None            # records of an open metadata transaction
        while i < n:
            j = i
            bno = recs[i].batch
            while j < n and recs[j].batch == bno:
                j += 1
            batch = recs[i:j]
            i = j
            while ci < len(checks) and checks[ci][0] <= batch[0].offset:
                self.check_snapshot(*checks[ci])
                ci += 1
            self.ts = max(self.ts, batch[0].ts)
            # metadata transactions: records between Begin and End are applied at End, dropped at Abort
            out = []
            for r in batch:
                if r.type == "BeginTransactionRecord":
                    txn = []
                    self.add_row(self.row(r, "Transaction"))
                elif r.type == "EndTransactionRecord":
                    if txn is not None:
                        out.extend(txn)
                    txn = None
                    self.add_row(self.row(r, "Transaction"))
                elif r.type == "AbortTransactionRecord":
                    for a in txn or []:
                        self.add_row(self.row(a, "Aborted"))
                    self.res.issues.append(Issue(r.file, r.pos, "aborted",
                                                 f"offset {r.offset}: metadata transaction aborted; "
                                                 f"{len(txn or [])} record(s) discarded as Kafka does"))
                    txn = None
                    self.add_row(self.row(r, "Transaction"))
                elif txn is not None:
                    txn.append(r)
                else:
                    out.append(r)
            if out:
                self.batch(out)
        while ci < len(checks):
            self.check_snapshot(*checks[ci])
            ci += 1
        return self.res

    # ------------------------------------------------------------------ one batch, record by record
    def batch(self, batch) -> None:
        """The records of one batch (its transactions resolved), in order, each attributed to what caused it.

        The controller writes a broker event's partition changes in the same batch, after it (a controlled
        shutdown, an unfence: `open_group`) or before it (a fence, a registration): a PartitionChangeRecord no
        event claimed yet waits in `pending`. Any other record ends that run of changes: the pending ones are
        then classified one by one, as is what is left at the end of the batch."""
        self.pending = []
        self.open_group = None
        k = 0
        n = len(batch)
        while k < n:
            r = batch[k]
            t = r.type
            if r.control or r.data is None:
                self._without_data(r)
            elif t == "PartitionChangeRecord":
                self._partition_change(r)
            elif t in _BROKER_STATE_RECORDS:
                self._broker_state_change(r)
            elif t == "RegisterBrokerRecord":
                self._broker_registration(r)
            else:
                self._end_change_run()
                k = self._other_record(batch, k)
                continue
            k += 1
        self.flush(self.pending)

    def _end_change_run(self) -> None:
        """The run of PartitionChangeRecords ends: each change still pending is classified on its own."""
        self.flush(self.pending)
        self.pending = []
        self.open_group = None

    def _without_data(self, r) -> None:
        """A control record or an undecoded one: a row and no event; a run of changes goes on across it."""
        self.add_row(self.row(r, "Control" if r.control else "Undecoded"))
        if not r.control:
            self.counts["undecoded"] = self.counts.get("undecoded", 0) + 1

    def _partition_change(self, r) -> None:
        """A PartitionChangeRecord merged into its partition: the open broker event's if it is that event's
        effect, else pending until a later record of the batch claims it."""
        d = r.data
        p = self.part_of(d)
        if p is None:
            self.res.issues.append(Issue(r.file, r.pos, "unknown-partition",
                                         f"offset {r.offset}: change of unknown partition "
                                         f"{d.get('topicId')}-{d.get('partitionId')} (no PartitionRecord "
                                         "before it)", skipped=1))
            self.add_row(self.row(r, "UnknownPartition"))
            return
        before = p.snap()
        self.merge(p, d)
        if self.open_group is not None and self._belongs(self.open_group, before, p, d):
            kind, _b, s = self.open_group
            self.add_row(self.row(r, kind, s, s, p))
            self.follow(p, p.snap(), before)
        else:
            self.open_group = None
            self.pending.append((r, before, p, p.snap()))

    def _broker_state_change(self, r) -> None:
        """BrokerRegistrationChangeRecord, FenceBrokerRecord or UnfenceBrokerRecord: a fence, a controlled
        shutdown, an unfence, or a change no partition sees."""
        t, d = r.type, r.data
        if t == "FenceBrokerRecord":
            bid, fenced, cs = d["id"], 1, 0
        elif t == "UnfenceBrokerRecord":
            bid, fenced, cs = d["id"], -1, 0
        else:
            bid, fenced, cs = d["brokerId"], d.get("fenced", 0), d.get("inControlledShutdown", 0)
        br = self.brokers.setdefault(bid, Broker())
        if fenced == 1:
            self._broker_fenced(r, bid, br)
        elif cs == 1:
            self._broker_shutting_down(r, bid, br)
        elif fenced == -1:
            self._broker_unfenced(r, bid, br)
        else:
            self.add_row(self.row(r, "NoPartitionEffect", extra={"broker": bid}))

    def _broker_fenced(self, r, bid: int, br: Broker) -> None:
        """A fence: the pending changes just before it that took the broker out of an ISR or a leadership are
        its effect; the earlier ones are classified on their own."""
        mine = self._take_trailing(self.pending, lambda before, after, dd: self._removes(bid, before, after))
        self._end_change_run()
        br.fenced = True
        br.in_cs = False
        s = self.emit({"type": "BrokerFence", "broker": bid})
        for (pr, _b, p, af) in mine:
            self.add_row(self.row(pr, "BrokerFence", s, s, p, after=af))
        for (pr, b4, p, af) in mine:
            self.follow(p, af, b4)
        self.add_row(self.row(r, "BrokerFence", s, s, extra={"broker": bid}))

    def _broker_shutting_down(self, r, bid: int, br: Broker) -> None:
        """A controlled shutdown: the changes after it that move the broker out belong to it."""
        self._end_change_run()
        br.in_cs = True
        br.clean_shutdown = True
        s = self.emit({"type": "BrokerControlledShutdown", "broker": bid})
        self.add_row(self.row(r, "BrokerControlledShutdown", s, s, extra={"broker": bid}))
        self.open_group = ("BrokerControlledShutdown", bid, s)

    def _broker_unfenced(self, r, bid: int, br: Broker) -> None:
        """An unfence: the changes after it that bring the broker back (leader, ISR) belong to it."""
        self._end_change_run()
        br.fenced = False
        s = self.emit({"type": "BrokerUnfence", "broker": bid})
        self.add_row(self.row(r, "BrokerUnfence", s, s, extra={"broker": bid}))
        self.open_group = ("BrokerUnfence", bid, s)

    def _broker_registration(self, r) -> None:
        """A (re-)registration: the pending changes just before it that took the broker out of an ELR are its
        effect. The previous epoch is the stream's only when the last incarnation shut down cleanly.

        Whether it did, the broker alone knew (its previousBrokerEpoch); the log shows it where it can: a
        registration after an unclean shutdown takes the broker out of every ELR it is in
        (ReplicationControlManager#handleBrokerShutdown, kafka-metadata 4.4.0: the partitions with the broker
        in an ELR, only when the shutdown was not clean), right before the RegisterBrokerRecord. So with the
        broker in some ELR, those records present mean unclean and absent mean clean. Only otherwise is the
        controlled-shutdown record the sign: a SIGTERMed broker that leads nothing is fenced with no
        inControlledShutdown record, yet shut down cleanly (the lab's `chaos` scenario, seed 7)."""
        d = r.data
        bid = d["brokerId"]
        mine = self._take_trailing(self.pending, lambda before, after, dd: self._elr_removal(bid, before, after))
        self._end_change_run()
        br = self.brokers.setdefault(bid, Broker())
        if mine or not br.registered:
            clean = False
        else:       # the scan only when the controlled-shutdown record does not settle it already
            clean = br.clean_shutdown or any(bid in p.elr for p in self.parts.values())
        prev = br.epoch if clean else -1
        br.epoch, br.registered = d["brokerEpoch"], True
        br.fenced, br.in_cs, br.clean_shutdown = d.get("fenced", True), d.get("inControlledShutdown", False), False
        s = self.emit({"type": "BrokerRegister", "broker": bid, "broker_epoch": d["brokerEpoch"],
                       "previous_broker_epoch": prev})
        for (pr, _b, p, af) in mine:
            self.add_row(self.row(pr, "BrokerRegister", s, s, p, after=af))
        self.add_row(self.row(r, "BrokerRegister", s, s, extra={"broker": bid, "broker_epoch": br.epoch}))
        if not br.fenced:
            self.emit({"type": "BrokerUnfence", "broker": bid})

    def _other_record(self, batch, k: int) -> int:
        """Any other record, at `batch[k]`: an admin request (a topic created, configs altered: the records that
        belong to it follow), an ELR cleared, a partition added, or state no partition sees. -> the next index."""
        r = batch[k]
        t = r.type
        if t == "TopicRecord":
            return self.create_topic(batch, k)
        if t == "ConfigRecord":
            return self.alter_config(batch, k)
        if t == "ClearElrRecord":
            self.clear_elr(r, None, None)
        elif t == "PartitionRecord":      # a partition added to an existing topic (CreatePartitions)
            p = self.apply_pr(r.data)
            s = self.emit({"type": "CreatePartition", "topic": p.topic, "partition": p.pid,
                           "replicas": list(p.replicas)})
            self.add_row(self.row(r, "CreatePartition", s, s, p))
            self.follow(p, p.snap())
        else:
            self._no_partition_effect(r)
        return k + 1

    def _no_partition_effect(self, r) -> None:
        """Features, topic deletions, broker unregistrations and the rest: state kept, a row, no event."""
        t, d = r.type, r.data
        if t == "FeatureLevelRecord":
            self.features[d["name"]] = d["featureLevel"]
        elif t == "RemoveTopicRecord":
            name = self.topics.pop(d["topicId"], None)
            for key in [key for key in self.parts if key[0] == d["topicId"]]:
                del self.parts[key]
            self.res.issues.append(Issue(r.file, r.pos, "not-representable",
                                         f"offset {r.offset}: topic {name} deleted; the stream has no "
                                         "deletion event (its partitions stay in the replay)"))
        elif t in ("UnregisterBrokerRecord",):
            self.brokers.pop(d["brokerId"], None)
        self.add_row(self.row(r, "NoPartitionEffect"))

    # ------------------------------------------------------------------ attribution helpers
    @staticmethod
    def _removes(b, before, after) -> bool:
        """The change takes broker b out of the ISR or out of the leadership (a fence / shutdown of b)."""
        return (b in before[1] and b not in after[1]) or (before[4] == b and after[4] != b)

    @staticmethod
    def _elr_removal(b, before, after) -> bool:
        return (b in before[2] and b not in after[2]) or (b in before[3] and b not in after[3])

    @staticmethod
    def _take_trailing(pending, pred) -> list:
        mine = []
        while pending and pred(pending[-1][1], pending[-1][3], pending[-1][0].data):
            mine.append(pending.pop())
        mine.reverse()
        return mine

    def _belongs(self, group, before, p: Part, d) -> bool:
        kind, b, _s = group
        if kind == "BrokerControlledShutdown":
            return self._removes(b, before, p.snap())
        if kind == "BrokerUnfence":
            # b back as leader or in the ISR; or any leaderless partition elected in the unfence's
            # batch: Kafka runs the election of every leaderless partition then (A15), b's or not
            return ((p.leader == b and before[4] != b) or (b in p.isr and b not in before[1])
                    or (before[4] == -1 and p.leader != -1))
        return False

    # ------------------------------------------------------------------ admin requests
    def create_topic(self, batch, k) -> int:
        r = batch[k]
        d = r.data
        name, tid = d["name"], d["topicId"]
        self.topics[tid] = name
        self.add_row(self.row(r, "CreateTopic", extra={"topic": name, "topic_id": tid}))
        k += 1
        parts = []
        while k < len(batch) and batch[k].type in ("ConfigRecord", "ClearElrRecord", "PartitionRecord") \
                and batch[k].data is not None:
            x = batch[k]
            if x.type == "ConfigRecord":
                self.apply_config(x.data)
                self.add_row(self.row(x, "CreateTopic", extra={"topic": x.data.get("resourceName")}))
            elif x.type == "ClearElrRecord":
                self.clear_elr(x, None, None)
            else:
                if x.data.get("topicId") != tid:
                    break
                parts.append(x)
            k += 1
        # the request's configs are the topic's: its first partition carries them (Cluster._first_creation)
        cfg = self.topic_cfg(name)
        for x in parts:
            p = self.apply_pr(x.data)
            ev = {"type": "CreatePartition", "topic": name, "partition": p.pid, "replicas": list(p.replicas)}
            if cfg:
                ev["config"], cfg = cfg, None
            s = self.emit(ev)
            self.add_row(self.row(x, "CreatePartition", s, s, p))
            self.follow(p, p.snap())
        return k

    def alter_config(self, batch, k) -> int:
        """Consecutive ConfigRecords (one IncrementalAlterConfigs) and the ClearElrRecord after them."""
        per_topic: dict[str, dict] = {}
        rows = []
        while k < len(batch) and batch[k].type == "ConfigRecord" and batch[k].data is not None:
            x = batch[k]
            d = x.data
            self.apply_config(d)
            if d.get("resourceType") == 2 and d.get("name") in TOPIC_KEYS:
                per_topic.setdefault(d["resourceName"], {})[d["name"]] = d.get("value")
            rows.append(x)
            k += 1
        seqs = {}
        for topic, cfg in per_topic.items():
            seqs[topic] = self.emit({"type": "AlterConfig", "topic": topic, "partition": None, "config": cfg})
        for x in rows:
            d = x.data
            s = seqs.get(d.get("resourceName")) if d.get("resourceType") == 2 else None
            if d.get("resourceType") == 4 and d.get("name") in TOPIC_KEYS and self.res.events:
                self.res.issues.append(Issue(x.file, x.pos, "not-representable",
                                             f"offset {x.offset}: cluster-wide {d.get('name')}={d.get('value')} "
                                             "changed after the start; the stream can only change topic configs"))
            self.add_row(self.row(x, "AlterConfig" if s else "NoPartitionEffect", s, s,
                                  extra={"topic": d.get("resourceName") if d.get("resourceType") == 2 else None}))
        while k < len(batch) and batch[k].type == "ClearElrRecord" and batch[k].data is not None:
            x = batch[k]
            s = seqs.get(x.data.get("topicName")) or (min(seqs.values()) if seqs else None)
            self.clear_elr(x, s, "AlterConfig" if s else None)
            k += 1
        return k

    def clear_elr(self, r, seq, cause) -> None:
        topic = r.data.get("topicName") or ""
        self.add_row(self.row(r, cause or "ClearElr", seq, seq, extra={"topic": topic or None}))
        for p in self.parts.values():
            if topic and p.topic != topic:
                continue
            if p.elr or p.lkelr:
                self.merge(p, {"eligibleLeaderReplicas": [], "lastKnownElr": []})
                # a partition change the controller made without a PartitionChangeRecord of its own
                self.add_row(self.row(r, cause or "ClearElr", seq, seq, p, {"derived": True}))

    # ------------------------------------------------------------------ the rest: one PCR at a time
    def flush(self, pending) -> None:
        for (r, before, p, after) in pending:
            self.classify(r, before, p, after)

    def classify(self, r, before, part: Part, after) -> None:
        self._classify(r, before, part, after)
        self.follow(part, after, before)

    def _classify(self, r, before, part: Part, after) -> None:
        d = r.data
        b_repl, b_isr, b_elr, b_lk, b_leader, _le, _pe, _lrs, b_add, b_rem = before
        a_repl, a_isr, _elr, _lk, a_leader, _le, _pe, _lrs, a_add, a_rem = after
        T, P = part.topic, part.pid
        if "replicas" in d:
            if a_add or a_rem:
                target = [x for x in a_repl if x not in a_rem]
                s = self.emit({"type": "Reassign", "topic": T, "partition": P, "replicas": target})
                self.add_row(self.row(r, "Reassign", s, s, part, after=after))
            elif b_add or b_rem:
                if "isr" in d:
                    s0, s1 = self.fetches(part, b_leader, after[5], [x for x in a_isr if x not in b_isr] or list(b_add))
                    self.add_row(self.row(r, "AlterPartition", s0, s1, part, {"reassignment": "completed"}, after=after))
                else:
                    s = self.emit({"type": "Reassign", "topic": T, "partition": P, "replicas": None})
                    self.add_row(self.row(r, "Reassign", s, s, part, {"reassignment": "cancelled"}, after=after))
            else:
                s = self.emit({"type": "Reassign", "topic": T, "partition": P, "replicas": list(a_repl)})
                self.add_row(self.row(r, "Reassign", s, s, part, after=after))
            return
        if "leader" in d:
            new = a_leader
            if new != NO_LEADER and (d.get("leaderRecoveryState") == 1 or (new not in b_isr and new not in b_elr)):
                s = self.emit({"type": "ElectLeaders", "topic": T, "partition": P, "election_type": "UNCLEAN"})
                self.add_row(self.row(r, "ElectLeaders", s, s, part, {"election_type": "UNCLEAN"}, after=after))
                return
            if new != NO_LEADER and a_repl and new == a_repl[0] and new != b_leader:
                s = self.emit({"type": "ElectLeaders", "topic": T, "partition": P, "election_type": "PREFERRED"})
                self.add_row(self.row(r, "ElectLeaders", s, s, part, {"election_type": "PREFERRED"}, after=after))
                return
            self.unexplained += 1
            self.add_row(self.row(r, "Unexplained", None, None, part, after=after))
            return
        if "isr" in d and b_leader != NO_LEADER:
            removed = [x for x in b_isr if x not in a_isr]
            added = [x for x in a_isr if x not in b_isr]
            s0 = s1 = None
            if removed:
                s0 = self.emit({"type": "Produce", "topic": T, "partition": P, "broker": b_leader, "records": 1,
                                "acks": 1})
                for f in a_isr:
                    if f != b_leader and f in b_isr:
                        self.catch_up(part, f, b_leader, after[5])
                # the leader's own check of this partition (a broker-wide Tick would visit all its partitions)
                s1 = self.emit({"type": "Tick", "broker": b_leader, "topic": T, "partition": P})
            if added:
                a0, s1 = self.fetches(part, b_leader, after[5], added)
                s0 = s0 or a0
            if s0 is None:       # an ISR change without a change (a reorder) or only ELR/recovery state
                self.unexplained += 1
                self.add_row(self.row(r, "Unexplained", None, None, part, after=after))
                return
            self.add_row(self.row(r, "AlterPartition", s0, s1, part, after=after, extra=
                                  {"alter": ("SHRINK" if removed else "") + ("EXPAND" if added else "")}))
            return
        self.unexplained += 1
        self.add_row(self.row(r, "Unexplained", None, None, part, after=after))

    def follow(self, part: Part, after, before=None) -> None:
        """After a leadership change (or a creation) the ISR followers fetch from the new leader once: the
        engine's leader then knows they are caught up, as the real leader learns from their first fetch."""
        leader, isr = after[4], after[1]
        if leader == NO_LEADER:
            return
        if before is not None and before[4] == leader and before[5] == after[5]:
            return
        for f in isr:
            if f != leader:
                self.emit({"type": "Fetch", "topic": part.topic, "partition": part.pid, "broker": f,
                           "target": leader})
                part.fetched[f] = after[5]

    def fetches(self, part: Part, leader, le: int, replicas) -> tuple[int, int]:
        """Each replica catches up with the leader (catch_up); with none, the leader's own check."""
        first = last = None
        for a in replicas:
            f0, last = self.catch_up(part, a, leader, le)
            first = first or f0
        if first is None:
            first = last = self.emit({"type": "Tick", "broker": leader, "topic": part.topic, "partition": part.pid})
        return first, last

    def catch_up(self, part: Part, f: int, leader: int, le: int) -> tuple[int, int]:
        """Follower f fetches from the leader (leader epoch `le`) until the engine's leader sees it at its
        log end: up to the LEO, then at it (the leader learns a position from the next request's offset).
        Before those, on f's first fetch in this leader epoch, one more: f's log may diverge from the new
        leader's (it holds an epoch the leader does not), and that fetch is answered DIVERGING_EPOCH and
        truncates it (C6/C7). A real cluster needed it (the lab's `chaos`, seed 2: a broker that had led
        epoch 1 rejoined leader 3's ISR at epoch 5; with two fetches the expansion and the partition's
        decisions after it were missing). Returns the first and last seq."""
        n = 2 if part.fetched.get(f) == le else 3
        part.fetched[f] = le
        seqs = [self.emit({"type": "Fetch", "topic": part.topic, "partition": part.pid, "broker": f,
                           "target": leader}) for _ in range(n)]
        return seqs[0], seqs[-1]


def convert(ml: MetaLog) -> Result:
    with gc_paused():
        return _convert(ml)


def _convert(ml: MetaLog) -> Result:
    c = Converter()
    res = c.res
    res.issues.extend(ml.issues)
    snaps = {}
    if ml.base_snapshot:
        end, _ep, recs = ml.snapshots[ml.base_snapshot]
        c.load_snapshot(recs)
        res.history_start = end
    else:
        res.history_start = ml.records[0].offset if ml.records else None
    for name, (end, _ep, recs) in ml.snapshots.items():
        if name != ml.base_snapshot and end > 0 and recs and (res.history_start is None or end > res.history_start):
            snaps[end] = recs
    # features/cluster configs from the bootstrap snapshot count as the starting configuration
    for name, (end, _ep, recs) in ml.snapshots.items():
        if end == 0:
            for r in recs:
                if r.type == "FeatureLevelRecord" and r.data:
                    c.features.setdefault(r.data["name"], r.data["featureLevel"])
    c.run(ml, snaps)
    s = dict(IMPORT_SETTINGS)
    # the cluster's starting configuration: the first cluster-wide values and the ELR feature
    first_cluster = {}
    for r in ml.records:
        if r.type == "ConfigRecord" and r.data and r.data.get("resourceType") == 4 and r.data.get("resourceName") == "":
            first_cluster.setdefault(r.data["name"], r.data.get("value"))
    for k in ("min.insync.replicas", "unclean.leader.election.enable"):
        if first_cluster.get(k) is not None:
            s[k] = first_cluster[k]
    elr = c.features.get("eligible.leader.replicas.version")
    if elr is not None:
        s["eligible.leader.replicas.enable"] = "true" if elr >= 1 else "false"
    res.settings = s
    res.counts = dict(c.counts, unexplained=c.unexplained, records=len(ml.records),
                      decisions=sum(1 for x in res.kafka_records if x.get("partition_epoch") is not None
                                    and x["cause"] not in ("Snapshot",)))
    return res
