"""A Kafka topic as the Spark engine's event source (`isrflow run|replay --source kafka`), and
`isrflow publish`, which writes a stream directory to such a topic.

The ordering contract (SPEC §2 holds for a topic exactly as for a directory): the events of one
replay are ONE totally ordered log, so they live on partition 0 of the topic, in stream order,
one event per record (the value: the event as a JSON object, UTF-8; the key is not read). A
record on any other partition is never applied and never dropped: it becomes a `rejected` row
that says so. `isrflow publish` creates a missing topic with one partition and refuses a topic
with more.

How the engine reads it: Spark's own Kafka source (spark-sql-kafka-0-10 for the pinned Spark,
resolved by `./dev setup`) with `subscribe` and `startingOffsets=earliest`; the offsets a
micro-batch consumed live in the Spark checkpoint, so a killed job restarts exactly where its
last committed batch ended (exactly once with the idempotent sinks). `failOnDataLoss` stays on:
records deleted by retention before they were read end the query with Kafka's error instead
of silently skipping events. Each micro-batch's records of partition 0 are read by one task (a
narrow mapInArrow right after the source), which runs the same scan as the file source
(jobs.spark_source.scan_rows: validation, the global seq / ts_ms order check, routing to
buckets). The order check's carry after the batch is stored under
`<checkpoint>/isrflow_carry/kafka-<last offset>.json` and read by the next batch (the newest
carry before its first offset), exactly like the file source's carry per file count.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from schemas._derive import is_text, safe_text

from .spark_source import CHUNK_ROWS, SCHEMA, scan_rows
from .streamio import list_stream_files, row_to_json

PARTITION = 0                  # the one partition a replay reads in order (see the module doc)
_CARRY = re.compile(r"^kafka-(\d{20})\.json$")


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: str
    topic: str
    max_offsets_per_trigger: int | None = None

    @property
    def uri(self) -> str:
        """The stream's name in `_run.json` and the checkpoint record."""
        return f"kafka://{self.bootstrap_servers}/{self.topic}"


# ----------------------------------------------------------------------------- records -> rows
def parse_value(value, where: str):
    """One record value as the file source's (raw row, raw text, parse error)."""
    if value is None:
        return None, "null", f"{where}: null value (a tombstone, not an event)"
    data = bytes(value)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        shown = data.decode("utf-8", "backslashreplace")
        return None, shown, f"{where}: not valid UTF-8 (byte \\x{data[e.start]:02x} at byte {e.start + 1})"
    # no byte order mark handling here: `publish` drops a file's leading one, as a replay of the file does
    line = text.strip()
    if not is_text(line):
        return None, safe_text(line), f"{where}: not valid text"
    try:
        obj = json.loads(line)
    except ValueError as e:
        return None, line, f"{where}: not valid JSON: {e}"
    except RecursionError:
        return None, line, f"{where}: not valid JSON: nested too deeply"
    if type(obj) is not dict:
        return None, line, f"{where}: not a JSON object (got {type(obj).__name__})"
    return obj, line, None


def _position(partition: int, offset: int) -> int:
    # chunks are ordered by position in the stateful step: partition 0's records first, in offset order
    return (partition << 48) | offset


def record_rows(topic: str, records):
    """[(partition, offset, value)] -> the scan's rows. A record off partition 0 is a parse error."""
    for partition, offset, value in records:
        where = f"kafka {topic}-{partition} offset {offset}"
        if partition != PARTITION:
            raw, text, _ = parse_value(value, where)
            yield (_position(partition, offset), raw, text,
                   f"{where}: isrflow reads one totally ordered log, partition {PARTITION} of the topic; "
                   f"produce every event to partition {PARTITION} (this record was not applied)")
            continue
        raw, text, err = parse_value(value, where)
        yield _position(partition, offset), raw, text, err


# ----------------------------------------------------------------------------- the carry
def load_carry(carry_dir: str, first_offset: int) -> tuple[int, int]:
    """The order check's carry before `first_offset`: the newest saved carry of an earlier batch
    ((0, 0) before the first). Carries older than it are deleted: their batches are committed."""
    try:
        names = os.listdir(carry_dir)
    except FileNotFoundError:
        return (0, 0)
    found = sorted((int(m.group(1)), n) for n in names if (m := _CARRY.match(n)))
    before = [x for x in found if x[0] < first_offset]
    if not before:
        return (0, 0)
    last, name = before[-1]
    with open(os.path.join(carry_dir, name), encoding="utf-8") as fh:
        d = json.load(fh)
    for _, old in before[:-1]:
        try:
            os.remove(os.path.join(carry_dir, old))
        except OSError:
            pass
    return (int(d["last_seq"]), int(d["max_ts"]))


def save_carry(carry_dir: str, last_offset: int, carry: tuple[int, int]) -> None:
    os.makedirs(carry_dir, exist_ok=True)
    final = os.path.join(carry_dir, f"kafka-{last_offset:020d}.json")
    tmp = f"{final}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"last_seq": carry[0], "max_ts": carry[1], "last_offset": last_offset}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)


