"""`isrflow audit METADATA --tables DIR`: every real controller decision next to isrflow's.

1. import the metadata log (stream + `kafka_records`), 2. replay the stream (local engine by default) under the
import settings, 3. pair each PartitionRecord / PartitionChangeRecord (and each partition a ClearElrRecord
changed) with the `metadata_log` row isrflow committed for the same partition while applying the stream rows
of the event the record is attributed to (`seq_first..seq_last`), in order, and compare the two states,
4. check the real history itself (leader eligibility, epochs, ELR ∩ ISR = ∅, unclean elections, time under
min ISR, time without a leader). The `kafka_records` table and step 4 need only the records: they run while
the engine replays (_Alongside).
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.tables import arrow_schema

from .importer import import_stream, write_records, write_table
from .reader import gc_paused

FIELDS = ("leader", "isr", "elr", "last_known_elr", "replicas", "leader_epoch", "partition_epoch",
          "leader_recovery_state")


def kafka_rule(before: dict | None, r: dict) -> str:
    """The rule a decision follows, read from the state change."""
    if before is None:
        return "create" if r["cause"] == "CreatePartition" else "load"
    parts = []
    if r["leader"] != before["leader"] or r["leader_epoch"] != before["leader_epoch"]:
        nl = r["leader"]
        if nl == -1:
            parts.append("leader lost: no candidate")
        elif r["leader_recovery_state"] == "RECOVERING" and before["leader_recovery_state"] != "RECOVERING":
            parts.append("unclean or last-known-ELR election")
        elif nl in before["isr"]:
            parts.append("ISR election" if nl != before["leader"] else "leader epoch bump")
        elif nl in before["elr"]:
            parts.append("ELR election")
        elif nl in before["last_known_elr"]:
            parts.append("last-known-ELR election")
        else:
            parts.append("election outside ISR/ELR")
    if r["isr"] != before["isr"]:
        if set(r["isr"]) < set(before["isr"]):
            parts.append("ISR shrink")
        elif set(r["isr"]) > set(before["isr"]):
            parts.append("ISR expand")
        elif set(r["isr"]) == set(before["isr"]):
            parts.append("ISR reorder")
        else:
            parts.append("ISR change")
    if r["elr"] != before["elr"] or r["last_known_elr"] != before["last_known_elr"]:
        parts.append("ELR update")
    if r["replicas"] != before["replicas"]:
        parts.append("replicas change")
    if r["leader_recovery_state"] != before["leader_recovery_state"] and "unclean" not in " ".join(parts):
        parts.append(f"recovery state -> {r['leader_recovery_state']}")
    return ", ".join(parts) or "no visible change (epoch bump)"


def _why(k: dict, i: dict | None, diff: list[str], earlier_differ: bool) -> str:
    if i is None:
        if k["cause"] in ("AlterConfig", "ClearElr"):
            return ("isrflow did not clear the ELR on this min.insync.replicas change (Kafka 4.4.0 writes "
                    "ClearElrRecord, which empties ELR and last known ELR)")
        if k["cause"] == "Unexplained":
            return "no stream event could be attributed to this record (see docs/metadata-import.md)"
        return "isrflow committed no change for this event"
    why = []
    if "isr" in diff and sorted(k["isr"]) == sorted(i["isr"] or []):
        why.append("ISR order differs (same members)")
    elif "isr" in diff:
        why.append("ISR members differ")
    if "elr" in diff or "last_known_elr" in diff:
        why.append("ELR / last known ELR rule differs")
    if "leader" in diff:
        why.append("a different leader was elected")
    if "leader_recovery_state" in diff:
        why.append("leader recovery state differs")
    if "replicas" in diff:
        why.append("replica assignment differs")
    if diff and set(diff) <= {"leader_epoch", "partition_epoch"}:
        why.append("only the epochs differ" + (": an earlier decision of this partition differed or was missing"
                                               if earlier_differ else ""))
    elif earlier_differ:
        why.append("follows an earlier difference in this partition")
    return "; ".join(why)


# the engine rows _engine_notes cites, per table: the columns it reads and a scan filter (a fetch answered
# with an error; an AlterPartition that did not go through)
_NOTE_ROWS = {
    "fetch": (("topic", "partition", "seq", "broker", "result"), pc.field("result") != "OK"),
    "alter_partition": (("topic", "partition", "seq", "phase", "error"),
                        pc.field("phase").isin(["REJECTED", "IGNORED", "ROLLED_BACK"])),
}


def _engine_notes(rows_by_part: dict, key, s0, s1) -> str:
    """What isrflow's own tables say happened in the event's rows (fetch errors, AlterPartition outcomes)."""
    notes = []
    for r in rows_by_part.get(key, ()):
        if s0 <= r["seq"] <= s1:
            if r.get("_t") == "fetch" and r.get("result") not in (None, "OK"):
                notes.append(f"fetch from {r.get('broker')} answered {r['result']}")
            elif r.get("_t") == "alter_partition" and r.get("phase") in ("REJECTED", "IGNORED", "ROLLED_BACK"):
                notes.append(f"AlterPartition {r['phase']}" + (f" {r['error']}" if r.get("error") else ""))
    return "; ".join(dict.fromkeys(notes))


def _min_isr_at(kafka_records: list[dict], default: int = 1) -> dict:
    """offset -> the topic's min.insync.replicas in force at that decision (from the ConfigRecords before it)."""
    topic_min: dict[str, int] = {}
    out = {}
    for r in kafka_records:
        if r["record_type"] == "ConfigRecord" and r.get("data"):
            d = json.loads(r["data"])
            if d.get("name") != "min.insync.replicas":
                continue
            if d.get("resourceType") == 4 and d.get("resourceName") == "" and d.get("value") is not None:
                default = int(d["value"])
            elif d.get("resourceType") == 2:
                if d.get("value") is None:
                    topic_min.pop(d["resourceName"], None)
                else:
                    topic_min[d["resourceName"]] = int(d["value"])
        elif r.get("partition_epoch") is not None and r.get("topic") is not None:
            out[r["offset"]] = topic_min.get(r["topic"], default)
    return out


