"""The columnar fast path of validation (schemas.events.plain_rows, read by jobs.streamio): a row
the batch check accepts must come out of validate() exactly as the row path makes it (the same
event dict, key order included, or the same reason), and the raw dict must be the row path's
(rejected.raw). Random Arrow batches, written to Parquet and read both ways."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobs.streamio as sio
from jobs.streamio import iter_file_rows, row_to_json
from schemas import events as E

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint32(), pa.uint64()]
INT_POOL = [-(2**63), -(2**31) - 1, -(2**31), -2, -1, 0, 1, 2, 5, 2**30 - 1, 2**30, 2**31 - 1, 2**31,
            2**62 - 1, 2**62, 2**63 - 1, 2**64 - 1]
STR_POOL = ["", "t", "orders", "x", "\u00fcn\u00ef", "LATEST", "EARLIEST", "READ_COMMITTED",
            "READ_UNCOMMITTED", "Fetch"]
TYPES = list(E.EVENT_TYPES) + ["Bogus"]


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


@st.composite
def column_type(draw, col: str) -> pa.DataType:
    """The column's canonical Arrow type most of the time, else another one."""
    canon = E.EVENT_ARROW_SCHEMA.field(col).type
    if pa.types.is_list(canon) and draw(st.integers(0, 9)) >= 7:
        # the same lists with wider, unsigned or large-list element types
        return draw(st.sampled_from([pa.list_(pa.int64()), pa.list_(pa.int8()), pa.list_(pa.uint32()),
                                     pa.large_list(pa.int32())]))
    if col == "type" or not (pa.types.is_integer(canon) or pa.types.is_string(canon) or pa.types.is_boolean(canon)):
        return canon
    if draw(st.integers(0, 9)) < 7:
        return canon
    return draw(st.sampled_from(INT_TYPES + [pa.float64(), pa.bool_(), pa.string(), pa.large_string()]))


def value_of(t: pa.DataType, col: str):
    if pa.types.is_integer(t):
        lo, hi = _int_range(t)
        return st.sampled_from([v for v in INT_POOL if lo <= v <= hi])
    if pa.types.is_floating(t):
        return st.sampled_from([0.0, 1.0, 2.5])
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return st.sampled_from(TYPES if col == "type" else STR_POOL)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        # usually broker ids in range, now and then a null, a negative or an out-of-range element
        lo, hi = _int_range(t.value_type)
        odd = [v for v in (None, -1, -(2**31) - 1, 2**31 - 1, 2**31) if v is None or lo <= v <= hi]
        elem = st.one_of(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4), st.sampled_from(odd))
        return st.lists(elem, max_size=3)
    if col == "config":
        return st.lists(st.tuples(st.sampled_from(["min.insync.replicas", "a"]), st.sampled_from(["1", "x"])),
                        max_size=2)
    return st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=2)   # epoch_start_offsets


@st.composite
def batches(draw):
    """(schema, rows): a few rows of random types; each row fills its type's columns most of the
    time (often in range), other columns rarely; random column order, now and then an extra column."""
    cols = [c for c in E.EVENT_COLUMNS if c in ("seq", "ts_ms", "type") or draw(st.integers(0, 9)) < 8]
    cols = draw(st.permutations(cols))
    types = {c: draw(column_type(c)) for c in cols}
    extra = draw(st.booleans())
    n = draw(st.integers(1, 12))
    rows = []
    for i in range(n):
        t = draw(st.sampled_from(TYPES))
        own = set(E.EVENT_MODELS[t].model_fields) if t in E.EVENT_MODELS else set()
        # a third of the rows leave every other type's column null (the rows a plain check can take)
        # and fill an optional map column (a creation's config) only half the time
        others = 0 if draw(st.integers(0, 2)) == 0 else 1
        row = {}
        for c in cols:
            if c == "type":
                row[c] = t if draw(st.integers(0, 19)) else None
            elif c == "seq" and pa.types.is_integer(types[c]):
                row[c] = i + 1 if draw(st.integers(0, 9)) else draw(value_of(types[c], c))
            elif draw(st.integers(0, 9)) < ((5 if c == "config" else 9) if c in own else others):
                if pa.types.is_integer(types[c]) and draw(st.integers(0, 9)) < 7:
                    lo, hi = _int_range(types[c])
                    row[c] = min(max(draw(st.integers(0, 6)), lo), hi)      # usually in range
                elif c == "topic" and pa.types.is_string(types[c]) and draw(st.booleans()):
                    row[c] = "t"
                else:
                    row[c] = draw(value_of(types[c], c))
            else:
                row[c] = None
        if extra:
            row["unknown_extra"] = draw(st.sampled_from([None, None, 1]))
        rows.append(row)
    fields = [pa.field(c, types[c]) for c in cols] + ([pa.field("unknown_extra", pa.int64())] if extra else [])
    return pa.schema(fields), rows


