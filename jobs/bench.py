"""`isrflow bench`: the same simulated streams through the in-process and the Spark engine.

For each cluster size it generates one standard stream (RF 3, a realistic produce / fetch /
consumer mix, ISR-expiration ticks) of exactly `--events` rows (simulated long enough, then cut;
the real count is reported), replays it with each engine in a fresh `isrflow replay`
process, and reports events/s (input rows / wall time of the whole replay, Delta writes
included), peak RSS of the process tree (driver, JVM, Python workers), the in-process core's
own events/s and state bytes per partition, the Spark/in-process ratio, and the real-time
factor (cluster time covered / wall time). Results go to JSON and a short table. The bench
process itself streams the rows through the core measurement (one chunk in memory at a time).
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _tree_rss(root_pid: int) -> dict[int, int]:
    """Resident memory (KB) of a process and each of its descendants (Linux /proc): {pid: KB}."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/statm", "rb") as f:
                pages = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents[int(d)] = ppid
        rss[int(d)] = pages * page_kb
    out = {}
    for pid in rss:
        p = pid
        while p and p != root_pid:
            p = parents.get(p, 0)
        if p == root_pid:
            out[pid] = rss[pid]
    return out


def _process_label(pid: int) -> str:
    """A short name for a process of the tree: the JVM, isrflow's own process, or the module a
    Python process runs (pyspark.daemon's workers by their worker module)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "gone"
    if not args:
        return "gone"
    if os.path.basename(args[0]) == "java":
        return "java"
    mods = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-m"]
    if mods:
        return " ".join([mods[0]] + [a for a in args if a.startswith("pyspark.") and a != mods[0]][:1])
    return " ".join(os.path.basename(a) for a in args[:3])[:60]


def _peak_parts(tree: dict[int, int], top: int = 8) -> list:
    """The largest processes of a peak sample: [[label, MB], ...], largest first."""
    big = sorted(tree.items(), key=lambda kv: -kv[1])[:top]
    return [[_process_label(pid), round(kb / 1024, 1)] for pid, kb in big]


def run_measured(argv: list[str], env=None) -> dict:
    """Runs a command, sampling the peak RSS of its process tree every 100 ms."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    parts: list = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            tree = _tree_rss(proc.pid)
            total = sum(tree.values())
            if total > peak[0]:
                peak[0] = total
                parts[:] = _peak_parts(tree)     # which processes made the peak (labelled while they run)
            done.wait(0.1)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    res = {"returncode": proc.returncode, "wall_s": round(wall, 3), "peak_rss_mb": round(peak[0] / 1024, 1),
           "peak_rss_parts": parts}
    if proc.returncode == 0:
        try:
            res["summary"] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    else:
        res["error"] = (err or out).strip().splitlines()[-3:]
    return res


def core_measure(stream: str, config_overrides: dict | None = None, chunk_rows: int = 50_000,
                 row_validation: bool = True) -> dict:
    """The in-process core alone: the protocol on the rows as the local engine reads them (a plain
    row as its event, checked per Arrow batch by the reader: schemas.events.plain_rows; runs of
    produce / fetch / consumer rows in windows, grouped by partition: jobs.windows), no Delta
    writes. Reading (Parquet, the per-batch check, a window's sort, the events made) and feeding
    (the core) are timed apart (_core_loop); every `chunk_rows` rows the output rows are dropped,
    so memory holds one window and the cluster state, never the whole stream. Also state bytes per
    partition, and (row_validation) a second pass that reads raw rows and runs validate() on each
    in the timed part: the core as the speed issue first measured it (`validated_core_*`)."""
    from protocol.codec import partition_bytes
    from protocol.config import EngineConfig
    from jobs.local_engine import BATCH_ROWS, replay_gc
    from jobs.streamio import iter_raw_rows
    from jobs.windows import chunked, iter_stream_items

    cfg = EngineConfig(config_overrides or {})
    engine = _timed_engine_class()
    eng = engine(cfg)
    with replay_gc():                 # as `isrflow replay` runs its loop: windows cut at its batches
        n, read_s, core_s = _core_loop(eng, iter_stream_items(stream, BATCH_ROWS), chunk_rows)
    sizes = [partition_bytes(p) for p in eng.cluster.partitions.values()]
    out = {"rows": n, "read_s": round(read_s, 3), "core_s": round(core_s, 3),
           "core_events_per_s": round(n / max(core_s, 1e-9)),
           "read_events_per_s": round(n / max(read_s, 1e-9)),
           "read_and_core_events_per_s": round(n / max(read_s + core_s, 1e-9)),
           "state_bytes_per_partition": round(sum(sizes) / max(len(sizes), 1)),
           "state_bytes_max": max(sizes) if sizes else 0}
    if row_validation:
        del eng, sizes
        eng = engine(cfg)
        with replay_gc():
            n2, _, vcore_s = _core_loop(eng, chunked(iter_raw_rows(stream)), chunk_rows)
        out.update(validated_rows=n2, validated_core_s=round(vcore_s, 3),
                   validated_core_events_per_s=round(n2 / max(vcore_s, 1e-9)))
    return out