# The pairing is columnar: a Python pass does what is sequential per partition (which isrflow row each
# decision is paired with, the rule read from the previous decision); the audit table's kafka_* and
# isrflow_* columns are then taken whole from the two Arrow tables, the fields compared column by column,
# and only the rows that do not agree (few, in a healthy history) are explained one by one in Python.
_DECISION_COLS = ("offset", "append_ms", "topic", "partition", "cause", "seq_first", "seq_last") + FIELDS
_ISRFLOW_COLS = ("topic", "partition", "seq", "idx", "ts_ms", "cause") + FIELDS


def decision_rows(kafka_records: list[dict]) -> list[dict]:
    """The partition decisions of the history: records with a partition state, snapshot loads left out."""
    return [r for r in kafka_records if r.get("partition_epoch") is not None and not r.get("in_snapshot")]


def _decision_table(kafka_records: list[dict], table: pa.Table | None) -> pa.Table:
    """decision_rows as Arrow (the columns compare reads): filtered from kafka_records' table when there is
    one (the same rows, in the same order), else built from the dicts."""
    if table is None:
        sch = arrow_schema("kafka_records")
        rows = decision_rows(kafka_records)
        return pa.table({c: pa.array([r.get(c) for r in rows], sch.field(c).type) for c in _DECISION_COLS})
    keep = pc.and_(pc.is_valid(table["partition_epoch"]), pc.invert(pc.fill_null(table["in_snapshot"], False)))
    return table.select(list(_DECISION_COLS)).filter(keep)


def _isrflow_table(isr_rows) -> pa.Table:
    """isrflow's metadata_log (Arrow, or dicts) in commit order: by (seq, idx), a stable sort."""
    if not isinstance(isr_rows, pa.Table):
        sch = arrow_schema("metadata_log")
        isr_rows = pa.table({c: pa.array([r.get(c) for r in isr_rows], sch.field(c).type) for c in _ISRFLOW_COLS})
    return isr_rows.select(list(_ISRFLOW_COLS)).sort_by([("seq", "ascending"), ("idx", "ascending")])


