"""jobs.streamio: stream files in name order, raw rows with parse errors."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.streamio import StreamError, iter_raw_rows, list_stream_files, row_to_json
from schemas.events import EVENT_ARROW_SCHEMA, validate


def test_files_in_name_order_hidden_ignored(tmp_path):
    for name in ["part-002.jsonl", "part-001.json", "_SUCCESS", ".part-000.jsonl", "part-003.parquet",
                 "notes.txt", "part-000.ndjson"]:
        (tmp_path / name).write_text("")
    (tmp_path / "sub.jsonl").mkdir()
    assert [p.name for p in list_stream_files(tmp_path)] == [
        "part-000.ndjson", "part-001.json", "part-002.jsonl", "part-003.parquet"]
    with pytest.raises(StreamError, match="does not exist"):
        list_stream_files(tmp_path / "missing")


def test_rows_and_parse_errors_in_order(tmp_path):
    lines = [
        json.dumps({"seq": 1, "ts_ms": 0, "type": "Tick"}),
        "",
        "{not json",
        "[1, 2]",
        json.dumps({"seq": 2, "ts_ms": 0, "type": "Tick", "broker": 1}),
    ]
    (tmp_path / "part-000.jsonl").write_text("\n".join(lines) + "\n")
    rows = [
        {"seq": 3, "ts_ms": 5, "type": "ReplicaSnapshot", "topic": "t", "partition": 0, "broker": 1,
         "epoch_start_offsets": [(0, 0), (1, 4)], "log_end_offset": 6, "hwm": 6},
        {"seq": 4, "ts_ms": 5, "type": "Fetch", "topic": "t", "partition": 0, "broker": 2},
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=EVENT_ARROW_SCHEMA), tmp_path / "part-001.parquet")
    got = list(iter_raw_rows(tmp_path, batch_rows=1))
    assert [(r[0] or {}).get("seq") for r in got] == [1, None, None, 2, 3, 4]
    assert got[1][2].startswith("part-000.jsonl line 3: not valid JSON:")
    assert got[1][1] == "{not json"
    assert got[2][2] == "part-000.jsonl line 4: not a JSON object (got list)"
    assert got[0][1] == lines[0] and got[0][2] is None
    # Parquet rows validate (maps arrive as pairs) and have no raw text
    ev, why = validate(got[4][0])
    assert why is None and ev["epoch_start_offsets"] == {0: 0, 1: 4}
    assert got[4][1] is None
    assert json.loads(row_to_json(got[4][0]))["epoch_start_offsets"] == {"0": 0, "1": 4}
    assert row_to_json(got[0][0], got[0][1]) == lines[0]


@pytest.mark.parametrize("line", [
    '{"seq":1,"ts_ms":2,"type":"Tick"}',
    '{"seq":99999999999999999999999,"ts_ms":3,"type":"Tick","broker":1}',      # past 64 bits: an int
    '{"seq":18446744073709551615,"ts_ms":1}',                                   # u64 max
    '{"seq":-9223372036854775809}',
    '{"replicas":[1,2,99999999999999999999999]}',                               # nested, past 64 bits
    '{"config":{"a":{"b":123456789012345678901234567890}}}',
    '{"seq":1.0,"ts_ms":1e3}', '{"seq":1e400}', '{"seq":NaN}', '{"seq":-Infinity}',
    '{"a":1,"a":2}', '{"t":"\\ud800"}', '{"t":"caf\\u00e9 \\u2603"}',
    '123456789012345678901234567890', '[1,2]', '"x"', 'null', '{"a":1} x', '{"a":01}', '{"a":"\t"}',
    '[' * 1100 + ']' * 1100,
])
def test_json_lines_read_exactly_as_pythons_json(line):
    """orjson reads the lines first, for speed: the rows and error texts must be json.loads's."""
    from jobs.streamio import _loads

    def outcome(f):
        try:
            v = f(line)
        except (ValueError, RecursionError) as e:
            return ("error", type(e).__name__, str(e))
        return ("ok", repr(v), repr(type(v)))
    assert outcome(_loads) == outcome(json.loads)


@pytest.mark.parametrize("number,float_free", [
    ("1.5", False), ("1e3", False), ("1E3", False), ("9" * 19, False), ("-9223372036854775809", False),
    ("123456789012345678", True), ("-12", True), ("0", True)])
