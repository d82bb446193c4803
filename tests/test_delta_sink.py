"""jobs.delta_sink: exactly-once micro-batch commits into real Delta tables."""

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from jobs.delta_sink import DeltaSink, SinkError, list_tables, read_table, sql
from schemas.tables import TABLES, arrow_schema


def ml(seq, partition=0, idx=0, **kw):
    row = {"topic": "t", "partition": partition, "seq": seq, "idx": idx, "ts_ms": seq * 10,
           "partition_epoch": seq, "leader_epoch": 0, "leader": 1, "replicas": [1, 2, 3],
           "isr": [1, 2], "elr": [], "last_known_elr": [], "adding": [], "removing": [],
           "leader_recovery_state": "RECOVERED", "cause": "CreatePartition"}
    row.update(kw)
    return row


def el(seq, partition=0):
    return {"topic": "t", "partition": partition, "seq": seq, "idx": 0, "ts_ms": seq * 10,
            "leader_epoch": 1, "old_leader": 1, "new_leader": 2, "election": "ISR",
            "reason": "leader fenced", "candidates": [2, 3]}


def ps(partition, seq, leader=1):
    return {"topic": "t", "partition": partition, "seq": seq, "idx": 0, "ts_ms": seq * 10,
            "leader": leader, "leader_epoch": 0, "partition_epoch": 0, "replicas": [1, 2],
            "isr": [1, 2], "leader_hwm": 5, "leader_leo": 7, "leader_leso": 7,
            "replica_states": [{"broker": 1, "alive": True, "fenced": False, "broker_epoch": 3,
                                "role": "leader", "leo": 7, "hwm": 5, "leader_epoch": 0}]}


def progress(batch_id, n):
    return [{"batch_id": batch_id, "engine": "local", "input_rows": n, "applied": n, "rejected": 0,
             "min_seq": 0, "max_seq": n, "max_ts_ms": n * 10}]


def seqs(tables, name):
    return sorted(read_table(tables, name).column("seq").to_pylist())


def test_creates_every_table_with_derived_schema(tmp_path):
    DeltaSink(str(tmp_path))
    assert list_tables(str(tmp_path)) == sorted(TABLES)
    for name in TABLES:
        got = read_table(str(tmp_path), name)
        assert got.num_rows == 0
        assert got.schema.names == arrow_schema(name).names
        for f in arrow_schema(name):
            assert got.schema.field(f.name).nullable == f.nullable, (name, f.name)


def test_replayed_batch_is_not_duplicated(tmp_path):
    d = str(tmp_path)
    sink = DeltaSink(d)
    b0 = {"metadata_log": [ml(1), ml(2)], "elections": [el(2)], "progress": progress(0, 2)}
    b1 = {"metadata_log": [ml(3)], "elections": [], "progress": progress(1, 1)}
    assert sink.commit(0, b0) == {"metadata_log": 2, "elections": 1, "progress": 1}
    assert sink.commit(1, b1)["metadata_log"] == 1
    # same process replays batch 1, then a restarted sink replays 0 and 1
    assert sink.commit(1, b1) == {"metadata_log": 0, "elections": 0, "progress": 0}
    sink2 = DeltaSink(d)
    assert sink2.committed_batch("metadata_log") == 1
    assert sink2.commit(0, b0)["metadata_log"] == 0
    assert sink2.commit(1, b1)["metadata_log"] == 0
    assert seqs(d, "metadata_log") == [1, 2, 3]
    assert seqs(d, "elections") == [2]
    assert sorted(read_table(d, "progress").column("batch_id").to_pylist()) == [0, 1]
    # the recorded app transaction is the batch id
    assert DeltaTable(str(tmp_path / "metadata_log")).transaction_version("isrflow") == 1
    # another app id is independent
    other = DeltaSink(d, app_id="other")
    assert other.committed_batch("metadata_log") is None


def test_crash_between_tables_is_repaired_by_replay(tmp_path):
    d = str(tmp_path)
    sink = DeltaSink(d)
    batch = {"metadata_log": [ml(1)], "elections": [el(1)], "hwm": [], "progress": progress(0, 1)}
    # simulate a crash after metadata_log was committed but before the rest
    sink.commit(0, {"metadata_log": batch["metadata_log"]})
    restarted = DeltaSink(d)
    written = restarted.commit(0, batch)
    assert written == {"metadata_log": 0, "elections": 1, "hwm": 0, "progress": 1}
    assert seqs(d, "metadata_log") == [1]
    assert seqs(d, "elections") == [1]
    # the next batch goes on normally, and a table that skipped empty batches
    # still accepts later ones
    restarted.commit(1, {"metadata_log": [ml(2)], "hwm": [{"topic": "t", "partition": 0, "seq": 2, "idx": 0,
                                                           "ts_ms": 20, "broker": 1, "old_hwm": 0, "new_hwm": 4,
                                                           "trigger": "Fetch"}]})
    assert seqs(d, "metadata_log") == [1, 2]
    assert seqs(d, "hwm") == [2]


