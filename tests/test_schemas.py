"""schemas.events / schemas.tables: models, fast validator, derived schemas."""

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import events as E
from schemas import tables as T

# The input column set of the brief / SPEC section 2 (test data, written
# independently of the models).
EXPECTED_INPUT = {
    "seq": pa.int64(), "ts_ms": pa.int64(), "type": pa.string(), "topic": pa.string(),
    "partition": pa.int32(), "broker": pa.int32(), "offset_spec": pa.string(),
    "isolation": pa.string(), "broker_epoch": pa.int64(), "previous_broker_epoch": pa.int64(),
    "replicas": pa.list_(pa.int32()), "records": pa.int32(), "acks": pa.int32(),
    "target": pa.int32(), "fetch_offset": pa.int64(), "last_fetched_epoch": pa.int32(),
    "current_leader_epoch": pa.int32(), "log_end_offset": pa.int64(), "up_to_seq": pa.int64(),
    "election_type": pa.string(), "clean": pa.bool_(), "config": pa.map_(pa.string(), pa.string()),
    "isr": pa.list_(pa.int32()), "elr": pa.list_(pa.int32()), "last_known_elr": pa.list_(pa.int32()),
    "leader": pa.int32(), "leader_epoch": pa.int32(), "partition_epoch": pa.int32(),
    "leader_recovery_state": pa.string(), "epoch_start_offsets": pa.map_(pa.int32(), pa.int64()),
    "hwm": pa.int64(),
}

SPEC_TYPES = [
    "CreatePartition", "AlterConfig", "BrokerRegister", "BrokerUnfence", "BrokerFence",
    "BrokerControlledShutdown", "Reassign", "ElectLeaders", "PartitionRecord", "ReplicaSnapshot",
    "BrokerCrash", "ReplicaLogLoss", "AlterPartitionArrive", "AlterPartitionResponse",
    "MetadataSync", "Produce", "Fetch", "Tick", "ListOffsets", "ConsumerFetch",
]


def pyd(row):
    """(normalized dict | None, error) through pydantic."""
    try:
        return E.event_to_dict(E.parse_event(row)), None
    except (ValidationError, ValueError) as e:
        return None, str(e)


def fetch(**kw):
    row = {"seq": 812, "ts_ms": 1000, "type": "Fetch", "topic": "orders", "partition": 0, "broker": 1}
    row.update(kw)
    return row


def produce(**kw):
    row = {"seq": 6, "ts_ms": 1000, "type": "Produce", "topic": "orders", "partition": 0,
           "broker": 1, "records": 3, "acks": -1}
    row.update(kw)
    return row


# ---------------------------------------------------------------- schemas


def test_input_arrow_schema_is_the_full_column_set():
    s = E.EVENT_ARROW_SCHEMA
    assert set(s.names) == set(EXPECTED_INPUT)
    for name, t in EXPECTED_INPUT.items():
        f = s.field(name)
        assert f.type == t, name
        assert f.nullable == (name not in ("seq", "ts_ms", "type")), name
    assert E.EVENT_COLUMNS == tuple(s.names)


def test_event_types_are_the_spec_types():
    assert list(E.EVENT_TYPES) == SPEC_TYPES


def test_spark_schema_is_derived():
    from pyspark.sql.types import ArrayType, IntegerType, LongType, MapType, StringType, StructType

    ss = E.event_spark_schema()
    assert isinstance(ss, StructType)
    assert ss.fieldNames() == list(E.EVENT_COLUMNS)
    by = {f.name: f for f in ss.fields}
    assert by["seq"].dataType == LongType() and not by["seq"].nullable
    assert by["partition"].dataType == IntegerType() and by["partition"].nullable
    assert by["replicas"].dataType == ArrayType(IntegerType())
    assert by["epoch_start_offsets"].dataType == MapType(IntegerType(), LongType())
    assert by["config"].dataType == MapType(StringType(), StringType())
    # the DDL string form is usable by spark.readStream.schema(...)
    assert "epoch_start_offsets" in ss.simpleString()