@pytest.mark.parametrize("shift", range(0, 24, 3))
def test_float_free_files_read_as_pythons_json(tmp_path, monkeypatch, number, float_free, shift):
    """A file with no number orjson could read as a float skips the per-value float check (_float_free).
    The check reads the file in chunks: a number cut by a chunk boundary (every position, with a small
    chunk) is still seen, and the rows read are json.loads's either way."""
    import jobs.streamio as sio
    monkeypatch.setattr(sio, "_CHUNK", 16)
    line = "x" * shift + '{"seq":' + number + ',"ts_ms":1}'
    text = '{"type":"Tick","seq":1,"ts_ms":1}\n' + line[shift:] + "\n"
    f = tmp_path / "s.jsonl"
    f.write_text(" " * shift + text)
    assert sio._float_free(f) is float_free
    rows = [raw for raw, _, _ in sio.iter_raw_rows(f)]
    assert rows == [json.loads(x) for x in text.split("\n") if x]
    assert [type(v) for v in rows[1].values()] == [type(v) for v in json.loads(line[shift:]).values()]


def test_string_columns_come_as_one_interned_object_per_value(tmp_path):
    """A Parquet string column's values come as to_pylist gives them, nulls included, but each
    distinct value as one interned object (an event's type and topic repeat row after row)."""
    import sys

    from jobs.streamio import _column
    for t in (pa.string(), pa.large_string()):
        vals = ["Fetch", None, "Produce", "Fetch", "t" + "0", None, "\u00fcn\u00ef", "Fetch"]
        a = pa.array(vals, t)
        got, exact = _column(a)
        assert exact and got == vals and got == a.to_pylist()
        assert got[0] is got[3] is got[7] is sys.intern("Fetch") and got[4] is sys.intern("t0")
        sliced, _ = _column(a.slice(2, 4))
        assert sliced == vals[2:6]
    # invalid UTF-8 in a string column: converted value by value as before (not exact)
    bad = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(b"\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"),
                                                  pa.py_buffer(b"a\xff")])
    got, exact = _column(bad)
    assert not exact and got[0] == "a"


def test_plain_rows_read_as_values(tmp_path):
    """events=VALUES: a plain row comes as its own values, in its columns' order, with a layout whose
    key gives (seq, ts_ms, type, topic, partition) (None for a column the batch does not hold) and
    whose JSON is the row's; other rows as their dicts, as with events=True."""
    from jobs.streamio import VALUES, Plain
    rows = [dict(seq=1, ts_ms=5, type="BrokerRegister", broker=1, broker_epoch=10, previous_broker_epoch=-1),
            dict(seq=2, ts_ms=6, type="Fetch", topic="t", partition=0, broker=1),
            dict(seq=3, ts_ms=7, type="Fetch", topic="t", partition=0, broker=1, fetch_offset=-5)]
    cols = ["type", "seq", "ts_ms", "topic", "partition", "broker", "broker_epoch", "previous_broker_epoch",
            "fetch_offset"]
    schema = pa.schema([EVENT_ARROW_SCHEMA.field(c) for c in cols])
    d = tmp_path / "s"
    d.mkdir()
    pq.write_table(pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in rows], schema=schema),
                   d / "part-00000.parquet")
    (a, ta, _), (b, tb, _), (c, tc, _) = list(iter_raw_rows(d, events=VALUES))
    assert type(ta) is Plain and type(tb) is Plain and tc is None and type(c) is dict
    assert ta.names == tuple(cols) and a == ("BrokerRegister", 1, 5, None, None, 1, 10, -1, None)
    assert ta.key(a) == (1, 5, "BrokerRegister", None, None) and tb.key(b) == (2, 6, "Fetch", "t", 0)
    assert row_to_json(b, tb) == '{"type":"Fetch","seq":2,"ts_ms":6,"topic":"t","partition":0,"broker":1}'
    events = list(iter_raw_rows(d, events=True))
    assert [validate(dict(zip(ta.names, v)))[0] for v in (a, b)] == [events[0][0], events[1][0]]
    # a layout without topic or partition at all
    d2 = tmp_path / "s2"
    d2.mkdir()
    pq.write_table(pa.Table.from_pylist([{"seq": 1, "ts_ms": 0, "type": "BrokerUnfence", "broker": 2}]),
                   d2 / "part-00000.parquet")
    [(v, t, _)] = list(iter_raw_rows(d2, events=VALUES))
    assert type(t) is Plain and t.key(v) == (1, 0, "BrokerUnfence", None, None)
    with pytest.raises(ValueError):
        list(iter_raw_rows(d, events=VALUES, foreign=lambda *a: False))
