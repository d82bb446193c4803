"""`isrflow audit METADATA --tables DIR`: every real controller decision next to isrflow's.

1. import the metadata log (stream + `kafka_records`), 2. replay the stream (local engine by default) under the
import settings, 3. pair each PartitionRecord / PartitionChangeRecord (and each partition a ClearElrRecord
changed) with the `metadata_log` row isrflow committed for the same partition while applying the stream rows
of the event the record is attributed to (`seq_first..seq_last`), in order, and compare the two states,
4. check the real history itself (leader eligibility, epochs, ELR ∩ ISR = ∅, unclean elections, time under
min ISR, time without a leader).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pyarrow.compute as pc

from .importer import import_metadata, write_table
from .reader import gc_paused

FIELDS = ("leader", "isr", "elr", "last_known_elr", "replicas", "leader_epoch", "partition_epoch",
          "leader_recovery_state")
_ISRFLOW_KEYS = tuple((f, f"isrflow_{f}") for f in FIELDS)     # compare's column names, made once


def _decisions(kafka_records: list[dict]) -> list[dict]:
    return [r for r in kafka_records if r.get("partition_epoch") is not None and not r.get("in_snapshot")]


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


def _paired(row: dict, k: dict, match: dict, elect: dict, mins: dict, earlier_differ: bool) -> None:
    """compare's row for a real decision k paired with isrflow's metadata_log row `match`: isrflow's
    fields, the verdict, and for a difference the fields that differ and why."""
    diff = [f for f in FIELDS if k[f] != match.get(f)]
    for f, kf in _ISRFLOW_KEYS:
        row[kf] = match.get(f)
    row["isrflow_seq"] = match["seq"]
    row["isrflow_cause"] = match.get("cause")
    row["isrflow_election"] = elect.get((k["topic"], k["partition"], match["seq"])) if elect else None
    row["verdict"] = "differ" if diff else "agree"
    row["diff"] = diff or None
    row["why"] = _why(k, match, diff, earlier_differ) if diff else None
    if diff:
        if "elr" in diff or "last_known_elr" in diff:
            mi = mins.get(k["offset"])
            if mi is not None:
                row["why"] += (f" (the topic's min.insync.replicas was {mi} at this offset; ISR size "
                               f"{len(k['isr'])})")
        if row["isrflow_election"]:
            row["rule"] = f"{row['rule']} (isrflow: {row['isrflow_election']} election)"


def compare(kafka_records: list[dict], isr_rows: list[dict], elections: list[dict],
            engine_rows: list[dict] | None = None) -> list[dict]:
    decisions = _decisions(kafka_records)
    notes_by_part: dict[tuple, list] = {}
    for r in engine_rows or ():
        notes_by_part.setdefault((r["topic"], r["partition"]), []).append(r)
    by_part_i: dict[tuple, list] = {}
    for r in sorted(isr_rows, key=lambda r: (r["seq"], r["idx"])):
        by_part_i.setdefault((r["topic"], r["partition"]), []).append(r)
    elect = {}
    for e in elections:
        elect.setdefault((e["topic"], e["partition"], e["seq"]), e.get("election"))
    used = set()
    cursor: dict[tuple, int] = {}
    last_k: dict[tuple, dict] = {}
    differ_seen: set = set()
    out = []
    n = 0
    mins = _min_isr_at(kafka_records)
    for k in decisions:
        key = (k["topic"], k["partition"])
        rows = by_part_i.get(key, [])
        match = None
        s0, s1 = k["seq_first"], k["seq_last"]
        if s0 is not None:
            c = cursor.get(key, 0)
            # isrflow rows before this event that nothing claimed are isrflow-only decisions
            while c < len(rows) and rows[c]["seq"] < s0:
                c += 1
            if c < len(rows) and s0 <= rows[c]["seq"] <= s1:
                match = rows[c]
                used.add(id(match))
                c += 1
            cursor[key] = c
        before = last_k.get(key)
        rule = kafka_rule(before, k)
        last_k[key] = k
        n += 1
        row = {"decision": n, "offset": k["offset"], "ts_ms": k["append_ms"], "topic": k["topic"],
               "partition": k["partition"], "cause": k["cause"], "seq_first": s0, "seq_last": s1,
               "kafka_leader": k["leader"], "kafka_isr": k["isr"], "kafka_elr": k["elr"],
               "kafka_last_known_elr": k["last_known_elr"], "kafka_replicas": k["replicas"],
               "kafka_leader_epoch": k["leader_epoch"], "kafka_partition_epoch": k["partition_epoch"],
               "kafka_leader_recovery_state": k["leader_recovery_state"], "rule": rule}
        if match is None:
            why = _why(k, None, [], key in differ_seen)
            if s0 is not None:
                note = _engine_notes(notes_by_part, key, s0, s1)
                if note:
                    why = f"{why}: {note}"
            row.update(verdict="kafka_only", diff=None, why=why)
            differ_seen.add(key)
        else:
            _paired(row, k, match, elect, mins, key in differ_seen)
            if row["diff"]:
                differ_seen.add(key)
        out.append(row)
    for key, rows in by_part_i.items():
        for r in rows:
            if id(r) in used or r.get("cause") == "PartitionRecord":    # a snapshot load, not a decision
                continue
            n += 1
            out.append({"decision": n, "ts_ms": r["ts_ms"], "topic": r["topic"], "partition": r["partition"],
                        "verdict": "isrflow_only", "isrflow_seq": r["seq"], "isrflow_cause": r.get("cause"),
                        "isrflow_election": elect.get((r["topic"], r["partition"], r["seq"])),
                        **{f"isrflow_{f}": r.get(f) for f in FIELDS},
                        "why": "isrflow committed a change the real controller did not write at this point"})
    return out


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


def _compare_tables(tables_dir: Path, res):
    """kafka_records written next to isrflow's tables, every decision paired, the real history checked."""
    from jobs.delta_sink import read_table
    write_table(tables_dir, "kafka_records", res.kafka_records_table if res.kafka_records_table is not None
                else res.kafka_records)
    try:
        isr_rows = read_table(str(tables_dir), "metadata_log").to_pylist()
    except Exception:                                    # noqa: BLE001 - no row at all: no table
        isr_rows = []
    try:
        elections = read_table(str(tables_dir), "elections").to_pylist()
    except Exception:                                    # noqa: BLE001
        elections = []
    engine_rows = []
    for t, (cols, keep) in _NOTE_ROWS.items():
        try:
            # only the rows a note can cite (_engine_notes), filtered in the scan: the table of a 1M-record
            # audit holds millions of PROPOSED/ACCEPTED rows that would cost seconds as Python dicts
            tbl = read_table(str(tables_dir), t, columns=list(cols), filter=keep)
        except Exception:                                # noqa: BLE001 - no such rows: no table
            continue
        engine_rows += [dict(r, _t=t) for r in tbl.to_pylist()]
    rows = compare(res.kafka_records, isr_rows, elections, engine_rows)
    findings = check_history(res.kafka_records, res.settings)
    if rows:
        write_table(tables_dir, "audit", rows)
    if findings:
        write_table(tables_dir, "audit_invariants", findings)
    return rows, findings


