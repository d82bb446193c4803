"""Test streams for the Spark engine: random schedules written as several JSON-lines files,
with malformed, duplicate and out-of-order rows spread over the files; and an in-process
emulation of the Spark engine's data flow (reader scan -> buckets -> timeouts)."""
from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from pathlib import Path

from tests.gen import random_schedule


def anomalies(evs: list[dict], seed: int) -> list:
    """Rows that must end in `rejected` (or be handled as the core answers), inserted at
    random places: JSON lines (str) or dicts."""
    rnd = random.Random(seed * 7919 + 1)
    out = list(evs)
    n = len(out)
    extra = []
    # rows the protocol core rejects (their raw JSON is attached from the stream position)
    i = rnd.randrange(n // 2, n)
    out[i] = {"seq": out[i]["seq"], "ts_ms": out[i]["ts_ms"], "type": "Fetch", "topic": "nosuch", "partition": 0,
              "broker": 1}
    i = rnd.randrange(n // 2, n)
    out[i] = {"seq": out[i]["seq"], "ts_ms": out[i]["ts_ms"], "type": "BrokerFence", "broker": 99}
    for _ in range(3):
        i = rnd.randrange(n)
        extra.append((i + rnd.randrange(1, 40), dict(out[i])))                 # duplicate seq, later
    for _ in range(2):
        # seq not yet applied but ts_ms going back: rejected, and the row that really has
        # this seq (right after) is still applied
        j = rnd.randrange(n // 2, n)
        if out[j - 1]["ts_ms"] > 0:
            extra.append((j, {**out[j], "ts_ms": out[j - 1]["ts_ms"] - 1}))
    k = rnd.randrange(n // 2)
    extra.append((k + 1, {**out[k], "ts_ms": out[k]["ts_ms"] + 10_000_000}))  # duplicate seq, ts far ahead
    extra.append((rnd.randrange(n), "{not json"))
    extra.append((rnd.randrange(n), '["an", "array"]'))
    extra.append((rnd.randrange(n), {"seq": "x", "type": "Fetch"}))
    extra.append((rnd.randrange(n), {"seq": 10**12, "ts_ms": 0, "type": "Nope"}))
    for pos, row in sorted(extra, key=lambda x: -x[0]):
        out.insert(min(pos, len(out)), row)
    return out


def write_jsonl(rows: list, d, n_files: int) -> Path:
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // n_files)
    for i in range(n_files):
        with open(d / f"part-{i:04d}.jsonl", "w", encoding="utf-8") as f:
            for r in rows[i * per:(i + 1) * per]:
                f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return d


def make_stream(d, seed: int, n: int = 400, *, n_files: int = 6, bad: bool = True, **kw) -> tuple[Path, int]:
    evs = random_schedule(seed, n, **kw)
    rows = anomalies(evs, seed) if bad else evs
    return write_jsonl(rows, d, n_files), len(rows)


def emulate_spark(stream, config, n_buckets: int = 4, files_per_batch: int | None = None) -> dict:
    """The Spark engine's data flow without Spark: the reader's scan per batch (with the
    carry), buckets called with their chunks or on timeout (watermark = stream time after
    the earlier batches), a final no-data batch. Returns {table: rows}."""
    from jobs.spark_engine import process_bucket
    from jobs.spark_source import run_scan
    from jobs.streamio import list_stream_files

    files = [(i, str(f)) for i, f in enumerate(list_stream_files(stream))]
    step = files_per_batch or len(files)
    batches = [files[i:i + step] for i in range(0, len(files), step)]
    carry = (0, 0)
    blobs: dict[int, bytes] = {}
    timeouts: dict[int, int] = {}
    out: dict[str, list] = defaultdict(list)
    state: dict = {}
    wm = 0
    stats = {"n_in": 0, "applied": 0, "rejected": 0}
    for batch in batches + [[]]:
        rows, new_carry = run_scan(batch, carry, n_buckets, chunk_rows=50,
                                   max_jump=config.max_time_jump_ms) if batch else ([], carry)
        by_b = defaultdict(list)
        for r in rows:
            by_b[r[0]].append(r[1:2] + r[3:])
        calls = {b: False for b in by_b}
        for b, t in timeouts.items():
            if b not in calls and t < wm:
                calls[b] = True
        for b, timed_out in sorted(calls.items()):
            tables, srows, st, blob, to = process_bucket(b, n_buckets, config, blobs.get(b), by_b.get(b, []), wm,
                                                         timed_out, str(stream))
            blobs[b] = blob
            if to is None:
                timeouts.pop(b, None)
            else:
                timeouts[b] = to
            for k, v in tables.items():
                out[k].extend(v)
            for r in srows.to_pylist():
                state[(r["topic"], r["partition"])] = r
            for k in stats:
                stats[k] += st[k]
        carry = new_carry
        wm = carry[1]
    out["partition_state"] = [state[k] for k in sorted(state)]
    out["_stats"] = stats
    return dict(out)