def _read_both(path, monkeypatch):
    fast = list(iter_file_rows(path))
    monkeypatch.setattr(sio, "PLAIN_ROWS", False)
    slow = list(iter_file_rows(path))
    monkeypatch.setattr(sio, "PLAIN_ROWS", True)
    return fast, slow


def _canonical(schema: pa.Schema, rows: list[dict], row: dict) -> bool:
    """Every non-null value of the row is in a column of the type's own, with its canonical type,
    and no row of the batch has a value in a column that is not an event column."""
    own = E.PLAIN_TYPES[row["type"]]
    if any(r.get("unknown_extra") is not None for r in rows):
        return False
    # a map column (CreatePartition's config) is plain only where it is null
    return all(v is None or c in ("seq", "type") or (
        c in own and own[c][0].kind != "map" and schema.field(c).type == E.EVENT_ARROW_SCHEMA.field(c).type)
        for c, v in row.items())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(batches())
def test_plain_rows_agree_with_the_row_path(tmp_path_factory, monkeypatch, case):
    schema, rows = case
    path = tmp_path_factory.mktemp("plain") / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    fast, slow = _read_both(path, monkeypatch)
    events = list(iter_file_rows(path, events=True))
    assert len(fast) == len(slow) == len(events) == len(rows)
    for (a, ta, _), (e, te, ee), (b, _, _) in zip(fast, events, slow):
        # read as events: a plain row is validate()'s own event (key order included) and gives the
        # row path's rejected.raw back; every other row is the raw dict, as without events
        assert ta is None and ee is None
        if type(a) is E.ValidEvent:
            assert type(te) is sio.Plain and type(e) is dict
            assert list(e) == list(E.EVENT_COLUMNS) and (e, None) == E.validate(b)
            assert row_to_json(e, te) == row_to_json(b)
        else:
            assert te is None and type(e) is dict and list(e.items()) == list(a.items())
    for (a, _, ea), (b, _, eb), row in zip(fast, slow, rows):
        assert ea is None and eb is None and type(b) is dict
        # the raw row: same keys, order and values (rejected.raw's JSON), ValidEvent or not
        assert dict(a) == b and list(a) == list(b)
        assert row_to_json(a) == row_to_json(b)
        ev_a, why_a = E.validate(a)
        ev_b, why_b = E.validate(b)
        assert why_a == why_b, row
        assert ev_a == ev_b
        if ev_a is not None:
            assert type(ev_a) is dict and list(ev_a) == list(E.EVENT_COLUMNS)
        if type(a) is E.ValidEvent:
            assert ev_b is not None and row["type"] in E.PLAIN_TYPES
        elif ev_b is not None and row["type"] in E.PLAIN_TYPES and _canonical(schema, rows, row) \
                and schema.field("seq").type == pa.int64():
            pytest.fail(f"a plain row took the row path: {row}")


def test_a_canonical_stream_is_read_plain(tmp_path, monkeypatch):
    """The common case is taken: valid data-plane rows and creations of the canonical schema are
    ValidEvents (a repeated or the highest broker id too); a creation with a config (a map column), with a negative or null replica id,
    and the invalid rows are not; validate gives the same."""
    rows = []
    for i in range(1, 201):
        r = dict.fromkeys(E.EVENT_COLUMNS)
        r.update(seq=i, ts_ms=i, topic="t", partition=i % 3, broker=i % 4)
        if i % 10 == 0:
            odd = {50: [0, -1], 100: [1, None], 150: [2, 2**31 - 1], 160: [3, 3]}.get(i, [0, 1, 2])
            r.update(type="CreatePartition", replicas=odd, broker=None,
                     config=[("min.insync.replicas", "2")] if i == 200 else None)
        elif i % 10 == 1:
            r.update(type="Fetch", fetch_offset=-1)                      # out of range: rejected
        elif i % 2:
            r.update(type="Produce", records=1, acks=-1)
        else:
            r.update(type="Fetch", target=0)
        rows.append(r)
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=E.EVENT_ARROW_SCHEMA), path)
    fast, slow = _read_both(path, monkeypatch)
    kinds = [type(a) is E.ValidEvent for a, _, _ in fast]
    assert kinds == [r["type"] in ("Fetch", "Produce") and r["fetch_offset"] is None
                     or r["type"] == "CreatePartition" and r["seq"] not in (50, 100, 200)
                     for r in rows]
    assert sum(kinds) == 160 + 17
    assert [type(t) is sio.Plain for _, t, _ in iter_file_rows(path, events=True)] == kinds
    for (a, _, _), (b, _, _) in zip(fast, slow):
        assert E.validate(a) == E.validate(b)


