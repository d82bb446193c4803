"""Bad input is quarantined, never lost (SPEC §2/§3 "Nothing is lost"): through the in-process
engine, every bad row lands in `rejected` with its raw text and a reason, and
input = applied + rejected. Also the stream-order rule (seq strictly increasing, ts_ms
non-decreasing) with hand-written expectations at its boundaries."""
import json

from jobs.local_engine import LocalEngine
from jobs.streamio import iter_raw_rows
from protocol.cluster import Cluster, order_reject_reason
from protocol.config import EngineConfig


GOOD = [
    {"seq": 1, "ts_ms": 0, "type": "BrokerRegister", "broker": 1, "broker_epoch": 101, "previous_broker_epoch": -1},
    {"seq": 2, "ts_ms": 0, "type": "BrokerUnfence", "broker": 1},
    {"seq": 3, "ts_ms": 0, "type": "CreatePartition", "topic": "t", "partition": 0, "replicas": [1]},
]


def replay_lines(tmp_path, lines):
    d = tmp_path / "stream"
    d.mkdir()
    (d / "000.jsonl").write_text("\n".join(lines) + "\n")
    eng = LocalEngine(EngineConfig({}))
    for row in iter_raw_rows(str(d)):
        eng.feed(*row)
    tables, _ = eng.drain(True)
    return eng, tables


def test_bad_rows_land_in_rejected_with_raw_text_and_reason(tmp_path):
    bad = {
        "not json": '{"seq": 4, "ts_ms": 1, "type": "Tick"',                                   # malformed
        "unknown type": json.dumps({"seq": 5, "ts_ms": 1, "type": "Explode"}),
        "no seq": json.dumps({"ts_ms": 1, "type": "Tick"}),
        "negative offset": json.dumps({"seq": 6, "ts_ms": 1, "type": "Fetch", "topic": "t", "partition": 0,
                                       "broker": 1, "fetch_offset": -1}),
        "duplicate seq": json.dumps({"seq": 3, "ts_ms": 1, "type": "Tick"}),
        "time backwards": json.dumps({"seq": 8, "ts_ms": 0, "type": "Tick"}),
        "unknown partition": json.dumps({"seq": 9, "ts_ms": 2, "type": "Produce", "topic": "nope", "partition": 0,
                                         "broker": 1, "records": 1, "acks": 1}),
    }
    lines = [json.dumps(r) for r in GOOD]
    lines.append(json.dumps({"seq": 7, "ts_ms": 1, "type": "Tick"}))
    order = ["not json", "unknown type", "no seq", "negative offset", "duplicate seq", "time backwards",
             "unknown partition"]
    lines += [bad[k] for k in order]
    eng, tables = replay_lines(tmp_path, lines)
    rej = tables["rejected"]
    assert len(rej) == len(bad)
    assert eng.input_rows == len(lines) == eng.cluster.applied + eng.cluster.rejected
    assert eng.cluster.applied == len(GOOD) + 1
    for k, r in zip(order, rej):
        assert r["reason"], k
        raw = r["raw"]
        assert raw, k
        if k == "not json":
            assert '"seq": 4' in raw                     # the text as it was, not a parse of it
        else:
            assert json.loads(raw) == json.loads(bad[k]), k
    by = dict(zip(order, rej))
    assert "Explode" in by["unknown type"]["reason"]
    assert "seq" in by["no seq"]["reason"]
    assert "fetch_offset" in by["negative offset"]["reason"]
    assert by["duplicate seq"]["reason"] == order_reject_reason("Tick", 3, 1, 7, 1)
    assert by["time backwards"]["reason"] == order_reject_reason("Tick", 8, 0, 7, 1)
    assert by["unknown partition"]["seq"] == 9


def test_order_rule_boundaries_hand_written():
    # seq must be strictly after the last applied seq
    assert order_reject_reason("Tick", 6, 10, 5, 10) is None                 # next seq, same time: fine
    assert order_reject_reason("Tick", 5, 10, 5, 10) == (
        "Tick row seq 5: seq 5 is not after the last applied seq 5 (duplicate or out of order); dropped")
    assert order_reject_reason("Tick", 4, 99, 5, 10).startswith("Tick row seq 4: seq 4 is not after")
    # ts_ms must not go back before the stream's time
    assert order_reject_reason("Fetch", 6, 9, 5, 10) == (
        "Fetch row seq 6: ts_ms 9 goes back before the stream's time 10 (ts_ms must not decrease with seq); dropped")
    assert order_reject_reason("Fetch", 6, 11, 5, 10) is None
    # the seq check comes first
    assert "is not after" in order_reject_reason("Tick", 5, 9, 5, 10)


def test_core_applies_the_order_rule_and_advances_only_on_applied_rows():
    cl = Cluster(EngineConfig({}))
    for ev in ({"seq": 5, "ts_ms": 10}, {"seq": 5, "ts_ms": 10}, {"seq": 6, "ts_ms": 9}, {"seq": 6, "ts_ms": 10}):
        cl.apply({"type": "Tick", "broker": None, **ev})
    rej = cl.drain()["rejected"]
    assert [(r["seq"], r["reason"].split(":")[1].strip().split(" ")[0]) for r in rej] == [(5, "seq"), (6, "ts_ms")]
    assert (cl.applied, cl.rejected, cl.last_seq, cl.max_ts) == (2, 2, 6, 10)


def test_the_spark_source_uses_the_same_order_rule():
    from jobs import spark_source
    assert spark_source.order_reject_reason is order_reject_reason
