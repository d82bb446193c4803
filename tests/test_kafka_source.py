"""A Kafka topic as the Spark engine's source (jobs/kafka_source.py).

Without Kafka: record values parse exactly like stream-file lines, a record off partition 0 is a
`rejected` row that says why, the order-check carry is found by offset (and old ones pruned), and
the scan over records routes exactly what the file scan routes.

With a real Kafka 4.4.0 broker on loopback (jobs/lab KafkaCluster, one broker): `publish` writes a stream with hostile rows to a topic, `isrflow run --source kafka` is SIGKILLed in the
middle of a Delta commit and once from outside, restarted from its checkpoint and stopped with
SIGTERM; its tables equal the local engine's replay of the same files (every table; `rejected`
rows too, with the location in a parse error's reason written as the source names it)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.kafka_source import load_carry, parse_value, record_rows, save_carry
from jobs.spark_source import APPLY, NOTES, chunk_events, run_scan, scan_rows, unpack
from jobs.streamio import iter_file_rows

ROOT = Path(__file__).resolve().parents[1]
ISRFLOW = str(Path(sys.executable).with_name("isrflow"))


# ----------------------------------------------------------------------------- without Kafka
def _drain(gen):
    """(the rows a scan generator yields, the carry it returns)."""
    out = []
    while True:
        try:
            out.append(next(gen))
        except StopIteration as s:
            return out, s.value


def test_values_parse_like_stream_lines(tmp_path):
    lines = [b'{"seq":1,"ts_ms":0,"type":"Tick"}', b"{not json", b'["an","array"]', b'"\xff"', b"\xef\xbb\xbf{}"]
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    from_file = list(iter_file_rows(tmp_path / "a.jsonl"))
    for i, (line, (raw, text, err)) in enumerate(zip(lines[:4], from_file)):
        r, t, e = parse_value(line, f"kafka t-0 offset {i}")
        assert r == raw and (e is None) == (err is None), (line, e, err)
        if e is not None:
            # the same reason after the location (file line vs topic offset)
            assert e.split(": ", 1)[1].split(" (")[0] == err.split(": ", 1)[1].split(" (")[0]
    assert parse_value(None, "kafka t-0 offset 9")[2] == "kafka t-0 offset 9: null value (a tombstone, not an event)"
    # a mark inside the stream is not valid JSON, in a file (after line 1) as in a record
    assert parse_value(b"\xef\xbb\xbf{}", "w")[2].startswith("w: not valid JSON") and from_file[4][2]


def test_a_record_off_partition_zero_is_rejected_with_its_reason():
    recs = [(0, 5, b'{"seq":1,"ts_ms":0,"type":"Tick"}'), (1, 0, b'{"seq":2,"ts_ms":0,"type":"Tick"}')]
    rows = list(record_rows("events", recs))
    assert rows[0][3] is None and rows[0][1]["seq"] == 1
    assert rows[1][1]["seq"] == 2 and "kafka events-1 offset 0" in rows[1][3]
    assert "partition 0" in rows[1][3] and "not applied" in rows[1][3]
    assert rows[1][0] > rows[0][0]          # ordered after every record of partition 0
    gen_out, carry = _drain(scan_rows(iter(rows), (0, 0), 1, keep_raw=True))
    items = [it for row in gen_out for it in unpack(row[6])]
    assert [it[0] for it in items] == [0, 1]           # applied, rejected
    assert "not applied" in items[1][1]["reason"] and carry == (1, 0)


def test_carry_by_offset(tmp_path):
    d = str(tmp_path / "carry")
    assert load_carry(d, 0) == (0, 0)
    save_carry(d, 99, (10, 5))
    save_carry(d, 199, (20, 6))
    assert load_carry(d, 100) == (10, 5)           # a re-run of the batch [100, 199]
    assert load_carry(d, 50) == (0, 0)             # a re-run of the first batch
    assert load_carry(d, 200) == (20, 6)           # the next batch; the carry at 99 is no longer needed
    assert sorted(os.listdir(d)) == ["kafka-00000000000000000199.json"]
    assert load_carry(d, 205) == (20, 6)           # offsets may have gaps (transaction markers, compaction)


def test_record_scan_routes_what_the_file_scan_routes(tmp_path):
    from tests.spark_streams import make_stream
    stream, n = make_stream(tmp_path / "s", 5, 300, n_files=1, partitions=3, topics=2)
    f = sorted(stream.iterdir())[0]
    file_out, file_carry = run_scan([(0, str(f))], (0, 0), 4, chunk_rows=64)
    values = [line.strip() for line in f.read_bytes().splitlines() if line.strip()]
    recs = [(0, off, v) for off, v in enumerate(values)]
    rec_out, rec_carry = _drain(scan_rows(record_rows("ev", recs), (0, 0), 4, chunk_rows=64, keep_raw=True))
    assert rec_carry == file_carry and len(rec_out) == len(file_out)
    for a, b in zip(file_out, rec_out):
        assert a[:6] == b[:6]
        ia, ib = unpack(a[6]), unpack(b[6])
        assert [x[0] for x in ia] == [x[0] for x in ib]
        assert chunk_events(ia) == chunk_events(ib)
        for x, y in zip(ia, ib):
            if x[0] == APPLY:
                assert json.loads(y[3]) == json.loads(values[x[3] & 0xFFFFFFFF])
            elif x[0] == NOTES:                 # other buckets' creations: the same notes
                assert x == y
            else:
                re_loc = r"^(a\.jsonl|part-\d+\.jsonl line \d+|kafka \S+ offset \d+): "
                assert re.sub(re_loc, "", x[1]["reason"]) == re.sub(re_loc, "", y[1]["reason"])


# ----------------------------------------------------------------------------- with Kafka and Spark
def _have_jars() -> bool:
    from jobs.jars import kafka_classpath, spark_extra_jars
    return kafka_classpath() is not None and any("spark-sql-kafka" in j for j in spark_extra_jars()) \
        and shutil.which("java") is not None


_LOC = re.compile(r"^(part-\d+\.jsonl line \d+|kafka \S+ offset \d+): ")


def _rejected(tables) -> list[str]:
    from jobs.delta_sink import read_table
    rows = read_table(str(tables), "rejected").to_pylist()
    for r in rows:
        r["reason"] = _LOC.sub("<where>: ", r["reason"])
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _start(args, tables, ck, log, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    cmd = [ISRFLOW, "run", "--source", "kafka", *args, "--tables", str(tables), "--checkpoint", str(ck),
           "--engine", "spark", "--max-offsets-per-trigger", "700", "--trigger-seconds", "0.2", "--buckets", "4",
           # the native sink has its own kill test (test_spark_kill.py); here the source is under test
           "--sink", "delta-rs"]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.skipif(not _have_jars(), reason="needs spark-sql-kafka and the Kafka JARs (./dev setup) and java")
def test_kafka_source_survives_sigkill(spark, tmp_path):
    from conf import load_defaults
    from jobs.kafka_source import KafkaSpec, ensure_topic, publish
    from jobs.lab.cluster import KafkaCluster
    from jobs.local_engine import replay_local
    from protocol.config import EngineConfig
    from tests.delta_compare import COMPARED, diff_tables, progress_totals
    from tests.spark_streams import make_stream
    from tests.test_spark_kill import _committed_rows, _reap, run_to_end_and_stop

    stream, n_rows = make_stream(tmp_path / "stream", 33, 2400, n_files=3, partitions=4, topics=2)
    ref = tmp_path / "ref"
    replay_local(str(stream), str(ref), EngineConfig(dict(load_defaults())))
    tables, ck = tmp_path / "tables", tmp_path / "ck"
    log = open(tmp_path / "run.log", "ab")
    with KafkaCluster(tmp_path / "kafka", brokers=1) as c:
        src = ["--bootstrap-servers", c.bootstrap_servers, "--topic", "events"]
        # `isrflow publish` is this function behind argument parsing; in-process it saves a JVM start
        spec = KafkaSpec(c.bootstrap_servers, "events")
        assert publish(spark, str(stream), spec)["records"] == n_rows
        assert ensure_topic(spark, spec) == 1             # it made the topic with one partition
        # 1: SIGKILL in the middle of batch 1's Delta commit (the test hook of the engine)
        marker = tmp_path / "killed"
        p = _start(src, tables, ck, log, {"ISRFLOW_TEST_KILL": "1:mid", "ISRFLOW_TEST_KILL_MARKER": str(marker)})
        rc = _reap(p, timeout=240)
        assert rc == -signal.SIGKILL and marker.exists(), (tmp_path / "run.log").read_text()[-3000:]
        # 2: killed from outside once it has committed more
        p = _start(src, tables, ck, log)
        base, deadline = _committed_rows(tables), time.time() + 240
        while time.time() < deadline and _committed_rows(tables) <= base and p.poll() is None:
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
        _reap(p)
        # 3: to the end of the topic, then SIGTERM
        others = [n for n in COMPARED if n != "rejected"]
        rc = run_to_end_and_stop(_start(src, tables, ck, log), tables, ref, n_rows, others)
    log.close()
    text = (tmp_path / "run.log").read_text()
    assert rc == 0, text[-3000:]
    tot = progress_totals(tables)
    assert tot["input_rows"] == n_rows == tot["applied"] + tot["rejected"]
    assert diff_tables(ref, tables, others) == {}
    assert _rejected(ref) == _rejected(tables)
    run = json.loads((tables / "_run.json").read_text())
    assert run["stream"] == f"kafka://{c.bootstrap_servers}/events"


@pytest.mark.parametrize("args,msg", [
    (["run", "--source", "kafka", "--tables", "T", "--checkpoint", "C"], "needs --bootstrap-servers"),
    (["replay", "S", "--source", "kafka", "--bootstrap-servers", "h:1", "--topic", "t", "--tables", "T"],
     "reads a topic, not the stream directory"),
    (["replay", "--source", "kafka", "--bootstrap-servers", "h:1", "--topic", "t", "--tables", "T",
      "--engine", "local"], "needs --engine spark"),
    (["replay", "S", "--topic", "t", "--tables", "T"], "need --source kafka"),
    (["replay", "--tables", "T"], "a stream directory is needed"),
])
def test_cli_source_arguments(tmp_path, args, msg):
    """Usage errors end before any JVM starts: exit 2 and a message that says what to change."""
    r = subprocess.run([ISRFLOW, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
