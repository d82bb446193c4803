"""LocalEngine.feed_rows over chunks of rows (runs of events to the core in one Cluster.apply_run
call) against LocalEngine.feed, one row per call (each row its own run): the same output rows in
the same order (rejected.raw included), the same seq range, input count and cluster state, whatever
the chunk sizes, the young-collection interval, and where the rows the core rejects, the rows only
validate() can judge and a parallel replay worker's foreign rows fall."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.local_engine as le
from jobs.buckets import owns_fn
from jobs.local_engine import LocalEngine
from jobs.streamio import Foreign, Plain, iter_raw_rows
from jobs.sim_core import state_digest
from protocol.config import EngineConfig
from schemas.events import EVENT_ARROW_SCHEMA
from tests.gen import random_schedule


def _stream(tmp_path, seed: int):
    """A random schedule in two Parquet files, with rows going back in seq or time, past the
    time-jump limit (all plain: the core rejects them) and with an invalid partition (not plain)."""
    rnd = random.Random(seed)
    rows = []
    for ev in random_schedule(seed, 700, partitions=6, brokers=4):
        r = dict(ev)
        x = rnd.random()
        r["seq"] += 40                       # so that a row can go back below the first one
        if x < 0.04:
            r["seq"] = rnd.randint(1, 39) if x < 0.01 else r["seq"] - rnd.randint(1, 30)
        elif x < 0.08:
            r["ts_ms"] = max(0, r["ts_ms"] - rnd.randint(1, 5000))
        elif x < 0.10:
            r["ts_ms"] = r["ts_ms"] + 400_000
        elif x < 0.12 and r.get("partition") is not None:
            r["partition"] = -1
        rows.append({k: r.get(k) for k in EVENT_ARROW_SCHEMA.names})
    s = tmp_path / f"s{seed}"
    s.mkdir()
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(pa.Table.from_pylist(part, schema=EVENT_ARROW_SCHEMA), s / f"part-{i:05d}.parquet")
    return s


def _run(stream, cfg, rows_at_once, young, worker=0, workers=1):
    eng = LocalEngine(cfg, worker, workers)
    eng.young.every = eng.young.at = young
    collected = []                           # the input rows that young collections came before
    real = eng.collect_young

    def collect_young(row=None):
        collected.append(eng.input_rows if row is None else row)
        return real(row)
    eng.collect_young = collect_young
    foreign = eng.cluster.is_foreign if workers > 1 else None
    rows = list(iter_raw_rows(stream, batch_rows=97, foreign=foreign, events=True))
    out = []
    i = 0
    while i < len(rows):
        n = rows_at_once(i)
        if n is None:
            eng.feed(*rows[i])
            i += 1
        else:
            eng.feed_rows(rows[i:i + n])
            i += n
        out.append(eng.cluster.drain())
    tables, state = eng.drain(True)
    out.append(tables)
    kinds = {"plain": sum(t.__class__ is Plain for _, t, _ in rows),
             "foreign": sum(r.__class__ is Foreign for r, _, _ in rows)}
    merged: dict = {}
    for o in out:
        for name, rs in o.items():
            merged.setdefault(name, []).extend(rs)
    return {"tables": merged, "state": state.to_pylist(), "seq": (eng.min_seq, eng.max_seq),
            "input_rows": eng.input_rows, "digest": state_digest(state.to_pylist()), "kinds": kinds,
            "n_rows": len(rows), "applied": eng.cluster.applied, "rejected": eng.cluster.rejected, "collected": collected}


@pytest.mark.parametrize("seed", [3, 8])
def test_feed_rows_is_feed_row_by_row(tmp_path, seed):
    s = _stream(tmp_path, seed)
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
    one = _run(s, cfg, lambda i: None, young=1 << 15)
    assert one["kinds"]["plain"] > 500 and one["rejected"] > 30
    assert one["input_rows"] == one["n_rows"]     # every row counted, rejected ones too
    assert one["seq"][0] < 40                # a plain row below the stream's first seq
    assert any(r["raw"] and r["reason"] for r in one["tables"]["rejected"])
    rnd = random.Random(seed)
    for young in (1, 7, 1 << 15):
        got = _run(s, cfg, lambda i: rnd.choice([None, 1, 2, 5, 64, 10_000]), young=young)
        for k in ("tables", "state", "seq", "input_rows", "applied", "rejected"):
            assert got[k] == one[k], (young, k)
        if young > 1:                        # the collections come before the same rows as feed()'s
            ref = _run(s, cfg, lambda i: None, young=young)
            assert got["collected"] == ref["collected"] and (len(ref["collected"]) > 3 or young > 1000), young


def test_feed_rows_in_a_parallel_replay_worker(tmp_path):
    """A worker's rows mix its own plain events with other workers' Foreign rows."""
    s = _stream(tmp_path, 5)
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
    for k in range(2):
        one = _run(s, cfg, lambda i: None, young=1 << 15, worker=k, workers=2)
        assert one["kinds"]["foreign"] > 100
        got = _run(s, cfg, lambda i: 333, young=5, worker=k, workers=2)
        for key in ("tables", "state", "seq", "input_rows", "applied", "rejected"):
            assert got[key] == one[key], (k, key)


def test_batches_cut_at_batch_rows_whatever_the_chunk(tmp_path, monkeypatch):
    """_batches feeds chunks of CHUNK_ROWS rows and windows of up to WINDOW_ROWS (jobs.windows) but
    still cuts a batch at exactly batch_rows input rows, the final timers in the last batch."""
    import jobs.windows as win
    s = _stream(tmp_path, 3)
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
    n = len(list(iter_raw_rows(s, events=True)))
    seen = {}
    monkeypatch.setattr(win, "MIN_RUN", 1)
    monkeypatch.setattr(le, "MIN_RUN", 1)
    for chunk, window in ((1, 0), (7, 0), (4096, 0), (7, 3), (4096, 40), (4096, 1 << 18)):
        monkeypatch.setattr(win, "CHUNK_ROWS", chunk)
        monkeypatch.setattr(le, "_CHUNK_ROWS", chunk)
        got = list(le._batches(LocalEngine(cfg), win.iter_stream_items(s, 100, window), 100))
        seen[chunk, window] = [(st["input_rows"], st["applied"], st["rejected"], st["min_seq"], st["max_seq"],
                                {k: len(v) for k, v in t.items()}) for t, _, st in got]
        assert [b[0] for b in seen[chunk, window]] == [100] * (n // 100) + ([n % 100] if n % 100 else [])
    for k, v in seen.items():
        assert v == seen[1, 0], k
