"""The versioned state encoding (it lives in Spark's state store)."""
import json
from pathlib import Path

import pytest

from protocol.codec import CodecError, decode, decode_cluster, encode, encode_cluster, partition_bytes
from protocol.config import EngineConfig
from tests.engine_util import canonical, rows, run_events
from tests.gen import random_schedule
from tests.streams import S

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


def _cluster_of(n_parts: int, n_events: int = 300, config: dict | None = None):
    events = random_schedule(3, n_events, partitions=n_parts, max_unclean=1)
    return run_events(events, config or {"min.insync.replicas": "2"}, finish=False)["_cluster"], events


def _row(cl, key, typ, broker, ts=None, **kw):
    from schemas.events import validate
    ev, why = validate({"seq": cl.last_seq + 1, "ts_ms": cl.max_ts if ts is None else ts, "type": typ,
                        "topic": key[0], "partition": key[1], "broker": broker, **kw})
    assert ev is not None, why
    return ev


def _produce(cl, key):
    return _row(cl, key, "Produce", cl.part(key).leader, acks=1, records=1)


def _led(cl):
    return [k for k in sorted(cl.partitions) if cl.partitions[k].leader >= 0]


def test_a_batch_decodes_and_reencodes_only_the_partitions_it_touches():
    from protocol.codec import decode as raw_decode
    cl, events = _cluster_of(8)
    cfg = EngineConfig({"min.insync.replicas": "2"})
    cl.finish()
    cl.drain()
    blob = encode_cluster(cl)
    again = decode_cluster(blob, cfg)
    assert again.partitions == {} and len(again.cold) == 8          # nothing decoded yet
    # one produce row for one partition, at the stream's time: only that partition is decoded
    key = _led(cl)[-1]
    ev = _produce(cl, key)
    again.apply(ev)
    again.finish(cl.max_ts)
    assert set(again.partitions) == {key}
    assert again.partition_state_rows(again.touched)[0]["partition"] == key[1]
    new = encode_cluster(again)
    old_parts, new_parts = raw_decode(blob)[1], raw_decode(new)[1]
    assert list(new_parts) == list(old_parts)                       # every partition still there, in key order
    assert [k for k in old_parts if old_parts[k] != new_parts[k]] == [key]   # the others' bytes as they came
    # and the cold path changes nothing: the same row on the whole cluster gives the same state
    cl.apply(ev)
    cl.finish(cl.max_ts)
    assert decode_cluster(new, cfg).partition_state_rows() == cl.partition_state_rows()


def test_a_due_timer_decodes_its_partition_and_fires_as_in_a_whole_cluster():
    # all brokers up, every ISR whole; no broker sessions (their expiry would reach every partition)
    conf = {"min.insync.replicas": "2", "broker.session.timeout.ms": "0"}
    cl, _ = _cluster_of(6, n_events=0, config=conf)
    cfg = EngineConfig(conf)
    cl.finish()
    cl.drain()
    key = _led(cl)[0]
    # at 20 s every other partition's followers fetch (caught up: their ISR check moves to 60 s); key's
    # followers never do, so its leader's ISR-expiration timer stays due at 45 s
    for k in sorted(cl.partitions):
        p = cl.partitions[k]
        for r in p.replicas:
            if k != key and r != p.leader:
                cl.apply(_row(cl, k, "Fetch", r, ts=20_000))
    cl.drain()
    blob = encode_cluster(cl)
    dues = {k: t for k, (t, _, _) in raw_cold(blob).items() if t is not None}
    assert key in dues
    lazy = decode_cluster(blob, cfg)
    assert lazy.next_due() == cl.next_due()
    ts = dues[key]
    lazy.finish(ts)
    cl.finish(ts)
    # exactly the partitions with a timer due by then were decoded; their rows equal the eager run's
    assert set(lazy.partitions) == {k for k, t in dues.items() if t <= ts}
    assert set(lazy.partitions) == {key}
    assert canonical(lazy.drain()) == canonical(cl.drain())
    assert lazy.partition_state_rows() == cl.partition_state_rows()


def raw_cold(blob):
    from protocol.codec import decode as raw_decode
    return raw_decode(blob)[1]


def test_version_2_blobs_of_whole_clusters_are_still_read():
    from protocol.codec import cluster_out
    cl, _ = _cluster_of(4)
    cfg = EngineConfig({"min.insync.replicas": "2"})
    old = encode(cluster_out(cl))          # the layout every checkpoint before version 3 holds
    assert old[2] == 2
    again = decode_cluster(old, cfg)
    assert len(again.cold) == 0 and sorted(again.partitions) == sorted(cl.partitions)
    assert again.partition_state_rows() == cl.partition_state_rows()
    assert decode_cluster(encode_cluster(again), cfg).partition_state_rows() == cl.partition_state_rows()