def _differs(a, b) -> np.ndarray:
    """Per row: is a's value not equal to b's (Python's !=: two nulls are equal, a null and a value not)?"""
    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    b = b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b
    if not pa.types.is_list(a.type):
        same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(a.is_null(), b.is_null()))
        return ~same.to_numpy(zero_copy_only=False)
    # lists: lengths first (null as -1), then the items of the rows whose lengths agree, side by side
    la = pc.fill_null(pc.list_value_length(a), -1).to_numpy(zero_copy_only=False)
    lb = pc.fill_null(pc.list_value_length(b), -1).to_numpy(zero_copy_only=False)
    out = la != lb
    rows = np.nonzero((la == lb) & (la > 0))[0]
    if len(rows):
        ia = pc.list_flatten(a.take(rows)).to_numpy(zero_copy_only=False)
        ib = pc.list_flatten(b.take(rows)).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(len(rows)), la[rows])
        out[rows[np.unique(owner[ia != ib])]] = True
    return out


def _by_partition(ikeys: list) -> dict[tuple, list]:
    """isrflow's rows (indexes into the sorted metadata_log) per partition, partitions in the order they
    first appear."""
    by_part: dict[tuple, list] = {}
    for j, key in enumerate(ikeys):
        by_part.setdefault(key, []).append(j)
    return by_part


def _pair(decisions: list[dict], by_part: dict, iseq: list) -> tuple[list, list]:
    """Which isrflow row (index into the sorted metadata_log, or None) each decision is paired with, and the
    rule each follows: per partition, the first row not yet passed at or after the event's first stream row,
    if it is within the event (rows passed over are isrflow-only decisions)."""
    cursor: dict[tuple, int] = {}
    last_k: dict[tuple, dict] = {}
    match, rules = [], []
    for k in decisions:
        key = (k["topic"], k["partition"])
        m = None
        s0 = k["seq_first"]
        if s0 is not None:
            rows = by_part.get(key, ())
            c = cursor.get(key, 0)
            while c < len(rows) and iseq[rows[c]] < s0:
                c += 1
            if c < len(rows) and iseq[rows[c]] <= k["seq_last"]:
                m = rows[c]
                c += 1
            cursor[key] = c
        match.append(m)
        rules.append(kafka_rule(last_k.get(key), k))
        last_k[key] = k
    return match, rules