COMMON = {"topic": pa.string(), "partition": pa.int32(), "seq": pa.int64(), "idx": pa.int32(), "ts_ms": pa.int64()}


def test_output_schemas():
    assert list(T.TABLES) == [
        "metadata_log", "elections", "alter_partition", "hwm", "produce", "fetch", "consumer",
        "violations", "admin", "rejected", "partition_state", "progress",
    ]
    for name in T.TABLES:
        s = T.arrow_schema(name)
        if name == "progress":
            assert not set(COMMON) & set(s.names)
            continue
        assert s.names[:5] == list(COMMON), name
        for c, t in COMMON.items():
            assert s.field(c).type == t
            if (name == "rejected" and c != "idx") or (name == "admin" and c in ("topic", "partition")):
                # rejected rows may have none of them; broker registrations and
                # topic-wide AlterConfig have no partition (nor topic)
                assert s.field(c).nullable, (name, c)
            else:
                assert not s.field(c).nullable, (name, c)
        for f in list(s)[5:]:
            assert f.nullable, (name, f.name)
    rej = T.arrow_schema("rejected")
    assert rej.field("topic").nullable and rej.field("seq").nullable and rej.field("raw").type == pa.string()
    assert T.arrow_schema("elections").field("candidates").type == pa.list_(pa.int32())
    assert T.arrow_schema("produce").field("base_offset").type == pa.int64()
    assert T.arrow_schema("consumer").field("records").type == pa.int64()
    assert T.arrow_schema("fetch").field("diverging_epoch").type == pa.int32()
    rs = T.arrow_schema("partition_state").field("replica_states").type
    assert rs.value_type == pa.struct([
        ("broker", pa.int32()), ("alive", pa.bool_()), ("fenced", pa.bool_()), ("broker_epoch", pa.int64()),
        ("role", pa.string()), ("leo", pa.int64()), ("hwm", pa.int64()), ("leader_epoch", pa.int32()),
    ])
    assert T.arrow_schema("progress").names == [
        "batch_id", "engine", "input_rows", "applied", "rejected", "min_seq", "max_seq", "max_ts_ms"]


def test_output_spark_schemas_build():
    from pyspark.sql.types import StructType

    for name in T.TABLES:
        ss = T.spark_schema(name)
        assert isinstance(ss, StructType)
        assert ss.fieldNames() == list(T.columns(name))


def test_rows_to_arrow():
    rows = [
        {"topic": "t", "partition": 0, "seq": 5, "idx": 0, "ts_ms": 9, "leader": 1, "replicas": [1, 2],
         "replica_states": [{"broker": 1, "alive": True, "leo": 10}]},
        {"topic": "t", "partition": 1, "seq": 6, "idx": 0, "ts_ms": 9},
    ]
    t = T.rows_to_arrow("partition_state", rows)
    assert t.schema == T.arrow_schema("partition_state")
    back = t.to_pylist()
    assert back[0]["replica_states"][0]["leo"] == 10 and back[0]["replica_states"][0]["role"] is None
    assert back[1]["replicas"] is None
    # the models accept what rows_to_arrow accepts
    for r in back:
        T.PartitionState.model_validate(r)
    with pytest.raises(ValueError, match="seq is required"):
        T.rows_to_arrow("hwm", [{"topic": "t", "partition": 0, "idx": 0, "ts_ms": 1}])
    with pytest.raises(ValueError, match="unknown column"):
        T.rows_to_arrow("hwm", [{"topic": "t", "partition": 0, "seq": 1, "idx": 0, "ts_ms": 1, "bogus": 1}])
    assert T.rows_to_arrow("violations", []).num_rows == 0


# ------------------------------------------------------------ reasons