# ----------------------------------------------------------------------------- the command
# the audit's default replay processes: a small log is replayed in one (a worker costs ~1 s to start)
PARALLEL_MIN_EVENTS = 50_000


def default_workers(events: int) -> int:
    return min(2, os.cpu_count() or 1) if events >= PARALLEL_MIN_EVENTS else 1


def run_audit(src, tables_dir, engine: str = "local", stream_dir=None, overrides: dict | None = None,
              log=None, workers: int | None = None) -> dict:
    from conf import load_defaults
    from protocol.config import EngineConfig

    t0 = time.perf_counter()
    tables_dir = Path(tables_dir)
    stream_dir = Path(stream_dir) if stream_dir else tables_dir.with_name(tables_dir.name + ".stream")
    imp, res, ml = import_metadata(src, stream_dir, tables=None, overwrite=True)
    t1 = time.perf_counter()
    settings = dict(res.settings)
    cfg = dict(load_defaults())
    cfg.update(settings)
    cfg.update(overrides or {})
    config = EngineConfig(cfg)
    if tables_dir.exists():
        shutil.rmtree(tables_dir)
    if engine == "local":
        from jobs.local_engine import replay_local
        workers = workers or default_workers(imp["events"])
        replay = replay_local(str(stream_dir), str(tables_dir), config, overwrite=True, workers=workers)
    else:
        from jobs.spark_engine import replay_spark
        replay = replay_spark(str(stream_dir), str(tables_dir), config, overwrite=True)
    t2 = time.perf_counter()
    with gc_paused():           # millions of small acyclic objects (see reader.gc_paused)
        rows, findings = _compare_tables(tables_dir, res)
    verdicts: dict[str, int] = {}
    for r in rows:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    inv: dict[str, int] = {}
    for f in findings:
        inv[f["invariant"]] = inv.get(f["invariant"], 0) + 1
    decisions = sum(1 for r in rows if r["verdict"] != "isrflow_only")
    t3 = time.perf_counter()
    summary = {"decisions": decisions, "agree": verdicts.get("agree", 0),
               "differ": verdicts.get("differ", 0), "kafka_only": verdicts.get("kafka_only", 0),
               "isrflow_only": verdicts.get("isrflow_only", 0), "invariant_findings": inv,
               "import": {k: imp[k] for k in ("records", "batches", "events", "decisions", "unexplained", "skipped",
                                              "skipped_by_reason", "issues")},
               "replay": {k: replay.get(k) for k in ("input_rows", "applied", "rejected", "seconds", "workers")},
               "tables": str(tables_dir), "stream": str(stream_dir), "settings": settings,
               # wall seconds: import (decode, convert, stream + kafka_records written), replay (the engine over
               # the stream), compare (tables read back, decisions paired, history checked, audit tables written)
               "seconds": {"import": round(t1 - t0, 3), "replay": round(t2 - t1, 3), "compare": round(t3 - t2, 3),
                           "total": round(t3 - t0, 3)}}
    (tables_dir / "_audit.json").write_text(json.dumps(summary, indent=1))
    return summary


def summary_line(s: dict) -> str:
    inv = ", ".join(f"{k} {v}" for k, v in sorted(s["invariant_findings"].items())) or "none"
    return (f"audit: {s['decisions']} decisions, {s['agree']} agree, {s['differ']} differ, "
            f"{s['kafka_only']} kafka-only, {s['isrflow_only']} isrflow-only; invariant findings: {inv}; "
            f"import skipped {s['import']['skipped']} record(s), {len(s['import']['issues'])} issue(s)")