def _core_loop(eng, items, chunk_rows: int) -> tuple[int, float, float]:
    """core_measure's loop over the engine's items (jobs.windows): (rows, reading seconds, core
    seconds). Reading is taking an item (Parquet, the per-batch check, a window's Arrow), a
    window's sort and its events (TimedEngine); every chunk_rows rows the output rows are dropped
    (measured, not kept)."""
    from jobs.windows import Window
    drain = eng.cluster.drain
    n = since = 0
    read_s = core_s = 0.0
    it = iter(items)
    while True:
        t0 = time.perf_counter()
        item = next(it, None)
        t1 = time.perf_counter()
        if item is None:
            break
        eng.read_s = 0.0
        if item.__class__ is Window:
            eng.feed_window(item)
            k = item.n
        else:
            eng.feed_rows(item)
            k = len(item)
        n += k
        since += k
        if since >= chunk_rows:
            drain()
            since = 0
        t2 = time.perf_counter()
        read_s += t1 - t0 + eng.read_s
        core_s += t2 - t1 - eng.read_s
        del item
    t0 = time.perf_counter()
    eng.drain(True)                   # the final timers and partition_state rows
    core_s += time.perf_counter() - t0
    return n, read_s, core_s


def _timed_engine_class():
    from jobs.local_engine import LocalEngine

    class TimedEngine(LocalEngine):
        """LocalEngine that counts the making of a window's rows as reading (read_s)."""
        read_s = 0.0

        def window_rows(self, w, grouped):
            t0 = time.perf_counter()
            out = super().window_rows(w, grouped)
            self.read_s += time.perf_counter() - t0
            return out

        def chunks(self, rows):
            inner = super().chunks(rows)
            while True:
                t0 = time.perf_counter()
                chunk = next(inner, None)
                self.read_s += time.perf_counter() - t0
                if chunk is None:
                    return
                yield chunk
    return TimedEngine


# rows per partition per ms of cluster time at the simulator's defaults (RF 3: ~8 fetches,
# 2 produces, 0.2 consumer requests per partition per second); only a first guess, the stream
# is then cut to the exact row count
_ROWS_PER_PARTITION_MS = 10.4 / 1000


