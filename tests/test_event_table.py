"""The event table (protocol/cluster.py EVENTS: type -> scope -> handler) is the one statement of
which partitions an event reaches; the schema's own view (which types require a partition) must
agree with it, and every schema event type has exactly one route."""
from protocol.cluster import EVENTS, PARTITION_TYPES, TOPIC_TYPES, partition_scoped
from protocol.messages import Scope
from schemas.events import EVENT_TYPES, PARTITION_EVENT_TYPES


def test_every_event_type_has_one_route():
    assert set(EVENTS) == set(EVENT_TYPES)
    assert all(isinstance(route[0], Scope) and callable(route[1]) for route in EVENTS.values())


def test_schema_and_table_agree_on_partition_scope():
    assert PARTITION_TYPES == PARTITION_EVENT_TYPES


def test_scope_rule():
    assert partition_scoped("Fetch", 0)
    assert not partition_scoped("BrokerCrash", None)
    assert [partition_scoped(t, p) for t in sorted(TOPIC_TYPES) for p in (None, 3)] == [False, True]


def test_scan_routes_as_the_scope_rule_says():
    """The Spark scan inlines the scope rule for speed: a narrowable row naming a partition goes to
    that partition's bucket only, one not naming it to every bucket (as partition_scoped says)."""
    from jobs.buckets import bucket_of
    from jobs.spark_source import chunk_events, scan_rows, unpack
    from protocol.cluster import NARROWABLE_TYPES
    assert "Tick" in NARROWABLE_TYPES and TOPIC_TYPES <= NARROWABLE_TYPES
    raws = [{"seq": 1, "ts_ms": 0, "type": "Tick", "broker": 1},
            {"seq": 2, "ts_ms": 0, "type": "Tick", "broker": 1, "topic": "t", "partition": 5},
            {"seq": 3, "ts_ms": 0, "type": "Tick", "topic": "t"},
            {"seq": 4, "ts_ms": 0, "type": "AlterConfig", "topic": "t", "partition": 5,
             "config": {"min.insync.replicas": "2"}},
            {"seq": 5, "ts_ms": 0, "type": "Tick", "partition": 5}]
    gen = scan_rows(iter((i, r, None, None) for i, r in enumerate(raws)), (0, 0), 8, keep_raw=True)
    reached: dict[int, set] = {}
    rejected = []
    for b, *_rest, payload in gen:
        items = unpack(payload)
        for item, ev in zip(items, chunk_events(items)):
            if ev is not None:
                reached.setdefault(ev["seq"], set()).add(b)
            else:
                rejected.append(item[1])
    one = {bucket_of("t", 5, 8)}
    assert reached == {1: set(range(8)), 2: one, 3: set(range(8)), 4: one}
    assert [r["seq"] for r in rejected] == [5] and "no topic" in rejected[0]["reason"]
    assert [partition_scoped(r["type"], r.get("partition")) for r in raws[:4]] == [False, True, False, True]