def compare_table(kafka_records: list[dict], isr_rows, elections: list[dict], engine_rows=None,
                  kafka_table: pa.Table | None = None) -> pa.Table:
    """The audit table: each real decision (kafka_records in log order) paired with the isrflow metadata_log
    row committed for its event (isr_rows: Arrow or dicts), then isrflow's unpaired decisions.
    engine_rows: the rows _engine_notes cites, or a function returning them (read only if some decision has
    no isrflow row)."""
    decisions = decision_rows(kafka_records)
    kt = _decision_table(kafka_records, kafka_table)
    it = _isrflow_table(isr_rows)
    ikeys = list(zip(it["topic"].to_pylist(), it["partition"].to_pylist()))
    iseq = it["seq"].to_pylist()
    elect: dict[tuple, str] = {}
    for e in elections:
        elect.setdefault((e["topic"], e["partition"], e["seq"]), e.get("election"))
    by_part = _by_partition(ikeys)
    match, rules = _pair(decisions, by_part, iseq)
    n = len(decisions)
    take = pa.array(match, pa.int64())
    paired = it.take(take)
    matched = take.is_valid().to_numpy(zero_copy_only=False)
    differs = {f: _differs(kt[f], paired[f]) & matched for f in FIELDS}
    any_diff = np.zeros(n, bool)
    for d in differs.values():
        any_diff |= d
    verdict = np.where(matched, np.where(any_diff, "differ", "agree"), "kafka_only").astype(object)
    diff: list = [None] * n
    why: list = [None] * n
    election = [elect.get((*ikeys[m], iseq[m])) if m is not None else None for m in match] if elect else [None] * n
    # the rows that do not agree, in log order: explained one by one (an earlier one of the same partition
    # is part of the explanation of a later one)
    differ_seen: set = set()
    notes_by_part = None
    mins = None
    for j in np.nonzero(~matched | any_diff)[0].tolist():
        k = decisions[j]
        key = (k["topic"], k["partition"])
        earlier = key in differ_seen
        differ_seen.add(key)
        if match[j] is None:
            w = _why(k, None, [], earlier)
            if k["seq_first"] is not None:
                if notes_by_part is None:
                    notes_by_part = _notes_by_part(engine_rows() if callable(engine_rows) else engine_rows)
                note = _engine_notes(notes_by_part, key, k["seq_first"], k["seq_last"])
                if note:
                    w = f"{w}: {note}"
            why[j] = w
            continue
        d = [f for f in FIELDS if differs[f][j]]
        diff[j] = d
        w = _why(k, paired.slice(j, 1).to_pylist()[0], d, earlier)
        if "elr" in d or "last_known_elr" in d:
            mins = _min_isr_at(kafka_records) if mins is None else mins
            mi = mins.get(k["offset"])
            if mi is not None:
                w += f" (the topic's min.insync.replicas was {mi} at this offset; ISR size {len(k['isr'])})"
        why[j] = w
        if election[j]:
            rules[j] = f"{rules[j]} (isrflow: {election[j]} election)"
    cols = {"decision": pa.array(np.arange(1, n + 1, dtype=np.int64)), "offset": kt["offset"],
            "ts_ms": kt["append_ms"], "topic": kt["topic"], "partition": kt["partition"], "cause": kt["cause"],
            "seq_first": kt["seq_first"], "seq_last": kt["seq_last"], "verdict": verdict, "diff": diff,
            **{f"kafka_{f}": kt[f] for f in FIELDS}, "isrflow_seq": paired["seq"],
            **{f"isrflow_{f}": paired[f] for f in FIELDS}, "isrflow_cause": paired["cause"],
            "isrflow_election": election, "rule": rules, "why": why}
    return pa.concat_tables([_audit_table(cols, n), _isrflow_only(it, ikeys, iseq, by_part, match, elect, n)])


def _audit_table(cols: dict, n: int) -> pa.Table:
    """The audit table of these columns (missing ones null), in its schema's order and types."""
    sch = arrow_schema("audit")
    arrays = []
    for f in sch:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(v, (pa.Array, pa.ChunkedArray)):
            arrays.append(v.cast(f.type) if v.type != f.type else v)
        else:
            arrays.append(pa.array(v, f.type))
    return pa.Table.from_arrays(arrays, schema=sch)


def _isrflow_only(it: pa.Table, ikeys: list, iseq: list, by_part: dict, match: list, elect: dict,
                  n: int) -> pa.Table:
    """isrflow's decisions no real decision was paired with (snapshot loads are not decisions), partition by
    partition in the order the partitions first appear, numbered on from the real ones."""
    used = np.zeros(len(ikeys), bool)
    used[[m for m in match if m is not None]] = True
    not_load = pc.fill_null(pc.not_equal(it["cause"], "PartitionRecord"), True).to_numpy(zero_copy_only=False)
    rows = [j for js in by_part.values() for j in js if not used[j] and not_load[j]]
    part = it.take(pa.array(rows, pa.int64()))
    m = len(rows)
    cols = {"decision": pa.array(np.arange(n + 1, n + m + 1, dtype=np.int64)), "ts_ms": part["ts_ms"],
            "topic": part["topic"], "partition": part["partition"], "verdict": ["isrflow_only"] * m,
            "isrflow_seq": part["seq"], "isrflow_cause": part["cause"],
            "isrflow_election": [elect.get((*ikeys[j], iseq[j])) for j in rows],
            **{f"isrflow_{f}": part[f] for f in FIELDS},
            "why": ["isrflow committed a change the real controller did not write at this point"] * m}
    return _audit_table(cols, m)


def _notes_by_part(engine_rows) -> dict:
    out: dict[tuple, list] = {}
    for r in engine_rows or ():
        out.setdefault((r["topic"], r["partition"]), []).append(r)
    return out