def make_stream(out: str, partitions: int, events: int, seed: int = 1) -> dict:
    """A standard stream (RF 3) of exactly `events` rows over `partitions` partitions: simulated
    for a cluster time long enough to give at least that many rows, then cut to its first
    `events` rows (a prefix of a stream is a stream). When `events` is below the rows that
    create the cluster, the stream is just that prefix. Returns the simulator's summary with the
    real `rows` and `duration_ms` (the last ts_ms kept)."""
    from jobs.simulate import simulate
    brokers = max(6, min(60, partitions // 50))
    setup = partitions + 2 * brokers + 1
    duration = max(1000, int((events - setup) / (partitions * _ROWS_PER_PARTITION_MS) * 1.1))
    rows_per_file = max(50_000, min(500_000, events // 10))
    for _ in range(5):
        sim = simulate(out, brokers=brokers, partitions=partitions, rf=3, duration_ms=duration, seed=seed,
                       fmt="parquet", overwrite=True, rows_per_file=rows_per_file)
        if sim["rows"] >= events:
            break
        duration = int(duration * max(events - setup, 1) / max(sim["rows"] - setup, 1) * 1.1) + 1000
    rows, last_ts = cut_stream(out, events)
    return {**sim, "rows": rows, "duration_ms": last_ts, "generated_rows": sim["rows"]}


def cut_stream(stream: str, n: int) -> tuple[int, int]:
    """Keeps the first `n` rows of a Parquet stream (files after the n-th row are deleted, the
    file holding it is rewritten up to it, batch by batch). Returns (rows kept, last ts_ms)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from jobs.streamio import list_stream_files

    kept = 0
    last_file = None
    for f in list_stream_files(stream):
        if kept >= n:
            f.unlink()
            continue
        pf = pq.ParquetFile(f)
        rows = pf.metadata.num_rows
        if kept + rows > n:
            want = n - kept
            tmp = f.with_name("_cut-" + f.name)
            with pq.ParquetWriter(tmp, pf.schema_arrow) as w:
                left = want
                for batch in pf.iter_batches(batch_size=65_536):
                    if left <= 0:
                        break
                    batch = batch.slice(0, left)
                    w.write_table(pa.Table.from_batches([batch], schema=pf.schema_arrow))
                    left -= batch.num_rows
            pf = None
            os.replace(tmp, f)
            rows = want
        kept += rows
        last_file = f
    last_ts = 0
    if last_file is not None:
        col = pq.read_table(last_file, columns=["ts_ms"]).column("ts_ms")
        last_ts = int(pc.max(col).as_py() or 0)
    manifest = Path(stream) / "_simulation.json"
    if manifest.exists():
        try:
            m = json.loads(manifest.read_text(encoding="utf-8"))
            m.update(rows=kept, last_ts_ms=last_ts, cut_to_rows=n,
                     files=[f.name for f in list_stream_files(stream)])
            manifest.write_text(json.dumps(m, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        except (OSError, ValueError):
            pass
    return kept, last_ts


# ---------------------------------------------------------------- small micro-batches
BATCH_ROWS = 1000       # rows per micro-batch of the `spark-batches` stage
BATCHES = 10            # how many such batches it times


def split_small_batches(stream: str, out: str, head: int, batch_rows: int, batches: int) -> int:
    """A copy of Parquet `stream` for timing small micro-batches: its first `head` rows in one file
    (the cluster's set-up: registrations and partition creations), then up to `batches` files of
    `batch_rows` rows each. Returns the number of small files."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from jobs.streamio import list_stream_files

    want = head + batch_rows * batches
    parts, got = [], 0
    for f in list_stream_files(stream):
        if got >= want:
            break
        t = pq.read_table(f)
        parts.append(t.slice(0, want - got))
        got += parts[-1].num_rows
    table = pa.concat_tables(parts) if parts else None
    dst = Path(out)
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    if table is None or table.num_rows <= head:
        raise ValueError(f"stream {stream} has no rows after its first {head}")
    pq.write_table(table.slice(0, head), dst / "part-00000.parquet")
    n = 0
    for start in range(head, table.num_rows, batch_rows):
        n += 1
        pq.write_table(table.slice(start, batch_rows), dst / f"part-{n:05d}.parquet")
    return n


def batch_latency(isrflow: str, stream: str, tables: str, sink: str | None = None) -> dict:
    """The Spark engine over `stream` one file per micro-batch (`replay --max-files-per-trigger 1
    --progress`): each batch's latency is the time between its progress line and the previous one
    (trigger, source, stateful operator, every table's commit), taken as the lines arrive. Batch 0
    (the set-up file) and the final no-data batch that fires the remaining timers are reported apart."""
    argv = [isrflow, "replay", stream, "--tables", tables, "--engine", "spark", "--max-files-per-trigger", "1",
            "--progress"] + (["--sink", sink] if sink else [])
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stamps: list[tuple[int, float]] = []      # (input rows, when its progress line came) per batch
    tail: list[str] = []
    for line in proc.stderr:
        if line.startswith("batch ") and " rows (" in line:     # "batch N: 1,000 rows (...)"
            stamps.append((int(line.split(": ", 1)[1].split()[0].replace(",", "")), time.perf_counter()))
        tail = (tail + [line.rstrip()])[-5:]
    out = proc.stdout.read()
    rc = proc.wait()
    res = {"returncode": rc, "wall_s": round(time.perf_counter() - t0, 3), "sink": sink or "default"}
    lat = [(rows, b - a) for (_, a), (rows, b) in zip(stamps, stamps[1:])]
    small = sorted(s for rows, s in lat if rows > 0)     # the small files' batches (no-data ones: timers)
    if rc != 0 or not small:
        res["error"] = tail[-3:] or out.strip().splitlines()[-3:]
        return res
    res.update(setup_batch_s=round(stamps[0][1] - t0, 2), batches=len(small),
               median_s=round(small[len(small) // 2], 3), max_s=round(small[-1], 3),
               timer_only_batches=[round(s, 3) for rows, s in lat if rows == 0])
    return res


def bench(partition_counts=(1000, 10_000, 100_000), events: int = 1_000_000, engines=("local", "spark"),
          out_json: str | None = "bench.json", work: str | None = None, log=print) -> dict:
    isrflow = str(Path(sys.executable).parent / "isrflow")
    base = Path(work or tempfile.mkdtemp(prefix="isrflow-bench-"))
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform(), "mem_gb": _mem_gb()},
               "events_target": events, "runs": []}
    if "import" in engines:     # metadata-log import + audit speed (jobs/metalog/bench_import.py)
        from jobs.metalog.bench_import import bench_import
        results["import"] = bench_import(events, log=log)
        engines = [e for e in engines if e != "import"]
        if not engines:         # `--engines import`: no replay streams to generate
            partition_counts = ()
    if "local-compiled" in engines and partition_counts:
        # the compiled core (jobs/compiled.py), built from this checkout's protocol/ if not yet
        from jobs import compiled
        log("[bench] compiled core: " + str(compiled.build(log=lambda m: log(f"[bench] {m}"))))
    with contextlib.ExitStack() as stack:
        kafka = None
        if "kafka" in engines and partition_counts:
            # the Spark engine reading the stream from a topic of a one-broker Kafka 4.4.0 on loopback
            # (jobs/lab/cluster.py), published first with `isrflow publish` (timed on its own)
            from jobs.lab.cluster import KafkaCluster
            kafka = stack.enter_context(KafkaCluster(base / "kafka", brokers=1))
            results["kafka"] = {"brokers": 1, "bootstrap_servers": kafka.bootstrap_servers}
        for n in partition_counts:
            results["runs"].append(_bench_stream(isrflow, base, n, events, engines, kafka, log))
    if not work:
        shutil.rmtree(base, ignore_errors=True)
    if out_json:
        Path(out_json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


def _compiled_env() -> dict:
    from jobs.compiled import ENV
    return dict(os.environ, **{ENV: "compiled"})


def _core_compiled(stream: str) -> dict:
    """core_measure in a process that runs the compiled core (the bench's own runs the pure one)."""
    code = "import json, sys, jobs; from jobs.bench import core_measure; print(json.dumps(core_measure(sys.argv[1])))"
    p = subprocess.run([sys.executable, "-c", code, stream], env=_compiled_env(), capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout)


def _replay_argv(isrflow: str, eng: str, stream: str, tables, kafka, topic: str) -> list[str]:
    if eng == "kafka":
        return [isrflow, "replay", "--source", "kafka", "--bootstrap-servers", kafka.bootstrap_servers,
                "--topic", topic, "--tables", str(tables), "--engine", "spark"]
    if eng == "local2":
        return [isrflow, "replay", stream, "--tables", str(tables), "--engine", "local", "--workers", "2"]
    if eng == "local-compiled":
        return [isrflow, "replay", stream, "--tables", str(tables), "--engine", "local"]
    return [isrflow, "replay", stream, "--tables", str(tables), "--engine", eng]


def _bench_stream(isrflow: str, base: Path, n: int, events: int, engines, kafka, log) -> dict:
    """One stream of `n` partitions: generated, the core measured, replayed by each engine."""
    stream = str(base / f"stream-{n}")
    t0 = time.perf_counter()
    sim = make_stream(stream, n, events)
    gen_s = time.perf_counter() - t0
    span_ms = sim["duration_ms"]
    entry = {"partitions": n, "rows": sim["rows"], "cluster_time_s": span_ms / 1000,
             "generate_s": round(gen_s, 2)}
    log(f"[bench] {n} partitions: {sim['rows']:,} rows (of {events:,} asked) over "
        f"{span_ms / 1000:.1f} s of cluster time")
    if "local" in engines or "local2" in engines:
        entry["core"] = core_measure(stream)
        c = entry["core"]
        log(f"[bench]   core: {c['core_events_per_s']:,} events/s ({c['validated_core_events_per_s']:,} with "
            f"validate() per row; reading {c['read_events_per_s']:,} rows/s), "
            f"{c['state_bytes_per_partition']} state bytes/partition")
    if "local-compiled" in engines:
        entry["core_compiled"] = c = _core_compiled(stream)
        log(f"[bench]   core, compiled: {c['core_events_per_s']:,} events/s ({c['validated_core_events_per_s']:,} "
            f"with validate() per row)" if "core_events_per_s" in c
            else f"[bench]   core, compiled: failed: {c['error']}")
    topic = f"isrflow-bench-{n}"
    if kafka is not None:
        pub = run_measured([isrflow, "publish", stream, "--bootstrap-servers", kafka.bootstrap_servers,
                            "--topic", topic])
        if pub["returncode"] == 0:
            pub["records_per_s"] = round(sim["rows"] / pub["wall_s"])
            log(f"[bench]   kafka publish: {pub['records_per_s']:,} records/s")
        entry["kafka_publish"] = pub
    for eng in [e for e in engines if e != "spark-batches"]:
        tables = base / f"tables-{n}-{eng}"
        shutil.rmtree(tables, ignore_errors=True)
        r = run_measured(_replay_argv(isrflow, eng, stream, tables, kafka, topic),
                         env=_compiled_env() if eng == "local-compiled" else None)
        if r["returncode"] == 0:
            got = (r.get("summary") or {}).get("input_rows")
            if got is not None and got != sim["rows"]:
                r["input_rows_mismatch"] = got
            r["events_per_s"] = round(sim["rows"] / r["wall_s"])
            r["real_time_factor"] = round(span_ms / 1000 / r["wall_s"], 2)
            log(f"[bench]   {eng}: {r['events_per_s']:,} events/s, peak RSS {r['peak_rss_mb']} MB, "
                f"{r['real_time_factor']}x real time")
            if len(r["peak_rss_parts"]) > 1:     # a process tree: which processes made its peak
                log("[bench]     peak RSS by process: " + ", ".join(f"{n} {mb:,.0f}" for n, mb in r["peak_rss_parts"][:5]))
        else:
            log(f"[bench]   {eng}: failed: {r.get('error')}")
        entry[eng] = r
        shutil.rmtree(tables, ignore_errors=True)
    if "spark-batches" in engines:
        small = str(base / f"stream-{n}-small")
        brokers = max(6, min(60, n // 50))
        head = min(sim["rows"] - 1, n + 2 * brokers + 1 + BATCH_ROWS)   # make_stream's set-up rows, and some
        entry["spark_batches"] = {"batch_rows": BATCH_ROWS,
                                  "files": split_small_batches(stream, small, head, BATCH_ROWS, BATCHES)}
        for sink in ("delta-rs", "delta-spark"):
            tables = base / f"tables-{n}-batches-{sink}"
            shutil.rmtree(tables, ignore_errors=True)
            r = batch_latency(isrflow, small, str(tables), sink)
            entry["spark_batches"][sink] = r
            log(f"[bench]   spark, {BATCH_ROWS:,}-row batches, {sink}: " + (
                f"median {r['median_s']} s, max {r['max_s']} s per batch" if "median_s" in r else
                f"failed: {r.get('error')}"))
            shutil.rmtree(tables, ignore_errors=True)
        shutil.rmtree(small, ignore_errors=True)
    if entry.get("core_compiled", {}).get("core_events_per_s") and entry.get("core"):
        entry["core_compiled_over_core"] = round(entry["core_compiled"]["core_events_per_s"]
                                                 / entry["core"]["core_events_per_s"], 2)
    for a, b in (("spark", "local"), ("kafka", "spark"), ("local2", "local"), ("spark", "local2"),
                 ("local-compiled", "local")):
        if entry.get(a, {}).get("events_per_s") and entry.get(b, {}).get("events_per_s"):
            entry[f"{a}_over_{b}"] = round(entry[a]["events_per_s"] / entry[b]["events_per_s"], 2)
    entry["bench_peak_rss_mb"] = _self_peak_rss_mb()
    shutil.rmtree(stream, ignore_errors=True)
    return entry


def format_table(results: dict) -> str:
    hdr = ["partitions", "rows", "core ev/s", "core ev/s compiled", "core ev/s validate() per row (pure / compiled)",
           "reading rows/s", "local ev/s", "local ev/s compiled",
           "local2 ev/s", "spark ev/s", "spark/local", "kafka ev/s",
           "kafka/spark", "local RSS MB", "spark RSS MB", "state B/part", "RT factor (spark)",
           "spark 1k-row batch s (delta-rs / delta-spark)", "bench RSS MB"]
    lines = [" | ".join(hdr)]
    for e in results["runs"]:
        loc, spk, core = e.get("local", {}), e.get("spark", {}), e.get("core", {})
        lines.append(" | ".join(str(x) for x in [
            e["partitions"], e["rows"], core.get("core_events_per_s", "-"),
            e.get("core_compiled", {}).get("core_events_per_s", "-"),
            f"{core.get('validated_core_events_per_s', '-')} / "
            f"{e.get('core_compiled', {}).get('validated_core_events_per_s', '-')}",
            core.get("read_events_per_s", "-"), loc.get("events_per_s", "-"),
            e.get("local-compiled", {}).get("events_per_s", "-"),
            e.get("local2", {}).get("events_per_s", "-"), spk.get("events_per_s", "-"), e.get("spark_over_local", "-"),
            e.get("kafka", {}).get("events_per_s", "-"), e.get("kafka_over_spark", "-"), loc.get("peak_rss_mb", "-"),
            spk.get("peak_rss_mb", "-"), core.get("state_bytes_per_partition", "-"),
            spk.get("real_time_factor", "-"), _batch_cell(e.get("spark_batches")), e.get("bench_peak_rss_mb", "-")]))
    imp = results.get("import")
    if imp:
        lines.append(f"import: {imp['records']:,} records, decode {imp['decode_records_per_s']:,} rec/s, whole import "
                     f"{imp.get('import_records_per_s', '-')} rec/s")
        a = imp.get("audit")
        if a:
            lines.append(f"audit: {a['wall_s']} s ({a['records_per_s']:,} rec/s; import {a['import_s']} s, replay "
                         f"{a['replay_s']} s, compare {a['compare_s']} s), {a['agree']:,}/{a['decisions']:,} "
                         f"decisions agree")
    m = results["machine"]
    lines.append(f"machine: {m['cpus']} cpus, {m['mem_gb']} GiB, Python {m['python']}, {m['platform']}")
    return "\n".join(lines)


def _batch_cell(sb: dict | None) -> str:
    if not sb:
        return "-"
    return " / ".join(str(sb.get(k, {}).get("median_s", "-")) for k in ("delta-rs", "delta-spark"))


def _self_peak_rss_mb() -> float:
    """Peak RSS of the bench process itself so far (not its replay subprocesses)."""
    import resource
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _mem_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            return round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except OSError:
        return 0.0