@pytest.mark.parametrize(
    "row, reason",
    [
        (fetch(fetch_offset=-3), "Fetch row seq 812: fetch_offset -3 is negative"),
        ({"seq": 9, "ts_ms": 1}, "row seq 9: missing required column 'type'"),
        ({"ts_ms": 1, "type": "Fetch"}, "row without seq"),
        ({"seq": "7", "ts_ms": 1, "type": "Fetch"}, "row without seq (Fetch row): seq must be an integer, got str '7'"),
        ({"seq": 4, "ts_ms": 1, "type": "Bogus"}, "row seq 4: unknown event type 'Bogus' (expected one of CreatePartition,"),
        (produce(records=-5), "Produce row seq 6: records -5 must be >= 1"),
        (produce(topic=None), "Produce row seq 6: missing required column 'topic'"),
        (produce(partition="0"), "Produce row seq 6: partition must be an integer, got str '0'"),
        (produce(partition=2**31), "Produce row seq 6: partition 2147483648 must be <= 2147483647"),
        (produce(ts_ms=-1), "Produce row seq 6: ts_ms -1 is negative"),
        (fetch(last_fetched_epoch=-2), "Fetch row seq 812: last_fetched_epoch -2 must be >= -1"),
        (fetch(broker=True), "Fetch row seq 812: broker must be an integer, got bool True"),
        ({"seq": 3, "ts_ms": 0, "type": "ElectLeaders", "topic": "t", "partition": 0, "election_type": "DESIGNATED"},
         "ElectLeaders row seq 3: election_type DESIGNATED needs a target broker"),
        ({"seq": 3, "ts_ms": 0, "type": "ElectLeaders", "topic": "t", "partition": 0, "election_type": "preferred"},
         "ElectLeaders row seq 3: election_type 'preferred' must be one of PREFERRED, UNCLEAN, DESIGNATED"),
        # (an empty or repeated replica list is readable: Kafka answers it INVALID_REPLICA_ASSIGNMENT,
        #  an `admin` row - tests/test_admin_errors.py)
        ({"seq": 3, "ts_ms": 0, "type": "Reassign", "topic": "t", "partition": 0, "replicas": "1,2"},
         "Reassign row seq 3: replicas must be a list, got str '1,2'"),
        ({"seq": 3, "ts_ms": 0, "type": "CreatePartition", "topic": "t", "partition": 0},
         "CreatePartition row seq 3: missing required column 'replicas'"),
        ({"seq": 3, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0, "broker": 1,
          "epoch_start_offsets": {"0": 0}, "log_end_offset": 5, "hwm": 6},
         "ReplicaSnapshot row seq 3: hwm 6 is above log_end_offset 5"),
        ({"seq": 3, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0, "broker": 1,
          "epoch_start_offsets": {"x": 0}, "log_end_offset": 5, "hwm": 5},
         "ReplicaSnapshot row seq 3: epoch_start_offsets key 'x' is not an integer leader epoch"),
        # a later epoch starting before an earlier one's start (and past that epoch's number)
        ({"seq": 3, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0, "broker": 1,
          "epoch_start_offsets": {"0": 10, "1": 5}, "log_end_offset": 20, "hwm": 5},
         "ReplicaSnapshot row seq 3: epoch_start_offsets: epoch 1 starts at 5, before epoch 0 (at 10)"),
        ({"seq": 3, "ts_ms": 0, "type": "ListOffsets", "topic": "t", "partition": 0, "broker": 1,
          "offset_spec": "LATEST", "isolation": "DIRTY"},
         "ListOffsets row seq 3: isolation 'DIRTY' must be one of READ_UNCOMMITTED, READ_COMMITTED"),
        ({"seq": 3, "ts_ms": 0, "type": "BrokerCrash", "broker": 1},
         "BrokerCrash row seq 3: missing required column 'clean'"),
        ({"seq": 3, "ts_ms": 0, "type": "MetadataSync", "broker": 1, "up_to_seq": -1},
         "MetadataSync row seq 3: up_to_seq -1 is negative"),
    ],
)
def test_reasons(row, reason):
    ev, why = E.validate(row)
    assert ev is None
    assert why.startswith(reason), why
    assert pyd(row)[0] is None  # pydantic rejects it too


