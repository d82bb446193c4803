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