def test_a_row_without_a_type_is_not_plain(tmp_path, monkeypatch):
    """A file whose `type` column may hold nulls (not the canonical schema, where it is required):
    a row with no type but a Produce's or a Fetch's columns in range is not plain, and validate
    rejects it; the typed rows around it are plain."""
    sch = E.EVENT_ARROW_SCHEMA
    sch = sch.set(sch.get_field_index("type"), sch.field("type").with_nullable(True))
    rows = []
    for i in range(1, 41):
        r = dict.fromkeys(E.EVENT_COLUMNS)
        r.update(seq=i, ts_ms=i, topic="t", partition=i % 3, broker=i % 4)
        if i % 2:
            r.update(type="Produce" if i % 4 == 1 else None, records=1, acks=-1)
        else:
            r.update(type="Fetch" if i % 4 == 2 else None, target=0)
        rows.append(r)
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=sch), path)
    fast, slow = _read_both(path, monkeypatch)
    assert [type(a) is E.ValidEvent for a, _, _ in fast] == [r["type"] is not None for r in rows]
    for (a, _, _), (b, _, _), r in zip(fast, slow, rows):
        assert E.validate(a) == E.validate(b)
        assert (E.validate(a)[0] is None) == (r["type"] is None)


def test_a_value_in_an_unknown_column_keeps_the_batch_on_the_row_path(tmp_path, monkeypatch):
    """The reader's dict of every row holds an unknown column's key once any row of the batch has
    a value in it; validate's dict never does (found by CI's hypothesis run)."""
    rows = [{"seq": 1, "ts_ms": 0, "type": "ConsumerFetch", "topic": "t", "partition": 0, "broker": 0,
             "fetch_offset": 0, "unknown_extra": None},
            {"seq": 2, "ts_ms": 0, "type": "ConsumerFetch", "topic": "t", "partition": 0, "broker": 0,
             "fetch_offset": 0, "unknown_extra": 1}]
    path = tmp_path / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    fast, slow = _read_both(path, monkeypatch)
    assert [type(a) for a, _, _ in fast] == [dict, dict]
    for (a, _, _), (b, _, _) in zip(fast, slow):
        ev, why = E.validate(a)
        assert why is None and list(ev) == list(E.EVENT_COLUMNS) and E.validate(b) == (ev, None)


def test_a_batch_the_check_cannot_read_takes_the_row_path():
    # no type column, a repeated name, seq not an integer column: None (every row by the row path)
    t = pa.table({"seq": [1], "ts_ms": [1]})
    assert E.plain_rows(t.to_batches()[0]) is None
    b = pa.RecordBatch.from_arrays([pa.array([1]), pa.array(["Fetch"]), pa.array([2])], ["seq", "type", "seq"])
    assert E.plain_rows(b) is None
    b = pa.RecordBatch.from_arrays([pa.array(["1"]), pa.array(["Fetch"])], ["seq", "type"])
    assert E.plain_rows(b) is None


