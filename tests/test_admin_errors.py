"""Issue 8 part 2: requests Kafka refuses are answers (an `admin` row with Kafka's error name and message,
state unchanged), not `rejected` rows. Messages are Kafka 4.4.0's: ReplicationControlManager
(#validateManualPartitionAssignment, #createTopic, #alterPartitionReassignment,
#cancelPartitionReassignment, #electLeader), ClusterControlManager (#registerBroker, #checkBrokerEpoch),
ConfigDef / LogConfig config validation, and the Errors enum's default messages."""
import pytest

from tests.engine_util import rows, run_events
from tests.streams import S

IRA = "INVALID_REPLICA_ASSIGNMENT"


def answer(out, seq):
    a = rows(out, "admin", seq=seq)
    assert len(a) == 1, a
    assert not rows(out, "rejected"), rows(out, "rejected")
    return a[0]["result"], a[0]["detail"]


def _unchanged(out, before_epoch=0):
    st = out["partition_state"]
    return all(r["partition_epoch"] == before_epoch for r in st if r["topic"] == "t" and r["partition"] == 0)


@pytest.mark.parametrize("replicas, detail", [
    ([1, 1], "The manual partition assignment includes the broker 1 more than once."),
    ([], "The manual partition assignment includes an empty replica list."),
    ([2, 9, 2], "The manual partition assignment includes the broker 2 more than once."),   # ascending: 2, 2, 9
    ([9, 1, 1], "The manual partition assignment includes the broker 1 more than once."),
    ([1, 9], "The manual partition assignment includes broker 9, but no such broker is registered."),
])
def test_create_partition_invalid_assignment(replicas, detail):
    s = S().up(1, 2)
    seq = s.create(replicas)
    out = run_events(s.events)
    assert answer(out, seq) == (IRA, detail)
    assert not out.get("metadata_log") and not out["partition_state"]
    assert out["_cluster"].applied == len(s.events)


def test_create_partition_all_fenced_and_existing():
    s = S().up(1)
    s.register(2, 3)
    seq = s.create([3, 2])
    ok = s.create([1, 2])
    dup = s.create([1])
    out = run_events(s.events)
    assert answer(out, seq) == (IRA, "All brokers specified in the manual partition assignment for partition 0 "
                                     "are fenced or in controlled shutdown.")
    assert answer(out, ok) == ("NONE", None)
    assert answer(out, dup) == ("TOPIC_ALREADY_EXISTS", "Partition t-0 already exists.")


def test_create_partition_config_is_checked_before_the_assignment():
    """Every topic config of Kafka 4.4.0 is checked as its controller checks it (protocol.topic_configs,
    held against the real LogConfig by tests/test_kafka44_topic_configs.py): Kafka's first bad key in
    LogConfig's order, whatever the request's; a valid one isrflow does not model is accepted."""
    s = S().up(1)
    seq = s.create([1, 1], config={"min.insync.replicas": "0"})
    seq2 = s.create([1], config={"no.such.config": "1000"})
    seq3 = s.create([1], config={"unclean.leader.election.enable": "maybe"})
    seq4 = s.create([1], config={"retention.ms": "-2", "segment.bytes": "x"})
    ok = s.create([1], config={"retention.ms": "1000", "cleanup.policy": "compact, delete", "min.insync.replicas": "1"})
    out = run_events(s.events)
    assert answer(out, seq) == ("INVALID_CONFIG", "Invalid value 0 for configuration min.insync.replicas: "
                                                  "Value must be at least 1")
    assert answer(out, seq2) == ("INVALID_CONFIG", "Unknown topic config name: no.such.config")
    assert answer(out, seq3) == ("INVALID_CONFIG", "Invalid value maybe for configuration "
                                                   "unclean.leader.election.enable: Expected value to be either "
                                                   "true or false")
    assert answer(out, seq4) == ("INVALID_CONFIG", "Invalid value x for configuration segment.bytes: "
                                                   "Not a number of type INT")
    assert answer(out, ok) == ("NONE", None)


