"""`isrflow bench` honours --events at every size: each stream has exactly that many rows (the
simulator runs long enough, the stream is cut), the core measurement and the replay see them
all, and the real count is reported. Small sizes, in-process engine only (one process, and 2 workers)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from jobs.bench import bench, core_measure, format_table, make_stream, run_measured
from jobs.streamio import list_stream_files


def test_bench_rows_equal_events_at_every_size(tmp_path):
    res = bench((20, 300), 4000, ("local", "local2"), out_json=str(tmp_path / "b.json"), work=str(tmp_path / "w"),
                log=lambda m: None)
    assert [e["partitions"] for e in res["runs"]] == [20, 300]
    for e in res["runs"]:
        assert e["rows"] == 4000
        assert e["core"]["rows"] == 4000
        assert e["local"]["returncode"] == 0, e["local"]
        assert e["local"]["summary"]["input_rows"] == 4000
        assert "input_rows_mismatch" not in e["local"]
        # the local engine with 2 workers replays the same rows
        assert e["local2"]["returncode"] == 0, e["local2"]
        assert e["local2"]["summary"]["input_rows"] == 4000 and e["local2"]["summary"]["workers"] == 2
        assert e["local2_over_local"] > 0
        assert e["cluster_time_s"] > 0
        assert e["bench_peak_rss_mb"] > 0
    assert json.loads((tmp_path / "b.json").read_text())["events_target"] == 4000
    table = format_table(res).splitlines()
    hdr = table[0].split(" | ")
    assert table[1].split(" | ")[hdr.index("local2 ev/s")] == str(res["runs"][0]["local2"]["events_per_s"])
    assert table[1].split(" | ")[hdr.index("local ev/s")] == str(res["runs"][0]["local"]["events_per_s"])
    assert table[1].split(" | ")[hdr.index("core ev/s compiled")] == "-"      # not asked for
    first = res["runs"][0]["core"]
    assert table[1].split(" | ")[hdr.index("reading rows/s")] == str(first["read_events_per_s"])
    assert table[1].split(" | ")[hdr.index("core ev/s validate() per row (pure / compiled)")] == \
        f"{first['validated_core_events_per_s']} / -"


def test_stream_cut_below_cluster_setup(tmp_path):
    # fewer events than the rows that create 500 partitions: the stream is that prefix
    out = tmp_path / "s"
    sim = make_stream(str(out), 500, 300)
    assert sim["rows"] == 300 <= sim["generated_rows"]
    files = list_stream_files(out)
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 300
    assert core_measure(str(out), chunk_rows=64)["rows"] == 300


def test_core_measure_streams_in_chunks(tmp_path):
    out = tmp_path / "s"
    sim = make_stream(str(out), 30, 2500)
    whole = core_measure(str(out), chunk_rows=10**9)
    chunked = core_measure(str(out), chunk_rows=100)
    assert whole["rows"] == chunked["rows"] == sim["rows"] == 2500
    assert whole["state_bytes_per_partition"] == chunked["state_bytes_per_partition"]
    # the engine's path (the reader's events) and the first measure (validate() per row)
    # both see every row; reading is timed apart
    assert whole["validated_rows"] == chunked["validated_rows"] == 2500
    for m in (whole, chunked):
        assert m["core_events_per_s"] > 0 and m["validated_core_events_per_s"] > 0 and m["read_events_per_s"] > 0
        assert m["read_and_core_events_per_s"] < min(m["core_events_per_s"], m["read_events_per_s"])
    assert core_measure(str(out), row_validation=False).keys().isdisjoint({"validated_rows", "validated_core_s"})


def test_small_batch_stream_keeps_every_row_in_order(tmp_path):
    from jobs.bench import split_small_batches
    src, dst = tmp_path / "s", tmp_path / "small"
    make_stream(str(src), 40, 3000)
    n = split_small_batches(str(src), str(dst), 200, 700, 3)
    files = list_stream_files(dst)
    assert n == 3 and len(files) == 4
    assert [pq.ParquetFile(f).metadata.num_rows for f in files] == [200, 700, 700, 700]
    seqs = [s for f in files for s in pq.read_table(f, columns=["seq"]).column("seq").to_pylist()]
    whole = [s for f in list_stream_files(src) for s in pq.read_table(f, columns=["seq"]).column("seq").to_pylist()]
    assert seqs == whole[:2300]


def test_batch_latency_times_each_small_batch_of_a_real_spark_replay(tmp_path):
    """One real Spark replay (delta-rs sink), one file per micro-batch: a latency per small batch,
    the set-up batch and the final no-data batch apart, the tables holding every row."""
    import sys
    from pathlib import Path

    from jobs.bench import batch_latency, split_small_batches
    from jobs.runinfo import table_totals
    src, dst = tmp_path / "s", tmp_path / "small"
    make_stream(str(src), 30, 1500)
    assert split_small_batches(str(src), str(dst), 300, 400, 3) == 3
    isrflow = str(Path(sys.executable).parent / "isrflow")
    r = batch_latency(isrflow, str(dst), str(tmp_path / "t"), "delta-rs")
    assert r["returncode"] == 0, r
    assert r["batches"] == 3                      # the three small files, not the set-up or the final batch
    assert 0 < r["median_s"] <= r["max_s"] < r["wall_s"]
    assert r["setup_batch_s"] > 0 and all(t > 0 for t in r["timer_only_batches"])
    assert table_totals(tmp_path / "t")["input_rows"] == 1500


def test_run_measured_names_the_processes_of_its_peak():
    """The peak RSS of a process tree, and which processes made it: here a Python child that
    holds 80 MB under a shell that waits for it."""
    import sys
    child = f"{sys.executable} -c 'import time; b = bytearray(80 << 20); b[::4096] = bytes(len(b) // 4096); time.sleep(1.0)'"
    r = run_measured(["sh", "-c", f"{child} & wait"])
    assert r["returncode"] == 0
    (name, mb), *rest = r["peak_rss_parts"]
    assert name.startswith("python") and "-c" in name and mb >= 80, r["peak_rss_parts"]
    assert any(n.startswith("sh") for n, _ in rest), r["peak_rss_parts"]
    assert r["peak_rss_mb"] >= sum(m for _, m in r["peak_rss_parts"]) - 0.5