def compare(kafka_records: list[dict], isr_rows: list[dict], elections: list[dict],
            engine_rows: list[dict] | None = None) -> list[dict]:
    """compare_table as dicts (every column present, null where it does not apply)."""
    return compare_table(kafka_records, isr_rows, elections, engine_rows).to_pylist()


# ----------------------------------------------------------------------------- invariants on the real history
def check_history(kafka_records: list[dict], settings: dict) -> list[dict]:
    """The invariants of the real history, kafka_records in log order: the raft epoch never goes back; each
    partition decision is checked on its own (leader in the ISR, ELR apart from the ISR and only under min ISR)
    and against the partition's previous state (epochs, who could be elected), with the min.insync.replicas and
    the brokers' state in force at its offset; at the end, each partition's time under min ISR and without a
    leader, up to the last record."""
    end_ts = max((r["append_ms"] or 0 for r in kafka_records), default=0)
    h = _History(int(settings.get("min.insync.replicas", "1")))
    for r in kafka_records:
        if r.get("in_snapshot") and r.get("partition_epoch") is None:
            continue                # the snapshot's other records: state from before the history
        if r.get("raft_epoch") != h.last_raft:        # most records repeat the epoch: nothing to check then
            h.check_raft_epoch(r)
        t = r["record_type"]
        if t == "ConfigRecord" and r.get("data"):
            h.track_min_isr(json.loads(r["data"]))
        elif t in _BROKER_STATE_RECORDS and r.get("data"):
            h.track_broker(t, json.loads(r["data"]))
        if r.get("partition_epoch") is not None:
            h.check_decision(r)
    return h.findings + h.durations(end_ts)


_BROKER_STATE_RECORDS = ("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FenceBrokerRecord",
                         "UnfenceBrokerRecord")


