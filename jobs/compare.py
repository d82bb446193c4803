"""What-if comparison of two replays of one schedule (SPEC §1 "What-if", §4 `isrflow compare`).

``summarize(tables_dir)`` computes availability and durability metrics of one
replay from its Delta tables; ``compare(tables_a, tables_b)`` puts two of
them side by side (typically the same stream replayed under two
configurations) and ``format_compare(result)`` renders that as an aligned
text table with a verdict in plain words. Every result is plain JSON
(``json.dumps(result)`` works: ints, floats, strings, lists, dicts only).

Metrics (times are event time, ``ts_ms``):

* elections by type (``elections.election``);
* time without a leader per partition: from ``metadata_log``, a partition is
  leaderless from a row with ``leader = -1`` until the next row with a
  leader, or until the run's end (the last ``ts_ms`` of the run:
  ``progress.max_ts_ms``, else the largest ``ts_ms`` over the tables);
* time under min ISR per partition: ``|isr| < min(min.insync.replicas,
  |replicas|)``. The tables do not carry the configuration, so
  ``min.insync.replicas`` comes from, in order: the ``min_isr`` argument;
  else ``_run.json`` in the tables directory (written by both engines, replay and run, through
  jobs/runinfo.py: ``{"config": {...effective config}, "stream": ..., "engine": ...}``) for the engine-wide
  value, plus the topic / partition overrides of the stream's
  ``AlterConfig``, ``CreatePartition`` and ``PartitionRecord`` rows when the
  stream named there is still readable (applied from their ``seq`` on, only
  if the tables show they were accepted); else Kafka's default 1. The source
  used is reported in ``min_isr``;
* acks=all records acknowledged and then lost: the counts in the details of
  ``AckedRecordsDurable`` violations ("<N> acknowledged acks=all record(s)
  ...");
* HWM regressions: ``HighWatermarkMonotonic`` violations (the true HWM) plus
  ``hwm`` rows whose ``new_hwm < old_hwm`` (a leader's HWM going backwards);
* invariant violations by invariant; produce outcomes by result.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc

NO_LEADER = -1
WORST_N = 5
_ACKED_RE = re.compile(r"^\s*([\d,]+)\s+acknowledged acks=all record")
_MIN_ISR_KEY = "min.insync.replicas"


# ---------------------------------------------------------------------------
# Loading one run
# ---------------------------------------------------------------------------


def _read(tables_dir, name: str) -> Optional[pa.Table]:
    """One table, or None when the directory has no such table."""
    from jobs.delta_sink import SinkError, read_table
    try:
        return read_table(str(tables_dir), name)
    except SinkError:
        return None


def _empty(t: Optional[pa.Table]) -> bool:
    return t is None or t.num_rows == 0


def read_run_info(tables_dir) -> Optional[dict]:
    """The ``_run.json`` written by either engine into the tables dir (None: absent or unreadable)."""
    p = Path(tables_dir) / "_run.json"
    try:
        info = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _ms_int(v) -> int:
    return int(v) if v is not None else 0


class Run:
    """The tables of one replay, loaded once, with the per-partition timelines derived from them.

    Used by :func:`summarize` and by ``jobs.report``."""

    def __init__(self, tables_dir, *, min_isr: Optional[int] = None):
        from jobs.delta_sink import list_tables
        self.dir = Path(tables_dir)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"tables directory {tables_dir} does not exist")
        if "metadata_log" not in list_tables(str(self.dir)):
            raise FileNotFoundError(f"{tables_dir} has no isrflow tables (no metadata_log Delta table)")
        self.info = read_run_info(self.dir)
        self.t: dict[str, Optional[pa.Table]] = {}
        for name in ("metadata_log", "elections", "hwm", "produce", "violations", "progress", "admin",
                     "rejected", "partition_state"):
            self.t[name] = _read(self.dir, name)
        self.start_ts, self.end_ts = self._time_range()
        self._meta_by_part = self._metadata_by_partition()
        self.min_isr_source, self._base_min_isr, self._cfg_events = self._min_isr_setup(min_isr)
        self.timelines = {key: self._timeline(key, rows) for key, rows in self._meta_by_part.items()}

    # -- basics ------------------------------------------------------------
    def table(self, name: str) -> Optional[pa.Table]:
        if name not in self.t:
            self.t[name] = _read(self.dir, name)
        return self.t[name]

    def _time_range(self) -> tuple[int, int]:
        lo, hi = None, None
        prog = self.t.get("progress")
        if not _empty(prog) and prog["max_ts_ms"].null_count < prog.num_rows:
            hi = pc.max(prog["max_ts_ms"]).as_py()
        for name in ("metadata_log", "elections", "hwm", "produce", "violations", "admin"):
            t = self.t.get(name)
            if _empty(t):
                continue
            mm = pc.min_max(t["ts_ms"]).as_py()
            if mm["min"] is not None:
                lo = mm["min"] if lo is None else min(lo, mm["min"])
            if mm["max"] is not None and (prog is None or prog.num_rows == 0):
                hi = mm["max"] if hi is None else max(hi, mm["max"])
        if hi is None:
            hi = lo if lo is not None else 0
        if lo is None:
            lo = 0
        # a table row may carry a timer time past the last event's ts: cover it
        for name in ("metadata_log", "hwm"):
            t = self.t.get(name)
            if not _empty(t):
                hi = max(hi, pc.max(t["ts_ms"]).as_py())
        return int(lo), int(hi)

    def _metadata_by_partition(self) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = defaultdict(list)
        t = self.t["metadata_log"]
        if _empty(t):
            return {}
        cols = ["topic", "partition", "seq", "idx", "ts_ms", "leader", "leader_epoch", "replicas", "isr",
                "elr", "last_known_elr", "cause"]
        t = t.select(cols).sort_by([("topic", "ascending"), ("partition", "ascending"),
                                    ("seq", "ascending"), ("idx", "ascending")])
        for r in t.to_pylist():
            out[(r["topic"], r["partition"])].append(r)
        return dict(out)

    @property
    def partitions(self) -> list[tuple]:
        keys = set(self._meta_by_part)
        ps = self.t.get("partition_state")
        if not _empty(ps):
            keys.update(zip(ps["topic"].to_pylist(), ps["partition"].to_pylist()))
        return sorted(keys)

    # -- min ISR -------------------------------------------------------------
    def _min_isr_setup(self, min_isr: Optional[int]):
        """(source text, base value, [(seq, ts_ms, topic, partition|None, value)])."""
        if min_isr is not None:
            return f"argument (min_isr={int(min_isr)})", int(min_isr), []
        cfg = (self.info or {}).get("config") if isinstance((self.info or {}).get("config"), dict) else None
        if cfg is not None and _MIN_ISR_KEY in cfg:
            try:
                base, src = int(cfg[_MIN_ISR_KEY]), f"_run.json config ({_MIN_ISR_KEY}={cfg[_MIN_ISR_KEY]})"
            except (TypeError, ValueError):
                base, src = 1, "Kafka default 1 (_run.json value unreadable)"
        elif self.info is not None:
            base, src = 1, "Kafka default 1 (_run.json has no min.insync.replicas)"
        else:
            base, src = 1, "Kafka default 1 (no _run.json in the tables directory)"
        events, note = self._stream_config_events()
        return src + note, base, events

    def _stream_config_events(self) -> tuple[list[tuple], str]:
        stream = (self.info or {}).get("stream")
        if not stream:
            return [], "; topic overrides unknown (no stream recorded)"
        try:
            rows = _stream_config_rows(stream)
        except Exception as e:  # the stream moved, unreadable, ...
            return [], f"; topic overrides unknown (stream {stream} not readable: {type(e).__name__})"
        accepted_admin = set()
        admin = self.t.get("admin")
        if not _empty(admin):
            a = admin.select(["seq", "type", "result"]).to_pylist()
            accepted_admin = {(r["seq"], r["type"]) for r in a if r["result"] == "NONE"}
        meta_seqs = {(k, r["seq"]) for k, rs in self._meta_by_part.items() for r in rs
                     if r["cause"] == "PartitionRecord"}
        events = []
        for r in rows:
            v = (r.get("config") or {}).get(_MIN_ISR_KEY)
            if v is None:
                continue
            try:
                v = int(str(v).strip())
            except ValueError:
                continue
            typ, part = r["type"], r.get("partition")
            if typ == "PartitionRecord":
                if ((r["topic"], part), r["seq"]) not in meta_seqs:
                    continue
            elif (r["seq"], typ) not in accepted_admin:
                continue
            scope_part = None if (typ == "AlterConfig" and part is None) else part
            events.append((int(r["seq"]), _ms_int(r.get("ts_ms")), r["topic"], scope_part, v))
        events.sort(key=lambda e: e[0])
        n = len(events)
        return events, (f"; plus {n} topic/partition override(s) from the stream's config rows" if n
                        else "; no topic overrides in the stream")

    # -- timelines -----------------------------------------------------------
    def _timeline(self, key: tuple, rows: list[dict]) -> dict:
        """Per partition: state segments {t0, t1, leader, leader_epoch, replicas, isr, elr, min_isr}
        (min_isr: the effective one), leaderless and under-min-ISR intervals [(t0, t1)] (t1 = the
        run's end for a state still holding at the end). A config change starts a new segment."""
        topic, part = key
        points = [((r["seq"], 1, r["idx"]), _ms_int(r["ts_ms"]), "meta", r) for r in rows]
        points += [((e[0], 0, 0), e[1], "cfg", e) for e in self._cfg_events
                   if e[2] == topic and (e[3] is None or e[3] == part)]
        points.sort(key=lambda p: p[0])
        topic_v: Optional[int] = None
        part_v: Optional[int] = None
        cur: Optional[dict] = None
        segs: list[dict] = []
        for _, ts, kind, x in points:
            if kind == "cfg":
                if x[3] is None:
                    topic_v = x[4]
                else:
                    part_v = x[4]
                if cur is None:
                    continue
                state = dict(cur)
            else:
                state = {"leader": x["leader"], "leader_epoch": x["leader_epoch"],
                         "replicas": list(x["replicas"] or []), "isr": list(x["isr"] or []),
                         "elr": list(x["elr"] or [])}
            conf = part_v if part_v is not None else topic_v if topic_v is not None else self._base_min_isr
            state["min_isr"] = min(conf, len(state["replicas"])) if state["replicas"] else conf
            cur = state
            if segs and segs[-1]["t0"] >= ts:  # same instant: the later state wins
                ts = segs[-1]["t0"]
                segs.pop()
            if segs and all(segs[-1][k] == state[k] for k in state):
                continue
            segs.append({"t0": ts, **state})
        for i, sg in enumerate(segs):
            sg["t1"] = segs[i + 1]["t0"] if i + 1 < len(segs) else max(self.end_ts, sg["t0"])
        return {
            "segments": segs,
            "leaderless": _merge([(s["t0"], s["t1"]) for s in segs if s["leader"] == NO_LEADER]),
            "under_min_isr": _merge([(s["t0"], s["t1"]) for s in segs if len(s["isr"]) < s["min_isr"]]),
            "leaderless_at_end": bool(segs) and segs[-1]["leader"] == NO_LEADER,
            "under_min_isr_at_end": bool(segs) and len(segs[-1]["isr"]) < segs[-1]["min_isr"],
        }


def _merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent / overlapping intervals merged (the input is in time order)."""
    out: list[list[int]] = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _stream_config_rows(stream) -> list[dict]:
    """The stream's rows that can carry a topic config (AlterConfig, CreatePartition,
    PartitionRecord), with config as a dict. Reads only those rows' columns."""
    import pyarrow.parquet as pq
    from jobs.streamio import PARQUET_SUFFIXES, list_stream_files
    wanted = ("AlterConfig", "CreatePartition", "PartitionRecord")
    out = []
    for f in list_stream_files(stream):
        if f.suffix.lower() in PARQUET_SUFFIXES:
            pf = pq.ParquetFile(f)
            cols = [c for c in ("seq", "ts_ms", "type", "topic", "partition", "config") if c in pf.schema_arrow.names]
            if "config" not in cols:
                continue
            t = pf.read(columns=cols)
            t = t.filter(pc.is_in(t["type"], value_set=pa.array(wanted)))
            for r in t.to_pylist():
                c = r.get("config")
                if c is not None and not isinstance(c, dict):
                    c = dict(c)
                r["config"] = c
                out.append(r)
        else:
            with open(f, "r", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if "config" not in line or not any(w in line for w in wanted):
                        continue
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(r, dict) and r.get("type") in wanted and isinstance(r.get("config"), dict):
                        out.append(r)
    return out


# ---------------------------------------------------------------------------
# Summary of one run
# ---------------------------------------------------------------------------


def _counts(t: Optional[pa.Table], col: str) -> dict[str, int]:
    if _empty(t):
        return {}
    vc = pc.value_counts(t[col].fill_null("null") if t[col].null_count else t[col])
    d = {str(k): int(v) for k, v in zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist())}
    return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def _pname(key: tuple) -> str:
    return f"{key[0]}-{key[1]}"


