"""The Spark Structured Streaming engine (`--engine spark`).

Plan of one query (see jobs/spark_source.py for the reader):

    isrflow stream source (name order, one task per file, in parallel: parse, validate, the
    global seq/ts_ms order check, routing; packed rows per (bucket, chunk))
      -> withWatermark(et, 1 ms)               # watermark == stream time after earlier batches
      -> groupBy(bucket).applyInPandasWithState(bucket_fn, "table string, data binary",
                                                "blob binary", Update, EventTimeTimeout)
      -> foreachBatch(BatchWriter)              # one collect(); Delta commit per batch id

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
from .spark_source import APPLY, FORMAT, IsrflowSource

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


def _ipc(tbl: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue().to_pybytes()


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
    (tables {name: rows}, partition_state rows, stats dict, new blob, next timeout or None)."""
    from protocol.cluster import Cluster
    from protocol.codec import decode_cluster, encode_cluster
    from schemas.events import EVENT_COLUMNS
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
    cols = EVENT_COLUMNS
    if not timed_out:
        for pos, nin, lo, hi, payload in sorted(chunks, key=lambda c: c[0]):
            n_in += int(nin or 0)
            lo, hi = _int_or_none(lo), _int_or_none(hi)
            if lo is not None and (mn is None or lo < mn):
                mn = lo
            if hi is not None and (mx is None or hi > mx):
                mx = hi
            apply = cl.apply
            for item in unpack(payload):
                if item[0] != APPLY:
                    pre_rejected.append(item[1])
                    continue
                tabs = cl.out.tables
                before = len(tabs["rejected"]) if "rejected" in tabs else 0
                apply(dict(zip(cols, item[1])))
                rows = cl.out.tables.get("rejected")
                if rows is not None and len(rows) > before and rows[-1]["raw"] is None:
                    need_raw.append((rows[-1], item[2]))   # a rejection emitted here: attach the raw row
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
    state_rows = cl.partition_state_rows(cl.touched)
    cl.touched = set()
    stats = {"n_in": n_in, "applied": cl.applied - applied0, "rejected": len(tables.get("rejected", ())),
             "min_seq": mn, "max_seq": mx, "max_ts": cl.max_ts}
    nd = cl.next_due()
    timeout = None
    if nd is not None:
        timeout = max(nd - 1, watermark, 1)
    return tables, state_rows, stats, encode_cluster(cl), timeout


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
        blob = state.get[0] if state.exists else None
        tables, state_rows, stats, new_blob, timeout = process_bucket(
            bucket, n_buckets, cfg, blob, chunks, wm, state.hasTimedOut, stream)
        state.update((new_blob,))
        if timeout is not None:
            state.setTimeoutTimestamp(timeout)
        names, datas = [], []
        for name, rows in tables.items():
            if rows:
                names.append(name)
                datas.append(_ipc(rows_to_arrow(name, rows)))
        if state_rows:
            names.append("partition_state")
            datas.append(_ipc(rows_to_arrow("partition_state", state_rows)))
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
    from .streamio import list_stream_files
    h = hashlib.sha1()
    h.update(str(Path(stream).resolve()).encode())
    h.update(json.dumps(sorted(config.raw.items())).encode())
    for f in list_stream_files(stream):
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
    p.write_text(json.dumps({"n_buckets": n, "stream": str(Path(stream).resolve()), "key_shuffle": ks}))
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