# ----------------------------------------------------------------------------- the Spark side
def make_scan_fn(topic: str, carry_dir: str, n_buckets: int, keys, chunk_rows: int = CHUNK_ROWS,
                 max_jump: int = 0):
    """The mapInArrow function: one task sees one topic partition's records of a micro-batch."""
    def scan_task(batches):
        import pyarrow as pa
        recs = []
        for b in batches:
            recs.extend(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(),
                            b.column("value").to_pylist()))
        if not recs:
            return
        recs.sort(key=lambda r: (r[0], r[1]))
        ours = [r for r in recs if r[0] == PARTITION]
        carry = load_carry(carry_dir, ours[0][1]) if ours else (0, 0)
        gen = scan_rows(record_rows(topic, recs), carry, n_buckets, chunk_rows, keep_raw=True, max_jump=max_jump)
        out = []
        while True:
            try:
                row = next(gen)
            except StopIteration as s:
                if ours:
                    save_carry(carry_dir, ours[-1][1], s.value)
                break
            out.append((keys[row[0]],) + row[1:])
        names = ["bucket", "pos", "et_ms", "n_in", "min_seq", "max_seq", "payload"]
        cols = list(zip(*out)) if out else [[] for _ in names]
        schema = pa.schema([("bucket", pa.int32()), ("pos", pa.int64()), ("et_ms", pa.int64()),
                            ("n_in", pa.int64()), ("min_seq", pa.int64()), ("max_seq", pa.int64()),
                            ("payload", pa.binary())])
        yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)
    return scan_task


def kafka_frame(spark, spec: KafkaSpec, carry_dir: str, n_buckets: int, keys, max_jump: int = 0):
    """The event rows of the topic as the file source's SCHEMA (bucket, pos, et_ms, ...)."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", spec.bootstrap_servers)
              .option("subscribe", spec.topic)
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if spec.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(int(spec.max_offsets_per_trigger)))
    src = reader.load().select("partition", "offset", "value")
    return src.mapInArrow(make_scan_fn(spec.topic, carry_dir, n_buckets, keys, max_jump=max_jump), SCHEMA)


# ----------------------------------------------------------------------------- publish
def stream_values(stream: str):
    """Every row of a stream directory as a record value, in stream order, byte for byte: a JSON
    file's lines as they are (blank lines skipped, as a replay skips them), a Parquet row as the
    JSON text `rejected.raw` would show."""
    from .streamio import JSON_SUFFIXES, iter_file_rows
    for f in list_stream_files(stream):
        if f.suffix.lower() in JSON_SUFFIXES:
            with open(f, "rb") as fh:
                for lineno, line in enumerate(fh, 1):
                    line = line.strip()
                    if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                        line = line[3:].strip()
                    if line:
                        yield line
        else:
            for raw, text, _err in iter_file_rows(f):
                yield row_to_json(raw, text).encode("utf-8", "surrogatepass")


def _admin(spark, bootstrap: str):
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", bootstrap)
    props.put("request.timeout.ms", "10000")
    props.put("default.api.timeout.ms", "30000")
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def ensure_topic(spark, spec: KafkaSpec, replication_factor: int = 1) -> int:
    """The topic's partition count; a missing topic is created with one partition. A topic with
    more than one partition is refused (the ordering contract)."""
    jvm = spark._jvm
    unit = jvm.java.util.concurrent.TimeUnit.SECONDS
    admin = _admin(spark, spec.bootstrap_servers)
    try:
        names = admin.listTopics().names().get(30, unit)
        if not names.contains(spec.topic):
            nt = jvm.org.apache.kafka.clients.admin.NewTopic(spec.topic, 1, replication_factor)
            admin.createTopics(jvm.java.util.List.of(nt)).all().get(30, unit)
            return 1
        d = admin.describeTopics(jvm.java.util.List.of(spec.topic)).allTopicNames().get(30, unit)
        n = d.get(spec.topic).partitions().size()
    finally:
        admin.close()
    if n != 1:
        raise ValueError(f"topic {spec.topic} has {n} partitions; an isrflow event stream is one totally ordered "
                         f"log: use a topic with one partition")
    return n


def publish(spark, stream: str, spec: KafkaSpec, replication_factor: int = 1) -> dict:
    """Write every row of `stream` to partition 0 of the topic, in stream order (one producer: Spark's
    Kafka sink from a single task, idempotent producer, so order and count are kept)."""
    import pyarrow as pa
    ensure_topic(spark, spec, replication_factor)
    values = list(stream_values(stream))
    tbl = pa.table({"value": pa.array(values, type=pa.binary())})
    df = spark.createDataFrame(tbl.to_pandas()) if values else None
    if df is not None:
        (df.coalesce(1).selectExpr("CAST(0 AS INT) AS partition", "value").write.format("kafka")
         .option("kafka.bootstrap.servers", spec.bootstrap_servers).option("topic", spec.topic)
         .option("kafka.enable.idempotence", "true").option("kafka.acks", "all")
         .option("kafka.max.in.flight.requests.per.connection", "1")
         .save())
    return {"stream": stream, "topic": spec.topic, "bootstrap_servers": spec.bootstrap_servers,
            "records": len(values), "partition": PARTITION}