def parse_acked_lost(detail: Optional[str]) -> int:
    """The N of an AckedRecordsDurable detail "<N> acknowledged acks=all record(s) ..." (0 if absent)."""
    m = _ACKED_RE.match(detail or "")
    return int(m.group(1).replace(",", "")) if m else 0


def _interval_metric(run: Run, field: str, at_end: str) -> dict:
    per = []
    for key, tl in run.timelines.items():
        iv = tl[field]
        ms = sum(b - a for a, b in iv)
        episodes = sum(1 for a, b in iv if b > a) + (1 if iv and iv[-1][1] == iv[-1][0] and tl[at_end] else 0)
        if ms > 0 or episodes:
            per.append({"topic": key[0], "partition": int(key[1]), "ms": int(ms), "episodes": int(episodes),
                        "at_end": bool(tl[at_end])})
    per.sort(key=lambda d: (-d["ms"], d["topic"], d["partition"]))
    total = sum(d["ms"] for d in per)
    return {
        "total_ms": int(total),
        "max_ms": int(per[0]["ms"]) if per else 0,
        "partitions": len([d for d in per if d["ms"] > 0]),
        "at_end": sum(1 for d in per if d["at_end"]),
        "worst": per[:WORST_N],
    }


def summarize(tables_dir, *, min_isr: Optional[int] = None, run: Optional[Run] = None) -> dict:
    """Availability and durability metrics of one replay (plain JSON types)."""
    run = run or Run(tables_dir, min_isr=min_isr)
    info = run.info or {}
    prog = run.table("progress")
    events = applied = rejected = None
    if not _empty(prog):
        def _sum(c):
            return int(pc.sum(prog[c]).as_py() or 0) if prog[c].null_count < prog.num_rows else None
        events, applied, rejected = _sum("input_rows"), _sum("applied"), _sum("rejected")
    rej = run.table("rejected")
    if rejected is None and rej is not None:
        rejected = rej.num_rows

    el = run.table("elections")
    elections = {"total": 0 if el is None else el.num_rows, "by_type": _counts(el, "election")}
    no_cand = elections["by_type"].get("NONE", 0)
    elections["leader_changes"] = elections["total"] - no_cand

    vio = run.table("violations")
    by_inv = _counts(vio, "invariant")
    lost_by_part: dict[tuple, int] = Counter()
    vio_parts: set = set()
    if not _empty(vio):
        for r in vio.select(["topic", "partition", "invariant", "detail"]).to_pylist():
            vio_parts.add((r["topic"], r["partition"]))
            if r["invariant"] == "AckedRecordsDurable":
                lost_by_part[(r["topic"], r["partition"])] += parse_acked_lost(r["detail"])
    lost_worst = sorted(lost_by_part.items(), key=lambda kv: (-kv[1], kv[0]))
    acked_lost = {
        "records": int(sum(lost_by_part.values())),
        "partitions": sum(1 for v in lost_by_part.values() if v > 0),
        "violations": int(by_inv.get("AckedRecordsDurable", 0)),
        "worst": [{"topic": k[0], "partition": int(k[1]), "records": int(v)} for k, v in lost_worst[:WORST_N]],
    }

    hwm = run.table("hwm")
    hwm_back = 0
    if not _empty(hwm):
        m = pc.less(hwm["new_hwm"], hwm["old_hwm"])
        hwm_back = int(pc.sum(m.fill_null(False)).as_py() or 0)
    hwm_viol = int(by_inv.get("HighWatermarkMonotonic", 0))

    prod = run.table("produce")
    produce = {"total": 0, "by_result": {}, "records_by_result": {}, "acks_all_acked_records": 0}
    if not _empty(prod):
        produce["total"] = prod.num_rows
        produce["by_result"] = _counts(prod, "result")
        g = prod.group_by("result").aggregate([("records", "sum")]).to_pylist()
        produce["records_by_result"] = {str(r["result"]): int(r["records_sum"] or 0)
                                        for r in sorted(g, key=lambda r: -(r["records_sum"] or 0))}
        sel = pc.and_(pc.equal(prod["acks"], -1), pc.equal(prod["result"], "ACKED"))
        produce["acks_all_acked_records"] = int(pc.sum(prod.filter(sel.fill_null(False))["records"]).as_py() or 0)

    return {
        "tables": str(run.dir),
        "stream": info.get("stream"),
        "engine": info.get("engine"),
        "config": info.get("config") if isinstance(info.get("config"), dict) else None,
        "events": events,
        "applied": applied,
        "rejected": rejected,
        "partitions": len(run.partitions),
        "start_ts_ms": run.start_ts,
        "end_ts_ms": run.end_ts,
        "duration_ms": run.end_ts - run.start_ts,
        "min_isr_source": run.min_isr_source,
        "elections": elections,
        "leaderless": _interval_metric(run, "leaderless", "leaderless_at_end"),
        "under_min_isr": _interval_metric(run, "under_min_isr", "under_min_isr_at_end"),
        "acked_lost": acked_lost,
        "hwm_regressions": {"total": hwm_viol + hwm_back, "violations": hwm_viol, "hwm_rows": hwm_back},
        "violations": {"total": 0 if vio is None else vio.num_rows, "partitions": len(vio_parts),
                       "by_invariant": by_inv},
        "produce": produce,
    }