def test_accepts_and_normalizes():
    ev, why = E.validate(produce(acks=7, extra_column="ignored"))
    assert why is None
    assert set(ev) == set(E.EVENT_COLUMNS)
    assert ev["acks"] == 7 and ev["fetch_offset"] is None  # acks 7 is the protocol's business
    ev, _ = E.validate({"seq": 1, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0,
                        "broker": 2, "epoch_start_offsets": {"0": 0, "3": 40}, "log_end_offset": 50, "hwm": 45})
    assert ev["epoch_start_offsets"] == {0: 0, 3: 40}
    # Arrow/Parquet maps arrive as lists of pairs
    ev, _ = E.validate({"seq": 1, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0,
                        "broker": 2, "epoch_start_offsets": [(0, 0), (3, 40)], "log_end_offset": 50, "hwm": 45})
    assert ev["epoch_start_offsets"] == {0: 0, 3: 40}
    ev, _ = E.validate({"seq": 2, "ts_ms": 0, "type": "AlterConfig", "topic": "t",
                        "config": {"min.insync.replicas": 2, "unclean.leader.election.enable": True}})
    assert ev["config"] == {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}
    assert ev["partition"] is None
    ev, _ = E.validate({"seq": 3, "ts_ms": 0, "type": "PartitionRecord", "topic": "t", "partition": 0,
                        "replicas": [1, 2, 3], "isr": [1, 2], "leader": 1, "leader_epoch": 4,
                        "partition_epoch": 7, "elr": None})
    assert ev["elr"] == [] and ev["last_known_elr"] == [] and ev["leader_recovery_state"] == "RECOVERED"
    ev, _ = E.validate({"seq": 4, "ts_ms": 0, "type": "Reassign", "topic": "t", "partition": 0})
    assert ev["replicas"] is None  # cancel
    ev, _ = E.validate({"seq": 5, "ts_ms": 0, "type": "Tick"})
    assert ev["broker"] is None
    # up_to_seq 0 is a seq like any other (a stream may start at seq 0): a request, not bad input
    ev, why = E.validate({"seq": 6, "ts_ms": 0, "type": "MetadataSync", "broker": 1, "up_to_seq": 0})
    assert why is None and ev["up_to_seq"] == 0
    # columns a type does not use are dropped
    ev, _ = E.validate(fetch(records=5, clean=True))
    assert ev["records"] is None and ev["clean"] is None


def test_models_reject_what_fast_path_rejects_with_pydantic_errors():
    with pytest.raises(ValidationError):
        E.parse_event(fetch(fetch_offset=-3))
    with pytest.raises(ValueError, match="unknown event type"):
        E.parse_event({"seq": 1, "ts_ms": 1, "type": "Bogus"})


# ------------------------------------------------- fast path == pydantic

GOOD_STR = {
    "topic": ["t", "orders"],
    "offset_spec": ["LATEST", "EARLIEST"],
    "isolation": ["READ_UNCOMMITTED", "READ_COMMITTED"],
    "election_type": ["PREFERRED", "UNCLEAN", "DESIGNATED"],
    "leader_recovery_state": ["RECOVERED", "RECOVERING"],
    "type": SPEC_TYPES,
}
BAD_VALUES = [
    -5, -2, 2**31, 2**63, -(2**63) - 1, "x", "", "3", 1.5, 3.0, True, False, [1, "a"], {"a": 1}, [],
    (1, 2), [("k", "v")], [(1, 5)], [1, 1], {"-1": 3}, {"x": 1}, {"k": [1]}, {1: None}, {"5": -1},
    [0, 2**31], "LATEST", "preferred",
]


def good_value(col):
    t = E.EVENT_ARROW_SCHEMA.field(col).type
    if col in GOOD_STR:
        return st.sampled_from(GOOD_STR[col])
    if pa.types.is_integer(t):
        return st.integers(-2, 12)
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_list(t):
        return st.lists(st.integers(0, 4), max_size=4)
    if col == "config":
        return st.dictionaries(
            st.sampled_from(["min.insync.replicas", "unclean.leader.election.enable", ""]),
            st.one_of(st.text(max_size=3), st.integers(-1, 3), st.booleans(), st.none(), st.just([1])),
            max_size=2,
        ) | st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["1", "x"])), max_size=2)
    if col == "epoch_start_offsets":
        return st.dictionaries(
            st.one_of(st.integers(0, 4), st.integers(0, 4).map(str)), st.integers(0, 12), max_size=3
        ) | st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=3)
    return st.text(max_size=3)