def test_a_plain_row_the_core_rejects_keeps_its_raw_json(tmp_path, monkeypatch):
    """The in-process replay reads plain rows as events (iter_raw_rows(events=True)). A plain row
    the core rejects -- here fetches and produces for a partition never created, and one out of
    order -- still gets the row path's rejected.raw: its own columns, in the file's order."""
    from jobs.local_engine import LocalEngine, _batches
    from jobs.streamio import iter_raw_rows
    from protocol.config import EngineConfig
    cols = ["type", "seq", "ts_ms", "topic", "partition", "broker", "broker_epoch", "previous_broker_epoch",
            "target", "records", "acks", "replicas"]
    rows = [dict(type="BrokerRegister", seq=1, ts_ms=1, broker=1, broker_epoch=10, previous_broker_epoch=-1),
            dict(type="BrokerUnfence", seq=2, ts_ms=2, broker=1),
            dict(type="CreatePartition", seq=3, ts_ms=3, topic="t", partition=0, replicas=[1]),
            dict(type="Fetch", seq=4, ts_ms=4, topic="t", partition=7, broker=1, target=1),
            dict(type="Produce", seq=5, ts_ms=5, topic="u", partition=0, broker=1, records=2, acks=-1),
            dict(type="Produce", seq=6, ts_ms=6, topic="t", partition=0, broker=1, records=2, acks=1),
            dict(type="Fetch", seq=6, ts_ms=7, topic="t", partition=0, broker=1)]
    schema = pa.schema([E.EVENT_ARROW_SCHEMA.field(c) for c in cols])
    s = tmp_path / "s"
    s.mkdir()
    pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows], schema=schema),
                   s / "part-00000.parquet")
    assert sum(type(t) is sio.Plain for _, t, _ in iter_raw_rows(s, events=True)) == 7  # the creation too

    def rejected(events):
        [(tables, _, _)] = list(_batches(LocalEngine(EngineConfig({})), [list(iter_raw_rows(s, events=events))], 100))
        return tables["rejected"]
    got = rejected(True)
    assert len(got) == 3 and got == rejected(False)
    assert [r["raw"] for r in got] == [
        '{"type":"Fetch","seq":4,"ts_ms":4,"topic":"t","partition":7,"broker":1,"target":1}',
        '{"type":"Produce","seq":5,"ts_ms":5,"topic":"u","partition":0,"broker":1,"records":2,"acks":-1}',
        '{"type":"Fetch","seq":6,"ts_ms":7,"topic":"t","partition":0,"broker":1}']


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(batches())
def test_the_spark_scan_routes_the_same_events_and_rejections_with_plain_rows_read_as_events(
        tmp_path_factory, monkeypatch, case):
    """The Spark source reads plain rows as their events and ships their own columns (jobs.spark_source
    scan_rows / chunk_events); without the batch check every row is validated and ships every event
    column. Both give each bucket the same events (key order included) and the same rejected rows."""
    from jobs.spark_source import chunk_events, run_scan, unpack
    schema, rows = case
    path = tmp_path_factory.mktemp("scan") / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)

    def scan():
        out, carry = run_scan([(0, str(path))], (0, 0), 4, chunk_rows=5)
        got = []
        for row in out:
            items = unpack(row[6])
            for item, ev in zip(items, chunk_events(items)):
                got.append((row[0], ev, item[3]) if ev is not None else (row[0], None, item[1]))
        return [row[:6] for row in out], got, carry

    fast = scan()
    monkeypatch.setattr(sio, "PLAIN_ROWS", False)
    slow = scan()
    monkeypatch.setattr(sio, "PLAIN_ROWS", True)
    assert fast == slow
    for _b, ev, _x in fast[1]:
        assert ev is None or list(ev) == list(E.EVENT_COLUMNS)