# ---------------------------------------------------------------------------
# Two runs side by side
# ---------------------------------------------------------------------------

# (key path, label, kind) -- kind: "count" (lower is better), "ms" (lower is better), "info"
_METRICS: list[tuple[str, str, str]] = [
    ("events", "input events", "info"),
    ("rejected", "rejected input rows", "count"),
    ("partitions", "partitions", "info"),
    ("duration_ms", "run duration (event time)", "info_ms"),
    ("elections.total", "elections (rows)", "info"),
    ("elections.leader_changes", "leader elections", "info"),
    ("leaderless.total_ms", "time without leader, total", "ms"),
    ("leaderless.max_ms", "time without leader, worst partition", "ms"),
    ("leaderless.partitions", "partitions ever leaderless", "count"),
    ("leaderless.at_end", "partitions leaderless at end", "count"),
    ("under_min_isr.total_ms", "time under min ISR, total", "ms"),
    ("under_min_isr.max_ms", "time under min ISR, worst partition", "ms"),
    ("under_min_isr.partitions", "partitions ever under min ISR", "count"),
    ("acked_lost.records", "acks=all records acked then lost", "count"),
    ("acked_lost.partitions", "partitions that lost acked records", "count"),
    ("hwm_regressions.total", "HWM regressions", "count"),
    ("violations.total", "invariant violations", "count"),
    ("violations.partitions", "partitions with violations", "count"),
    ("produce.total", "produce requests", "info"),
    ("produce.acks_all_acked_records", "acks=all records acknowledged", "info"),
]


