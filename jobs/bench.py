"""`isrflow bench`: the same simulated streams through the in-process and the Spark engine.

For each cluster size it generates one standard stream (RF 3, a realistic produce / fetch /
consumer mix, ISR-expiration ticks), replays it with each engine in a fresh `isrflow replay`
process, and reports events/s (input rows / wall time of the whole replay, Delta writes
included), peak RSS of the process tree (driver, JVM, Python workers), the in-process core's
own events/s and state bytes per partition, the Spark/in-process ratio, and the real-time
factor (cluster time covered / wall time). Results go to JSON and a short table.
"""
from __future__ import annotations

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


def _tree_rss_kb(root_pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
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
        rss[int(d)] = pages * (os.sysconf("SC_PAGE_SIZE") // 1024)
    total = 0
    for pid in rss:
        p = pid
        while p and p != root_pid:
            p = parents.get(p, 0)
        if p == root_pid:
            total += rss[pid]
    return total


def run_measured(argv: list[str], env=None) -> dict:
    """Runs a command, sampling the peak RSS of its process tree every 100 ms."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            done.wait(0.1)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    res = {"returncode": proc.returncode, "wall_s": round(wall, 3), "peak_rss_mb": round(peak[0] / 1024, 1)}
    if proc.returncode == 0:
        try:
            res["summary"] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
    else:
        res["error"] = (err or out).strip().splitlines()[-3:]
    return res


def core_measure(stream: str, config_overrides: dict | None = None) -> dict:
    """The in-process core alone: rows already in memory, no Delta writes. Also state bytes."""
    from protocol.codec import partition_bytes
    from protocol.config import EngineConfig
    from jobs.local_engine import LocalEngine
    from jobs.streamio import iter_raw_rows

    t0 = time.perf_counter()
    rows = list(iter_raw_rows(stream))
    t1 = time.perf_counter()
    eng = LocalEngine(EngineConfig(config_overrides or {}))
    feed = eng.feed
    for raw, text, err in rows:
        feed(raw, text, err)
    eng.drain(True)
    t2 = time.perf_counter()
    parts = list(eng.cluster.partitions.values())
    sizes = [partition_bytes(p) for p in parts]
    return {"rows": len(rows), "read_s": round(t1 - t0, 3), "core_s": round(t2 - t1, 3),
            "core_events_per_s": round(len(rows) / max(t2 - t1, 1e-9)),
            "state_bytes_per_partition": round(sum(sizes) / max(len(sizes), 1)),
            "state_bytes_max": max(sizes) if sizes else 0}


def make_stream(out: str, partitions: int, events: int, seed: int = 1) -> dict:
    """A standard stream of about `events` rows over `partitions` partitions (RF 3)."""
    from jobs.simulate import simulate
    brokers = max(6, min(60, partitions // 50))
    probe = simulate(out, brokers=brokers, partitions=partitions, rf=3, duration_ms=20_000, seed=seed,
                     fmt="parquet", overwrite=True)
    per_ms = max(probe["rows"] - 3 * partitions, 1) / 20_000
    duration = int(max(20_000, (events - 2 * partitions) / per_ms))
    return simulate(out, brokers=brokers, partitions=partitions, rf=3, duration_ms=duration, seed=seed,
                    fmt="parquet", overwrite=True, rows_per_file=max(100_000, events // 10))


def bench(partition_counts=(1000, 10_000, 100_000), events: int = 1_000_000, engines=("local", "spark"),
          out_json: str | None = "bench.json", work: str | None = None, log=print) -> dict:
    isrflow = str(Path(sys.executable).parent / "isrflow")
    base = Path(work or tempfile.mkdtemp(prefix="isrflow-bench-"))
    results = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform(), "mem_gb": _mem_gb()},
               "events_target": events, "runs": []}
    for n in partition_counts:
        stream = str(base / f"stream-{n}")
        t0 = time.perf_counter()
        sim = make_stream(stream, n, events)
        gen_s = time.perf_counter() - t0
        span_ms = sim["duration_ms"]
        entry = {"partitions": n, "rows": sim["rows"], "cluster_time_s": span_ms / 1000,
                 "generate_s": round(gen_s, 2)}
        log(f"[bench] {n} partitions: {sim['rows']:,} rows over {span_ms / 1000:.0f} s of cluster time")
        if "local" in engines:
            entry["core"] = core_measure(stream)
            log(f"[bench]   core: {entry['core']['core_events_per_s']:,} events/s, "
                f"{entry['core']['state_bytes_per_partition']} state bytes/partition")
        for eng in engines:
            tables = base / f"tables-{n}-{eng}"
            shutil.rmtree(tables, ignore_errors=True)
            argv = [isrflow, "replay", stream, "--tables", str(tables), "--engine", eng]
            r = run_measured(argv)
            if r["returncode"] == 0:
                r["events_per_s"] = round(sim["rows"] / r["wall_s"])
                r["real_time_factor"] = round(span_ms / 1000 / r["wall_s"], 2)
                log(f"[bench]   {eng}: {r['events_per_s']:,} events/s, peak RSS {r['peak_rss_mb']} MB, "
                    f"{r['real_time_factor']}x real time")
            else:
                log(f"[bench]   {eng}: failed: {r.get('error')}")
            entry[eng] = r
            shutil.rmtree(tables, ignore_errors=True)
        if entry.get("local", {}).get("events_per_s") and entry.get("spark", {}).get("events_per_s"):
            entry["spark_over_local"] = round(entry["spark"]["events_per_s"] / entry["local"]["events_per_s"], 2)
        results["runs"].append(entry)
        shutil.rmtree(stream, ignore_errors=True)
    if not work:
        shutil.rmtree(base, ignore_errors=True)
    if out_json:
        Path(out_json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


def format_table(results: dict) -> str:
    hdr = ["partitions", "rows", "core ev/s", "local ev/s", "spark ev/s", "spark/local", "local RSS MB",
           "spark RSS MB", "state B/part", "RT factor (spark)"]
    lines = [" | ".join(hdr)]
    for e in results["runs"]:
        loc, spk, core = e.get("local", {}), e.get("spark", {}), e.get("core", {})
        lines.append(" | ".join(str(x) for x in [
            e["partitions"], e["rows"], core.get("core_events_per_s", "-"), loc.get("events_per_s", "-"),
            spk.get("events_per_s", "-"), e.get("spark_over_local", "-"), loc.get("peak_rss_mb", "-"),
            spk.get("peak_rss_mb", "-"), core.get("state_bytes_per_partition", "-"),
            spk.get("real_time_factor", "-")]))
    m = results["machine"]
    lines.append(f"machine: {m['cpus']} cpus, {m['mem_gb']} GiB, Python {m['python']}, {m['platform']}")
    return "\n".join(lines)


def _mem_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            return round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except OSError:
        return 0.0
