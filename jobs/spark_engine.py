"""The Spark Structured Streaming engine (`--engine spark`).

Plan of one query (see jobs/spark_source.py for the reader):

    isrflow stream source (name order, one task per file, in parallel: parse, validate, the
    global seq/ts_ms order check, routing; packed rows per (bucket, chunk))
      -> withWatermark(et, 1 ms)               # watermark == stream time after earlier batches
      -> groupBy(bucket).applyInPandasWithState(bucket_fn, "table string, data binary",
                                                "blob binary", Update, EventTimeTimeout)
      -> foreachBatch(BatchWriter)              # Delta commit per table per batch id: native
                                                # delta-spark from the executors (SparkDeltaSink) or
                                                # delta-rs after one collect() (docs/spark-engine.md)

Each bucket's state is one `protocol.cluster.Cluster` (its own broker registry and topic
configs + the partitions hashed to it by jobs.buckets.bucket_of), encoded with
protocol.codec. Broker-scoped rows and topic-wide AlterConfig reach every bucket in stream
order; only bucket 0 emits the rows that belong to no partition. After applying its rows a
bucket fires every timer due by the watermark (the stream time reached by all earlier
batches) and sets its event-time timeout to its next timer - 1, so Spark calls it again,
without data, in the first batch whose watermark passes that timer (availableNow ends with
such a no-data batch). Output rows leave the operator as Arrow IPC blobs per table.

Exactness notes:
* The seq / ts_ms order check is the in-process engine's, over the whole stream: it runs in
  the reader with a carry stored per consumed-file count (see spark_source), so there is no
  cross-bucket / cross-batch corner: a bucket never sees a row the global check rejects.
* Timers: a timer due at t fires when the watermark (stream time of earlier batches) is
  >= t; the timeout is set to t - 1 because Spark fires when timeout < watermark. Spark
  refuses timeouts <= 0, so a timer due at ts_ms 1 waits for stream time 2 (only a stream
  whose last event is at ts_ms 1 could tell).
* Core rejections: the rejected row's `raw` is re-read from the stream file at the row's
  position (files are immutable once written), so events travel as compact tuples.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa

from protocol.config import EngineConfig

from .buckets import DEFAULT_BUCKETS, owns_fn
from .spark_source import FORMAT, IsrflowSource
from .streamio import from_ipc, to_ipc
from .windows import WINDOW_ROWS

OUT_SCHEMA = "table string, data binary"
STATE_SCHEMA = "blob binary"
SORT_KEYS = ("topic", "partition", "seq", "idx")


# ============================================================================ executors
_CFG_CACHE: dict = {}


def _config(raw: dict) -> EngineConfig:
    key = json.dumps(sorted(raw.items()))
    cfg = _CFG_CACHE.get(key)
    if cfg is None:
        cfg = _CFG_CACHE[key] = EngineConfig(dict(raw))
    return cfg


def _int_or_none(v):
    try:
        import pandas as pd
        if v is None or pd.isna(v):
            return None
    except TypeError:
        pass
    return int(v)


def process_bucket(bucket: int, n_buckets: int, cfg: EngineConfig, blob: bytes | None, chunks, watermark: int,
                   timed_out: bool, stream: str | None = None):
    """One call of the stateful function, without Spark (tests drive it directly too).
    chunks: iterable of (pos, n_in, min_seq, max_seq, payload). Returns
    (tables {name: rows}, partition_state as Arrow, stats dict, new blob, next timeout or None).

    It runs as the in-process engine does (jobs.local_engine, _YOUNG_ROWS): automatic GC off,
    young collections on YoungGC's schedule, one for all the process's calls (_WORKER_YOUNG); and
    once its state is encoded, the bucket's Cluster is released (Cluster.release), so reference
    counting frees it at once. Before (automatic GC on,
    the Cluster left in cycles), on the bench's 100,000-partition stream cut into 16 buckets and
    called outside Spark: the full collections that kept coming while a bucket's partitions were
    built rescanned all of them, and every bucket's dead Cluster waited for one; 37% of the calls'
    time went to the GC (14.3 s of 38.4 s, compiled core), against 2.3-2.9 s of 21-26 s after."""
    from .local_engine import replay_gc
    with replay_gc():
        return _process_bucket(bucket, n_buckets, cfg, blob, chunks, watermark, timed_out, stream)


# The young-collection schedule (jobs.local_engine.YoungGC) of this process's bucket calls: one for
# the process, on one clock (the items all its calls fed), so the back-off a call earns carries over
# to the next. Spark reuses a Python worker for many bucket calls; with a schedule per call, each
# started over at _YOUNG_ROWS and every call of more than 32k items collected at least once. On the
# bench's 100k-partition stream (16 bucket calls of ~62k items, outside Spark) those were 16
# collections of ~0.15 s that freed nothing: the calls took 14.0 s with them and 11.0 s without.
_WORKER_YOUNG: list = []          # [YoungGC, clock], made by the first call


def _worker_young(make) -> tuple:
    """(the process's YoungGC, its clock); `make` builds it on first use."""
    if not _WORKER_YOUNG:
        _WORKER_YOUNG.extend((make(), 0))
    return _WORKER_YOUNG[0], _WORKER_YOUNG[1]


def _process_bucket(bucket: int, n_buckets: int, cfg: EngineConfig, blob: bytes | None, chunks, watermark: int,
                    timed_out: bool, stream: str | None):
    from protocol.cluster import Cluster
    from protocol.codec import decode_cluster, encode_cluster
    from schemas.tables import partition_state_arrow
    from .local_engine import YoungGC
    from .spark_source import raw_rows_at, unpack

    owns = owns_fn(bucket, n_buckets)
    if blob is not None:
        cl = decode_cluster(blob, cfg, bucket == 0, owns)
    else:
        cl = Cluster(cfg, bucket == 0, owns)
    applied0 = cl.applied
    pre_rejected: list[dict] = []
    need_raw: list[tuple[dict, int]] = []
    n_in = 0
    mn = mx = None
    young, done = _worker_young(YoungGC)
    if not timed_out:
        # a bucket that groups its runs (_feed_grouped) feeds its chunks' items WINDOW_ROWS at a
        # time: a run of produce / fetch rows that goes on in the next chunk is then grouped whole
        # (a chunk holds the bucket's ~1/16 of the source's CHUNK_ROWS, too few rows a partition
        # for grouping to pay); any other bucket feeds chunk by chunk, holding fewer items alive
        items: list = []
        for pos, nin, lo, hi, payload in sorted(chunks, key=lambda c: c[0]):
            n_in += int(nin or 0)
            lo, hi = _int_or_none(lo), _int_or_none(hi)
            if lo is not None and (mn is None or lo < mn):
                mn = lo
            if hi is not None and (mx is None or hi > mx):
                mx = hi
            items += unpack(payload)
            if len(items) >= WINDOW_ROWS or not _groups(cl):
                done = _WORKER_YOUNG[1] = _feed_chunk(cl, items, young, done, pre_rejected, need_raw)
                items = []
        if items:
            done = _WORKER_YOUNG[1] = _feed_chunk(cl, items, young, done, pre_rejected, need_raw)
    if need_raw:
        if stream is None:
            raise ValueError("process_bucket needs the stream path to attach rejected rows' raw JSON")
        raws = raw_rows_at(stream, [p for _, p in need_raw])
        for row, p in need_raw:
            row["raw"] = raws.get(p)
    cl.finish(max(watermark, cl.max_ts))
    tables = cl.drain()
    if pre_rejected:
        tables["rejected"] = pre_rejected + tables.get("rejected", [])
    state = partition_state_arrow(*cl.partition_state_columns(cl.take_touched()))
    stats = {"n_in": n_in, "applied": cl.applied - applied0, "rejected": len(tables.get("rejected", ())),
             "min_seq": mn, "max_seq": mx, "max_ts": cl.max_ts}
    nd = cl.next_due()
    timeout = None
    if nd is not None:
        timeout = max(nd - 1, watermark, 1)
    blob = encode_cluster(cl)
    cl.release()
    return tables, state, stats, blob, timeout


def _feed_chunk(cl, items: list, young, done: int, pre_rejected: list, need_raw: list) -> int:
    """Apply one source chunk's items to the bucket's core; returns the young-collection clock.

    The chunk's events go in runs, one core call each (Cluster.apply_run, as the in-process engine
    feeds its rows); a run stops after a row the core rejects. A long run of produce / fetch rows
    goes grouped by partition when the core allows it (_feed_grouped), as the in-process engine's
    windows do. Rows the source already rejected go to `pre_rejected`; a core rejection whose raw
    row the source carried by position goes to `need_raw`, to be re-read from the stream files
    once per call."""
    from .spark_source import REJECTED, chunk_events, noted_creations, without_known_notes
    items = without_known_notes(items, cl.topic_rf)
    evs = chunk_events(items)
    runs = _commuting_runs(evs) if _groups(cl) else []
    runs.reverse()                  # popped from the end: the next run last
    i, n = 0, len(items)
    while i < n:
        if runs and runs[-1][0] == i:
            end = runs.pop()[1]
            got = _feed_grouped(cl, evs, items, i, end, young, done, need_raw)
            if got is not None:
                done, i = got, end
                continue
        if evs[i] is None:
            if done + 1 >= young.at:    # (_apply checks before each run of events)
                young.collect(done + 1)
            if items[i][0] == REJECTED:
                pre_rejected.append(items[i][1])
            else:                   # other buckets' creations: their topics' replication factors
                notes = noted_creations(items[i], cl.topic_rf)
                if notes:
                    cl.apply_run(notes, 0, len(notes))
            done += 1
            i += 1
            continue
        i, done = _apply(cl, evs, i, runs[-1][0] if runs else n, young, done, items, None, need_raw, False)
    return done


# Grouping a bucket's runs pays only once its partitions' state outgrows the processor's cache. The
# 16 bucket calls of the bench's 1M-row streams outside Spark (compiled core, in turn), their feed
# grouped against in stream order: 100k partitions (~6,250 a bucket) 6.3-7.2 s against 7.3-8.5 s;
# 10k (~625) 3.95-4.16 s against 4.07-4.19 s; 1k (~62) 3.1-3.5 s against 2.9-3.2 s (the grouping's
# own pass, ~0.4 us a row, with nothing to gain). Whole Spark replays at 10k partitions were no
# faster grouped, so a bucket groups from well above that size.
GROUP_PARTITIONS = 2048


def _groups(cl) -> bool:
    """Whether the bucket is large enough to group its runs: GROUP_PARTITIONS partitions, the
    cold ones (decoded from the previous micro-batch's state, not used since) counted."""
    return len(cl.partitions) + len(cl.cold) >= GROUP_PARTITIONS


def _commuting_runs(evs: list) -> list[tuple[int, int]]:
    """[start, end) of each run of at least jobs.windows.MIN_RUN consecutive events of
    COMMUTING_TYPES (an applied row's event; None is any other item), in order."""
    from protocol.cluster import COMMUTING_TYPES
    from .windows import MIN_RUN
    runs = []
    start = -1
    for j, ev in enumerate(evs):
        if ev is not None and ev["type"] in COMMUTING_TYPES:
            if start < 0:
                start = j
        elif start >= 0:
            if j - start >= MIN_RUN:
                runs.append((start, j))
            start = -1
    if start >= 0 and len(evs) - start >= MIN_RUN:
        runs.append((start, len(evs)))
    return runs


def _feed_grouped(cl, evs: list, items: list, a: int, b: int, young, done: int, need_raw: list) -> int | None:
    """The events evs[a:b] (a run of _commuting_runs) applied grouped by partition, in key order,
    each partition's rows in their order, when the core allows it (Cluster.commutes: the rule and
    why it holds, as for the in-process engine's windows, jobs.windows); a bucket looks for runs
    only once it holds GROUP_PARTITIONS partitions (_groups). Returns the young-collection clock,
    or None (nothing applied: the caller feeds the run in stream order)."""
    # The source's scan applied the stream order check over the whole stream (rows out of order
    # reach the bucket as REJECTED items, which end a run), so a run's seq strictly increases and
    # its ts_ms never decreases; and a bucket's core checks no time jump (Cluster.max_jump is 0
    # there: the scan checked it), so a step is never too long for it.
    run = evs[a:b]
    first, last = run[0], run[-1]
    if not cl.commutes(first["seq"], first["ts_ms"], last["ts_ms"], 0):
        return None
    groups: dict = {}
    for j, ev in enumerate(run, a):
        key = (ev["topic"], ev["partition"])
        g = groups.get(key)
        if g is None:
            groups[key] = [j]
        else:
            g.append(j)
    order = [j for key in sorted(groups) for j in groups[key]]
    grouped = [evs[j] for j in order]
    done = _apply(cl, grouped, 0, len(grouped), young, done, items, order, need_raw, True)[1]
    cl.end_window(last["seq"], last["ts_ms"])
    return done


def _apply(cl, evs: list, i: int, stop: int, young, done: int, items: list, order, need_raw: list,
           window: bool) -> tuple[int, int]:
    """evs[i:stop] in core runs (Cluster.apply_run; `window`: a grouped run's), up to the first None,
    on the young-collection schedule; a core rejection gets its item's raw row (_attach_raw: the
    item of evs[j] is items[j], or items[order[j]] for a grouped run). Returns (the index after
    the last row applied, the young-collection clock)."""
    while i < stop and evs[i] is not None:
        if done + 1 >= young.at:
            young.collect(done + 1)
        rows = cl.out.tables.get("rejected")
        before, n_rows = cl.rejected, len(rows) if rows is not None else 0
        k = young.run(cl, evs, i, stop, done, window)[0]
        done += k - i
        i = k
        if cl.rejected != before:
            _attach_raw(cl, n_rows, items[i - 1 if order is None else order[i - 1]], need_raw)
    return i, done


def _attach_raw(cl, before: int, item, need_raw: list) -> None:
    """The core rejected `item`'s row, the last it applied: attach its raw row to the rejected row
    it emitted (a broadcast row's only in bucket 0), carried along by the Kafka source, re-read by
    position from the stream files otherwise (need_raw)."""
    rows = cl.out.tables.get("rejected")
    if rows is not None and len(rows) > before and rows[-1]["raw"] is None:
        raw = item[3]
        if type(raw) is str:
            rows[-1]["raw"] = raw
        else:
            need_raw.append((rows[-1], raw))


# A bucket's state value in Spark's state store: b"IZ" + the blob's size (8 bytes, little endian) +
# zstd(protocol.codec blob). The codec leaves its partitions' pickles uncompressed because they
# compress far better together: at 100,000 partitions the 16 values went from 23 MB (each partition
# zlib'd on its own) to ~3 MB, and every byte of them is read, copied to Python and back, written
# and logged by the state store every micro-batch. A value without the prefix is a codec blob as
# checkpoints before this stored it.
_ZSTD = b"IZ"


def store_blob(blob: bytes) -> bytes:
    return _ZSTD + len(blob).to_bytes(8, "little") + pa.compress(blob, codec="zstd", asbytes=True)


def load_blob(value: bytes) -> bytes:
    from protocol.codec import CodecError
    if value[:2] != _ZSTD:
        return value
    try:
        return pa.decompress(value[10:], decompressed_size=int.from_bytes(value[2:10], "little"),
                             codec="zstd", asbytes=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CodecError(f"truncated or corrupt isrflow state value ({type(e).__name__}: {e})") from None


def make_bucket_fn(cfg_raw: dict, n_buckets: int, stream: str):
    def bucket_fn(key, pdfs, state):
        import pandas as pd
        from schemas.tables import rows_to_arrow

        cfg = _config(cfg_raw)
        bucket = int(key[0]) % n_buckets      # the grouping key (see jobs.buckets.group_keys)
        wm = state.getCurrentWatermarkMs()
        wm = wm if wm and wm > 0 else 0
        chunks = []
        if not state.hasTimedOut:
            for pdf in pdfs:
                chunks.extend(zip(pdf["pos"].tolist(), pdf["n_in"].tolist(), pdf["min_seq"].tolist(),
                                  pdf["max_seq"].tolist(), pdf["payload"].tolist()))
        blob = load_blob(state.get[0]) if state.exists else None
        tables, state_tbl, stats, new_blob, timeout = process_bucket(
            bucket, n_buckets, cfg, blob, chunks, wm, state.hasTimedOut, stream)
        state.update((store_blob(new_blob),))
        if timeout is not None:
            state.setTimeoutTimestamp(timeout)
        names, datas = [], []
        for name, rows in tables.items():
            if rows:
                names.append(name)
                datas.append(to_ipc(rows_to_arrow(name, rows)))
        if state_tbl.num_rows:
            names.append("partition_state")
            datas.append(to_ipc(state_tbl))
        names.append("_stats")
        datas.append(json.dumps(stats).encode())
        yield pd.DataFrame({"table": names, "data": datas})
    return bucket_fn


# ============================================================================ driver
def fingerprint(config: EngineConfig, checkpoint: str) -> str:
    h = hashlib.sha1()
    h.update(b"spark")
    h.update(json.dumps(sorted(config.raw.items())).encode())
    h.update(str(Path(checkpoint).resolve()).encode())
    return f"isrflow-spark-{h.hexdigest()[:12]}"


def _default_checkpoint(stream: str, tables_dir: str, config: EngineConfig) -> str:
    from .runinfo import stream_id
    from .streamio import list_stream_files
    sid = stream_id(stream)
    h = hashlib.sha1()
    h.update(sid.encode())
    h.update(json.dumps(sorted(config.raw.items())).encode())
    for f in ([] if "://" in sid else list_stream_files(stream)):
        h.update(f.name.encode())
    return str(Path(tables_dir) / "_spark_checkpoint" / h.hexdigest()[:12])


def _meta(checkpoint: str, n_buckets: int | None, stream: str) -> int:
    """The bucket count is frozen in the checkpoint: record it, reuse it."""
    return _meta_keys(checkpoint, n_buckets, stream, None)[0]


def _meta_keys(checkpoint: str, n_buckets: int | None, stream: str, shuffle_partitions) -> tuple[int, int]:
    """(bucket count, key_shuffle) frozen in the checkpoint: key_shuffle is the shuffle
    partition count the grouping keys were balanced for (jobs.buckets.group_keys; 0 for
    checkpoints made before that: the key is the bucket)."""
    os.makedirs(checkpoint, exist_ok=True)
    p = Path(checkpoint) / "isrflow.json"
    if p.exists():
        meta = json.loads(p.read_text())
        if n_buckets is not None and int(n_buckets) != meta["n_buckets"]:
            raise ValueError(f"checkpoint {checkpoint} was created with {meta['n_buckets']} buckets, not {n_buckets}")
        return int(meta["n_buckets"]), int(meta.get("key_shuffle", 0))
    n = int(n_buckets or os.environ.get("ISRFLOW_BUCKETS") or DEFAULT_BUCKETS)
    if (Path(checkpoint) / "spark").exists():
        ks = 0      # a Spark checkpoint without our record: keep its keys
    else:
        from conf import spark_defaults
        ks = int(shuffle_partitions or spark_defaults().get("spark.sql.shuffle.partitions", "2"))
    from .runinfo import stream_id
    p.write_text(json.dumps({"n_buckets": n, "stream": stream_id(stream), "key_shuffle": ks}))
    return n, ks


def _kill_hook(batch_id: int, phase: str) -> None:
    """Test hook: ISRFLOW_TEST_KILL="<batch>:<phase>" SIGKILLs this process at that point
    (phase: before | mid | after the Delta commit of that batch)."""
    spec = os.environ.get("ISRFLOW_TEST_KILL")
    if not spec:
        return
    b, _, ph = spec.partition(":")
    if int(b) == batch_id and ph == phase:
        marker = os.environ.get("ISRFLOW_TEST_KILL_MARKER")
        if marker:
            if os.path.exists(marker):
                return   # killed once already: the restart runs through
            Path(marker).write_text(spec)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _merge_stats(stats) -> dict:
    """The operator's per-bucket `_stats` rows summed into one batch's figures."""
    st = {"n_in": 0, "applied": 0, "rejected": 0, "min_seq": None, "max_seq": None, "max_ts": 0}
    for s in stats:
        for k in ("n_in", "applied", "rejected"):
            st[k] += s[k]
        st["max_ts"] = max(st["max_ts"], s["max_ts"])
        if s["min_seq"] is not None and (st["min_seq"] is None or s["min_seq"] < st["min_seq"]):
            st["min_seq"] = s["min_seq"]
        if s["max_seq"] is not None and (st["max_seq"] is None or s["max_seq"] > st["max_seq"]):
            st["max_seq"] = s["max_seq"]
    return st


class BatchWriter:
    """foreachBatch: turns the operator's output of one micro-batch into a Delta commit per
    table, through the sink: the delta-rs sink gets the rows collected on the driver (one
    collect()); the native delta-spark sink writes from the executors (write_frame)."""

    def __init__(self, sink, progress=None):
        self.sink = sink
        self.progress = progress
        self.t0 = time.perf_counter()
        self.totals = {"input_rows": 0, "applied": 0, "rejected": 0, "batches": 0}
        self.max_seq = None
        self.max_ts = 0
        self.lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        with self.lock:
            self._batch(df, batch_id)

    def _progress_row(self, batch_id: int, st: dict) -> dict:
        from .runinfo import progress_row
        if st["max_seq"] is not None:
            self.max_seq = st["max_seq"] if self.max_seq is None else max(self.max_seq, st["max_seq"])
        self.max_ts = max(self.max_ts, st["max_ts"])
        return progress_row(batch_id, "spark", st["n_in"], st["applied"], st["rejected"], st["min_seq"],
                            st["max_seq"], self.max_ts)

    def _batch(self, df, batch_id: int) -> None:
        if hasattr(self.sink, "write_frame"):
            st = self.sink.write_frame(df, batch_id, lambda st: self._progress_row(batch_id, st))
        else:
            st = self._collect_and_commit(df, batch_id)
        tot = self.totals
        tot["input_rows"] += st["n_in"]
        tot["applied"] += st["applied"]
        tot["rejected"] += st["rejected"]
        tot["batches"] += 1
        if self.progress:
            el = time.perf_counter() - self.t0
            self.progress(f"batch {batch_id}: {st['n_in']:,} rows ({st['applied']:,} applied, "
                          f"{st['rejected']:,} rejected); total {tot['input_rows']:,} rows, "
                          f"{tot['input_rows'] / max(el, 1e-9):,.0f} events/s")

    def _collect_and_commit(self, df, batch_id: int) -> dict:
        trace = _tracer(batch_id)
        rows = df.collect()                      # the one action on the batch DataFrame
        trace("operator + collect")
        tables, st = _gather(rows)
        state = tables.pop("partition_state", None)
        state_rows = state if state is not None else []      # upserted as Arrow (DeltaSink._commit_state)
        tables["progress"] = [self._progress_row(batch_id, st)]
        _kill_hook(batch_id, "before")
        if os.environ.get("ISRFLOW_TEST_KILL", "").endswith(":mid"):
            first = {k: v for k, v in tables.items() if k != "progress"}
            names = sorted(first)[: max(1, len(first) // 2)]
            self.sink.commit(batch_id, {k: first[k] for k in names})
            _kill_hook(batch_id, "mid")
        self.sink.commit(batch_id, tables, state_rows)
        trace("delta-rs commits")
        _kill_hook(batch_id, "after")
        return st


def _gather(rows) -> tuple[dict[str, pa.Table], dict]:
    """The operator's output rows (table name, data) on the driver -> ({table: Arrow table in
    stream order}, the batch's merged `_stats`). Rows whose data is null are skipped."""
    per: dict[str, list] = defaultdict(list)
    stats = []
    for r in rows:
        name, data = r["table"], r["data"]
        if data is None:
            continue
        if name == "_stats":
            stats.append(json.loads(bytes(data)))
        else:
            per[name].append(from_ipc(data))
    tables = {}
    for name, parts in per.items():
        t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        keys = [(k, "ascending") for k in SORT_KEYS if k in t.column_names]
        tables[name] = t.sort_by(keys) if keys else t
    return tables, _merge_stats(stats)


SINKS = ("delta-spark", "delta-rs")


def choose_sink(spark, sink: str | None = None) -> str:
    """--sink / ISRFLOW_SINK: delta-spark | delta-rs | auto (default: delta-spark when its JARs
    are on the classpath, else delta-rs)."""
    from .delta_sink import SinkError
    from .spark_session import has_delta_jars
    choice = sink or os.environ.get("ISRFLOW_SINK") or "auto"
    with_ext = "Delta" in (spark.conf.get("spark.sql.extensions", "") or "")
    if choice == "auto":
        return "delta-spark" if has_delta_jars(spark) and with_ext else "delta-rs"
    if choice not in SINKS:
        raise SinkError(f"unknown sink {choice!r} (expected one of {', '.join(SINKS)})")
    if choice == "delta-spark" and not has_delta_jars(spark):
        raise SinkError("--sink delta-spark needs the delta-spark JARs on the classpath (./dev setup resolves them "
                        "into .cache/jars/spark; with spark-submit pass them with --jars)")
    return choice


def _make_sink(spark, tables_dir: str, app_id: str, sink: str, n_buckets: int = DEFAULT_BUCKETS):
    from .delta_sink import DeltaSink
    if sink == "delta-spark":
        s = SparkDeltaSink(spark, tables_dir, app_id, n_buckets)
        if s.driver_blob_cap < 0:       # the executors append every batch: their first needs Delta's JVM side
            s.maybe_warm_up()
        return s
    return DeltaSink(tables_dir, app_id=app_id)


def _explode_fn(name: str):
    """mapInArrow function (runs on the executors): the operator's Arrow IPC blobs of one
    table -> that table's record batches, in the table's Arrow schema (schemas/)."""
    def explode(batches):
        from schemas.tables import arrow_schema
        want = arrow_schema(name)
        for b in batches:
            for blob in b.column(0).to_pylist():
                t = from_ipc(blob)
                t = t.select(want.names).cast(want)
                keys = [(k, "ascending") for k in SORT_KEYS if k in t.column_names]
                if keys:
                    t = t.sort_by(keys)
                yield from t.to_batches()
    return explode


# A table's rows of one micro-batch up to this many bytes (Arrow IPC, summed over its buckets) are
# committed from the driver with delta-rs by the native sink; larger ones are appended by the
# executors. A Spark append costs ~0.5-2 s of planning and Delta log work however few its rows,
# which is what separated the sinks on small micro-batches; the cap keeps a large batch's data off
# the driver (a whole 1M-row replay's five tables held ~30 MB at 100,000 partitions, the largest
# under 16 MB; the driver holds partition_state, ~28 MB at 100,000 partitions, in any case).
# ISRFLOW_SINK_DRIVER_BYTES overrides it (0: the executors append every table).
DRIVER_BYTES = 64 << 20
# the operator's outputs the native sink always collects: the batch's stats and partition_state
# (which the driver upserts into its copy of the table)
COLLECTED = ("_stats", "partition_state")


def _driver_bytes_from_env() -> int:
    from .delta_sink import SinkError
    raw = os.environ.get("ISRFLOW_SINK_DRIVER_BYTES", "").strip()
    if not raw:
        return DRIVER_BYTES
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise SinkError(f"ISRFLOW_SINK_DRIVER_BYTES must be a whole number of bytes >= 0 (0: the executors append "
                        f"every table; default {DRIVER_BYTES}), got {raw!r}")
    return n


class SparkDeltaSink:
    """The native delta-spark sink (default when the delta-spark JARs are on the classpath).

    Per micro-batch: the operator's output (one row per bucket and table: the table name and an
    Arrow IPC blob) is persisted; one collect() brings the per-bucket `_stats`, the
    `partition_state` rows (one per partition the batch touched) and every blob of at most
    `driver_blob_cap` bytes to the driver, with each blob's size. A table whose blobs all came (its
    batch at most DRIVER_BYTES) is committed from the driver by delta-rs; for each other table, a
    mapInArrow over the blobs of that table explodes them into a DataFrame with the table's schema
    and the executors append it with Delta's idempotent writes (txnAppId = app id, txnVersion =
    batch id: Delta itself skips a batch the table already holds). Both paths write under the same
    app transaction, so a batch replayed after a crash is skipped by a table that holds it whichever
    path wrote it. A Spark append costs ~0.5-2 s of planning and Delta log work however few its
    rows; the driver's delta-rs commit of a 1,000-row batch's tables takes tens of ms. The driver
    upserts the partition_state rows into its copy of the table and delta-rs commits it under the
    same app transaction (DeltaSink, as the delta-rs sink does): a Spark MERGE rewrote the table
    through several Spark jobs, ~3.5-4 s a micro-batch at 100,000 partitions on 2 cores against
    ~0.15 s. The progress row, made on the driver, is committed last with delta-rs.
    Tables are created (empty, with the schemas from schemas/) by delta-rs, as the delta-rs
    sink does, so both sinks produce the same table metadata."""

    def __init__(self, spark, tables_dir: str, app_id: str, n_buckets: int = DEFAULT_BUCKETS,
                 driver_bytes: int | None = None):
        from .delta_sink import DeltaSink
        if driver_bytes is None:
            driver_bytes = _driver_bytes_from_env()     # first: a bad value stops the run before any table is made
        self.spark = spark
        # creates / checks the tables, and holds partition_state as committed (read back on a restart)
        self.base = DeltaSink(tables_dir, app_id=app_id)
        self.app_id = app_id
        # a table's blobs (one per bucket) each at most this: its whole batch is <= driver_bytes
        self.driver_blob_cap = driver_bytes // max(1, n_buckets) if driver_bytes > 0 else -1
        self.warm_thread: threading.Thread | None = None      # warm_up's, joined before the run reports

    def _path(self, name: str) -> str:
        return str(Path(self.base.table_path(name)).resolve())

    # always committed on the driver by delta-rs; every other table of schemas/ by the executors,
    # or by the driver in a micro-batch whose rows of it the driver holds whole (driver_tables)
    DRIVER_TABLES = ("partition_state", "progress")
    # the warm-up loads these first: a replay writes them in nearly every micro-batch
    WARM_FIRST = ("metadata_log", "produce", "hwm", "consumer")

    @classmethod
    def appended_tables(cls) -> tuple[str, ...]:
        from schemas.tables import TABLES
        return tuple(n for n in TABLES if n not in cls.DRIVER_TABLES)

    @classmethod
    def warm_order(cls) -> tuple[str, ...]:
        rest = cls.appended_tables()
        return tuple(n for n in cls.WARM_FIRST if n in rest) + tuple(n for n in rest if n not in cls.WARM_FIRST)

    def warm_up(self) -> threading.Thread:
        """Loads every appended table's Delta snapshot, with its app transactions, in the JVM, in a
        background thread, while the first micro-batch's operator runs. A process's first Delta
        operation costs ~8-11 s (Delta's classes, Spark's planning of its log replay, the replay's
        job) and each table's first snapshot ~1.1 s more (a Spark job over its log, which the
        txnAppId check needs): a whole replay is one or two micro-batches, so its first batch's
        commits paid all of it after the operator. Read-only: an append that finds the snapshot
        loaded (DeltaLog's cache) uses it; one that comes first loads it itself, and the other waits
        for it (a lazy value). A failure here changes nothing (the append loads what it needs), so
        it is only reported."""
        def run():
            try:
                self.warm(self.warm_order())
            except Exception as e:     # noqa: BLE001 - an optimisation: the appends load what they need
                print(f"isrflow: delta-spark warm-up stopped ({type(e).__name__}: {str(e)[:200]})",
                      file=sys.stderr, flush=True)
        th = threading.Thread(target=run, name="isrflow-delta-warm-up", daemon=True)
        th.start()
        self.warm_thread = th
        return th

    def maybe_warm_up(self) -> None:
        """warm_up, once, unless ISRFLOW_DELTA_WARMUP=0 (to measure it). Started when the sink is
        made if the executors append every batch (driver bytes 0), else by the first batch that
        leaves a table to them (a large one, so likely not the last): while the driver commits the
        batches, the warm-up would only take CPU from the operator (a 1M-row replay at 1k partitions,
        all committed from the driver: 22.9 s with it, 18.2 s without, 2026-11-28)."""
        if self.warm_thread is None and os.environ.get("ISRFLOW_DELTA_WARMUP", "1") != "0":
            self.warm_up()

    def warm(self, names) -> dict[str, tuple[int, int]]:
        """Delta's snapshot of each table and its app transactions, loaded (and so cached) in the
        JVM: {name: (snapshot version, app transactions recorded)}."""
        jvm, jss = self.spark._jvm, self.spark._jsparkSession
        trace = _tracer("warm-up")
        out = {}
        for name in names:
            snap = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(jss, self._path(name)).unsafeVolatileSnapshot()
            out[name] = (int(snap.version()), int(snap.setTransactions().size()))
            trace(name)
        return out

    def _frame(self, df, name: str):
        from pyspark.sql import functions as F
        from schemas.tables import spark_schema
        return df.filter(F.col("table") == name).select("data").mapInArrow(_explode_fn(name), spark_schema(name))

    def _append(self, df, name: str, batch_id: int) -> None:
        (self._frame(df, name).write.format("delta").mode("append").option("txnAppId", self.app_id)
         .option("txnVersion", str(batch_id)).save(self._path(name)))

    def write_frame(self, df, batch_id: int, make_progress) -> dict:
        from concurrent.futures import ThreadPoolExecutor
        from pyspark.sql import functions as F
        trace = _tracer(batch_id)
        df.persist()        # the stateful plan runs once (Q6: one action re-runs it); later reads hit the cache
        try:
            # one collect: the _stats and partition_state blobs always; any other table's blob when it
            # is small (`driver_blob_cap`), with every blob's size, so the driver knows which tables it
            # holds whole (driver_tables) and commits those itself
            size = F.length("data")
            on_driver = F.col("table").isin(*COLLECTED) | (size <= self.driver_blob_cap)
            meta = df.select("table", F.when(on_driver, F.col("data")).alias("data"), size.alias("size")).collect()
            trace("operator + meta collect")
            present = {r["table"] for r in meta if r["table"] != "_stats"}
            held = driver_tables(meta, self.driver_blob_cap)
            trace(f"driver holds {sum(r['size'] for r in meta if r['table'] in held):,} bytes of {len(held)} tables")
            # a table partly collected (one of its blobs over the cap) goes to the executors whole
            small, st = _gather([r for r in meta if r["table"] in held or r["table"] in COLLECTED])
            state = small.get("partition_state")
            order = [n for n in self.appended_tables() if n in present]
            on_driver_rows = {n: small[n] for n in order if n in held and n in small}     # in commit order
            del meta, small     # the blobs' bytes: not held through the commits
            if any(n not in on_driver_rows for n in order):
                self.maybe_warm_up()
            prog = make_progress(st)

            def commit(name):
                if name in on_driver_rows:
                    self._commit_on_driver({name: on_driver_rows[name]}, batch_id)
                else:
                    self._append(df, name, batch_id)
            _kill_hook(batch_id, "before")
            if os.environ.get("ISRFLOW_TEST_KILL", "").endswith(":mid"):
                for name in order[: max(1, len(order) // 2)]:
                    commit(name)
                _kill_hook(batch_id, "mid")
            # the tables' commits are independent: Spark runs the appends as concurrent jobs (a Delta
            # append is mostly driver-side log work) beside the driver's delta-rs commits
            # (partition_state and the tables it holds whole), which go first in one job (they need no
            # Spark job, so no thread waits for them); progress strictly after all
            jobs = [(self._append, (df, name, batch_id), name) for name in order if name not in on_driver_rows]
            if state is not None or on_driver_rows:
                jobs.insert(0, (self._commit_on_driver, (on_driver_rows, batch_id, state),
                                "delta-rs: " + ", ".join(list(on_driver_rows) + ["partition_state"] * (state is not None))))

            def run(job):
                fn, args, name = job
                fn(*args)
                trace(name)
            threads = max(1, int(os.environ.get("ISRFLOW_SINK_THREADS", "4")))
            if threads == 1 or len(jobs) <= 1:
                for j in jobs:
                    run(j)
            else:
                with ThreadPoolExecutor(max_workers=threads) as pool:
                    for f in [pool.submit(run, j) for j in jobs]:
                        f.result()
            # the one progress row comes from the driver: delta-rs commits it in milliseconds under the
            # same app transaction (a Spark append of one row costs ~1-2 s of planning and log work)
            self.base.commit(batch_id, {"progress": [prog]})
            trace("progress")
            _kill_hook(batch_id, "after")
        finally:
            df.unpersist()
        return st

    def _commit_on_driver(self, rows: dict, batch_id: int, state: pa.Table | None = None) -> None:
        """delta-rs commits of tables the driver holds, under the app transaction the executors'
        appends use: each table's snapshot is brought up to date first (the executors may have
        appended to it since the driver last read it), so the skip of a batch the table already
        holds sees every writer's commits."""
        self.base.refresh(rows)
        self.base.commit(batch_id, rows, state)


def driver_tables(meta, blob_cap: int) -> set[str]:
    """The tables of a micro-batch whose every blob came with the driver's collect (each at most
    `blob_cap` bytes; `meta` rows: table, data (None where not collected), size): the native sink
    commits these from the driver with delta-rs, the executors append the rest. partition_state and
    _stats always come to the driver and are not among them."""
    whole: dict[str, bool] = {}
    for r in meta:
        name = r["table"]
        if name in COLLECTED or r["size"] is None:
            continue
        whole[name] = whole.get(name, True) and r["data"] is not None and r["size"] <= blob_cap
    return {n for n, ok in whole.items() if ok}


def _tracer(batch_id):
    """ISRFLOW_SINK_TRACE=1: a micro-batch's step times on stderr (either sink); batch_id may be a
    label ("warm-up")."""
    if not os.environ.get("ISRFLOW_SINK_TRACE"):
        return lambda step: None
    t0 = time.perf_counter()

    def trace(step):
        what = f"batch {batch_id}" if isinstance(batch_id, int) else batch_id
        print(f"[sink] {what} +{time.perf_counter() - t0:.2f}s {step}", file=sys.stderr, flush=True)
    return trace


def _set_shuffle(spark, shuffle_partitions) -> None:
    """Shuffle partitions = state store partitions; only a new checkpoint takes the value."""
    from conf import spark_defaults
    n = shuffle_partitions or spark_defaults().get("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.shuffle.partitions", str(int(n)))


def _source_frame(spark, stream, checkpoint: str, n_buckets: int, max_files_per_trigger, key_shuffle: int,
                  max_jump: int = 0):
    """The event rows (jobs.spark_source.SCHEMA) from a stream directory, or from a Kafka topic
    when `stream` is a jobs.kafka_source.KafkaSpec. max_jump: input.max.time.jump.ms, a check of
    the whole stream, so the scan makes it (the buckets' clusters do not)."""
    carry_dir = str(Path(checkpoint).resolve() / "isrflow_carry")
    from .kafka_source import KafkaSpec, kafka_frame
    if isinstance(stream, KafkaSpec):
        from .buckets import group_keys
        return kafka_frame(spark, stream, carry_dir, n_buckets, group_keys(n_buckets, int(key_shuffle)), max_jump)
    try:
        spark.dataSource.register(IsrflowSource)
    except Exception:
        pass
    reader = (spark.readStream.format(FORMAT)
              .option("path", str(Path(stream).resolve()))
              .option("carry_dir", carry_dir)
              .option("n_buckets", str(n_buckets))
              .option("key_shuffle", str(int(key_shuffle)))
              .option("max_time_jump_ms", str(int(max_jump))))
    if max_files_per_trigger:
        reader = reader.option("max_files_per_trigger", str(int(max_files_per_trigger)))
    return reader.load()


def build_query(spark, stream, tables_dir: str, config: EngineConfig, checkpoint: str, n_buckets: int,
                writer: BatchWriter, *, max_files_per_trigger=None, trigger=None, key_shuffle: int = 0):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout
    from .kafka_source import KafkaSpec

    src = _source_frame(spark, stream, checkpoint, n_buckets, max_files_per_trigger, key_shuffle,
                        config.max_time_jump_ms)
    # the file source's rows are re-read by position for the core's rejections; Kafka's carry their raw text
    raw_from = None if isinstance(stream, KafkaSpec) else str(Path(stream).resolve())
    df = (src.withColumn("et", F.timestamp_millis("et_ms"))
          .withWatermark("et", "1 millisecond")
          .select("bucket", "pos", "n_in", "min_seq", "max_seq", "payload", "et"))
    out = df.groupBy("bucket").applyInPandasWithState(
        make_bucket_fn(dict(config.raw), n_buckets, raw_from), OUT_SCHEMA, STATE_SCHEMA, "Update",
        GroupStateTimeout.EventTimeTimeout)
    w = (out.writeStream.foreachBatch(writer).outputMode("update")
         .option("checkpointLocation", str(Path(checkpoint).resolve() / "spark")))
    w = w.trigger(**(trigger or {"availableNow": True}))
    return w.queryName(f"isrflow-{Path(checkpoint).name}").start()


def _quiesce(spark, writer: BatchWriter) -> None:
    """Nothing of the run left in flight before it reports: the native sink's warm-up thread (which
    loads every table's snapshot, also of tables this stream never appends to, so a short replay's
    query can end before it does) is joined, then every Spark job of the session is waited for
    (spark_session.await_idle). Exiting with them running killed their tasks and printed the JVM's
    `ERROR Executor: Exception in task` / `RejectedExecutionException` traces after the summary of a
    successful replay (2 runs in 8 of a 10k-partition replay, 2026-11-28)."""
    from .spark_session import await_idle
    th = getattr(writer.sink, "warm_thread", None)
    if th is not None:
        th.join(timeout=120)
    if not await_idle(spark):
        print("isrflow: a Spark job of this run was still running after 60 s; the tables are committed, "
              "the process exits without it", file=sys.stderr, flush=True)


def _summary(writer: BatchWriter, t0: float, tables_dir: str, n_buckets: int, checkpoint: str, sink: str) -> dict:
    from .runinfo import finish_run_info
    tot = dict(writer.totals)
    el = time.perf_counter() - t0
    all_batches = finish_run_info(tables_dir)
    tot.update(seconds=round(el, 3), events_per_s=round(tot["input_rows"] / max(el, 1e-9)),
               partitions=all_batches["partitions"], tables=str(Path(tables_dir)), engine="spark",
               buckets=n_buckets, checkpoint=checkpoint, sink=sink)
    return tot


def _start_run(spark, stream, tables_dir, config, checkpoint, n_buckets, sink, progress):
    """The shared replay record (jobs/runinfo.py) + the sink + the foreachBatch writer."""
    from .runinfo import write_run_info
    app_id = fingerprint(config, checkpoint)
    sink = choose_sink(spark, sink)
    writer = BatchWriter(_make_sink(spark, tables_dir, app_id, sink, n_buckets), progress)
    write_run_info(tables_dir, stream, config, "spark", app_id, checkpoint=str(Path(checkpoint).resolve()),
                   buckets=n_buckets, sink=sink, master=spark.sparkContext.master)
    return writer, sink


def _guard(stream, tables_dir, config, checkpoint, overwrite: bool, default_ck: bool) -> None:
    from .runinfo import check_tables_dir
    ck = Path(checkpoint).resolve()
    inside = default_ck or Path(tables_dir).resolve() in ck.parents
    check_tables_dir(tables_dir, fingerprint(config, checkpoint), overwrite, () if inside else (ck,))


def replay_spark(stream: str, tables_dir: str, config: EngineConfig, *, checkpoint=None, max_files_per_trigger=None,
                 shuffle_partitions=None, master=None, n_buckets=None, progress=None, spark=None,
                 sink: str | None = None, overwrite: bool = False) -> dict:
    """Replays the whole stream (trigger availableNow) into Delta tables under tables_dir.
    A tables directory that holds another replay is refused unless overwrite (then cleared,
    with the checkpoint). Returns once no Spark job of the session runs any more (await_idle)."""
    from .spark_session import get_spark

    default_ck = checkpoint is None
    if default_ck:
        checkpoint = _default_checkpoint(stream, tables_dir, config)
    _guard(stream, tables_dir, config, checkpoint, overwrite, default_ck)
    n_buckets, key_shuffle = _meta_keys(checkpoint, n_buckets, stream, shuffle_partitions)
    spark = spark or get_spark(master, shuffle_partitions)
    _set_shuffle(spark, shuffle_partitions)
    if progress is None and os.environ.get("ISRFLOW_PROGRESS"):
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    writer, sink = _start_run(spark, stream, tables_dir, config, checkpoint, n_buckets, sink, progress)
    t0 = time.perf_counter()
    q = build_query(spark, stream, tables_dir, config, checkpoint, n_buckets, writer,
                    max_files_per_trigger=max_files_per_trigger, key_shuffle=key_shuffle)
    try:
        q.awaitTermination()
    except BaseException:
        q.stop()
        raise
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")
    _quiesce(spark, writer)
    return _summary(writer, t0, tables_dir, n_buckets, checkpoint, sink)


def run_spark(stream: str, tables_dir: str, config: EngineConfig, *, checkpoint, master=None,
              trigger_seconds: float = 5.0, max_files_per_trigger=None, shuffle_partitions=None, n_buckets=None,
              progress=None, spark=None, stop_event: threading.Event | None = None, sink: str | None = None,
              overwrite: bool = False) -> dict:
    """The continuous job: processing-time trigger, new files are picked up as they land;
    SIGINT/SIGTERM (or stop_event) stop it cleanly after the running micro-batch.
    overwrite: start afresh (the tables directory and the checkpoint are cleared)."""
    from .spark_session import get_spark

    _guard(stream, tables_dir, config, checkpoint, overwrite, False)
    n_buckets, key_shuffle = _meta_keys(checkpoint, n_buckets, stream, shuffle_partitions)
    spark = spark or get_spark(master, shuffle_partitions)
    _set_shuffle(spark, shuffle_partitions)
    if progress is None:
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    writer, sink = _start_run(spark, stream, tables_dir, config, checkpoint, n_buckets, sink, progress)
    stop = stop_event or threading.Event()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda *_: stop.set())
    t0 = time.perf_counter()
    q = build_query(spark, stream, tables_dir, config, checkpoint, n_buckets, writer,
                    max_files_per_trigger=max_files_per_trigger,
                    trigger={"processingTime": f"{max(float(trigger_seconds), 0.1)} seconds"},
                    key_shuffle=key_shuffle)
    progress(f"isrflow run: watching {stream} (checkpoint {checkpoint}); stop with Ctrl-C / SIGTERM")
    try:
        while not stop.is_set():
            if q.awaitTermination(0.5):
                break
        if q.isActive:
            # let the running micro-batch finish (its commit is idempotent anyway)
            deadline = time.time() + 120
            while q.isActive and q.status.get("isTriggerActive") and time.time() < deadline:
                time.sleep(0.2)
            with writer.lock:
                q.stop()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")
    _quiesce(spark, writer)
    progress("isrflow run: stopped")
    return _summary(writer, t0, tables_dir, n_buckets, checkpoint, sink)