def _get(d: dict, path: str):
    for k in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def config_diff(a: Optional[dict], b: Optional[dict]) -> dict[str, list]:
    """{key: [value in A, value in B]} for the config keys that differ (None: not set); {} when
    either configuration is unknown."""
    if a is None or b is None:
        return {}
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def compare(tables_a, tables_b, *, min_isr: Optional[int] = None) -> dict:
    """Summaries of two replays side by side, with per-metric deltas (B - A) and a verdict."""
    sa = summarize(tables_a, min_isr=min_isr)
    sb = summarize(tables_b, min_isr=min_isr)
    return compare_summaries(sa, sb)


def compare_summaries(sa: dict, sb: dict) -> dict:
    metrics = []
    for path, label, kind in _METRICS:
        va, vb = _get(sa, path), _get(sb, path)
        delta = (vb - va) if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        metrics.append({"key": path, "label": label, "kind": kind, "a": va, "b": vb, "delta": delta})
    sections = {
        "elections.by_type": "elections: ",
        "violations.by_invariant": "violations: ",
        "produce.by_result": "produce: ",
    }
    for path, prefix in sections.items():
        da, db = _get(sa, path) or {}, _get(sb, path) or {}
        for k in sorted(set(da) | set(db), key=lambda k: (-(da.get(k, 0) + db.get(k, 0)), k)):
            va, vb = int(da.get(k, 0)), int(db.get(k, 0))
            kind = "count" if path == "violations.by_invariant" else "info"
            metrics.append({"key": f"{path}.{k}", "label": prefix + k, "kind": kind, "a": va, "b": vb,
                            "delta": vb - va})
    diff = config_diff(sa.get("config"), sb.get("config"))
    same_stream = None
    if sa.get("stream") and sb.get("stream"):
        same_stream = str(Path(sa["stream"]).resolve()) == str(Path(sb["stream"]).resolve())
    result = {
        "a": sa,
        "b": sb,
        "config_diff": diff,
        "same_stream": same_stream,
        "metrics": metrics,
    }
    result["verdict"] = verdict(result)
    return result