class _History:
    """What `check_history` knows at a point of the log, and what it found so far."""

    def __init__(self, default_min: int):
        self.findings: list[dict] = []
        self.default_min = default_min                  # cluster-wide min.insync.replicas
        self.topic_min: dict[str, int] = {}
        self.fenced: dict[int, bool] = {}
        self.in_cs: dict[int, bool] = {}
        self.state: dict[tuple, dict] = {}              # (topic, partition) -> its last decision
        self.since_under: dict[tuple, int] = {}         # partitions under min ISR now: since when
        self.since_leaderless: dict[tuple, int] = {}
        self.under_total: dict[tuple, int] = {}
        self.leaderless_total: dict[tuple, int] = {}
        self.last_raft = None

    def find(self, r, inv, detail, dur=None) -> None:
        self.findings.append({"offset": r.get("offset"), "ts_ms": r.get("append_ms"), "topic": r.get("topic"),
                              "partition": r.get("partition"), "invariant": inv, "detail": detail,
                              "duration_ms": dur})

    def check_raft_epoch(self, r) -> None:
        """The log's raft epochs never decrease (a snapshot's records carry the epoch of their time)."""
        if r.get("raft_epoch") is not None and not r.get("in_snapshot"):
            if self.last_raft is not None and r["raft_epoch"] < self.last_raft:
                self.find(r, "EpochMonotonic", f"raft epoch went back from {self.last_raft} to {r['raft_epoch']}")
            self.last_raft = max(self.last_raft or 0, r["raft_epoch"])

    def track_min_isr(self, d: dict) -> None:
        """A ConfigRecord: a topic's or the cluster's min.insync.replicas from here on."""
        if d.get("resourceType") == 2 and d.get("name") == "min.insync.replicas":
            if d.get("value") is None:
                self.topic_min.pop(d["resourceName"], None)
            else:
                self.topic_min[d["resourceName"]] = int(d["value"])
        elif d.get("resourceType") == 4 and d.get("resourceName") == "" and d.get("name") == "min.insync.replicas" \
                and d.get("value") is not None:
            self.default_min = int(d["value"])

    def track_broker(self, t: str, d: dict) -> None:
        """A broker's fenced / controlled-shutdown state from here on (who may be elected)."""
        b = d.get("brokerId", d.get("id"))
        if t == "RegisterBrokerRecord":
            self.fenced[b] = d.get("fenced", True)
            self.in_cs[b] = d.get("inControlledShutdown", False)
        elif t == "FenceBrokerRecord" or d.get("fenced") == 1:
            self.fenced[b] = True
            self.in_cs[b] = False
        elif t == "UnfenceBrokerRecord" or d.get("fenced") == -1:
            self.fenced[b] = False
        if d.get("inControlledShutdown") == 1:
            self.in_cs[b] = True

    def check_decision(self, r) -> None:
        """One partition decision: its own state, the change from the previous one, and the clocks of the
        partition's time under min ISR and without a leader."""
        key = (r["topic"], r["partition"])
        prev = self.state.get(key)
        name = f"{r['topic']}-{r['partition']}"
        isr, elr, lk, leader = r["isr"] or [], r["elr"] or [], r["last_known_elr"] or [], r["leader"]
        mi = min(self.topic_min.get(r["topic"], self.default_min), len(r["replicas"] or []) or 1)
        self._check_state(r, name, isr, elr, leader, mi)
        if prev is not None:
            self._check_change(r, prev, name, leader)
        self._track_time(r, key, name, len(isr) < mi, isr, elr, lk, leader)
        self.state[key] = r

    def _check_state(self, r, name, isr, elr, leader, mi) -> None:
        """ELR ∩ ISR = ∅, an ELR only while the ISR is under min ISR, the leader in the ISR."""
        if set(isr) & set(elr):
            self.find(r, "ElrIsrDisjoint", f"{name}: ISR {isr} and ELR {elr} share {sorted(set(isr) & set(elr))}")
        if elr and len(isr) >= mi:
            self.find(r, "ElrOnlyUnderMinIsr",
                      f"{name}: ELR {elr} is not empty while ISR {isr} has at least min ISR {mi}")
        if leader != -1 and leader not in isr:
            self.find(r, "LeaderInIsr", f"{name}: leader {leader} is not in the ISR {isr}")

    def _check_change(self, r, prev, name, leader) -> None:
        """Epochs only go up; a new leader was neither fenced nor shutting down, and came from the ISR or the
        ELR (else the election was unclean)."""
        if r["leader_epoch"] < prev["leader_epoch"] or r["partition_epoch"] <= prev["partition_epoch"]:
            self.find(r, "EpochMonotonic", f"{name}: epochs went from (leader {prev['leader_epoch']}, partition "
                                           f"{prev['partition_epoch']}) to ({r['leader_epoch']}, "
                                           f"{r['partition_epoch']})")
        if leader != -1 and (leader != prev["leader"] or r["leader_epoch"] != prev["leader_epoch"]):
            if self.fenced.get(leader, False) or self.in_cs.get(leader, False):
                why = "fenced" if self.fenced.get(leader) else "in controlled shutdown"
                self.find(r, "LeaderEligibility", f"{name}: elected broker {leader} is {why}")
            if leader not in prev["isr"] and leader not in prev["elr"] and leader != prev["leader"]:
                how = ("the last known ELR member" if leader in prev["last_known_elr"] else
                       "neither in the ISR nor in the ELR")
                self.find(r, "UncleanElection", f"{name}: leader {leader} elected though it was {how} "
                                                f"(ISR {prev['isr']}, ELR {prev['elr']}); recovery state "
                                                f"{r['leader_recovery_state']}")

    def _track_time(self, r, key, name, under, isr, elr, lk, leader) -> None:
        """The clocks of time under min ISR and without a leader start and stop at decisions (a leaderless
        partition is also a finding when it starts)."""
        ts = r["append_ms"] or 0
        if under and key not in self.since_under:
            self.since_under[key] = ts
        elif not under and key in self.since_under:
            self.under_total[key] = self.under_total.get(key, 0) + ts - self.since_under.pop(key)
        if leader == -1 and key not in self.since_leaderless:
            self.since_leaderless[key] = ts
            self.find(r, "Leaderless", f"{name}: no leader (ISR {isr}, ELR {elr}, last known ELR {lk})")
        elif leader != -1 and key in self.since_leaderless:
            self.leaderless_total[key] = self.leaderless_total.get(key, 0) + ts - self.since_leaderless.pop(key)

    def durations(self, end_ts: int) -> list[dict]:
        """Time under min ISR and without a leader per partition; a clock still running stops at the last record."""
        for key, t0 in self.since_under.items():
            self.under_total[key] = self.under_total.get(key, 0) + end_ts - t0
        for key, t0 in self.since_leaderless.items():
            self.leaderless_total[key] = self.leaderless_total.get(key, 0) + end_ts - t0
        out = []
        for key, ms in sorted(self.under_total.items()):
            out.append({"topic": key[0], "partition": key[1], "invariant": "TimeUnderMinIsr", "duration_ms": ms,
                        "detail": f"{key[0]}-{key[1]}: {ms} ms with ISR below min ISR", "ts_ms": end_ts})
        for key, ms in sorted(self.leaderless_total.items()):
            out.append({"topic": key[0], "partition": key[1], "invariant": "TimeWithoutLeader", "duration_ms": ms,
                        "detail": f"{key[0]}-{key[1]}: {ms} ms without a leader", "ts_ms": end_ts})
        return out


