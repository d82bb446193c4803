"""Issue 14.4: ISR lists in Kafka's order.

Real 4.4.0 cluster (research/real_kafka_facts.md): with replicas [3,1,2], every ISR written from the
leader's AlterPartition is ascending (shrink -> [2,3], expansion -> [1,2,3]); ISRs the controller writes
itself keep their list order ([3,1,2] -> [3,2] at a controlled shutdown). Source: Partition#prepareIsrShrink
/ #prepareIsrExpand (kafka_2.13 4.4.0) send `toList` of a scala mutable.HashSet built from the committed
ISR; PartitionChangeBuilder writes the controller's target ISR list as given."""
from protocol.partition import leader_isr_order
from tests.engine_util import rows, run_events
from tests.streams import S


def _leader3():
    s = S().up(1, 2, 3)
    s.create([3, 1, 2])                           # ISR [3, 1, 2], leader 3
    s.at(100).fetch(1); s.fetch(2)
    s.at(200).produce(3, 1, acks=1)
    s.at(300).fetch(2); s.fetch(2)                # 2 caught up, 1 stays at offset 0
    return s


def test_leader_shrink_and_expand_are_ascending():
    s = _leader3()
    s.at(46_000).fetch(1); s.fetch(1)             # 1 catches up again
    out = run_events(s.events)                     # lag 30000, check every 15000
    ap = [r for r in rows(out, "metadata_log", cause="AlterPartition")]
    assert [(r["ts_ms"], r["isr"]) for r in ap] == [(45_000, [2, 3]), (46_000, [1, 2, 3])]
    assert [r["proposed_isr"] for r in rows(out, "alter_partition", phase="PROPOSED")] == [[2, 3], [1, 2, 3]]
    assert ap[-1]["replicas"] == [3, 1, 2]


def test_controller_written_isr_keeps_its_order():
    s = S().up(1, 2, 3)
    s.create([3, 1, 2])
    seq = s.at(10).shutdown(1)                     # controlled shutdown of a follower
    out = run_events(s.events)
    r = rows(out, "metadata_log", seq=seq)[0]
    assert (r["isr"], r["leader"]) == ([3, 2], 3)


def test_scala_hash_set_order_for_large_ids():
    # table of 16 buckets: index = id & 15, then ascending hash within a bucket
    assert leader_isr_order([3, 1, 2]) == (1, 2, 3)
    assert leader_isr_order([17, 2]) == (17, 2)            # 17 & 15 = 1 < 2
    assert leader_isr_order([100, 5, 33]) == (33, 100, 5)  # buckets 1, 4, 5
    assert leader_isr_order(list(range(12, 0, -1))) == tuple(range(1, 13))   # 12 ids: 32 buckets
    # the table's growth boundary, from both sides: 11 ids still share 16 buckets (17 & 15 = 1: after 1),
    # 12 ids have 32 (17 its own bucket, after 11)
    assert leader_isr_order([17] + list(range(10, 0, -1))) == (1, 17) + tuple(range(2, 11))
    assert leader_isr_order([17] + list(range(11, 0, -1))) == tuple(range(1, 12)) + (17,)