# ---------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------


def fmt_int(v) -> str:
    return "-" if v is None else f"{int(v):,}"


def fmt_ms(ms) -> str:
    """Event-time duration in words: 0 s, 850 ms, 12.5 s, 3 min 20 s, 2 h 05 min."""
    if ms is None:
        return "-"
    ms = int(ms)
    neg, ms = ms < 0, abs(ms)
    if ms == 0:
        s = "0 s"
    elif ms < 1000:
        s = f"{ms} ms"
    elif ms < 60_000:
        s = f"{ms / 1000:.1f} s".replace(".0 s", " s")
    elif ms < 3_600_000:
        m, sec = divmod(round(ms / 1000), 60)
        s = f"{m} min {sec:02d} s"
    else:
        h, rem = divmod(round(ms / 1000), 3600)
        s = f"{h} h {rem // 60:02d} min"
    return ("-" if neg else "") + s


def fmt_value(v, kind: str) -> str:
    if kind in ("ms", "info_ms"):
        return fmt_ms(v)
    return fmt_int(v) if isinstance(v, (int, float)) else ("-" if v is None else str(v))


def fmt_delta(d, kind: str) -> str:
    if d is None:
        return ""
    if d == 0:
        return "="
    if kind in ("ms", "info_ms"):
        return ("+" if d > 0 else "-") + fmt_ms(abs(d))
    return f"{d:+,}"