def _compare_tables(tables_dir: Path, res, records_dir: Path, findings: list[dict]):
    """kafka_records next to isrflow's tables (a copy of the import's: a Delta table's paths are relative),
    every decision paired, the audit tables written."""
    from jobs.delta_sink import read_table
    shutil.copytree(records_dir / "kafka_records", tables_dir / "kafka_records")
    try:
        isr_rows = read_table(str(tables_dir), "metadata_log", columns=list(_ISRFLOW_COLS))
    except Exception:                                    # noqa: BLE001 - no row at all: no table
        isr_rows = []
    try:
        elections = read_table(str(tables_dir), "elections", columns=["topic", "partition", "seq",
                                                                      "election"]).to_pylist()
    except Exception:                                    # noqa: BLE001
        elections = []

    def engine_rows():
        rows = []
        for t, (cols, keep) in _NOTE_ROWS.items():
            try:
                # only the rows a note can cite (_engine_notes), filtered in the scan: the table of a 1M-record
                # audit holds millions of PROPOSED/ACCEPTED rows that would cost seconds as Python dicts
                tbl = read_table(str(tables_dir), t, columns=list(cols), filter=keep)
            except Exception:                            # noqa: BLE001 - no such rows: no table
                continue
            rows += [dict(r, _t=t) for r in tbl.to_pylist()]
        return rows

    table = compare_table(res.kafka_records, isr_rows, elections, engine_rows, res.kafka_records_table)
    if table.num_rows:
        write_table(tables_dir, "audit", table)
    if findings:
        write_table(tables_dir, "audit_invariants", findings)
    return table, findings


# ----------------------------------------------------------------------------- the command
# the audit's default replay processes: a small log is replayed in one (a worker costs ~1 s to start)
PARALLEL_MIN_EVENTS = 50_000


def default_workers(events: int) -> int:
    return min(2, os.cpu_count() or 1) if events >= PARALLEL_MIN_EVENTS else 1


class _Alongside(threading.Thread):
    """The audit's work that needs only the records, run while the engine replays the stream: the rest of the
    import (the kafka_records table, _import.json) and the invariants of the real history. The local
    engine's parallel replay runs in worker processes, its parent mostly waits for them: this thread uses
    that wait (on one process, it shares the interpreter with the replay and costs what it would after it)."""

    def __init__(self, imp: dict, res, records_dir: Path):
        super().__init__(name="isrflow-audit-alongside", daemon=True)
        self.imp, self.res, self.records_dir = imp, res, records_dir
        self.findings: list[dict] = []
        self.error: BaseException | None = None
        self.seconds = 0.0

    def run(self) -> None:
        t = time.perf_counter()
        try:
            write_records(self.imp, self.res, self.records_dir)
            self.findings = check_history(self.res.kafka_records, self.res.settings)
        except BaseException as e:                      # noqa: BLE001 - raised in the audit's thread (result)
            self.error = e
        self.seconds = time.perf_counter() - t

    def result(self) -> list[dict]:
        self.join()
        if self.error is not None:
            raise self.error
        return self.findings