@st.composite
def raw_rows(draw):
    t = draw(st.sampled_from(SPEC_TYPES + ["Bogus", None, 7]))
    used = set(E.EVENT_MODELS[t].model_fields) if t in E.EVENT_MODELS else {"seq", "ts_ms", "topic"}
    row = {}
    for col in E.EVENT_COLUMNS:
        if col == "type":
            continue
        p_include = 9 if col in used else 1
        if draw(st.integers(0, 9)) < p_include:
            if draw(st.integers(0, 9)) < 8:
                row[col] = draw(good_value(col))
            else:
                row[col] = draw(st.sampled_from(BAD_VALUES) | st.none())
    if t is not None:
        row["type"] = t
    if draw(st.booleans()):
        row["unknown_extra"] = draw(st.integers())
    return row


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_rows())
def test_fast_validator_agrees_with_pydantic(row):
    ev, why = E.validate(row)
    pv, perr = pyd(row)
    assert (ev is None) == (pv is None), f"fast: {why!r} pydantic: {perr!r} row: {row!r}"
    if ev is not None:
        assert ev == pv
        assert list(ev) == list(E.EVENT_COLUMNS)
    else:
        assert isinstance(why, str) and why


def test_agreement_sample_has_accepts_for_every_type():
    # deterministic complement to the hypothesis test: valid-biased rows of
    # every type are accepted by both paths
    import random

    rnd = random.Random(7)
    accepted = {t: 0 for t in SPEC_TYPES}
    base = {"topic": "t", "partition": 0, "broker": 1, "replicas": [1, 2], "isr": [1], "leader": 1,
            "leader_epoch": 0, "partition_epoch": 0, "records": 1, "acks": 1, "election_type": "PREFERRED",
            "config": {"min.insync.replicas": "2"}, "broker_epoch": 3, "previous_broker_epoch": -1,
            "epoch_start_offsets": {"0": 0}, "log_end_offset": 4, "hwm": 2, "clean": True,
            "offset_spec": "LATEST", "fetch_offset": 0}
    for i in range(2000):
        t = rnd.choice(SPEC_TYPES)
        row = {"seq": i, "ts_ms": i, "type": t}
        for k, v in base.items():
            if rnd.random() < 0.95:
                row[k] = v if rnd.random() < 0.9 else rnd.choice(BAD_VALUES)
        ev, why = E.validate(row)
        pv, perr = pyd(row)
        assert (ev is None) == (pv is None), (row, why, perr)
        assert ev == pv
        accepted[t] += ev is not None
    assert all(n > 0 for n in accepted.values()), accepted


def test_compiled_from_models():
    # tightening a model bound changes the compiled validator: the fast path
    # is generated from the field metadata, not written by hand
    src = E._VALIDATORS["Produce"].__source__
    assert "1 <= v_records <= 2147483647" in src
    assert "-2147483648 <= v_acks <= 2147483647" in src


def test_validate_table_with_arrow_maps():
    rows = [
        {"seq": 1, "ts_ms": 0, "type": "ReplicaSnapshot", "topic": "t", "partition": 0, "broker": 1,
         "epoch_start_offsets": [(0, 0), (2, 5)], "log_end_offset": 9, "hwm": 9},
        {"seq": 2, "ts_ms": 0, "type": "Fetch", "topic": "t", "partition": 0, "broker": 2, "fetch_offset": -1},
        {"seq": 3, "ts_ms": 0, "type": "AlterConfig", "topic": "t", "config": [("min.insync.replicas", "2")]},
    ]
    table = pa.Table.from_pylist(rows, schema=E.EVENT_ARROW_SCHEMA)
    good, bad = E.validate_table(table)
    assert [g["seq"] for g in good] == [1, 3]
    assert good[0]["epoch_start_offsets"] == {0: 0, 2: 5}
    assert good[1]["config"] == {"min.insync.replicas": "2"}
    assert bad[0][1] == "Fetch row seq 2: fetch_offset -1 is negative"