def _plural(n: int, one: str, many: Optional[str] = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def _lost_sentence(sa: dict, sb: dict) -> str:
    def lost_txt(n, s):
        lost = s["acked_lost"]
        if not lost["records"]:
            return f"{n} lost none"
        return (f"{n} lost {lost['records']:,} acknowledged acks=all "
                f"{'record' if lost['records'] == 1 else 'records'} in {_plural(lost['partitions'], 'partition')}")

    la, lb = sa["acked_lost"], sb["acked_lost"]
    if not (la["records"] or lb["records"]):
        return "Neither run lost acknowledged acks=all records."
    first, second = ("B", "A") if lb["records"] >= la["records"] else ("A", "B")
    s1, s2 = (sb, sa) if first == "B" else (sa, sb)
    return f"{lost_txt(first, s1)}; {lost_txt(second, s2)}."


def _violations_sentence(sa: dict, sb: dict) -> str:
    def vio_txt(n, s):
        v = s["violations"]
        if not v["total"]:
            return f"{n} had none"
        top = ", ".join(f"{k} {c:,}" for k, c in list(v["by_invariant"].items())[:4])
        more = len(v["by_invariant"]) - 4
        return (f"{n} had {_plural(v['total'], 'invariant violation')} ({top}"
                f"{f', and {more} more' if more > 0 else ''})")

    va, vb = sa["violations"]["total"], sb["violations"]["total"]
    if not (va or vb):
        return "Neither run broke a safety invariant."
    first = "B" if vb >= va else "A"
    s1, s2 = (sb, sa) if first == "B" else (sa, sb)
    return f"{vio_txt(first, s1)}; {vio_txt('B' if first == 'A' else 'A', s2)}."


def _availability_sentences(sa: dict, sb: dict) -> list[str]:
    parts = []
    ua, ub = sa["leaderless"], sb["leaderless"]
    if ua["total_ms"] or ub["total_ms"]:
        def ul(n, u):
            if not u["total_ms"]:
                return f"{n} always had a leader"
            end = f", {u['at_end']:,} still leaderless at the end" if u["at_end"] else ""
            return (f"{n} had {_plural(u['partitions'], 'partition')} without a leader for "
                    f"{fmt_ms(u['total_ms'])} in total (worst {fmt_ms(u['max_ms'])}{end})")
        parts.append(f"Availability: {ul('A', ua)}; {ul('B', ub)}.")
    else:
        parts.append("Every partition had a leader throughout in both runs.")
    ma, mb = sa["under_min_isr"], sb["under_min_isr"]
    if ma["total_ms"] or mb["total_ms"]:
        parts.append(f"Time under min ISR: {fmt_ms(ma['total_ms'])} in A "
                     f"({_plural(ma['partitions'], 'partition')}), {fmt_ms(mb['total_ms'])} in B "
                     f"({_plural(mb['partitions'], 'partition')}).")
    fa = sum(v for k, v in sa["produce"]["by_result"].items() if k != "ACKED")
    fb = sum(v for k, v in sb["produce"]["by_result"].items() if k != "ACKED")
    if fa or fb:
        parts.append(f"Failed produce requests: {fa:,} in A, {fb:,} in B.")
    return parts


def _bottom_line(sa: dict, sb: dict) -> str | None:
    """Safety first (acknowledged records lost, invariant violations, HWM regressions), then availability."""
    score_a = (sa["acked_lost"]["records"], sa["violations"]["total"], sa["hwm_regressions"]["total"])
    score_b = (sb["acked_lost"]["records"], sb["violations"]["total"], sb["hwm_regressions"]["total"])
    ua, ub = sa["leaderless"]["total_ms"], sb["leaderless"]["total_ms"]
    if score_a == score_b == (0, 0, 0):
        if ua != ub:
            return f"Both are safe on this schedule; {'A' if ua < ub else 'B'} is more available."
        return "Both are safe on this schedule."
    if score_a == score_b:
        return None
    safer = "A" if score_a < score_b else "B"
    other = "B" if safer == "A" else "A"
    avail = ""
    if (ua if safer == "A" else ub) > (ub if safer == "A" else ua):
        avail = f", at the cost of more time without a leader than {other}"
    return f"{safer} is the safer configuration on this schedule{avail}."


def verdict(result: dict) -> str:
    """One paragraph in plain words comparing A and B."""
    sa, sb = result["a"], result["b"]
    parts = []
    if result.get("config_diff"):
        ds = ", ".join(f"{k}={a if a is not None else 'unset'} in A vs {b if b is not None else 'unset'} in B"
                       for k, (a, b) in result["config_diff"].items())
        parts.append(f"The runs differ in {ds}.")
    if result.get("same_stream") is False:
        parts.append("Warning: the two runs replayed different streams, so the comparison is not a what-if.")
    parts.append(_lost_sentence(sa, sb))
    parts.append(_violations_sentence(sa, sb))
    ha, hb = sa["hwm_regressions"]["total"], sb["hwm_regressions"]["total"]
    if ha or hb:
        parts.append(f"The high watermark went backwards {_plural(ha, 'time')} in A and {_plural(hb, 'time')} in B.")
    parts += _availability_sentences(sa, sb)
    last = _bottom_line(sa, sb)
    if last:
        parts.append(last)
    return " ".join(parts)


def format_compare(result: dict, *, width: int = 100) -> str:
    """Aligned side-by-side text table (A, B, delta B-A) and the verdict."""
    import textwrap
    sa, sb = result["a"], result["b"]
    lines = [f"A: {sa['tables']}", f"B: {sb['tables']}"]
    if result.get("config_diff"):
        lines.append("config differences:")
        for k, (a, b) in result["config_diff"].items():
            lines.append(f"  {k}: A={a if a is not None else '(unset)'}  B={b if b is not None else '(unset)'}")
    lines.append(f"min ISR: A from {sa['min_isr_source']}")
    lines.append(f"         B from {sb['min_isr_source']}")
    lines.append("")
    rows = [("metric", "A", "B", "B - A")]
    for m in result["metrics"]:
        rows.append((m["label"], fmt_value(m["a"], m["kind"]), fmt_value(m["b"], m["kind"]),
                     fmt_delta(m["delta"], m["kind"])))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        lines.append(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}".rstrip())
        if i == 0:
            lines.append("  ".join("-" * x for x in w))
    for name, s in (("A", sa), ("B", sb)):
        worst = s["acked_lost"]["worst"]
        if worst:
            lines.append("")
            lines.append(f"{name}: partitions that lost the most acknowledged records: " +
                         ", ".join(f"{d['topic']}-{d['partition']} ({d['records']:,})" for d in worst))
        wl = s["leaderless"]["worst"]
        if wl:
            lines.append(f"{name}: longest without a leader: " +
                         ", ".join(f"{d['topic']}-{d['partition']} ({fmt_ms(d['ms'])})" for d in wl))
    lines.append("")
    lines.append("Verdict:")
    lines.extend(textwrap.wrap(result["verdict"], width=width, initial_indent="  ", subsequent_indent="  "))
    return "\n".join(lines)