def test_partition_state_is_replaced_not_appended(tmp_path):
    d = str(tmp_path)
    sink = DeltaSink(d)
    sink.commit(0, {}, [ps(0, 1), ps(1, 1)])
    sink.commit(1, {}, [ps(1, 5, leader=2)])  # only partition 1 changed
    sink.commit(1, {}, [ps(1, 5, leader=2)])  # replay: no-op
    rows = read_table(d, "partition_state").to_pylist()
    assert [(r["partition"], r["seq"], r["leader"]) for r in rows] == [(0, 1, 1), (1, 5, 2)]
    assert rows[0]["replica_states"][0]["leo"] == 7
    # a restarted sink keeps the untouched partitions
    sink2 = DeltaSink(d)
    sink2.commit(2, {}, [ps(2, 9)])
    rows = read_table(d, "partition_state").to_pylist()
    assert [(r["partition"], r["seq"]) for r in rows] == [(0, 1), (1, 5), (2, 9)]
    assert DeltaTable(str(tmp_path / "partition_state")).transaction_version("isrflow") == 2


def test_arrow_input_and_sql(tmp_path):
    d = str(tmp_path)
    sink = DeltaSink(d)
    tbl = pa.Table.from_pylist([ml(1), ml(2, partition=1)], schema=arrow_schema("metadata_log"))
    sink.commit(0, {"metadata_log": tbl, "elections": [el(2, partition=1)]})
    out = sql(d, "SELECT m.partition, m.cause, e.election, m.isr FROM metadata_log m "
                 "LEFT JOIN elections e ON m.partition = e.partition ORDER BY m.partition")
    assert isinstance(out, pa.Table)
    assert out.to_pylist() == [
        {"partition": 0, "cause": "CreatePartition", "election": None, "isr": [1, 2]},
        {"partition": 1, "cause": "CreatePartition", "election": "ISR", "isr": [1, 2]},
    ]
    assert out.schema.field("cause").type == pa.string()  # not string_view
    assert sql(d, "SELECT count(*) AS n FROM partition_state").column("n").to_pylist() == [0]
    with pytest.raises(SinkError, match="SQL failed"):
        sql(d, "SELECT * FROM no_such_table")


def test_errors_are_readable(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    with pytest.raises(SinkError, match="cannot create tables directory"):
        DeltaSink(str(f / "tables"))
    with pytest.raises(SinkError, match="no Delta tables"):
        sql(str(tmp_path / "empty"), "SELECT 1")
    sink = DeltaSink(str(tmp_path / "t"))
    with pytest.raises(SinkError, match="unknown table"):
        sink.commit(0, {"bogus": [{}]})
    with pytest.raises(SinkError, match="seq is required"):
        sink.commit(0, {"hwm": [{"topic": "t", "partition": 0, "idx": 0, "ts_ms": 1}]})
    bad = pa.table({c: pa.array([None], arrow_schema("violations").field(c).type) for c in arrow_schema("violations").names})
    with pytest.raises(SinkError, match="violations.*topic"):
        sink.commit(0, {"violations": bad})
    with pytest.raises(SinkError, match="no Delta table 'nope'"):
        read_table(str(tmp_path / "t"), "nope")


def test_schema_mismatch_is_refused(tmp_path):
    d = tmp_path / "t"
    DeltaTable.create(str(d / "hwm"), schema=pa.schema([pa.field("x", pa.int32())]))
    with pytest.raises(SinkError, match="table hwm .* has columns"):
        DeltaSink(str(d))


def test_partition_state_upserts_equal_a_dict_of_latest_rows(tmp_path):
    """The Arrow-kept state against the obvious model (a dict of the latest row per key, written in
    key order): known keys only (a take), new keys (a sort), a key twice in one batch (the last
    wins), topics whose UTF-8 bytes and code points must order alike, partitions at int32's ends,
    rows given as dicts or as
    Arrow, and a restart that reloads the table."""
    import random

    from jobs.delta_sink import _upsert
    from schemas.tables import rows_to_arrow
    rnd = random.Random(5)
    topics = ["t", "T", "té", "t\u20ac", "a", "zz"]
    # the int32 range's ends too: the sink orders keys as one int64 per (topic, partition)
    parts = [*range(40), -1, -2**31, 2**31 - 1]
    model: dict = {}
    d = str(tmp_path)
    sink = DeltaSink(d)
    for batch in range(25):
        rows = []
        for _ in range(rnd.choice((1, 3, 8))):
            known = model and rnd.random() < 0.7
            key = rnd.choice(sorted(model)) if known else (rnd.choice(topics), rnd.choice(parts))
            r = dict(ps(key[1], batch * 10 + len(rows), leader=rnd.randrange(5)), topic=key[0])
            rows.append(r)
            model[key] = r
        if batch % 7 == 6:
            sink = DeltaSink(d)                  # restarted: the state comes back from the table
        sink.commit(batch, {}, rows_to_arrow("partition_state", rows) if batch % 2 else rows)
        got = read_table(d, "partition_state").to_pylist()
        assert [(r["topic"], r["partition"], r["seq"], r["leader"]) for r in got] == \
            [(k[0], k[1], model[k]["seq"], model[k]["leader"]) for k in sorted(model)], batch
    # the take path (known keys only) replaces rows in place
    state = sink._state
    key = sorted(model)[1]
    new = _upsert(state, rows_to_arrow("partition_state", [dict(model[key], seq=999)]))
    assert new.num_rows == state.num_rows and new.column("seq")[1].as_py() == 999
    assert new.drop_columns(["seq"]).equals(state.drop_columns(["seq"]))