def run_audit(src, tables_dir, engine: str = "local", stream_dir=None, overrides: dict | None = None,
              log=None, workers: int | None = None) -> dict:
    with gc_paused():           # millions of small acyclic objects (see reader.gc_paused), in both threads
        return _run_audit(src, tables_dir, engine, stream_dir, overrides, workers)


def _run_audit(src, tables_dir, engine, stream_dir, overrides, workers) -> dict:
    from conf import load_defaults
    from protocol.config import EngineConfig

    t0 = time.perf_counter()
    tables_dir = Path(tables_dir)
    stream_dir = Path(stream_dir) if stream_dir else tables_dir.with_name(tables_dir.name + ".stream")
    imp, res, _ml = import_stream(src, stream_dir, overwrite=True)
    t1 = time.perf_counter()
    settings = dict(res.settings)
    cfg = dict(load_defaults())
    cfg.update(settings)
    cfg.update(overrides or {})
    config = EngineConfig(cfg)
    if tables_dir.exists():
        shutil.rmtree(tables_dir)
    alongside = _Alongside(imp, res, stream_dir / "_tables")
    alongside.start()
    try:
        if engine == "local":
            from jobs.local_engine import replay_local
            workers = workers or default_workers(imp["events"])
            replay = replay_local(str(stream_dir), str(tables_dir), config, overwrite=True, workers=workers)
        else:
            from jobs.spark_engine import replay_spark
            replay = replay_spark(str(stream_dir), str(tables_dir), config, overwrite=True)
    finally:
        alongside.join()
    findings = alongside.result()
    t2 = time.perf_counter()
    table, findings = _compare_tables(tables_dir, res, stream_dir / "_tables", findings)
    verdicts = {v["values"]: v["counts"] for v in pc.value_counts(table["verdict"]).to_pylist()} \
        if table.num_rows else {}
    inv: dict[str, int] = {}
    for f in findings:
        inv[f["invariant"]] = inv.get(f["invariant"], 0) + 1
    decisions = table.num_rows - verdicts.get("isrflow_only", 0)
    t3 = time.perf_counter()
    summary = {"decisions": decisions, "agree": verdicts.get("agree", 0),
               "differ": verdicts.get("differ", 0), "kafka_only": verdicts.get("kafka_only", 0),
               "isrflow_only": verdicts.get("isrflow_only", 0), "invariant_findings": inv,
               "import": {k: imp[k] for k in ("records", "batches", "events", "decisions", "unexplained", "skipped",
                                              "skipped_by_reason", "issues")},
               "replay": {k: replay.get(k) for k in ("input_rows", "applied", "rejected", "seconds", "workers")},
               "tables": str(tables_dir), "stream": str(stream_dir), "settings": settings,
               # wall seconds: import (decode, convert, stream written), replay (the engine over the stream; the
               # kafka_records table and the real history's invariants alongside, `alongside` their own time),
               # compare (isrflow's tables read back, decisions paired, audit tables written)
               "seconds": {"import": round(t1 - t0, 3), "replay": round(t2 - t1, 3), "compare": round(t3 - t2, 3),
                           "alongside": round(alongside.seconds, 3), "total": round(t3 - t0, 3)}}
    (tables_dir / "_audit.json").write_text(json.dumps(summary, indent=1))
    return summary


def summary_line(s: dict) -> str:
    inv = ", ".join(f"{k} {v}" for k, v in sorted(s["invariant_findings"].items())) or "none"
    return (f"audit: {s['decisions']} decisions, {s['agree']} agree, {s['differ']} differ, "
            f"{s['kafka_only']} kafka-only, {s['isrflow_only']} isrflow-only; invariant findings: {inv}; "
            f"import skipped {s['import']['skipped']} record(s), {len(s['import']['issues'])} issue(s)")
