"""The in-process engine applies long runs of produce / fetch / consumer rows grouped by partition
(jobs.windows, protocol.cluster.COMMUTING_TYPES and Cluster.commutes): the reader's items are the
stream's rows in stream order, and a replay with windows gives every table of a replay without
them, batch by batch, whatever the faults, the broker sessions running out and the rows out of
order."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.local_engine as le
import jobs.windows as win
from jobs.local_engine import LocalEngine
from jobs.simulate import simulate
from jobs.streamio import iter_raw_rows, list_stream_files, row_to_json
from jobs.windows import Window, iter_stream_items
from protocol.cluster import COMMUTING_TYPES, Cluster
from protocol.config import EngineConfig
from schemas.events import EVENT_ARROW_SCHEMA
from tests.gen import random_schedule


@pytest.fixture
def small_windows(monkeypatch):
    """Windows from runs of any length (the bench's thresholds would leave these streams' short runs
    in the row chunks)."""
    monkeypatch.setattr(win, "MIN_RUN", 1)
    monkeypatch.setattr(le, "MIN_RUN", 1)


def _disordered(tmp_path, seed: int, files: int = 3):
    """A random schedule in Parquet files with rows going back in seq or time, past the time-jump
    limit, and an invalid partition (not plain) here and there."""
    rnd = random.Random(seed)
    rows = []
    for ev in random_schedule(seed, 900, partitions=7, brokers=4, topics=2):
        r = dict(ev)
        r["seq"] += 40
        x = rnd.random()
        if x < 0.02:
            r["seq"] -= rnd.randint(1, 30)
        elif x < 0.04:
            r["ts_ms"] = max(0, r["ts_ms"] - rnd.randint(1, 5000))
        elif x < 0.05:
            r["ts_ms"] += 400_000
        elif x < 0.06 and r.get("partition") is not None:
            r["partition"] = -1
        rows.append({k: r.get(k) for k in EVENT_ARROW_SCHEMA.names})
    s = tmp_path / f"d{seed}"
    s.mkdir()
    step = -(-len(rows) // files)
    for i in range(files):
        part = rows[i * step:(i + 1) * step]
        pq.write_table(pa.Table.from_pylist(part, schema=EVENT_ARROW_SCHEMA), s / f"part-{i:05d}.parquet")
    return s


def _simulated(tmp_path, name: str, **kw):
    s = tmp_path / name
    simulate(str(s), fmt="parquet", rows_per_file=700, seed=kw.pop("seed", 5), **kw)
    return s


def _replay(stream, cfg, batch_rows: int, window_rows: int):
    eng = LocalEngine(cfg)
    out = []
    for tables, state, st in le._batches(eng, iter_stream_items(stream, batch_rows, window_rows), batch_rows):
        rows = {name: sorted(json.dumps(r, sort_keys=True, default=str) for r in rs)
                for name, rs in tables.items() if rs}
        out.append((rows, state.to_pylist(), {k: v for k, v in st.items()}))
    return out, eng.grouped_rows


def _same_replay(stream, cfg, batch_rows: int, window_rows: int) -> int:
    """Replays with and without windows; returns the rows applied grouped."""
    ref, none = _replay(stream, cfg, batch_rows, 0)
    assert none == 0
    got, grouped = _replay(stream, cfg, batch_rows, window_rows)
    assert len(got) == len(ref)
    for k, (a, b) in enumerate(zip(ref, got)):
        assert a[2] == b[2], k                  # input rows, applied, rejected, seq range, max ts
        assert a[1] == b[1], k                  # partition_state, in key order
        assert a[0].keys() == b[0].keys(), k
        for name in a[0]:
            assert a[0][name] == b[0][name], (k, name)
    return grouped


def _values(row):
    ev, text, _ = row
    return ev if text is not None or ev is None else {k: v for k, v in ev.items() if v is not None}


def _flat(items, grouped: bool):
    for it in items:
        if it.__class__ is Window:
            yield from it.rows(grouped)
        else:
            yield from it


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_items_are_the_stream_in_order_and_never_cross_a_cut(tmp_path, small_windows, seed):
    s = _disordered(tmp_path, seed)
    want = list(iter_raw_rows(s, events=True))
    for cut, window in ((100, 1 << 18), (37, 5), (10_000, 64)):
        items = list(iter_stream_items(s, cut, window))
        assert any(it.__class__ is Window for it in items)
        got = list(_flat(items, False))
        # a plain row's event exactly; a row for validate() as its values (a column null in the rows
        # around it may be absent: absent == null for validate and rejected.raw)
        assert [_values(r) for r in got] == [_values(r) for r in want]
        assert [row_to_json(r[0], r[1]) for r in got] == [row_to_json(r[0], r[1]) for r in want]  # rejected.raw
        assert [r[2] for r in got] == [r[2] for r in want]
        pos = 0
        for it in items:
            n = it.n if it.__class__ is Window else len(it)
            assert n > 0 and pos // cut == (pos + n - 1) // cut, (pos, n, cut)
            if it.__class__ is Window:
                assert n <= window
                evs = [r[0] for r in it.rows(False)]
                assert {e["type"] for e in evs} <= COMMUTING_TYPES
                grouped = [r[0] for r in it.rows(True)]
                assert [(e["topic"], e["partition"]) for e in grouped] == sorted(
                    (e["topic"], e["partition"]) for e in evs)
                for key in {(e["topic"], e["partition"]) for e in evs}:      # each partition's rows in order
                    assert ([e for e in grouped if (e["topic"], e["partition"]) == key]
                            == [e for e in evs if (e["topic"], e["partition"]) == key])
            pos += n
        assert pos == len(want)


def test_a_short_run_inside_a_batch_stays_in_the_row_chunks(tmp_path):
    s = _disordered(tmp_path, 4, files=1)
    items = list(iter_stream_items(s, 1 << 20))
    windows = [it for it in items if it.__class__ is Window]
    # a 900-row schedule has no run of MIN_RUN commuting rows: at most a window at each end of the file
    assert len(windows) <= 2 and all(w.n < win.MIN_RUN for w in windows)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_disordered_streams_give_the_same_tables(tmp_path, small_windows, seed):
    s = _disordered(tmp_path, seed)
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
    for batch_rows, window in ((10_000, 1 << 18), (150, 23)):
        assert _same_replay(s, cfg, batch_rows, window) > 300


@pytest.mark.parametrize("name, kw", [
    ("crash", dict(faults="crash:2@20s+30s,unclean-crash:1@70s", duration_ms=120_000)),
    ("zone", dict(scenario="zone-outage", duration_ms=200_000)),
    ("rolling", dict(scenario="rolling-restart", duration_ms=200_000, partitions=5)),
    ("reassign", dict(scenario="reassignment", duration_ms=120_000, partitions=4)),
    ("flaky", dict(scenario="flaky-network", duration_ms=120_000, partitions=4, seed=8)),
])
def test_simulated_faults_give_the_same_tables(tmp_path, small_windows, name, kw):
    kw.setdefault("partitions", 8)
    kw.setdefault("brokers", 5)
    s = _simulated(tmp_path, name, **kw)
    cfg = EngineConfig({})
    for batch_rows, window in ((1 << 20, 1 << 18), (900, 97)):
        assert _same_replay(s, cfg, batch_rows, window) > 1000


def test_a_session_running_out_within_a_run_is_applied_in_stream_order(tmp_path, small_windows):
    """A broker that stops is fenced when its session runs out (broker.session.timeout.ms), at the
    first row at or past that time, whichever partition that row is of: that expiry changes other
    partitions (their leaders), so a window across it must not be grouped."""
    s = _simulated(tmp_path, "stop", faults="crash:1@10s+40s", duration_ms=80_000, partitions=6, brokers=4)
    cfg = EngineConfig({})
    eng = LocalEngine(cfg)
    refused = []
    real = eng.cluster.commutes

    def commutes(first_seq, first_ts, last_ts, max_step):
        ok = real(first_seq, first_ts, last_ts, max_step)
        if not ok and eng.cluster.sess_next is not None and first_ts <= eng.cluster.sess_next <= last_ts:
            refused.append(first_seq)
        return ok
    eng.cluster.commutes = commutes
    list(le._batches(eng, iter_stream_items(s, 1 << 20, 1 << 18), 1 << 20))
    assert refused                          # the whole stream's run of fetches holds the expiry
    assert _same_replay(s, cfg, 1 << 20, 1 << 18) > 0


def test_commutes():
    cl = Cluster(EngineConfig({"input.max.time.jump.ms": "1000"}))
    cl.last_seq, cl.max_ts = 10, 500
    assert cl.commutes(11, 500, 900, 1000)
    assert not cl.commutes(10, 500, 900, 10)          # the first row goes back in seq
    assert not cl.commutes(11, 499, 900, 10)          # ... or in time
    assert not cl.commutes(11, 1501, 1600, 10)        # ... or jumps too far ahead
    assert not cl.commutes(11, 600, 5000, 1001)       # a step within it jumps too far
    cl.sess_next = 900
    assert not cl.commutes(11, 500, 900, 10)          # a session runs out at its last row
    assert cl.commutes(11, 500, 899, 10)
    cl.end_window(40, 899)
    assert (cl.last_seq, cl.max_ts) == (40, 899)
    worker = Cluster(EngineConfig({}), owns=lambda key: False)
    assert worker.commutes(1, 0, 0, 0)                # a parallel replay's worker: the same rule


def _workers(stream, cfg, batch_rows: int, window_rows: int, workers: int):
    """The parallel replay's batches, its workers run one after the other in this process and
    merged as the parent merges them (jobs.local_engine._replay_workers)."""
    runs, grouped = [], 0
    for k in range(workers):
        eng = LocalEngine(cfg, k, workers)
        items = iter_stream_items(stream, batch_rows, window_rows, foreign=eng.cluster.is_foreign)
        runs.append(list(le._batches(eng, items, batch_rows)))
        grouped += eng.grouped_rows
    out = []
    for parts in zip(*runs):
        rows: dict = {}
        for tables, _, _ in parts:
            for name, rs in tables.items():
                rows.setdefault(name, []).extend(json.dumps(r, sort_keys=True, default=str) for r in rs)
        state = sorted((r for _, st, _ in parts for r in st.to_pylist()), key=lambda r: (r["topic"], r["partition"]))
        st = dict(parts[0][2])
        for key in ("applied", "rejected", "partitions"):
            st[key] = sum(p[2][key] for p in parts)
        out.append(({n: sorted(v) for n, v in rows.items() if v}, state, st))
    return out, grouped


@pytest.mark.parametrize("seed", [2, 5])
def test_parallel_workers_with_windows_give_the_tables_of_one_process(tmp_path, small_windows, seed):
    """Each worker applies its own rows of a grouped window and skips the others' (they only move
    its stream order): the merged batches equal one process's without windows, with the rows out
    of order and the faults above."""
    streams = [_disordered(tmp_path, seed),
               _simulated(tmp_path, "crash", faults="crash:2@20s+30s", duration_ms=90_000, partitions=8,
                          brokers=5, seed=seed)]
    for s in streams:
        cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
        ref, _ = _replay(s, cfg, 300, 0)
        for workers, window in ((2, 1 << 18), (3, 41)):
            got, grouped = _workers(s, cfg, 300, window, workers)
            assert grouped > 300
            assert len(got) == len(ref)
            for k, (a, b) in enumerate(zip(ref, got)):
                assert a[2] == b[2], (workers, k)
                assert a[1] == b[1], (workers, k)
                assert a[0] == b[0], (workers, k)


def test_the_bench_sized_windows_group_a_large_stream(tmp_path):
    """With the shipped thresholds, a simulated 200-partition stream goes through windows."""
    s = _simulated(tmp_path, "big", partitions=200, brokers=6, duration_ms=30_000)
    n = sum(pq.ParquetFile(f).metadata.num_rows for f in s.glob("*.parquet"))
    assert _same_replay(s, EngineConfig({}), 1 << 20, 1 << 18) > n // 2


def test_a_progress_rows_seq_range_is_its_own_batchs(tmp_path, small_windows):
    """The progress row of a batch gives the lowest and highest seq applied in that batch (as the
    Spark engine's), not since the replay began."""
    s = _simulated(tmp_path, "p", partitions=6, brokers=4, duration_ms=60_000)
    got, _ = _replay(s, EngineConfig({}), 500, 1 << 18)
    ranges = [(st["min_seq"], st["max_seq"]) for _, _, st in got]
    assert len(ranges) > 3
    for (lo, hi), (lo2, hi2) in zip(ranges, ranges[1:]):
        assert lo <= hi < lo2 <= hi2


def test_files_of_other_schemas_close_the_window(tmp_path, small_windows):
    """A window spans Parquet batches and files of one schema; a file with other columns (or
    types) starts a new one, and the rows and tables are those of the stream read as rows."""
    src = _disordered(tmp_path, 7, files=3)
    s = tmp_path / "mixed"
    s.mkdir()
    for i, f in enumerate(sorted(src.glob("*.parquet"))):
        t = pq.read_table(f)
        if i == 1:      # the used columns only, the partition as int64: another schema
            keep = [c for c in t.column_names if t.column(c).null_count < t.num_rows]
            t = t.select(keep)
            t = t.set_column(keep.index("partition"), "partition", t.column("partition").cast(pa.int64()))
        pq.write_table(t, s / f.name)
    want = list(iter_raw_rows(s, events=True))
    items = list(iter_stream_items(s, 10_000, 1 << 18))
    assert sum(1 for it in items if it.__class__ is Window) >= 3
    got = list(_flat(items, False))
    assert [_values(r) for r in got] == [_values(r) for r in want]
    assert _same_replay(s, EngineConfig({"input.max.time.jump.ms": "300000"}), 10_000, 1 << 18) > 300


# ------------------------------------------------------------------ the Spark engine's bucket calls
# A bucket call (jobs.spark_engine.process_bucket) groups the same runs by partition
# (_commuting_runs, _feed_grouped) once its bucket holds GROUP_PARTITIONS partitions: its tables,
# state rows, statistics and the state it hands to the next micro-batch are those of stream order.

def _bucket_batches(stream, cfg, n_buckets: int, chunk_rows: int, batches: int):
    """Every bucket's calls over the stream's source chunks (the scan, as a read task runs it), cut
    into `batches` micro-batches by position, each call on the state the previous one left."""
    from jobs.spark_engine import process_bucket
    from jobs.spark_source import run_scan
    files = [(i, str(f)) for i, f in enumerate(list_stream_files(stream))]
    rows, _ = run_scan(files, (0, 0), n_buckets, chunk_rows=chunk_rows, max_jump=cfg.max_time_jump_ms)
    positions = sorted({r[1] for r in rows})
    cut = -(-len(positions) // batches)
    out = []
    for b in range(n_buckets):
        chunks = [r[1:2] + r[3:] for r in rows if r[0] % n_buckets == b]
        blob = None
        watermark = 0
        for k in range(batches):
            lo, hi = positions[k * cut] if k * cut < len(positions) else 1 << 62, \
                positions[(k + 1) * cut] if (k + 1) * cut < len(positions) else 1 << 62
            mine = [c for c in chunks if lo <= c[0] < hi]
            tables, state, stats, blob, _ = process_bucket(b, n_buckets, cfg, blob, mine, watermark, False,
                                                           str(stream))
            watermark = max(watermark, stats["max_ts"] or 0)
            rows_k = {name: sorted(json.dumps(r, sort_keys=True, default=str) for r in rs)
                      for name, rs in tables.items() if rs}
            out.append((b, k, rows_k, state.to_pylist(), stats, blob))
    return out


@pytest.fixture
def grouping(monkeypatch):
    """Counts the rows the bucket calls applied grouped; `on(True)` groups runs of any length
    whatever the bucket's size, `on(False)` never groups."""
    import jobs.spark_engine as se
    real = se._feed_grouped
    seen = [0]

    def counted(cl, evs, items, a, b, *rest):
        got = real(cl, evs, items, a, b, *rest)
        if got is not None:
            seen[0] += b - a
        return got

    def on(yes: bool):
        monkeypatch.setattr(se, "GROUP_PARTITIONS", 0 if yes else 1 << 40)
        seen[0] = 0
    monkeypatch.setattr(se, "_feed_grouped", counted)
    monkeypatch.setattr(se, "_WORKER_YOUNG", [])
    on.seen = seen
    return on


def _same_buckets(grouping, stream, cfg, n_buckets: int, chunk_rows: int, batches: int) -> int:
    grouping(False)
    ref = _bucket_batches(stream, cfg, n_buckets, chunk_rows, batches)
    assert grouping.seen[0] == 0
    grouping(True)
    got = _bucket_batches(stream, cfg, n_buckets, chunk_rows, batches)
    assert len(got) == len(ref)
    for a, b in zip(ref, got):
        assert a[:2] == b[:2]
        assert a[4] == b[4], a[:2]              # input rows, applied, rejected, seq range, max ts
        assert a[3] == b[3], a[:2]              # partition_state, in key order
        assert a[2] == b[2], a[:2]              # every output table
        assert a[5] == b[5], a[:2]              # the state the next micro-batch starts from
    return grouping.seen[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bucket_calls_grouped_give_the_tables_of_stream_order(tmp_path, small_windows, grouping, seed):
    s = _disordered(tmp_path, seed)
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})
    for n_buckets, chunk_rows, batches in ((1, 50_000, 1), (3, 40, 4)):
        assert _same_buckets(grouping, s, cfg, n_buckets, chunk_rows, batches) > 300


@pytest.mark.parametrize("name, kw", [
    ("crash", dict(faults="crash:2@20s+30s,unclean-crash:1@70s", duration_ms=120_000)),
    ("zone", dict(scenario="zone-outage", duration_ms=200_000)),
    ("flaky", dict(scenario="flaky-network", duration_ms=120_000, partitions=4, seed=8)),
    ("stop", dict(faults="crash:1@10s+40s", duration_ms=80_000, partitions=6, brokers=4)),
])
def test_bucket_calls_grouped_under_faults(tmp_path, small_windows, grouping, name, kw):
    kw.setdefault("partitions", 8)
    kw.setdefault("brokers", 5)
    s = _simulated(tmp_path, name, **kw)
    for n_buckets, chunk_rows, batches in ((1, 50_000, 1), (4, 300, 3)):
        assert _same_buckets(grouping, s, EngineConfig({}), n_buckets, chunk_rows, batches) > 1000


def test_a_bucket_groups_only_past_its_size_and_a_long_run(tmp_path, monkeypatch):
    """With the shipped thresholds: a bucket of fewer than GROUP_PARTITIONS partitions feeds its
    chunks in stream order, one by one (nothing to gain there: the partitions fit in the processor's
    cache); one of more, its cold partitions counted, groups the runs of MIN_RUN rows or more,
    across the source's chunks."""
    import jobs.spark_engine as se
    from jobs.spark_engine import _commuting_runs
    ev = {"type": "Fetch"}
    other = {"type": "Tick"}
    n = win.MIN_RUN
    assert _commuting_runs([ev] * n) == [(0, n)]
    assert _commuting_runs([ev] * (n - 1)) == []
    assert _commuting_runs([None] + [ev] * n + [other] + [ev] * (n - 1) + [None] + [ev] * n) == \
        [(1, n + 1), (2 * n + 2, 3 * n + 2)]
    seen = []
    real = se._feed_grouped

    def recorded(cl, evs, items, a, b, *rest):
        got = real(cl, evs, items, a, b, *rest)
        seen.append((len(cl.partitions), len(cl.cold), b - a, got is not None))
        return got
    feeds = []
    feed = se._feed_chunk

    def fed(cl, items, *rest):
        feeds.append(len(items))
        return feed(cl, items, *rest)
    monkeypatch.setattr(se, "_feed_grouped", recorded)
    monkeypatch.setattr(se, "_feed_chunk", fed)
    s = _simulated(tmp_path, "big", partitions=200, brokers=6, duration_ms=20_000)
    ref = _bucket_batches(s, EngineConfig({}), 1, 500, 2)
    assert not seen                                             # 200 partitions: below
    chunks = len(feeds)
    assert chunks > 50 and max(feeds) < 2_000                   # ... fed chunk by chunk
    feeds.clear()
    monkeypatch.setattr(se, "GROUP_PARTITIONS", 200)            # a bucket of GROUP_PARTITIONS: grouped
    monkeypatch.setattr(se, "_WORKER_YOUNG", [])
    got = _bucket_batches(s, EngineConfig({}), 1, 500, 2)
    assert len(feeds) < chunks / 10
    # runs longer than a source chunk's 500 rows, grouped across chunks
    assert any(grouped and hot + cold == 200 and rows > 500 for hot, cold, rows, grouped in seen)
    assert [g[2:] for g in got] == [r[2:] for r in ref]
    # a bucket's size counts the partitions still cold in the state the last micro-batch left
    from protocol.codec import decode_cluster
    cl = decode_cluster(got[-1][5], EngineConfig({}), True, None)
    assert len(cl.partitions) < 200 <= len(cl.partitions) + len(cl.cold)
    assert se._groups(cl)


def test_a_bucket_run_holding_a_session_expiry_is_fed_in_stream_order(tmp_path, small_windows, grouping,
                                                                      monkeypatch):
    """A broker session that runs out within a bucket's run of fetches fences the broker at the
    first row at or past its time, which changes other partitions: that run is not grouped
    (Cluster.commutes), the others are, and the tables are those of stream order."""
    import jobs.spark_engine as se
    s = _simulated(tmp_path, "stop", faults="crash:1@10s+40s", duration_ms=80_000, partitions=6, brokers=4)
    runs = []
    counted = se._feed_grouped

    def recorded(cl, evs, items, a, b, *rest):
        expiring = cl.sess_next is not None and evs[a]["ts_ms"] <= cl.sess_next <= evs[b - 1]["ts_ms"]
        got = counted(cl, evs, items, a, b, *rest)
        runs.append((expiring, got is not None))
        return got
    monkeypatch.setattr(se, "_feed_grouped", recorded)
    assert _same_buckets(grouping, s, EngineConfig({}), 1, 50_000, 1) > 1000
    assert (True, False) in runs and (False, True) in runs
    assert (True, True) not in runs
