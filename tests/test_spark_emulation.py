"""The Spark engine's data flow, emulated in-process (no Spark): reader scan with the
cross-batch carry, bucketed Clusters, watermark timeouts. Must equal the in-process engine
row for row for any bucket count and batch size. Fast, so it runs many schedules."""
from __future__ import annotations

import json

import pytest

from jobs.local_engine import LocalEngine
from jobs.spark_source import order_reject_reason
from jobs.streamio import iter_raw_rows
from protocol.cluster import Cluster
from protocol.config import EngineConfig
from tests.spark_streams import emulate_spark, make_stream


def local_rows(stream, cfg) -> dict:
    eng = LocalEngine(cfg)
    for raw, text, err in iter_raw_rows(stream):
        eng.feed(raw, text, err)
    tables, state = eng.drain(True)
    tables = dict(tables)
    tables["partition_state"] = state.to_pylist()
    tables["_stats"] = {"n_in": eng.input_rows, "applied": eng.cluster.applied, "rejected": eng.cluster.rejected}
    return tables


def canon(out: dict) -> dict:
    return {k: sorted(json.dumps(r, sort_keys=True, default=str) for r in v)
            for k, v in out.items() if not k.startswith("_") and v}


CASES = [(seed, kw) for seed in range(1, 7)
         for kw in ({}, {"explicit_ap": True}, {"explicit_md": True}, {"creations": True})]


@pytest.mark.parametrize("seed,kw", CASES)
def test_emulated_spark_equals_local(tmp_path, seed, kw):
    stream, n_rows = make_stream(tmp_path / "s", seed, 500, n_files=7, partitions=5, topics=2, **kw)
    cfg = EngineConfig({"isr.expiration.interval.ms": "5000"} if seed % 2 else {})
    ref = local_rows(stream, cfg)
    assert ref["_stats"]["n_in"] == n_rows
    assert ref["_stats"]["n_in"] == ref["_stats"]["applied"] + ref["_stats"]["rejected"]
    for n_buckets, fpb in ((1, None), (4, 1), (7, 3)):
        got = emulate_spark(stream, cfg, n_buckets, fpb)
        assert canon(got) == canon(ref), (n_buckets, fpb)
        assert got["_stats"] == {**ref["_stats"]}, (n_buckets, fpb)


def test_order_reject_reason_matches_core():
    """The core and the Spark source drop out-of-order rows with the same, hand-written reasons."""
    cfg = EngineConfig({})
    want = {
        5: "Tick row seq 5: seq 5 is not after the last applied seq 5 (duplicate or out of order); dropped",
        3: "Tick row seq 3: seq 3 is not after the last applied seq 5 (duplicate or out of order); dropped",
        6: ("Tick row seq 6: ts_ms 9 goes back before the stream's time 10 (ts_ms must not decrease with seq); "
            "dropped"),
    }
    for last, mx, ev in ((5, 10, {"seq": 5, "ts_ms": 20}), (5, 10, {"seq": 3, "ts_ms": 20}),
                         (5, 10, {"seq": 6, "ts_ms": 9})):
        cl = Cluster(cfg)
        cl.last_seq, cl.max_ts = last, mx
        full = {"type": "Tick", "broker": None, **ev}
        cl.apply(full)
        core = cl.drain()["rejected"][0]["reason"]
        assert core == want[ev["seq"]]
        assert order_reject_reason("Tick", ev["seq"], ev["ts_ms"], last, mx) == want[ev["seq"]]
    assert order_reject_reason("Tick", 6, 10, 5, 10) is None


def test_other_buckets_creations_come_as_notes_read_only_while_their_topic_has_no_factor(tmp_path):
    """The source gives every bucket but its own each CreatePartition as a note, consecutive notes in one
    NOTES item (jobs.spark_source._note_creation); a bucket reads them as Foreign rows with their creation
    only while a topic in the item has no replication factor there (noted_creations)."""
    from jobs.spark_source import NOTES, noted_creations, run_scan, unpack
    from jobs.streamio import list_stream_files
    from protocol.cluster import Foreign
    stream, _ = make_stream(tmp_path / "s", 3, 300, n_files=2, partitions=5, topics=2, bad=False, creations=True)
    creations = {}
    for ev in (json.loads(line) for f in list_stream_files(stream) for line in f.read_text().splitlines()):
        if ev["type"] == "CreatePartition":
            creations[ev["seq"]] = (ev["topic"], ev["replicas"], None, "CreatePartition")
    rows, _ = run_scan([(i, str(f)) for i, f in enumerate(list_stream_files(stream))], (0, 0), 4, chunk_rows=40)
    groups = [it for r in rows for it in unpack(r[6]) if it[0] == NOTES]
    assert len(groups) > 10
    noted = [f for g in groups for f in noted_creations(g, {})]
    assert all(type(f) is Foreign and creations[f.seq] == f.creation for f in noted)
    assert len(noted) == 3 * len(creations)                     # each creation to the 3 other buckets
    assert all(noted_creations(g, {t: 3 for t in g[1]}) == [] for g in groups)
    assert any(len(g[1]) == 2 and noted_creations(g, {sorted(g[1])[0]: 3}) for g in groups)