class BatchWriter:
    """foreachBatch: one collect() of the operator's output, one Delta commit per table."""

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

    def _batch(self, df, batch_id: int) -> None:
        rows = df.collect()                      # the one action on the batch DataFrame
        per: dict[str, list] = defaultdict(list)
        st = {"n_in": 0, "applied": 0, "rejected": 0, "min_seq": None, "max_seq": None, "max_ts": 0}
        for r in rows:
            name, data = r["table"], r["data"]
            if name == "_stats":
                s = json.loads(bytes(data))
                for k in ("n_in", "applied", "rejected"):
                    st[k] += s[k]
                st["max_ts"] = max(st["max_ts"], s["max_ts"])
                if s["min_seq"] is not None and (st["min_seq"] is None or s["min_seq"] < st["min_seq"]):
                    st["min_seq"] = s["min_seq"]
                if s["max_seq"] is not None and (st["max_seq"] is None or s["max_seq"] > st["max_seq"]):
                    st["max_seq"] = s["max_seq"]
            else:
                per[name].append(pa.ipc.open_stream(pa.py_buffer(bytes(data))).read_all())
        tables = {}
        for name, parts in per.items():
            t = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
            keys = [(k, "ascending") for k in SORT_KEYS if k in t.column_names]
            tables[name] = t.sort_by(keys) if keys else t
        state = tables.pop("partition_state", None)
        state_rows = state.to_pylist() if state is not None else []
        if st["max_seq"] is not None:
            self.max_seq = st["max_seq"] if self.max_seq is None else max(self.max_seq, st["max_seq"])
        self.max_ts = max(self.max_ts, st["max_ts"])
        tables["progress"] = [{"batch_id": batch_id, "engine": "spark", "input_rows": st["n_in"],
                               "applied": st["applied"], "rejected": st["rejected"], "min_seq": st["min_seq"],
                               "max_seq": st["max_seq"], "max_ts_ms": self.max_ts}]
        _kill_hook(batch_id, "before")
        if os.environ.get("ISRFLOW_TEST_KILL", "").endswith(":mid"):
            first = {k: v for k, v in tables.items() if k != "progress"}
            names = sorted(first)[: max(1, len(first) // 2)]
            self.sink.commit(batch_id, {k: first[k] for k in names})
            _kill_hook(batch_id, "mid")
        self.sink.commit(batch_id, tables, state_rows)
        _kill_hook(batch_id, "after")
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


def _make_sink(spark, tables_dir: str, app_id: str):
    from .delta_sink import DeltaSink
    from .spark_session import has_delta_jars
    choice = os.environ.get("ISRFLOW_SINK", "auto")
    if choice == "delta-spark" or (choice == "auto" and has_delta_jars(spark)):
        return SparkDeltaSink(spark, tables_dir, app_id)
    return DeltaSink(tables_dir, app_id=app_id)


class SparkDeltaSink:
    """NATIVE delta-spark sink, used only where the delta-spark JARs are on the classpath
    (ISRFLOW_SINK=auto detects them; never required). UNTESTED HERE: no Maven repository is
    reachable on the development machines, so the JARs could not be installed. Same tables
    and the same exactly-once rule as DeltaSink: Delta's own idempotent writes
    (txnAppId = app id, txnVersion = batch id), partition_state rewritten in full."""

    def __init__(self, spark, tables_dir: str, app_id: str):
        from .delta_sink import DeltaSink
        self.spark = spark
        self.base = DeltaSink(tables_dir, app_id=app_id)   # creates the tables, loads partition_state
        self.app_id = app_id

    def _write(self, name, tbl: pa.Table, batch_id: int, mode: str) -> None:
        from schemas.tables import spark_schema
        df = self.spark.createDataFrame(tbl.to_pandas(), schema=spark_schema(name))
        (df.write.format("delta").option("txnAppId", self.app_id).option("txnVersion", batch_id)
         .mode(mode).save(self.base.table_path(name)))

    def commit(self, batch_id, rows_by_table, partition_state=None):
        from schemas.tables import TABLES
        for name in [n for n in TABLES if n in rows_by_table and n != "progress"] + ["progress"]:
            if name not in rows_by_table:
                continue
            t = self.base._to_arrow(name, rows_by_table[name])
            if t.num_rows:
                self._write(name, t, batch_id, "append")
        if partition_state:
            for r in partition_state:
                self.base._state[(r["topic"], r["partition"])] = r
            ordered = [self.base._state[k] for k in sorted(self.base._state)]
            self._write("partition_state", self.base._to_arrow("partition_state", ordered), batch_id, "overwrite")

    @property
    def partition_state(self):
        return self.base.partition_state


def _set_shuffle(spark, shuffle_partitions) -> None:
    """Shuffle partitions = state store partitions; only a new checkpoint takes the value."""
    from conf import spark_defaults
    n = shuffle_partitions or spark_defaults().get("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.shuffle.partitions", str(int(n)))


def build_query(spark, stream: str, tables_dir: str, config: EngineConfig, checkpoint: str, n_buckets: int,
                writer: BatchWriter, *, max_files_per_trigger=None, trigger=None, key_shuffle: int = 0):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    try:
        spark.dataSource.register(IsrflowSource)
    except Exception:
        pass
    reader = (spark.readStream.format(FORMAT)
              .option("path", str(Path(stream).resolve()))
              .option("carry_dir", str(Path(checkpoint).resolve() / "isrflow_carry"))
              .option("n_buckets", str(n_buckets))
              .option("key_shuffle", str(int(key_shuffle))))
    if max_files_per_trigger:
        reader = reader.option("max_files_per_trigger", str(int(max_files_per_trigger)))
    src = reader.load()
    df = (src.withColumn("et", F.timestamp_millis("et_ms"))
          .withWatermark("et", "1 millisecond")
          .select("bucket", "pos", "n_in", "min_seq", "max_seq", "payload", "et"))
    out = df.groupBy("bucket").applyInPandasWithState(
        make_bucket_fn(dict(config.raw), n_buckets, str(Path(stream).resolve())), OUT_SCHEMA, STATE_SCHEMA, "Update",
        GroupStateTimeout.EventTimeTimeout)
    w = (out.writeStream.foreachBatch(writer).outputMode("update")
         .option("checkpointLocation", str(Path(checkpoint).resolve() / "spark")))
    w = w.trigger(**(trigger or {"availableNow": True}))
    return w.queryName(f"isrflow-{Path(checkpoint).name}").start()


def _summary(writer: BatchWriter, t0: float, tables_dir: str, n_buckets: int, checkpoint: str) -> dict:
    tot = dict(writer.totals)
    el = time.perf_counter() - t0
    tot.update(seconds=round(el, 3), events_per_s=round(tot["input_rows"] / max(el, 1e-9)),
               partitions=len(writer.sink.partition_state), tables=str(Path(tables_dir)), engine="spark",
               buckets=n_buckets, checkpoint=checkpoint)
    return tot


def replay_spark(stream: str, tables_dir: str, config: EngineConfig, *, checkpoint=None, max_files_per_trigger=None,
                 shuffle_partitions=None, master=None, n_buckets=None, progress=None, spark=None) -> dict:
    """Replays the whole stream (trigger availableNow) into Delta tables under tables_dir."""
    from .spark_session import get_spark

    if checkpoint is None:
        checkpoint = _default_checkpoint(stream, tables_dir, config)
    n_buckets, key_shuffle = _meta_keys(checkpoint, n_buckets, stream, shuffle_partitions)
    spark = spark or get_spark(master, shuffle_partitions)
    _set_shuffle(spark, shuffle_partitions)
    if progress is None and os.environ.get("ISRFLOW_PROGRESS"):
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    sink = _make_sink(spark, tables_dir, fingerprint(config, checkpoint))
    writer = BatchWriter(sink, progress)
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
    return _summary(writer, t0, tables_dir, n_buckets, checkpoint)


def run_spark(stream: str, tables_dir: str, config: EngineConfig, *, checkpoint, master=None,
              trigger_seconds: float = 5.0, max_files_per_trigger=None, shuffle_partitions=None, n_buckets=None,
              progress=None, spark=None, stop_event: threading.Event | None = None) -> dict:
    """The continuous job: processing-time trigger, new files are picked up as they land;
    SIGINT/SIGTERM (or stop_event) stop it cleanly after the running micro-batch."""
    from .spark_session import get_spark

    n_buckets, key_shuffle = _meta_keys(checkpoint, n_buckets, stream, shuffle_partitions)
    spark = spark or get_spark(master, shuffle_partitions)
    _set_shuffle(spark, shuffle_partitions)
    if progress is None:
        progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    sink = _make_sink(spark, tables_dir, fingerprint(config, checkpoint))
    writer = BatchWriter(sink, progress)
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
    progress("isrflow run: stopped")
    return _summary(writer, t0, tables_dir, n_buckets, checkpoint)