NAMED = [
    (".", "Topic name is invalid: '.' is not allowed"),
    ("..", "Topic name is invalid: '..' is not allowed"),
    ("bad!name", "Topic name is invalid: 'bad!name' contains one or more characters other than ASCII "
                 "alphanumerics, '.', '_' and '-'"),
    ("t\u00e9", "Topic name is invalid: 't\u00e9' contains one or more characters other than ASCII alphanumerics, "
                "'.', '_' and '-'"),
    ("x" * 250, f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249"),
    # 125 characters outside the BMP: 250 UTF-16 units, as Java counts a String's length
    ("\U0001f600" * 125, f"Topic name is invalid: the length of '{chr(0x1f600) * 125}' is longer than the max "
                         "allowed length 249"),
    ("a_b", "Topic 'a_b' collides with existing topic: a.b"),
    ("a.b!", "Topic name is invalid: 'a.b!' contains one or more characters other than ASCII alphanumerics, "
             "'.', '_' and '-'"),
    ("a!b", "Topic name is invalid: 'a!b' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"),
    ("a_b_", None),
    ("x" * 249, None),
    ("Az09._-", None),
]


def test_a_new_topics_name_is_checked_first():
    """RCM#validateNewTopicNames (Topic.validate, then the collision of '.' and '_'), before the config
    and the assignment, for a topic's first partition only: INVALID_TOPIC_EXCEPTION with Kafka's
    message, and no topic made (a later request for it finds none)."""
    s = S().up(1, 2, 3)
    made = s.add(type="CreatePartition", topic="a.b", partition=0, replicas=[1, 2, 3])
    seqs = [s.add(type="CreatePartition", topic=name, partition=0, replicas=[1, 1],
                  config={"min.insync.replicas": "0"} if want else None) for name, want in NAMED]
    later = s.add(type="CreatePartition", topic="a.b", partition=1, replicas=[1, 2, 3])
    again = s.add(type="AlterConfig", topic="bad!name", config={"retention.ms": "5"})
    out = run_events(s.events)
    assert answer(out, made) == ("NONE", None) and answer(out, later) == ("NONE", None)
    for seq, (name, want) in zip(seqs, NAMED):
        # the valid names reach the assignment's check ([1, 1]: a repeated broker)
        repeated = (IRA, "The manual partition assignment includes the broker 1 more than once.")
        assert answer(out, seq) == (("INVALID_TOPIC_EXCEPTION", want) if want else repeated), name
    assert answer(out, again) == ("UNKNOWN_TOPIC_OR_PARTITION", "The topic 'bad!name' does not exist.")
    assert {r["topic"] for r in out["partition_state"]} == {"a.b"}
    # the names of existing topics survive the state codec (Spark's state store between batches)
    from tests.engine_util import canonical
    assert canonical(run_events(s.events, roundtrip_every=1)) == canonical(out)


def test_create_partition_must_have_its_topics_replication_factor():
    """RCM#createPartitions: #validateManualPartitionAssignment with the topic's replication factor.
    A new partition of a topic that has partitions has as many replicas as they do: checked after
    the brokers' registration (an unregistered broker is named first), before the active replicas
    (a partition of fenced brokers only is refused for its count). A creation that is refused sets
    no factor: the topic's first partition created does. A reassignment may change the count (Kafka
    passes no factor), and other topics have their own. The same when each partition is its own
    Spark bucket (the earlier partitions foreign: Cluster.note_creation), with the state encoded
    between rows."""
    from tests.engine_util import canonical
    from tests.test_properties import run_bucketed
    s = S().up(1, 2, 3)
    s.register(4)                                       # registered, fenced
    p = {i: S("t", i) for i in range(1, 7)}
    for x in p.values():
        x.events = s.events
    none_active = s.create([4])                         # t-0: refused, sets no factor
    first = p[1].create([1, 2])                         # t-1: the topic's factor is 2
    fewer = p[2].create([1])
    unregistered = p[3].create([3, 9, 1])
    fenced_one = p[4].create([4])
    more = p[5].create([4, 1, 2])
    ok = p[6].create([2, 3])
    grown = p[1].reassign([1, 2, 3])                    # t-1 now has 3 replicas
    other = S("u", 0)
    other.events = s.events
    own = other.create([1])
    out = run_events(s.events)
    assert answer(out, none_active)[1].startswith("All brokers specified")
    assert answer(out, first) == answer(out, ok) == answer(out, own) == answer(out, grown) == ("NONE", None)
    assert answer(out, unregistered) == (IRA, "The manual partition assignment includes broker 9, but no such "
                                              "broker is registered.")
    for seq, n in ((fewer, 1), (fenced_one, 1), (more, 3)):
        assert answer(out, seq) == (IRA, f"The manual partition assignment includes a partition with {n} "
                                         "replica(s), but this is not consistent with previous partitions, "
                                         "which have 2 replica(s)."), seq
    assert sorted((r["topic"], r["partition"]) for r in out["partition_state"]) == [("t", 1), ("t", 6), ("u", 0)]
    assert canonical(run_events(s.events, roundtrip_every=1)) == canonical(out)
    assert canonical(run_bucketed(s.events, {}, 16, 1)) == canonical(out)


@pytest.mark.parametrize("target, detail", [
    ([], "The manual partition assignment includes an empty replica list."),
    ([1, 2, 1], "The manual partition assignment includes the broker 1 more than once."),
    ([1, 7], "The manual partition assignment includes broker 7, but no such broker is registered."),
])
def test_reassign_invalid_target(target, detail):
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.reassign(target)
    out = run_events(s.events)
    assert answer(out, seq) == (IRA, detail)
    assert not rows(out, "metadata_log", seq=seq) and _unchanged(out)


def test_reassign_cancel_and_unknown_partition():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    cancel = s.reassign(None)
    other = s.add(type="Reassign", topic="t", partition=5, replicas=[1, 2])
    nott = s.add(type="Reassign", topic="x", partition=0, replicas=[1, 2])
    out = run_events(s.events)
    assert answer(out, cancel) == ("NO_REASSIGNMENT_IN_PROGRESS", "No partition reassignment is in progress.")
    assert answer(out, other) == ("UNKNOWN_TOPIC_OR_PARTITION", "Unable to find partition t:5.")
    # Kafka's message for a topic that does not exist (every bucket of a Spark replay knows the topics)
    assert answer(out, nott) == ("UNKNOWN_TOPIC_OR_PARTITION", "Unable to find a topic named x.")
    assert [(r["topic"], r["partition"]) for r in out["partition_state"]] == [("t", 0)]


def test_reassign_cancel_needing_unclean_election():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2])
    s.reassign([3, 4])                              # adding [3, 4], removing [1, 2]
    s.fence(1); s.fence(2)                          # the old ISR is gone
    seq = s.reassign(None)
    out = run_events(s.events)
    assert answer(out, seq) == (IRA, "Unable to revert partition assignment for t:0 because it would require an "
                                     "unclean leader election.")
    assert not rows(out, "metadata_log", seq=seq)