def test_a_record_epoch_is_bounded_where_int32_headroom_ends():
    """EPOCH_MAX = 2**30 - 1: a recorded leader / partition epoch leaves 2**30 increments before
    the output's int32 columns end; one more is rejected with its column, never overflows."""
    def rec(**kw):
        return dict({"seq": 3, "ts_ms": 0, "type": "PartitionRecord", "topic": "t", "partition": 0,
                     "replicas": [1, 2], "isr": [1], "leader": 1, "leader_epoch": 4, "partition_epoch": 7}, **kw)
    for col in ("leader_epoch", "partition_epoch"):
        ev, why = E.validate(rec(**{col: 2**30 - 1}))
        assert why is None and ev[col] == 2**30 - 1
        ev, why = E.validate(rec(**{col: 2**30}))
        assert ev is None and col in why and str(2**30 - 1) in why, why


def test_plain_rows_check_integer_ranges_and_text_columns():
    """schemas.events.plain_rows, the batch check the readers trust instead of validate(): an int
    out of its column's range, or a text column that breaks its rule, is not plain."""
    n = E.EVENT_ARROW_SCHEMA
    rows = [{"seq": 1, "ts_ms": 0, "type": "Fetch", "topic": "t", "partition": 0, "broker": 1},
            {"seq": 2, "ts_ms": 0, "type": "Fetch", "topic": "t", "partition": -1, "broker": 1},
            {"seq": 3, "ts_ms": 0, "type": "Fetch", "topic": "", "partition": 0, "broker": 1},
            {"seq": 4, "ts_ms": 0, "type": "Produce", "topic": "t", "partition": 0, "broker": 1, "records": -1,
             "acks": 1},
            {"seq": 5, "ts_ms": 0, "type": "Produce", "topic": "t", "partition": 0, "broker": 1, "records": 2,
             "acks": -1}]
    cols = ["seq", "ts_ms", "type", "topic", "partition", "broker", "records", "acks"]
    batch = pa.RecordBatch.from_pylist([{c: r.get(c) for c in cols} for r in rows],
                                       schema=pa.schema([n.field(c) for c in cols]))
    assert E.plain_rows(batch) == [True, False, False, False, True]
    assert [E.validate(r)[0] is not None for r in rows] == [True, False, False, False, True]


def test_a_reason_quotes_a_value_whole_up_to_sixty_characters():
    """A rejection reason names the offending value, cut to about 60 characters so that a huge
    value does not become a huge reason: a repr of exactly 60 stays whole, one of 61 is cut to 60."""
    from schemas.events import _short
    assert _short("x" * 58) == repr("x" * 58) and len(_short("x" * 58)) == 60
    cut = _short("x" * 59)
    assert len(cut) == 60 and cut.endswith("...") and cut.startswith("'xxx")


def test_a_reason_quotes_a_broker_list_whole_up_to_sixty_characters():
    """A duplicate-id reason quotes the broker list: whole up to 60 characters, cut to 60 with its
    closing bracket kept beyond that."""
    def record(isr):
        return E.validate({"seq": 3, "ts_ms": 0, "type": "PartitionRecord", "topic": "t", "partition": 0,
                           "replicas": [1, 2], "isr": isr, "leader": 1, "leader_epoch": 0, "partition_epoch": 0})
    ev, why = record([1, 2, 1])
    assert ev is None and "[1, 2, 1] has duplicate broker ids" in why
    sixty = [1] + list(range(1_000_000, 1_000_006)) + [1]
    assert len(str(sixty)) == 60
    ev, why = record(sixty)
    assert ev is None and f"{sixty} has duplicate broker ids" in why
    ev, why = record([1] + list(range(1000, 1030)) + [1])
    quoted = why[why.index("[1, 1000"):why.index(" has duplicate")]
    assert ev is None and len(quoted) == 60 and quoted.endswith("...]")
