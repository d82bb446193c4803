"""Hostile input: whatever bytes a stream holds, a replay exits 0, every row is applied or in
`rejected` (raw text + a reason naming the column and the limit), `input_rows = applied +
rejected`, and both engines write the same tables.

* a seeded mutator turns valid streams into hostile ones (8% of lines: columns dropped, wrong
  types, huge / negative integers, NaN, long strings, truncated JSON, binary garbage, empty
  lines, duplicated rows, arrays, lone surrogates, deep nesting);
* Parquet files with odd column types, bytes that are not UTF-8, corrupt files;
* hand-written rows with their exact `rejected` reason;
* hypothesis: any rows of any JSON-like values (huge ints, floats, surrogates, bytes, nesting)
  are applied or rejected and every output table converts to Arrow.
The Spark engine runs once (marked spark); the rest compares the in-process engine with the
Spark engine's data flow emulated without Spark (tests.spark_streams.emulate_spark).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.cli import main as cli_main
from jobs.delta_sink import read_table
from jobs.local_engine import LocalEngine, replay_local
from jobs.streamio import row_to_json
from protocol.config import EngineConfig
from schemas.events import EVENT_COLUMNS, EVENT_TYPES
from schemas.tables import rows_to_arrow
from tests.delta_compare import diff_tables, progress_totals
from tests.gen import random_schedule
from tests.spark_streams import emulate_spark
from tests.test_spark_emulation import canon, local_rows

HUGE = [2**31, 2**63, -(2**63) - 1, 10**30, 2**64, 2**62, 2**30, -1, -(2**31) - 1]


def _mutate_row(d: dict, rng: random.Random) -> str | bytes | None:
    """One hostile line from a valid row (None: drop nothing, keep the row)."""
    keys = list(d)
    k = rng.choice(keys)
    m = rng.randrange(17)
    if m == 0:
        d.pop(k)
    elif m == 1:
        d[k] = str(d[k])                                  # ints in string fields and back
    elif m == 2:
        d[k] = rng.choice(HUGE)
    elif m == 3:
        d[k] = float(d[k]) if type(d[k]) is int else 3.5   # floats for ints
    elif m == 4:
        return json.dumps(d).replace(json.dumps(d[k]), rng.choice(["NaN", "Infinity", "-Infinity", "1e999"]), 1)
    elif m == 5:
        d[k] = "x" * rng.choice([1, 5000, 100_000])
    elif m == 6:
        s = json.dumps(d)
        return s[: rng.randrange(1, len(s))]               # truncated JSON
    elif m == 7:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
    elif m == 8:
        return ""
    elif m == 9:
        return json.dumps([d])                             # an array, not an object
    elif m == 10:
        return json.dumps(d).replace(json.dumps(d[k]), '"\\ud800"', 1)  # lone surrogate
    elif m == 11:
        return "[" * 100_000                               # nested too deeply for json
    elif m == 12:
        d[k] = [d[k], None, {"a": 1}]
    elif m == 13:
        d[k] = True
    elif m == 14:
        d["config"] = {"\udfff": 1, "x": [1]} if rng.random() < 0.5 else {"a": "\ud800"}
    elif m == 15:
        return json.dumps(d).encode("utf-8")[:-3] + b"\xff\xfe\"}"   # not UTF-8
    else:
        d["seq"] = 10**25 if rng.random() < 0.5 else -(2**70)
    return json.dumps(d)


def hostile_lines(events: list[dict], seed: int, rate: float = 0.08) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for ev in events:
        line = json.dumps(ev)
        if rng.random() < rate:
            if rng.random() < 0.2:
                out.append(line.encode())                  # duplicated row
                out.append(line.encode())
                continue
            bad = _mutate_row(dict(ev), rng)
            out.append(bad if isinstance(bad, bytes) else bad.encode("utf-8", "surrogatepass"))
        else:
            out.append(line.encode())
    return out


def write_lines(d: Path, lines: list[bytes], n_files: int = 3) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    per = -(-len(lines) // n_files)
    for i in range(n_files):
        (d / f"part-{i:03d}.jsonl").write_bytes(b"\n".join(lines[i * per:(i + 1) * per]) + b"\n")
    return d


def n_rows(lines: list[bytes]) -> int:
    """Rows the reader sees: non-blank lines (a line may hold several after a byte mutation)."""
    return sum(1 for ln in b"\n".join(lines).split(b"\n") if ln.decode("utf-8", "replace").strip())


def _replay(stream, tables, engine="local", *extra) -> int:
    return cli_main(["replay", str(stream), "--tables", str(tables), "--engine", engine, *extra])


def assert_emulated_spark_equals_local(stream, cfg, n_buckets, files_per_batch):
    ref = local_rows(stream, cfg)
    got = emulate_spark(stream, cfg, n_buckets, files_per_batch)
    assert canon(got) == canon(ref)
    assert got["_stats"] == ref["_stats"]
    st = ref["_stats"]
    assert st["n_in"] == st["applied"] + st["rejected"]


@pytest.mark.parametrize("seed", [1, 2, 3, 5])
def test_mutated_streams_local_and_emulated_spark(tmp_path, seed):
    events = random_schedule(seed, 250, partitions=3)
    lines = hostile_lines(events, seed)
    stream = write_lines(tmp_path / "s", lines)
    tables = tmp_path / "t"
    assert _replay(stream, tables) == 0
    tot = progress_totals(tables)
    assert tot["input_rows"] == n_rows(lines) == tot["applied"] + tot["rejected"]
    assert tot["rejected"] > 5
    rej = read_table(str(tables), "rejected").to_pylist()
    assert len(rej) == tot["rejected"]
    assert all(r["raw"] is not None and r["reason"] for r in rej)
    # the Spark engine's data flow (reader scan, buckets, timers) gives the same rows
    assert_emulated_spark_equals_local(stream, EngineConfig({}), 3, 1)


def test_any_bytes_exit_zero(tmp_path):
    rng = random.Random(5)
    s = tmp_path / "s"
    s.mkdir()
    (s / "000.jsonl").write_bytes(bytes(rng.randrange(256) for _ in range(20_000)))
    (s / "001.parquet").write_bytes(bytes(rng.randrange(256) for _ in range(5_000)))
    (s / "002.parquet").write_bytes(b"")
    (s / "003.json").write_bytes(b"PAR1" + bytes(rng.randrange(256) for _ in range(300)) + b"PAR1")
    good = pa.table({"seq": [1, 2], "ts_ms": [0, 0], "type": ["Tick", "Tick"]})
    pq.write_table(good, s / "004.parquet")
    data = (s / "004.parquet").read_bytes()
    (s / "005.parquet").write_bytes(data[: len(data) // 2] + data[len(data) // 2:][::-1])
    assert _replay(s, tmp_path / "t") == 0
    tot = progress_totals(tmp_path / "t")
    assert tot["input_rows"] == tot["applied"] + tot["rejected"]
    assert tot["applied"] == 2
    reasons = [r["reason"] for r in read_table(str(tmp_path / "t"), "rejected").to_pylist()]
    assert any(r.startswith("001.parquet: not a readable Parquet file") for r in reasons)
    assert any(r.startswith("002.parquet: not a readable Parquet file") for r in reasons)


def odd_parquet(path: Path) -> int:
    """A Parquet file with odd column types; returns its row count."""
    n = 6
    bad_utf8 = pa.array([b"t", b"\xff\xfe", b"t", b"t", b"t", b"t"]).view(pa.string())
    t = pa.table({
        "seq": pa.array([1, 2, 3, 2**63 + 5, 5, 6], pa.uint64()),
        "ts_ms": pa.array([0, 0, 1, 2, 3, 4], pa.int16()),
        "fetch_offset": pa.array([None, 1.5, None, None, None, None], pa.float32()),
        "type": pa.array(["CreatePartition", "Fetch", "Tick", "Tick", "Produce", "BrokerRegister"]).dictionary_encode(),
        "topic": bad_utf8,
        "partition": pa.array([0, 0, 0, 0, 2**40, 0], pa.int64()),
        "broker": pa.array([None, None, None, None, "1", None]),
        "replicas": pa.array([[1], None, None, None, None, None], pa.list_(pa.int64())),
        "records": pa.array([None, None, None, None, 1, None], pa.decimal128(10, 0)),
        "config": pa.array([[(b"\xff", "1")], None, None, None, None, None], pa.map_(pa.binary(), pa.string())),
        "broker_epoch": pa.array([None] * 5 + [1], pa.timestamp("ms")),
        "clean": pa.array([{"a": 1}] * n),
    })
    pq.write_table(t, path)
    return n


def test_parquet_odd_types(tmp_path):
    s = tmp_path / "s"
    s.mkdir()
    n = odd_parquet(s / "000.parquet")
    pq.write_table(pa.table({"seq": pa.array([10], pa.int64()), "ts_ms": [5], "type": ["Tick"]}), s / "001.parquet")
    assert _replay(s, tmp_path / "t") == 0
    tot = progress_totals(tmp_path / "t")
    assert tot["input_rows"] == n + 1 == tot["applied"] + tot["rejected"]
    rej = {r["reason"] for r in read_table(str(tmp_path / "t"), "rejected").to_pylist()}
    assert "Fetch row seq 2: topic must be a string, got bytes b'\\xff\\xfe'" in rej
    assert "row without seq (Tick row): seq 9223372036854775813 must be <= 9223372036854775807" in rej
    assert "Produce row seq 5: topic must be a string, got bytes b't'" not in rej
    assert "Produce row seq 5: partition 1099511627776 must be <= 2147483647" in rej
    assert any(r.startswith("CreatePartition row seq 1: config ") for r in rej), rej
    assert_emulated_spark_equals_local(s, EngineConfig({}), 2, 1)


# --------------------------------------------------------------- exact rows in `rejected`

EXACT = [
    ('{"seq":99999999999999999999999,"ts_ms":3,"type":"Tick","broker":1}',
     {"seq": None, "partition": None,
      "reason": "row without seq (Tick row): seq 99999999999999999999999 must be <= 9223372036854775807"}),
    ('{"seq":5,"ts_ms":3,"type":"Fetch","topic":"t","partition":9223372036854775808,"broker":1}',
     {"seq": 5, "topic": "t", "partition": None,
      "reason": "Fetch row seq 5: partition 9223372036854775808 must be <= 2147483647"}),
    ('{"seq":6,"ts_ms":-3,"type":"Tick"}',
     {"seq": 6, "ts_ms": -3, "reason": "Tick row seq 6: ts_ms -3 is negative"}),
    ('{"seq":7,"ts_ms":3,"type":"Produce","topic":"t","partition":0,"broker":1,"records":1.0,"acks":1}',
     {"seq": 7, "partition": 0, "reason": "Produce row seq 7: records must be an integer, got float 1.0"}),
    ('{"seq":8,"ts_ms":3,"type":"Fetch","topic":"\\ud800x","partition":0,"broker":1}',
     {"seq": 8, "topic": None,
      "reason": "Fetch row seq 8: topic '\\ud800x' is not valid Unicode text (lone surrogate)"}),
    ('{"seq":9,"ts_ms":3,"type":"PartitionRecord","topic":"t","partition":0,"replicas":[1],"isr":[1],'
     '"leader":1,"leader_epoch":2147483647,"partition_epoch":0}',
     {"seq": 9, "reason": "PartitionRecord row seq 9: leader_epoch 2147483647 must be <= 1073741823"}),
    ('{"seq":10,"ts_ms":3,"type":"Tick","broker":"1"}',
     {"seq": 10, "reason": "Tick row seq 10: broker must be an integer, got str '1'"}),
    ('[{"seq":11,"ts_ms":3,"type":"Tick"}]',
     {"seq": None, "reason": "000.jsonl line 9: not a JSON object (got list)"}),
    ('{"seq":12,"ts_ms":3,"type":"Ti',
     {"seq": None, "reason": "000.jsonl line 10: not valid JSON: Unterminated string starting at: "
                             "line 1 column 28 (char 27)"}),
    ("[" * 50_000, {"seq": None, "reason": "000.jsonl line 11: not valid JSON: nested too deeply"}),
    ('{"seq":13,"ts_ms":4611686018427387904,"type":"Tick"}',
     {"seq": 13, "ts_ms": 4611686018427387904,
      "reason": "Tick row seq 13: ts_ms 4611686018427387904 must be <= 4611686018427387903"}),
    ('{"seq":14,"ts_ms":3,"type":"' + "Z" * 3000 + '"}',
     {"seq": 14, "reason": "row seq 14: unknown event type '" + "Z" * 56 + "... (expected one of "
                           "CreatePartition, AlterConfig, BrokerRegister, BrokerUnfence, BrokerFence, "
                           "BrokerControlledShutdown, Reassign, ElectLeaders, PartitionRecord, "
                           "ReplicaSnapshot, BrokerCrash, ReplicaLogLoss, AlterPartitionArrive, "
                           "AlterPartitionResponse, MetadataSync, Produce, Fetch, Tick, ListOffsets, "
                           "ConsumerFetch)"}),
    ('{"seq":15,"ts_ms":4611686018427387903,"type":"Tick"}',
     {"seq": 15, "reason": "Tick row seq 15: ts_ms 4611686018427387903 is 4611686018427387903 ms past the "
                           "stream's time 0, more than input.max.time.jump.ms=604800000 (a corrupt "
                           "timestamp? every periodic timer would fire across the gap; --set "
                           "input.max.time.jump.ms=0 lifts the limit); dropped"}),
]


def _exact_stream(tmp_path) -> Path:
    s = tmp_path / "s"
    s.mkdir()
    lines = ['{"seq":1,"ts_ms":0,"type":"Tick"}'] + [line for line, _ in EXACT]
    (s / "000.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return s


def test_exact_rejections(tmp_path):
    s = _exact_stream(tmp_path)
    t = tmp_path / "t"
    assert _replay(s, t) == 0
    rej = read_table(str(t), "rejected").to_pylist()
    by_raw = {r["raw"]: r for r in rej}
    assert len(rej) == len(EXACT)
    for line, want in EXACT:
        got = by_raw[line]
        for k, v in want.items():
            assert got[k] == v, (line[:80], k, got[k])
    tot = progress_totals(t)
    assert tot == {"input_rows": len(EXACT) + 1, "applied": 1, "rejected": len(EXACT)}


@pytest.mark.spark
def test_spark_engine_hostile_equals_local(spark, tmp_path):
    """One Spark run over a mutated JSON stream plus the odd Parquet and corrupt files."""
    from jobs.spark_engine import replay_spark

    events = random_schedule(4, 200, partitions=3)
    lines = hostile_lines(events, 4)
    s = write_lines(tmp_path / "s", lines, n_files=2)
    n_par = odd_parquet(s / "part-900.parquet")
    (s / "part-901.parquet").write_bytes(b"PAR1 not really")
    pq.write_table(pa.table({"seq": pa.array([None] * 2, pa.int64())}), s / "part-902.parquet")  # all null
    cfg = EngineConfig({})
    ref = tmp_path / "local"
    loc = replay_local(str(s), str(ref), cfg)
    assert loc["input_rows"] == n_rows(lines) + n_par + 1 + 2 == loc["applied"] + loc["rejected"]
    out = tmp_path / "spark"
    summ = replay_spark(str(s), str(out), cfg, checkpoint=str(tmp_path / "ck"), max_files_per_trigger=2,
                        shuffle_partitions=2, n_buckets=3, spark=spark)
    assert (summ["input_rows"], summ["applied"], summ["rejected"]) == (
        loc["input_rows"], loc["applied"], loc["rejected"])
    tot = progress_totals(out)
    assert tot["input_rows"] == loc["input_rows"] == tot["applied"] + tot["rejected"]
    assert diff_tables(ref, out) == {}


def test_bytes_not_utf8_bom_null_rows_and_file_names(tmp_path):
    s = tmp_path / "s"
    s.mkdir()
    (s / "000.jsonl").write_bytes(
        b'\xef\xbb\xbf{"seq":1,"ts_ms":0,"type":"Tick"}\n'                   # a byte order mark: read
        b'{"seq":2,"ts_ms":0,"type":"Fetch","topic":"a\xffb","partition":0,"broker":1}\n'
        b'\x00\x01\n')
    pq.write_table(pa.table({"seq": pa.array([None] * 3, pa.int64()), "x": pa.nulls(3)}), s / "001.parquet")
    (s / os.fsdecode(b"002-\xff.jsonl")).write_bytes(                   # a file name that is not UTF-8
        b'{"seq":3,"ts_ms":1,"type":"Tick"}\n{"seq":3,\n')
    t = tmp_path / "t"
    assert _replay(s, t) == 0
    rej = [(r["raw"], r["reason"]) for r in read_table(str(t), "rejected").to_pylist()]
    assert ('{"seq":2,"ts_ms":0,"type":"Fetch","topic":"a\\xffb","partition":0,"broker":1}',
            "000.jsonl line 2: not valid UTF-8 (byte \\xff at character 45)") in rej
    assert rej.count(("{}", "row without seq: missing required column 'seq'")) == 3   # all-null rows count
    assert ('{"seq":3,', "002-\\udcff.jsonl line 2: not valid JSON: Expecting property name enclosed in "
                         "double quotes: line 1 column 10 (char 9)") in rej
    tot = progress_totals(t)
    assert tot == {"input_rows": 8, "applied": 2, "rejected": 6}


# ------------------------------------------- any row: applied or rejected, and Arrow takes it

_ints = st.one_of(st.integers(-3, 5), st.sampled_from(HUGE + [2**62 - 1, 2**30 - 1]), st.integers())
_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6)  # surrogates too
_scalars = st.one_of(st.none(), st.booleans(), _ints, st.floats(), _text, st.binary(max_size=4),
                     st.sampled_from(EVENT_TYPES), st.just("t"))
_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(_text | st.just("5"), c,
                                                                                     max_size=3)
                       | st.lists(st.tuples(_scalars, _scalars), max_size=2), max_leaves=6)


@st.composite
def _rows(draw):
    row = {"seq": draw(st.integers(1, 40) | _ints), "ts_ms": draw(st.integers(0, 9) | _ints),
           "type": draw(st.sampled_from(EVENT_TYPES) | _scalars)}
    for col in draw(st.lists(st.sampled_from(EVENT_COLUMNS), max_size=6)):
        row[col] = draw(_values)
    return row


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_rows(), min_size=1, max_size=12))
def test_any_rows_reach_arrow(rows):
    eng = LocalEngine(EngineConfig({}))
    for raw in rows:
        eng.feed(raw, None, None)
        row_to_json(raw)
    tables, state = eng.drain(True)
    cl = eng.cluster
    assert eng.input_rows == len(rows) == cl.applied + cl.rejected
    assert len(tables.get("rejected", [])) == cl.rejected
    for name, trows in tables.items():
        rows_to_arrow(name, trows)
    assert state.num_rows == len(cl.partitions)     # every partition the rows created: touched


def test_a_time_leap_is_rejected_not_replayed_period_by_period():
    """A leaderless partition with unclean.leader.election.enable and no live replica: the periodic
    unclean-election task fires every 300 s and changes nothing. A row at ts_ms 2^62 - 1 would make
    it fire ~1.5e13 times (the replay never ends); input.max.time.jump.ms rejects it, names the
    limit, and a leap inside the limit is replayed period by period as before."""
    from tests.engine_util import rows, run_events
    from tests.streams import S

    def stream(leap_ts: int):
        s = S().up(1, 2)
        s.create([1, 2], config={"unclean.leader.election.enable": "true"})
        s.at(10).crash(1); s.crash(2)
        s.at(leap_ts).tick()
        return s.events

    out = run_events(stream(2**62 - 1))
    [rej] = rows(out, "rejected")
    assert rej["seq"] == len(stream(0)) and "input.max.time.jump.ms=604800000" in rej["reason"]
    assert "ts_ms 4611686018427387903 is 4611686018427387893 ms past the stream's time 10" in rej["reason"]
    out = run_events(stream(6 * 86_400_000), finish=False)          # six days: applied
    assert rows(out, "rejected") == []
    out = run_events(stream(8 * 86_400_000), {"input.max.time.jump.ms": str(9 * 86_400_000)}, finish=False)
    assert rows(out, "rejected") == []