def test_elect_leaders_answers():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    pref_ok = s.elect("PREFERRED")                  # leader 1 is preferred
    uncl_ok = s.elect("UNCLEAN")                    # has a leader
    s.shutdown(1)                                   # leader 2; 1 in controlled shutdown
    pref_na = s.elect("PREFERRED")
    s.fence(2); s.fence(3); s.fence(1)
    uncl_na = s.elect("UNCLEAN")                    # leaderless, nobody acceptable
    unk_p = s.add(type="ElectLeaders", topic="t", partition=3, election_type="PREFERRED")
    unk_t = s.add(type="ElectLeaders", topic="x", partition=0, election_type="UNCLEAN")
    out = run_events(s.events)
    assert answer(out, pref_ok) == ("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
    assert answer(out, uncl_ok) == ("ELECTION_NOT_NEEDED", "Leader election not needed for topic partition.")
    assert answer(out, pref_na) == ("PREFERRED_LEADER_NOT_AVAILABLE", "The preferred leader was not available.")
    assert answer(out, uncl_na) == ("ELIGIBLE_LEADERS_NOT_AVAILABLE",
                                    "Eligible topic partition leaders are not available.")
    assert answer(out, unk_p) == ("UNKNOWN_TOPIC_OR_PARTITION", "No such partition as t-3")
    assert answer(out, unk_t) == ("UNKNOWN_TOPIC_OR_PARTITION", "No such topic as x")
    for seq in (pref_ok, uncl_ok, pref_na, uncl_na):
        assert not rows(out, "metadata_log", seq=seq)


def test_alter_config_answers():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    bad = s.alter_config(min_insync_replicas="two")
    unk = s.alter_config(partition=4, min_insync_replicas=2)
    out = run_events(s.events)
    assert answer(out, bad) == ("INVALID_CONFIG", "Invalid value two for configuration min.insync.replicas: "
                                                  "Not a number of type INT")
    assert answer(out, unk) == ("UNKNOWN_TOPIC_OR_PARTITION", "No such partition as t-4")


def test_alter_config_of_a_key_isrflow_does_not_model():
    """A valid topic config of Kafka's that isrflow does not model is answered NONE and not kept; a
    deletion of a key that is not set, known or not, is no error (ConfigurationControlManager
    #validateAlterConfig validates the config the change leaves)."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    ok = s.add(type="AlterConfig", topic="t", config={"retention.ms": "1000", "min.insync.replicas": "2"})
    bad = s.add(type="AlterConfig", topic="t", config={"retention.ms": "-5"})
    gone = s.add(type="AlterConfig", topic="t", config={"retention.ms": None, "no.such.config": None})
    unknown = s.add(type="AlterConfig", topic="t", config={"no.such.config": "1"})
    out = run_events(s.events)
    assert answer(out, ok) == ("NONE", None)
    assert answer(out, bad) == ("INVALID_CONFIG", "Invalid value -5 for configuration retention.ms: "
                                                  "Value must be at least -1")
    assert answer(out, gone) == ("NONE", None)
    assert answer(out, unknown) == ("INVALID_CONFIG", "Unknown topic config name: no.such.config")
    cl = out["_cluster"]
    assert cl.topic_cfg["t"] == {"min.insync.replicas": "2"}
    assert cl.partitions[("t", 0)].conf.min_isr == 2


def test_heartbeats_from_unregistered_broker_are_stale_broker_epoch():
    s = S().up(1)
    unf = s.unfence(7)
    cs = s.shutdown(8)
    out = run_events(s.events)
    assert answer(out, unf) == ("STALE_BROKER_EPOCH", "No broker registration found for broker id 7")
    assert answer(out, cs) == ("STALE_BROKER_EPOCH", "No broker registration found for broker id 8")
    assert 7 not in out["_cluster"].brokers or not out["_cluster"].brokers[7].registered


def test_duplicate_registration_is_an_answer():
    s = S().up(1)
    seq = s.add(type="BrokerRegister", broker=1, broker_epoch=500, previous_broker_epoch=101)
    out = run_events(s.events)
    assert answer(out, seq)[0] == "DUPLICATE_BROKER_REGISTRATION"
    assert out["_cluster"].brokers[1].epoch == 101


def test_what_stays_rejected():
    # rows the schema cannot read, and streams contradicting themselves, stay in `rejected`
    s = S().up(1)
    s.fence(1)
    back = s.add(type="BrokerRegister", broker=1, broker_epoch=50, previous_broker_epoch=-1)
    bad = s.add(type="CreatePartition", topic="t", partition=0, replicas="1,2")
    out = run_events(s.events)
    assert "epoch going backwards" in rows(out, "rejected", seq=back)[0]["reason"]
    assert "replicas must be a list" in [r["reason"] for r in out["rejected"]][-1]
    assert not rows(out, "admin", seq=back) and not rows(out, "admin", seq=bad)


def test_create_partition_null_config_values_are_refused_before_any_other_config_check():
    """RCM#computeConfigChanges (kafka-metadata 4.4.0, before the names and values are validated):
    INVALID_CONFIG "Null value not supported for topic configs: " and every null key, joined by ","."""
    s = S().up(1, 2, 3)
    both = s.create([1, 2, 3], config={"min.insync.replicas": None, "unclean.leader.election.enable": None})
    first = s.create([1, 2, 3], config={"retention.ms": "1", "unclean.leader.election.enable": None})
    out = run_events(s.events)
    assert answer(out, both) == ("INVALID_CONFIG", "Null value not supported for topic configs: "
                                                   "min.insync.replicas,unclean.leader.election.enable")
    assert answer(out, first) == ("INVALID_CONFIG", "Null value not supported for topic configs: "
                                                    "unclean.leader.election.enable")
    assert not out["partition_state"]


def test_a_topics_first_creation_sets_the_topics_config():
    """CreateTopics writes the request's configs as the topic's ConfigRecords, and CreatePartitions
    carries none: a topic's later partitions take the config of its first partition's creation (t-1:
    min ISR 2, so fencing 3 then 2 leaves ELR [2]; the engine's default 1 would leave none). A later
    creation's config stays that partition's own (t-2: min ISR 3). Deleting the topic's min ISR (an
    AlterConfig null) brings t-0 and t-1 back to the default and leaves t-2's own; it clears their
    ELRs (a ConfigRecord for min.insync.replicas). The same in Spark buckets (each partition in another)."""
    from tests.engine_util import canonical
    from tests.test_properties import run_bucketed
    s = S().up(1, 2, 3)
    p = {i: S("t", i) for i in range(3)}
    for x in p.values():
        x.events = s.events
    p[0].create([1, 2, 3], config={"min.insync.replicas": "2"})
    p[1].create([1, 2, 3])
    p[2].create([1, 2, 3], config={"min.insync.replicas": "3"})
    s.at(100).fence(3)
    s.fence(2)
    deleted = s.at(200).add(type="AlterConfig", topic="t", config={"min.insync.replicas": None})
    again = s.at(300).add(type="AlterConfig", topic="t", config={"min.insync.replicas": None})
    cfg = {"min.insync.replicas": "1"}
    out = run_events(s.events, cfg)
    before = {r["partition"]: r["elr"] for r in rows(out, "metadata_log") if r["seq"] < deleted}
    assert before[1] == [2] and before[2] == [2, 3]
    assert answer(out, deleted) == answer(out, again) == ("NONE", None)
    cleared = rows(out, "metadata_log", seq=deleted)
    assert [(r["partition"], r["cause"], r["elr"]) for r in cleared] == [(0, "ClearElr", []), (1, "ClearElr", []),
                                                                          (2, "ClearElr", [])]
    assert not rows(out, "metadata_log", seq=again)           # nothing left to delete: no record
    cl = out["_cluster"]
    assert [cl.partitions[("t", i)].conf.min_isr for i in range(3)] == [1, 1, 3]
    assert canonical(run_bucketed(s.events, cfg, 16, 2)) == canonical(out)
