"""Which topics exist, in every layout of a replay. Kafka 4.4.0's controller answers a topic's
IncrementalAlterConfigs with UNKNOWN_TOPIC_OR_PARTITION "The topic 'T' does not exist." when no
CreateTopics made it (ConfigurationControlManager#validateAlterConfig: the configs are checked
first). A topic exists in isrflow from its first partition's CreatePartition or PartitionRecord
(the first one's config is the topic's, as CreateTopics' request configs are), and every cluster
of a replay -- a Spark bucket, a worker of a parallel replay -- learns of it from the other
clusters' creations (Cluster.note_creation), so the one that answers topic-wide requests answers
as one process does."""
from __future__ import annotations

import pytest

from protocol.config import EngineConfig
from tests.engine_util import rows, run_events
from tests.spark_streams import emulate_spark, write_jsonl
from tests.test_local_workers import _assert_same
from tests.test_spark_emulation import canon, local_rows

BROKERS = [
    *({"type": "BrokerRegister", "broker": b, "broker_epoch": 100 + b, "previous_broker_epoch": -1} for b in (1, 2, 3)),
    *({"type": "BrokerUnfence", "broker": b} for b in (1, 2, 3)),
]


def _stream(evs: list[dict], start_ts: int = 0) -> list[dict]:
    return [{"seq": i, "ts_ms": start_ts + i, **e} for i, e in enumerate(BROKERS + evs, 1)]


def _record(topic, part, config=None, elr=()):
    """A snapshot's PartitionRecord: replicas 1-3, leader 1, ISR without the ELR's brokers."""
    isr = [b for b in (1, 2, 3) if b not in elr]
    row = {"type": "PartitionRecord", "topic": topic, "partition": part, "replicas": [1, 2, 3], "isr": isr,
           "elr": list(elr), "last_known_elr": [], "leader": isr[0], "leader_epoch": 4, "partition_epoch": 7}
    if config is not None:
        row["config"] = config
    return row


def _answers(out, typ="AlterConfig") -> list[tuple]:
    return [(r["seq"], r["result"], r["detail"]) for r in rows(out, "admin", type=typ)]


