"""The Spark engine against the in-process engine: identical Delta tables row for row
(all tables but `progress`), for micro-batches of 1 file, 10 files and all files and for 1
and 8 shuffle partitions; input rows = applied + rejected. One shared Spark session."""
from __future__ import annotations

import pytest

from jobs.local_engine import replay_local
from protocol.config import EngineConfig
from tests.delta_compare import diff_tables, progress_totals
from tests.spark_streams import make_stream

pytestmark = pytest.mark.spark

# (seed, schedule options, files, [(max_files_per_trigger, shuffle partitions, buckets)])
MATRIX = [
    (11, {"partitions": 4, "topics": 2, "creations": True}, 12, [(None, 1, 16), (10, 8, 5), (1, 2, 3)]),
    (12, {"explicit_ap": True, "partitions": 3}, 5, [(1, 8, 4)]),
    (13, {"explicit_md": True, "partitions": 3}, 5, [(None, 8, 2), (10, 1, 16)]),
]


def _spark_replay(spark, stream, tables, cfg, ck, mf, sp, nb, sink=None):
    from jobs.spark_engine import replay_spark
    return replay_spark(str(stream), str(tables), cfg, checkpoint=str(ck), max_files_per_trigger=mf,
                        shuffle_partitions=sp, n_buckets=nb, spark=spark, sink=sink)


@pytest.mark.parametrize("seed,kw,n_files,runs", MATRIX)
def test_spark_equals_local(spark, tmp_path, seed, kw, n_files, runs):
    stream, n_rows = make_stream(tmp_path / "stream", seed, 350, n_files=n_files, **kw)
    cfg = EngineConfig({"isr.expiration.interval.ms": "5000"})
    ref = tmp_path / "local"
    s = replay_local(str(stream), str(ref), cfg)
    assert s["input_rows"] == n_rows == s["applied"] + s["rejected"]
    for i, (mf, sp, nb) in enumerate(runs):
        out = tmp_path / f"spark{i}"
        # the engine's layouts through the fast delta-rs sink; the first layout of the streams with
        # several layouts also through the default sink (native delta-spark when its JARs are
        # cached), which test_spark_native_sink compares with delta-rs on its own (the one-layout
        # stream, one file per batch, cost over a minute of the suite through the native sink)
        summ = _spark_replay(spark, stream, out, cfg, tmp_path / f"ck{i}", mf, sp, nb,
                             sink=None if i == 0 and len(runs) > 1 else "delta-rs")
        assert summ["input_rows"] == n_rows == summ["applied"] + summ["rejected"], summ
        assert (summ["applied"], summ["rejected"]) == (s["applied"], s["rejected"])
        tot = progress_totals(out)
        assert tot["input_rows"] == n_rows == tot["applied"] + tot["rejected"]
        assert diff_tables(ref, out) == {}, (mf, sp, nb)
        if mf:
            assert summ["batches"] >= -(-n_files // mf)


def test_spark_parquet_simulated_and_idempotent_rerun(spark, tmp_path):
    from jobs.simulate import simulate
    stream = tmp_path / "sim"
    simulate(str(stream), brokers=4, partitions=6, rf=3, duration_ms=90_000, seed=5, fmt="parquet",
             rows_per_file=1500, faults="crash:1@30s")
    cfg = EngineConfig({})
    ref = tmp_path / "local"
    s = replay_local(str(stream), str(ref), cfg)
    out = tmp_path / "spark"
    summ = _spark_replay(spark, stream, out, cfg, tmp_path / "ck", 2, None, None)
    assert summ["input_rows"] == s["input_rows"] == summ["applied"] + summ["rejected"]
    assert diff_tables(ref, out) == {}
    # the same replay again (same checkpoint): nothing new, nothing written twice
    again = _spark_replay(spark, stream, out, cfg, tmp_path / "ck", 2, None, None)
    assert again["input_rows"] == 0
    assert diff_tables(ref, out) == {}


def test_await_idle_waits_for_a_job_started_in_the_background(spark):
    """A replay returns only once its session runs no Spark job (spark_session.await_idle): a job
    another thread started, as the native sink's commits leave some running, is waited for."""
    import threading
    import time

    from jobs.spark_session import await_idle

    def slow(_):
        time.sleep(1.5)

    t = threading.Thread(target=lambda: spark.sparkContext.parallelize([1], 1).foreach(slow))
    t.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.time() + 60
    while not tracker.getActiveJobsIds() and time.time() < deadline:
        time.sleep(0.02)
    assert tracker.getActiveJobsIds(), "the background job never started"
    t0 = time.time()
    assert await_idle(spark, timeout=60)
    assert time.time() - t0 > 0.5
    assert not tracker.getActiveJobsIds()
    t.join(timeout=30)
    # and a bounded wait gives up on a job that outlasts it
    t = threading.Thread(target=lambda: spark.sparkContext.parallelize([1], 1).foreach(slow))
    t.start()
    while not tracker.getActiveJobsIds() and time.time() < deadline:
        time.sleep(0.02)
    assert await_idle(spark, timeout=0.3) is False
    t.join(timeout=30)


def test_spark_knows_every_topic(spark, tmp_path):
    """Topics created by CreatePartition and by PartitionRecord, changed before and after they exist
    (tests/test_topic_existence.py), through Spark itself (8 buckets, a file per micro-batch): the
    in-process engine's tables, one answer per topic-wide AlterConfig whichever bucket holds the topic."""
    from tests.spark_streams import write_jsonl
    from tests.test_topic_existence import _spread_stream
    stream = write_jsonl(_spread_stream(), tmp_path / "s", 3)
    cfg = EngineConfig({})
    replay_local(str(stream), str(tmp_path / "local"), cfg)
    _spark_replay(spark, stream, tmp_path / "spark", cfg, tmp_path / "ck", 1, 2, 8, sink="delta-rs")
    assert diff_tables(tmp_path / "local", tmp_path / "spark") == {}


def test_spark_equals_local_where_buckets_group(spark, tmp_path):
    """A bucket of GROUP_PARTITIONS partitions or more applies its runs of produce / fetch rows
    grouped by partition (jobs.spark_engine._feed_grouped; tests/test_windows.py checks the
    grouping and its rule in the bucket calls themselves): a real Spark replay of such a stream, in
    several micro-batches and with brokers crashing, gives the in-process engine's tables."""
    from jobs.simulate import simulate
    from jobs.spark_engine import GROUP_PARTITIONS
    stream = tmp_path / "big"
    simulate(str(stream), brokers=6, partitions=2_100, rf=3, duration_ms=8_000, seed=3, fmt="parquet",
             rows_per_file=40_000, faults="crash:2@2s+4s")
    assert 2_100 >= GROUP_PARTITIONS
    cfg = EngineConfig({})
    ref = tmp_path / "local"
    s = replay_local(str(stream), str(ref), cfg)
    out = tmp_path / "spark"
    summ = _spark_replay(spark, stream, out, cfg, tmp_path / "ck", 2, None, 1, sink="delta-rs")
    assert summ["batches"] >= 3
    assert (summ["input_rows"], summ["applied"], summ["rejected"]) == \
        (s["input_rows"], s["applied"], s["rejected"])
    assert diff_tables(ref, out) == {}
