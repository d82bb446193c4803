"""The versioned state encoding (it lives in Spark's state store)."""
import json
from pathlib import Path

import pytest

from protocol.codec import CodecError, decode, decode_cluster, encode, encode_cluster, partition_bytes
from protocol.config import EngineConfig
from tests.engine_util import canonical, rows, run_events
from tests.gen import random_schedule

SCEN = Path(__file__).resolve().parent / "scenarios"


def test_roundtrip_preserves_the_whole_cluster():
    events = random_schedule(11, 400, explicit_ap=True, explicit_md=True, max_unclean=2)
    out = run_events(events, {"min.insync.replicas": "2"}, finish=False)
    cl = out["_cluster"]
    cfg = EngineConfig({"min.insync.replicas": "2"})
    blob = encode_cluster(cl)
    again = decode_cluster(blob, cfg)
    assert encode_cluster(again) == blob
    assert again.partition_state_rows() == cl.partition_state_rows()


def test_unknown_version_and_garbage_are_refused():
    blob = encode((1, 2, 3))
    assert decode(blob) == (1, 2, 3)
    with pytest.raises(CodecError, match="version 9"):
        decode(blob[:2] + bytes([9]) + blob[3:])
    with pytest.raises(CodecError):
        decode(b"nope")


def test_state_is_compact():
    events = random_schedule(5, 2000, partitions=3, max_unclean=1)
    cl = run_events(events, {"min.insync.replicas": "2"})["_cluster"]
    sizes = [partition_bytes(p) for p in cl.partitions.values()]
    assert max(sizes) < 4096, sizes


def test_snapshot_load_works_with_immediate_metadata():
    sc = json.loads((SCEN / "snapshot-replay-divergence.json").read_text())
    events = [e for e in sc["events"] if e["type"] != "MetadataSync"]
    out = run_events(events)
    r = rows(out, "fetch", result="DIVERGING_EPOCH")
    assert [(x["diverging_epoch"], x["diverging_end_offset"], x["truncated_to"]) for x in r] == [(5, 130, 130)]
    assert out["partition_state"][0]["leader_leso"] == 130
    assert not out.get("violations")