@st.composite
def creations(draw):
    """(schema, rows): creations and reassignments of the canonical columns, with a replica list of
    random elements (ids, null, negative, the int32 extremes), now and then a config, among
    fetches; the list column's element type is int32, int64 or uint32 (unsigned: the row path)."""
    list_type = draw(st.sampled_from([pa.list_(pa.int32()), pa.list_(pa.int64()), pa.large_list(pa.int32()),
                                      pa.list_(pa.uint32())]))
    lo, hi = _int_range(list_type.value_type)
    elem = st.one_of(st.integers(0, 5), st.sampled_from([v for v in (None, -1, 0, 2**31 - 1, 2**31)
                                                         if v is None or lo <= v <= hi]))
    # the config column as a map (its type), or a type no config can have (the row path rejects it)
    config_type = draw(st.sampled_from([E.EVENT_ARROW_SCHEMA.field("config").type, pa.bool_(), pa.string()]))
    config_value = {pa.bool_(): True, pa.string(): "min.insync.replicas=2"}.get(config_type,
                                                                               [("min.insync.replicas", "2")])
    rows = []
    for i in range(draw(st.integers(1, 10))):
        t = draw(st.sampled_from(["CreatePartition", "Reassign", "Fetch"]))
        r = {"seq": i + 1, "ts_ms": i, "type": t, "topic": "t", "partition": draw(st.integers(0, 2)),
             "broker": None, "replicas": None, "config": None}
        if t == "Fetch":
            r["broker"] = draw(st.integers(0, 3))
        else:
            r["replicas"] = draw(st.one_of(st.none(), st.lists(elem, max_size=4)))
            if t == "CreatePartition" and draw(st.integers(0, 3)) == 0:
                r["config"] = config_value
        rows.append(r)
    fields = [E.EVENT_ARROW_SCHEMA.field(c) for c in ("seq", "ts_ms", "type", "topic", "partition", "broker")] + [
        pa.field("config", config_type), pa.field("replicas", list_type)]
    return pa.schema(fields), rows


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(creations())
def test_list_columns_are_checked_column_wise(tmp_path_factory, monkeypatch, case):
    """A row with a list of broker ids is plain exactly when validate() keeps it as it stands:
    every element an id in range (a repeat or an empty list is Kafka's answer, not a rejection),
    the list present where the type requires it, no config (a map column), a signed element type
    (or no list: a reassignment's cancel); its event is validate()'s."""
    schema, rows = case
    path = tmp_path_factory.mktemp("lists") / "part-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    fast, slow = _read_both(path, monkeypatch)
    events = list(iter_file_rows(path, events=True))
    signed = pa.types.is_signed_integer(schema.field("replicas").type.value_type)
    for (a, _, _), (b, _, _), (e, te, _), r in zip(fast, slow, events, rows):
        ev, why = E.validate(b)
        assert E.validate(a) == (ev, why)
        expect = why is None and (signed or r["replicas"] is None) and r["config"] is None
        assert (type(a) is E.ValidEvent) == expect, (r, why)
        if expect:
            assert type(te) is sio.Plain and e == ev and list(e) == list(E.EVENT_COLUMNS)
            assert row_to_json(e, te) == row_to_json(b)


def test_only_lists_of_plain_ids_are_checked_column_wise():
    """A list column is read column-wise only when validate() keeps its valid values as they are
    and the batch check can see every rule: integers, never null, no uniqueness rule (repeats are
    not looked for), no normalizer. Lists that do not qualify leave their type to the row path."""
    from typing import Annotated, Optional

    from schemas.events import UNIQUE, BrokerId, _plain_list, _Spec
    assert _plain_list(_Spec(list[BrokerId]))
    assert _plain_list(_Spec(Optional[list[BrokerId]]))
    assert not _plain_list(_Spec(list[Optional[BrokerId]]))          # a null element is valid there
    assert not _plain_list(_Spec(Annotated[list[BrokerId], UNIQUE]))   # repeats are a rejection there
    assert not _plain_list(_Spec(list[str]))
    assert not _plain_list(_Spec(list[Annotated[int, E.BeforeValidator(int)]]))


def test_the_event_makers_are_kept_per_layout_and_bounded(monkeypatch):
    """plain_event_maker generates one function per column layout and keeps it: a stream's files
    with a few layouts reuse theirs, file after file; a stream with more than 256 layouts (files
    written by many tools) drops the kept ones rather than growing without bound."""
    monkeypatch.setattr(E, "_MAKERS", {})
    a = E.plain_event_maker(("seq", "type", "ts_ms"))
    b = E.plain_event_maker(("type", "seq", "ts_ms"))
    assert a is not b
    assert E.plain_event_maker(("seq", "type", "ts_ms")) is a and E.plain_event_maker(("type", "seq", "ts_ms")) is b
    assert a(7, "Fetch", 9) == {**E._PAD, "seq": 7, "type": "Fetch", "ts_ms": 9}
    assert E.plain_event_maker(("seq", "seq")) is None and E.plain_event_maker(("seq", "nope")) is None
    cols = [c for c in E.EVENT_COLUMNS if c not in ("seq", "type")]
    for i in range(300):
        E.plain_event_maker(("seq", "type", cols[i % len(cols)], cols[(i // len(cols) + 1 + i) % len(cols)]))
        assert len(E._MAKERS) <= 256
    assert len(E._MAKERS) > 1