def test_a_truncated_or_damaged_blob_is_a_codec_error():
    from protocol.codec import cluster_out
    cl, _ = _cluster_of(3)
    cfg = EngineConfig({"min.insync.replicas": "2"})
    for blob in (encode_cluster(cl), encode(cluster_out(cl))):      # version 3, version 2
        for bad in (blob[:3], blob[:len(blob) // 2], blob[:3] + bytes(reversed(blob[3:]))):
            with pytest.raises(CodecError, match="truncated or corrupt"):
                decode_cluster(bad, cfg)
            with pytest.raises(CodecError, match="truncated or corrupt"):
                decode(bad)


# ---------------------------------------------------------------- the shared empty containers
def _shares_empties(p) -> list[str]:
    """The names of p's almost-always-empty containers that are the shared ones (messages.EMPTY)."""
    from protocol.messages import EMPTY, EMPTY_SET
    held = {"elr": p.elr, "last_known_elr": p.lke, "adding": p.adding, "removing": p.removing,
            "md_history": p.md_history, "ap_requests": p.ap_requests, "ap_responses": p.ap_responses,
            "consumed": p.inv.consumed, "changed": p.inv.changed, "reported": p.inv.reported,
            **{f"purgatory of {b}": r.purgatory for b, r in p.reps.items()}}
    return sorted(k for k, v in held.items() if v is EMPTY or v is EMPTY_SET)


def test_empty_containers_are_shared_and_grown_into_lists_of_their_own():
    """A new partition holds no empty list of its own (one shared EMPTY: ~12 objects fewer per
    partition); the first item gives the holder its own list, and the shared ones stay empty
    through a schedule that grows every kind (ELR, reassignment, explicit delivery, acks=all,
    consumer reads, violations) and through the state's round trip."""
    from protocol.messages import EMPTY, EMPTY_SET
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    out = run_events(s.events, finish=False)
    p = out["_cluster"].partitions[("t", 0)]
    assert _shares_empties(p) == ["adding", "ap_requests", "ap_responses", "changed", "consumed", "elr",
                                  "last_known_elr", "md_history", "purgatory of 1", "purgatory of 2",
                                  "purgatory of 3", "removing", "reported"]
    again = decode_cluster(encode_cluster(out["_cluster"]), EngineConfig())
    assert _shares_empties(again.all_partitions()[0]) == _shares_empties(p)   # (decoded when used)
    cfg = {"min.insync.replicas": "2", "eligible.leader.replicas.enable": "true",
           "delivery.metadata": "explicit", "delivery.alter_partition": "explicit"}
    grew = set()
    # seed 20 has a consumer read, seed 27 three violations (reported once each)
    for seed in (20, 27):
        events = random_schedule(seed, 1500, explicit_ap=True, explicit_md=True, max_unclean=3)
        cl = run_events(events, cfg, finish=False)["_cluster"]
        assert EMPTY == [] and EMPTY_SET == set()
        grew |= {k for p in cl.partitions.values() for k in ("elr", "md_history", "ap_requests", "consumed", "reported")
                 if k not in _shares_empties(p)}
        again = decode_cluster(encode_cluster(cl), EngineConfig(cfg))
        assert again.partition_state_rows() == cl.partition_state_rows()
        for key, p in again.partitions.items():
            # decoded: shared again where it was empty
            assert set(_shares_empties(cl.partitions[key])) <= set(_shares_empties(p)), key
    assert grew == {"elr", "md_history", "ap_requests", "consumed", "reported"}, grew


def test_growing_a_shared_empty_in_place_stops_the_batch():
    """The guard of the sharing: a handler that appended to the shared EMPTY (instead of
    messages.grown) would give every partition that item; the cluster's drain refuses to go on."""
    from protocol.messages import EMPTY, grown
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    cl = run_events(s.events, finish=False)["_cluster"]
    assert grown(EMPTY, 7) == [7] and EMPTY == []
    mine = [1]
    assert grown(mine, 2) is mine == [1, 2]
    EMPTY.append(7)
    try:
        with pytest.raises(AssertionError, match="grown in place"):
            cl.drain()
    finally:
        EMPTY.clear()
    assert cl.drain() is not None



def test_topics_replication_factors_are_kept_and_older_state_has_none():
    """Cluster.topic_rf travels in the cluster's head (its 12th field). State written before it
    existed has 11: it reads with no factor, and the topic's next creation that succeeds sets one."""
    from protocol.codec import cluster_in, cluster_out
    from schemas.events import validate
    s = S().up(1, 2)
    s.create([1, 2])
    u = S("u", 0)
    u.events = s.events
    u.create([1])
    cfg = EngineConfig({})
    cl = run_events(s.events, finish=False)["_cluster"]
    assert cl.topic_rf == {"t": 2, "u": 1}
    assert decode_cluster(encode_cluster(cl), cfg).topic_rf == {"t": 2, "u": 1}
    older = cluster_in(cfg, cluster_out(cl)[:11])
    assert older.topic_rf == {} and len(older.partitions) == 2
    older.apply(validate({"seq": 100, "ts_ms": 0, "type": "CreatePartition", "topic": "t", "partition": 1,
                          "replicas": [1]})[0])
    assert older.topic_rf == {"t": 1} and ("t", 1) in older.partitions
