"""Memory discipline of the Spark engine's bucket calls (jobs.spark_engine.process_bucket), run
without Spark: automatic GC off during the call with young collections on the in-process engine's
schedule (jobs.local_engine.YoungGC), and the bucket's Cluster freed by reference counting when the
call ends (Cluster.release), not left in cycles for a full collection. The tables themselves are
checked against the in-process engine by tests/test_spark_emulation.py."""
from __future__ import annotations

import gc
from collections import defaultdict

import pytest

from jobs import local_engine as le
from jobs import spark_engine as se
from jobs.spark_engine import process_bucket
from jobs.spark_source import run_scan
from jobs.streamio import iter_raw_rows, list_stream_files
from protocol.cluster import Cluster
from protocol.config import EngineConfig
from protocol.partition import Partition
from tests.spark_streams import make_stream


def _live_partitions() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, Partition))


def _chunks(stream, n_buckets: int) -> dict[int, list]:
    files = [(i, str(f)) for i, f in enumerate(list_stream_files(stream))]
    rows, _ = run_scan(files, (0, 0), n_buckets, chunk_rows=64)
    by_b: dict[int, list] = defaultdict(list)
    for r in rows:
        by_b[r[0]].append(r[1:2] + r[3:])
    return by_b


@pytest.fixture
def no_stray_partitions():
    gc.collect()
    assert _live_partitions() == 0
    yield


def test_a_released_cluster_leaves_nothing_for_the_cyclic_gc(tmp_path, no_stray_partitions):
    """Partitions point back at their cluster, so an unreleased cluster outlives its last name
    until a full collection walks it; a released one is freed at once."""
    stream, _ = make_stream(tmp_path / "s", 3, 300, n_files=2, bad=False, partitions=6, topics=2)
    cfg = EngineConfig({})
    was = gc.isenabled()
    gc.disable()
    try:
        for release in (False, True):
            eng = le.LocalEngine(cfg)
            for raw, text, err in iter_raw_rows(stream):
                eng.feed(raw, text, err)
            cl = eng.cluster
            n = len(cl.partitions)
            assert n >= 6
            if release:
                cl.release()
                assert not cl.partitions and not cl.by_broker and not cl.by_topic and not cl.cold
            del eng, cl
            assert _live_partitions() == (0 if release else n)
            gc.collect()
            assert _live_partitions() == 0
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("young_rows", [40, le._YOUNG_ROWS])
def test_a_bucket_call_frees_its_cluster_and_restores_automatic_gc(tmp_path, monkeypatch, no_stray_partitions,
                                                                   young_rows):
    """Freed whether or not young collections ran during the call (which move part of the cluster
    to the old generation, where the young collection at the call's end does not look)."""
    monkeypatch.setattr(le, "_YOUNG_ROWS", young_rows)
    monkeypatch.setattr(se, "_WORKER_YOUNG", [])
    stream, _ = make_stream(tmp_path / "s", 5, 400, n_files=3, partitions=8, topics=2)
    cfg = EngineConfig({})
    blobs: dict[int, bytes] = {}
    for b, chunks in sorted(_chunks(stream, 4).items()):
        assert gc.isenabled()
        tables, state, stats, blob, _ = process_bucket(b, 4, cfg, None, chunks, 0, False, str(stream))
        assert gc.isenabled()
        assert _live_partitions() == 0, "the bucket's partitions outlived its call"
        assert stats["applied"] + stats["rejected"] > 0
        blobs[b] = blob
    # a second call decodes the state and frees it again (a no-data timer batch)
    for b, blob in blobs.items():
        process_bucket(b, 4, cfg, blob, [], 10**12, True, str(stream))
        assert _live_partitions() == 0


def test_a_bucket_call_collects_the_young_generations_on_the_engines_schedule(tmp_path, monkeypatch):
    """With a young-collection interval of 40 items, a bucket call collects before item 40 and
    then on YoungGC's schedule (doubled while nothing is freed), and never with automatic GC on;
    the tables are those of a call with automatic GC on throughout."""
    stream, n = make_stream(tmp_path / "s", 7, 600, n_files=4, partitions=3, topics=1)
    cfg = EngineConfig({})
    chunks = _chunks(stream, 1)[0]
    ref = process_bucket(0, 1, cfg, None, chunks, 0, False, str(stream))

    rows_at: list[tuple[int, int, bool]] = []

    class Spy(le.YoungGC):
        __slots__ = ()

        def collect(self, row: int) -> int:
            rows_at.append((row, self.at, gc.isenabled()))
            return super().collect(row)

    monkeypatch.setattr(le, "_YOUNG_ROWS", 40)
    monkeypatch.setattr(le, "_SAMPLE_ROWS", 20)
    monkeypatch.setattr(le, "YoungGC", Spy)
    monkeypatch.setattr(se, "_WORKER_YOUNG", [])
    got = process_bucket(0, 1, cfg, None, chunks, 0, False, str(stream))
    assert rows_at, "no young collection in a call of 600 rows"
    assert rows_at[0][0] == 40
    assert all(row == at and not enabled for row, at, enabled in rows_at)
    assert len(rows_at) >= 3
    assert got[0] == ref[0] and got[2] == ref[2] and got[3] == ref[3]
    assert got[1].equals(ref[1])

    # the process's next call goes on on the same schedule: its rows continue the clock, and its
    # first collection is where the first call's schedule put it (not at its own row 40 again)
    young, clock = se._WORKER_YOUNG
    at = young.at
    assert clock == n and at > n and at != n + 40
    rows_at.clear()
    again = process_bucket(0, 1, cfg, None, chunks, 0, False, str(stream))
    assert [row for row, _at, _on in rows_at][:1] == ([at] if at <= 2 * n else [])
    assert se._WORKER_YOUNG[1] == 2 * n
    assert again[0] == ref[0] and again[1].equals(ref[1])


def test_a_released_cluster_is_empty():
    """A released cluster has no partition, hot or cold, and its router says so."""
    from schemas.events import validate
    cl = Cluster(EngineConfig({}))
    for row in ({"seq": 1, "ts_ms": 0, "type": "BrokerRegister", "broker": 1, "broker_epoch": 1,
                 "previous_broker_epoch": -1},
                {"seq": 2, "ts_ms": 1, "type": "BrokerUnfence", "broker": 1},
                {"seq": 3, "ts_ms": 2, "type": "CreatePartition", "topic": "t", "partition": 0, "replicas": [1]}):
        ev, why = validate(row)
        assert why is None, why
        cl.apply(ev)
    assert cl.has(("t", 0))
    cl.release()
    assert not cl.has(("t", 0)) and cl.part(("t", 0)) is None and cl.all_partitions() == []
