"""Issue 14.1: a min.insync.replicas change clears the topic's ELRs (Kafka 4.4.0).

Real cluster (research/real_kafka_facts.md, "Min ISR config change"): the change writes CONFIG_RECORD +
CLEAR_ELR_RECORD {topicName} in one batch, no PartitionChangeRecord, and describeTopics shows an empty
ELR afterwards. Source: ConfigurationControlManager#createClearElrRecordsAsNeeded (one ClearElrRecord per
min.insync.replicas CONFIG_RECORD while ELR is enabled; a topic CONFIG_RECORD is written only when the
value changes), ReplicationControlManager#replay(ClearElrRecord) -> #removeTopicElrs (partitions with a
non-empty ELR or lastKnownElr are merged with {elr: [], lastKnownElr: []}: partitionEpoch + 1, leader
epoch unchanged; partitions with both empty untouched - no epoch bump, as observed)."""
from tests.engine_util import rows, run_events
from tests.streams import S


def _two_partitions_elr_populated():
    """t-0 and t-1 with replicas [1, 2, 3], min ISR 2; brokers 3 then 2 fenced: ISR [1], ELR [2]."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3], config={"min.insync.replicas": "2"})     # the topic's config (CreateTopics)
    s.add(type="CreatePartition", topic="t", partition=1, replicas=[1, 2, 3])
    s.add(type="CreatePartition", topic="u", partition=0, replicas=[1, 2, 3])   # another topic
    s.at(100).fence(3)
    s.fence(2)
    return s


def test_min_isr_change_clears_elr_of_every_partition_of_the_topic():
    s = _two_partitions_elr_populated()
    seq = s.at(200).alter_config(min_insync_replicas=3)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    before = {r["partition"]: r for r in rows(out, "metadata_log", topic="t") if r["seq"] < seq}
    assert before[0]["elr"] == [2] and before[0]["isr"] == [1]
    got = rows(out, "metadata_log", seq=seq)
    assert [(r["topic"], r["partition"], r["cause"]) for r in got] == [("t", 0, "ClearElr"), ("t", 1, "ClearElr")]
    for r in got:
        # hand-written from removeTopicElrs: ELR and lastKnownElr empty, partition epoch 2 -> 3, leader epoch 0
        assert (r["isr"], r["elr"], r["last_known_elr"], r["leader"]) == ([1], [], [], 1)
        assert (r["partition_epoch"], r["leader_epoch"]) == (3, 0)
    assert not rows(out, "elections", seq=seq)
    # the other topic keeps its ELR
    assert [r["elr"] for r in out["partition_state"] if r["topic"] == "u"] == [[2]]


def test_same_min_isr_value_writes_no_config_record_and_clears_nothing():
    s = _two_partitions_elr_populated()
    seq = s.at(200).alter_config(min_insync_replicas=2)       # already 2 at topic level
    out = run_events(s.events)
    assert not rows(out, "metadata_log", seq=seq)
    assert [r["elr"] for r in out["partition_state"] if r["topic"] == "t"] == [[2], [2]]


def test_clearing_empty_elr_bumps_nothing():
    # real cluster: CLEAR_ELR_RECORD on partitions whose ELR was already empty did not bump partitionEpoch
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.at(10).alter_config(min_insync_replicas=2)
    out = run_events(s.events)
    assert not rows(out, "metadata_log", seq=seq)
    assert out["partition_state"][0]["partition_epoch"] == 0


def test_last_known_elr_is_cleared_too_and_leader_does_not_move():
    s = S().up(1, 2)
    s.create([1, 2], config={"min.insync.replicas": "2"})
    s.at(10).fence(2)
    s.fence(1)                                  # leaderless: ISR [], ELR [1, 2], lastKnownElr [1]
    seq = s.at(20).alter_config(min_insync_replicas=1)
    out = run_events(s.events)
    r = rows(out, "metadata_log", seq=seq)[0]
    assert (r["isr"], r["elr"], r["last_known_elr"], r["leader"], r["leader_epoch"], r["partition_epoch"]) == \
        ([], [], [], -1, 1, 3)
    assert r["cause"] == "ClearElr"


def test_elr_disabled_writes_no_clear():
    s = _two_partitions_elr_populated()
    seq = s.at(200).alter_config(min_insync_replicas=3)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    assert not rows(out, "metadata_log", seq=seq)


def test_next_shrink_below_raised_min_isr_fills_elr_again():
    # real cluster: raising min ISR 2 -> 3 with a 2-member ISR adds no ELR member; the next shrink does
    s = S().up(1, 2, 3)
    s.create([1, 2, 3], config={"min.insync.replicas": "2"})     # the topic's config (CreateTopics)
    s.at(10).fence(3)                           # ISR [1, 2] (= min ISR: ELR empty)
    seq_cfg = s.at(20).alter_config(min_insync_replicas=3)
    seq = s.at(30).fence(2)
    out = run_events(s.events)
    assert not rows(out, "metadata_log", seq=seq_cfg)
    r = rows(out, "metadata_log", seq=seq)[0]
    assert (r["isr"], r["elr"]) == ([1], [2])      # A11: (ELR + old ISR [1, 2]) - new ISR; 3 left earlier


def test_partition_level_override_clears_that_partition_only():
    s = _two_partitions_elr_populated()
    seq = s.at(200).alter_config(partition=1, min_insync_replicas=3)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert [(r["partition"], r["elr"]) for r in rows(out, "metadata_log", seq=seq)] == [(1, [])]