def test_alter_config_of_a_topic_never_created_is_unknown():
    evs = _stream([
        {"type": "AlterConfig", "topic": "t", "config": {"min.insync.replicas": "2"}},
        {"type": "AlterConfig", "topic": "t", "config": {"min.insync.replicas": "0"}},     # checked first
        {"type": "AlterConfig", "topic": "t", "partition": 0, "config": {"min.insync.replicas": "2"}},
        {"type": "CreatePartition", "topic": "t", "partition": 0, "replicas": [1, 2, 3]},
        {"type": "AlterConfig", "topic": "t", "config": {"retention.ms": "1000"}},
    ])
    out = run_events(evs)
    assert _answers(out) == [
        (7, "UNKNOWN_TOPIC_OR_PARTITION", "The topic 't' does not exist."),
        (8, "INVALID_CONFIG", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        (9, "UNKNOWN_TOPIC_OR_PARTITION", "No such partition as t-0"),
        (11, "NONE", None),
    ]
    # the refused change left nothing behind: the topic's config is its creation's and the accepted change
    assert out["_cluster"].topic_cfg["t"] == {"retention.ms": "1000"}
    assert out["_cluster"].part(("t", 0)).eff_min_isr() == 1


def test_a_recorded_topic_exists_with_its_first_records_config():
    """A PartitionRecord creates its topic as a CreatePartition does: the first one's config is the
    topic's (later partitions take it), its replica count the topic's replication factor (a later
    CreatePartition with another count is refused, as Kafka's CreatePartitions is); an invalid
    recorded config is a rejected row, and then creates nothing."""
    evs = _stream([
        _record("s", 0, {"min.insync.replicas": "3"}, elr=[3]),
        _record("s", 1),
        _record("u", 0, {"min.insync.replicas": "many"}),
        {"type": "AlterConfig", "topic": "u", "config": {}},
        {"type": "CreatePartition", "topic": "s", "partition": 2, "replicas": [1, 2]},
        {"type": "AlterConfig", "topic": "s", "config": {"retention.ms": "5"}},
        {"type": "AlterConfig", "topic": "s", "config": {"min.insync.replicas": "2"}},
    ])
    out = run_events(evs)
    cl = out["_cluster"]
    assert cl.topic_cfg["s"]["min.insync.replicas"] == "2" and cl.part(("s", 1)).config == {}
    assert [r["seq"] for r in out["rejected"]] == [9]
    assert "min.insync.replicas" in out["rejected"][0]["reason"]
    assert cl.part(("u", 0)) is None and "u" not in cl.topic_rf
    assert _answers(out) == [(10, "UNKNOWN_TOPIC_OR_PARTITION", "The topic 'u' does not exist."),
                             (12, "NONE", None), (13, "NONE", None)]
    assert _answers(out, "CreatePartition") == [
        (11, "INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes a partition with 2 "
         "replica(s), but this is not consistent with previous partitions, which have 3 replica(s).")]
    # the loaded ELR stays (the first record's min ISR is the topic's from the start, nothing changed
    # it), and the later change of min.insync.replicas clears it (CLEAR_ELR_RECORD)
    clears = rows(out, "metadata_log", cause="ClearElr")
    assert [(r["seq"], r["partition"], r["elr"]) for r in clears] == [(13, 0, [])]


def _spread_stream() -> list[dict]:
    """Topics whose partitions land in every bucket: created by CreatePartition and by PartitionRecord,
    changed before and after they exist, topic-wide and per partition."""
    evs = [{"type": "AlterConfig", "topic": f"r{t}", "config": {"min.insync.replicas": "2"}} for t in range(3)]
    for t in range(3):
        evs += [_record(f"r{t}", p, {"min.insync.replicas": "3"} if p == 0 else None, elr=[3] if p % 2 else ())
                for p in range(6)]
        evs += [{"type": "CreatePartition", "topic": f"c{t}", "partition": p, "replicas": [1 + (p + t) % 3, 2]}
                for p in range(6)]
    evs += [{"type": "CreatePartition", "topic": "r1", "partition": 6, "replicas": [1, 2]},
            {"type": "CreatePartition", "topic": "r2", "partition": 6, "replicas": [3, 2, 1]},
            # a name that collides with another bucket's topic ('.' and '_'): refused, the topic not made
            {"type": "CreatePartition", "topic": "d.x", "partition": 3, "replicas": [1, 2]},
            {"type": "CreatePartition", "topic": "d_x", "partition": 5, "replicas": [1, 2]},
            {"type": "AlterConfig", "topic": "d_x", "config": {"retention.ms": "10"}}]
    for t in range(3):
        evs += [{"type": "AlterConfig", "topic": f"r{t}", "config": {"min.insync.replicas": "2"}},
                {"type": "AlterConfig", "topic": f"c{t}", "config": {"retention.ms": "10"}},
                {"type": "AlterConfig", "topic": f"x{t}", "config": {"retention.ms": "10"}},
                {"type": "AlterConfig", "topic": f"c{t}", "partition": 7, "config": {}},
                {"type": "Reassign", "topic": f"r{t}", "partition": 9, "replicas": [1, 2, 3]},
                {"type": "Reassign", "topic": f"x{t}", "partition": t, "replicas": [1, 2, 3]},
                {"type": "ElectLeaders", "topic": f"c{t}", "partition": 9, "election_type": "PREFERRED"},
                {"type": "ElectLeaders", "topic": f"x{t}", "partition": t, "election_type": "PREFERRED"},
                {"type": "Fetch", "topic": f"r{t}", "partition": 1, "broker": 2}]
    return _stream(evs)


def test_every_layout_knows_every_topic(tmp_path):
    """One answer per topic-wide AlterConfig, the same in one process, in 2 and 3 workers and in
    Spark's buckets (emulated: 1, 4 and 7 buckets, a file per batch), whichever cluster holds the
    topic's partitions."""
    evs = _spread_stream()
    stream = write_jsonl(evs, tmp_path / "s", 5)
    cfg = EngineConfig({})
    ref = local_rows(stream, cfg)
    answers = {r["seq"]: r["result"] for r in ref["admin"] if r["type"] == "AlterConfig"}
    n = len(BROKERS)
    assert list(answers.values()).count("UNKNOWN_TOPIC_OR_PARTITION") == 3 + 3 + 3 + 1   # before, x*, c*-7, d_x
    assert [r["result"] for r in ref["admin"] if r["topic"] == "d_x"] == ["INVALID_TOPIC_EXCEPTION",
                                                                         "UNKNOWN_TOPIC_OR_PARTITION"]
    assert [answers[s] for s in range(n + 1, n + 4)] == ["UNKNOWN_TOPIC_OR_PARTITION"] * 3
    assert sum(r["cause"] == "ClearElr" for r in ref["metadata_log"]) == 9           # r*-1, -3, -5
    unknown = sorted(r["detail"] for r in ref["admin"] if r["type"] in ("Reassign", "ElectLeaders"))
    assert unknown == sorted([f"No such partition as c{t}-9" for t in range(3)] + [f"No such topic as x{t}" for t in
                             range(3)] + [f"Unable to find a topic named x{t}." for t in range(3)]
                             + [f"Unable to find partition r{t}:9." for t in range(3)])
    assert ref["_stats"]["rejected"] == 0
    for n_buckets, fpb in ((1, None), (4, 1), (7, 2)):
        got = emulate_spark(stream, cfg, n_buckets, fpb)
        assert canon(got) == canon(ref), (n_buckets, fpb)
    _assert_same(stream, tmp_path, cfg, workers=(2, 3), batch_rows=20)


def test_import_gives_a_topics_configs_to_its_first_partition():
    """`isrflow import` writes no topic's configs before the topic: a snapshot's topic configs ride on
    the topic's first PartitionRecord row, a CreateTopics' on its first CreatePartition row. Replayed,
    the topic's partitions have the snapshot's min.insync.replicas from the start (no ELR cleared by it),
    and a later change in the log is answered NONE, not UNKNOWN_TOPIC_OR_PARTITION."""
    from jobs.metalog.convert import Converter
    from jobs.metalog.reader import mkrec

    def rec(i, typ, data):
        return mkrec("f", 0, i, i, 1, 1_700_000_000_000 + i, False, typ, 0, 0, data, "snap" if i < 100 else None)

    snap = [rec(0, "RegisterBrokerRecord", {"brokerId": b, "brokerEpoch": 10 + b, "fenced": False})
            for b in (1, 2, 3)]
    for t, name in enumerate(("a", "b")):
        snap.append(rec(1, "TopicRecord", {"name": name, "topicId": f"id-{name}"}))
        snap += [rec(2, "PartitionRecord", {"partitionId": p, "topicId": f"id-{name}", "replicas": [1, 2, 3],
                                            "isr": [1, 2], "eligibleLeaderReplicas": [3], "lastKnownElr": [],
                                            "leader": 1, "leaderEpoch": 3, "partitionEpoch": 5})
                 for p in range(3)]
    snap.append(rec(3, "ConfigRecord", {"resourceType": 2, "resourceName": "a", "name": "min.insync.replicas",
                                        "value": "3"}))
    c = Converter()
    c.load_snapshot(snap)
    c.alter_config([rec(100, "ConfigRecord", {"resourceType": 2, "resourceName": "b",
                                              "name": "unclean.leader.election.enable", "value": "false"})], 0)
    c.create_topic([rec(101, "TopicRecord", {"name": "n", "topicId": "id-n"}),
                    rec(102, "ConfigRecord", {"resourceType": 2, "resourceName": "n",
                                              "name": "min.insync.replicas", "value": "2"}),
                    *(rec(103 + p, "PartitionRecord", {"partitionId": p, "topicId": "id-n", "replicas": [1, 2, 3],
                                                       "isr": [1, 2, 3], "leader": 1, "leaderEpoch": 0,
                                                       "partitionEpoch": 0}) for p in range(2))], 0)
    evs = c.res.events
    made = [(e["type"], e["topic"], e["partition"], e.get("config")) for e in evs
            if e["type"] in ("PartitionRecord", "CreatePartition")]
    assert made == [("PartitionRecord", "a", 0, {"min.insync.replicas": "3"}), ("PartitionRecord", "a", 1, None),
                    ("PartitionRecord", "a", 2, None), ("PartitionRecord", "b", 0, None),
                    ("PartitionRecord", "b", 1, None), ("PartitionRecord", "b", 2, None),
                    ("CreatePartition", "n", 0, {"min.insync.replicas": "2"}), ("CreatePartition", "n", 1, None)]
    assert [e["topic"] for e in evs if e["type"] == "AlterConfig"] == ["b"]
    out = run_events([{k: v for k, v in e.items() if v is not None} for e in evs])
    cl = out["_cluster"]
    assert [cl.part(("a", p)).eff_min_isr() for p in range(3)] == [3, 3, 3]
    assert [cl.part(("n", p)).eff_min_isr() for p in range(2)] == [2, 2]
    assert [r["result"] for r in out["admin"] if r["type"] == "AlterConfig"] == ["NONE"]
    assert not rows(out, "metadata_log", cause="ClearElr") and not out.get("rejected")


@pytest.mark.parametrize("version", [2, 4])
@pytest.mark.parametrize("strip", ["no topic_rf", "topics loaded by PartitionRecord unknown"])
def test_state_of_an_earlier_isrflow_knows_its_partitions_topics(version, strip):
    """State written before a PartitionRecord created its topic (or before topics had a replication
    factor at all) lacks topics that have partitions: decoding gives each such topic the replica count
    of its first partition, so a topic-wide AlterConfig is still answered NONE after an upgrade, and a
    creation with another replica count still refused."""
    import pickle

    from protocol.codec import MAGIC, _frame, cluster_out, decode_cluster, encode, encode_cluster
    evs = _stream([_record("s", p, elr=[3] if p else ()) for p in range(3)]
                  + [{"type": "CreatePartition", "topic": "c", "partition": 0, "replicas": [1, 2]}])
    cl = run_events(evs)["_cluster"]
    assert cl.topic_rf == {"s": 3, "c": 2}
    t = cluster_out(cl)
    if strip == "no topic_rf":
        t = t[:11]
    else:
        t = t[:11] + ({"c": 2},)
    if version == 2:
        blob = encode(t)
    else:
        head, cols = pickle.loads(_frame(encode_cluster(cl))[1])
        blob = MAGIC + bytes([4]) + pickle.dumps((pickle.dumps(t[:2] + ([],) + t[3:], protocol=4), cols))
    conf = EngineConfig({})
    old = decode_cluster(blob, conf)
    assert old.topic_rf == {"s": 3, "c": 2}
    n = len(evs)
    for i, ev in enumerate([{"type": "AlterConfig", "topic": "s", "config": {"min.insync.replicas": "2"}},
                            {"type": "CreatePartition", "topic": "s", "partition": 5, "replicas": [1, 2]}]):
        old.apply({"seq": n + 1 + i, "ts_ms": n + 1 + i, "partition": None, **ev})
    out = old.drain()
    assert [(r["type"], r["result"]) for r in out["admin"]] == [("AlterConfig", "NONE"),
                                                               ("CreatePartition", "INVALID_REPLICA_ASSIGNMENT")]
    assert [(r["partition"], r["cause"]) for r in out["metadata_log"]] == [(1, "ClearElr"), (2, "ClearElr")]
