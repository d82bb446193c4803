"""Output rows: one pydantic model per Delta table (SPEC section 3).

The Arrow and Spark schemas are derived from the models. A field is
nullable iff its annotation admits None: the common columns topic,
partition, seq, idx, ts_ms are required on the partition tables, nullable in
``rejected`` (a malformed row may have none of them); ``progress`` (one row
per micro-batch) has no common columns.

Writing rows: ``rows_to_arrow(table, rows)`` builds the Arrow table column by
column (no per-row pydantic); the models are for documentation, tests and
occasional validation (``TABLES[name].model_validate(row)``).
"""

from typing import Optional

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from schemas._derive import Int, Long, model_arrow_schema, spark_schema_from_arrow

BrokerList = list[Int]

_CFG = ConfigDict(extra="forbid")


class PartitionRow(BaseModel):
    """Common columns of every partition table."""

    model_config = _CFG

    topic: str
    partition: Int
    seq: Long  # the input event that caused the row
    idx: Int  # order among the rows one event caused in one partition
    ts_ms: Long


class MetadataLog(PartitionRow):
    partition_epoch: Optional[Int] = None
    leader_epoch: Optional[Int] = None
    leader: Optional[Int] = None  # -1: none
    replicas: Optional[BrokerList] = None
    isr: Optional[BrokerList] = None
    elr: Optional[BrokerList] = None
    last_known_elr: Optional[BrokerList] = None
    adding: Optional[BrokerList] = None
    removing: Optional[BrokerList] = None
    leader_recovery_state: Optional[str] = None  # RECOVERED / RECOVERING
    cause: Optional[str] = None  # event type or AlterPartition


class Elections(PartitionRow):
    leader_epoch: Optional[Int] = None
    old_leader: Optional[Int] = None
    new_leader: Optional[Int] = None  # -1: none
    election: Optional[str] = None  # ISR ELR LAST_KNOWN_ELR UNCLEAN PREFERRED DESIGNATED NONE
    reason: Optional[str] = None
    candidates: Optional[BrokerList] = None


class AlterPartition(PartitionRow):
    leader: Optional[Int] = None
    leader_epoch: Optional[Int] = None
    partition_epoch: Optional[Int] = None
    change: Optional[str] = None  # EXPAND / SHRINK
    proposed_isr: Optional[BrokerList] = None
    maximal_isr: Optional[BrokerList] = None
    phase: Optional[str] = None  # PROPOSED ACCEPTED REJECTED APPLIED ROLLED_BACK IGNORED
    error: Optional[str] = None


class Hwm(PartitionRow):
    broker: Optional[Int] = None
    leader_epoch: Optional[Int] = None
    old_hwm: Optional[Long] = None
    new_hwm: Optional[Long] = None
    trigger: Optional[str] = None


class ProduceRow(PartitionRow):
    broker: Optional[Int] = None
    acks: Optional[Int] = None
    records: Optional[Int] = None
    base_offset: Optional[Long] = None  # null if not appended
    leader_epoch: Optional[Int] = None
    result: Optional[str] = None
    result_seq: Optional[Long] = None
    result_ts_ms: Optional[Long] = None


class FetchRow(PartitionRow):
    broker: Optional[Int] = None
    target: Optional[Int] = None
    fetch_offset: Optional[Long] = None
    result: Optional[str] = None
    diverging_epoch: Optional[Int] = None
    diverging_end_offset: Optional[Long] = None
    truncated_to: Optional[Long] = None
    replica_leo: Optional[Long] = None
    replica_hwm: Optional[Long] = None
    detail: Optional[str] = None  # what drifted, for DRIFT rows


class ConsumerRow(PartitionRow):
    broker: Optional[Int] = None
    type: Optional[str] = None  # ListOffsets / ConsumerFetch
    fetch_offset: Optional[Long] = None
    result: Optional[str] = None
    offset: Optional[Long] = None
    records: Optional[Long] = None
    hwm: Optional[Long] = None


class Violation(PartitionRow):
    invariant: Optional[str] = None
    detail: Optional[str] = None


class AdminRow(BaseModel):
    """Admin and controller requests; broker registrations and topic-wide AlterConfig have no
    partition (and registrations no topic)."""

    model_config = _CFG

    topic: Optional[str] = None
    partition: Optional[Int] = None
    seq: Long
    idx: Int
    ts_ms: Long
    type: Optional[str] = None
    broker: Optional[Int] = None
    result: Optional[str] = None
    detail: Optional[str] = None


class Rejected(BaseModel):
    model_config = _CFG

    topic: Optional[str] = None
    partition: Optional[Int] = None
    seq: Optional[Long] = None
    idx: Int
    ts_ms: Optional[Long] = None
    raw: Optional[str] = None  # the input row as JSON
    reason: Optional[str] = None


class ReplicaState(BaseModel):
    model_config = _CFG

    broker: Optional[Int] = None
    alive: Optional[bool] = None
    fenced: Optional[bool] = None
    broker_epoch: Optional[Long] = None
    role: Optional[str] = None
    leo: Optional[Long] = None
    hwm: Optional[Long] = None
    leader_epoch: Optional[Int] = None


class PartitionState(PartitionRow):
    leader: Optional[Int] = None
    leader_epoch: Optional[Int] = None
    partition_epoch: Optional[Int] = None
    replicas: Optional[BrokerList] = None
    isr: Optional[BrokerList] = None
    elr: Optional[BrokerList] = None
    last_known_elr: Optional[BrokerList] = None
    adding: Optional[BrokerList] = None
    removing: Optional[BrokerList] = None
    leader_recovery_state: Optional[str] = None
    leader_hwm: Optional[Long] = None
    leader_leo: Optional[Long] = None
    leader_leso: Optional[Long] = None
    maximal_isr: Optional[BrokerList] = None
    pending_alter_partition: Optional[str] = None
    replica_states: Optional[list[ReplicaState]] = None


class Progress(BaseModel):
    """One row per micro-batch (not a partition table)."""

    model_config = _CFG

    batch_id: Long
    engine: Optional[str] = None
    input_rows: Optional[Long] = None
    applied: Optional[Long] = None
    rejected: Optional[Long] = None
    min_seq: Optional[Long] = None
    max_seq: Optional[Long] = None
    max_ts_ms: Optional[Long] = None


TABLES: dict[str, type[BaseModel]] = {
    "metadata_log": MetadataLog,
    "elections": Elections,
    "alter_partition": AlterPartition,
    "hwm": Hwm,
    "produce": ProduceRow,
    "fetch": FetchRow,
    "consumer": ConsumerRow,
    "violations": Violation,
    "admin": AdminRow,
    "rejected": Rejected,
    "partition_state": PartitionState,
    "progress": Progress,
}

# Tables with one row per event outcome (appended each micro-batch).
APPEND_TABLES: tuple[str, ...] = tuple(n for n in TABLES if n != "partition_state")

# -- metadata-log import and audit (`isrflow import` / `isrflow audit`; jobs/metalog). Written by those
# commands, not by a replay, so they are not in TABLES.


class KafkaRecord(BaseModel):
    """One record of a real KRaft metadata log, with the partition state after it (epochs computed)."""

    model_config = _CFG

    offset: Long
    batch_base_offset: Optional[Long] = None
    raft_epoch: Optional[Int] = None
    append_ms: Optional[Long] = None
    file: Optional[str] = None
    position: Optional[Long] = None  # byte position of the record's batch in its file
    batch: Optional[Long] = None  # running batch number
    control: Optional[bool] = None
    record_type: str
    version: Optional[Int] = None
    data: Optional[str] = None  # the record as Kafka's JSON (tagged fields at their default left out)
    cause: Optional[str] = None  # the event the record is attributed to (AlterPartition, BrokerFence, ...)
    seq_first: Optional[Long] = None  # the imported stream rows of that event
    seq_last: Optional[Long] = None
    topic: Optional[str] = None
    topic_id: Optional[str] = None
    partition: Optional[Int] = None
    leader: Optional[Int] = None
    isr: Optional[BrokerList] = None
    elr: Optional[BrokerList] = None
    last_known_elr: Optional[BrokerList] = None
    replicas: Optional[BrokerList] = None
    adding: Optional[BrokerList] = None
    removing: Optional[BrokerList] = None
    leader_recovery_state: Optional[str] = None
    leader_epoch: Optional[Int] = None  # computed (PartitionChangeRecords carry no epochs)
    partition_epoch: Optional[Int] = None
    broker: Optional[Int] = None
    broker_epoch: Optional[Long] = None
    in_snapshot: Optional[bool] = None
    derived: Optional[bool] = None  # a change without a record of its own (ClearElrRecord)
    election_type: Optional[str] = None
    reassignment: Optional[str] = None
    alter: Optional[str] = None


class AuditRow(BaseModel):
    """One real controller decision next to isrflow's decision at the same point of the replay."""

    model_config = _CFG

    decision: Long
    offset: Optional[Long] = None
    ts_ms: Optional[Long] = None
    topic: str
    partition: Int
    cause: Optional[str] = None
    seq_first: Optional[Long] = None
    seq_last: Optional[Long] = None
    verdict: str  # agree | differ | kafka_only | isrflow_only
    diff: Optional[list[str]] = None
    kafka_leader: Optional[Int] = None
    kafka_isr: Optional[BrokerList] = None
    kafka_elr: Optional[BrokerList] = None
    kafka_last_known_elr: Optional[BrokerList] = None
    kafka_replicas: Optional[BrokerList] = None
    kafka_leader_epoch: Optional[Int] = None
    kafka_partition_epoch: Optional[Int] = None
    kafka_leader_recovery_state: Optional[str] = None
    isrflow_seq: Optional[Long] = None
    isrflow_leader: Optional[Int] = None
    isrflow_isr: Optional[BrokerList] = None
    isrflow_elr: Optional[BrokerList] = None
    isrflow_last_known_elr: Optional[BrokerList] = None
    isrflow_replicas: Optional[BrokerList] = None
    isrflow_leader_epoch: Optional[Int] = None
    isrflow_partition_epoch: Optional[Int] = None
    isrflow_leader_recovery_state: Optional[str] = None
    isrflow_cause: Optional[str] = None
    isrflow_election: Optional[str] = None
    rule: Optional[str] = None  # the rule that decided (Kafka side; isrflow's election when it differs)
    why: Optional[str] = None  # the known cause of a difference


class AuditInvariant(BaseModel):
    """A property checked on the real controller's history (not on isrflow's)."""

    model_config = _CFG

    offset: Optional[Long] = None
    ts_ms: Optional[Long] = None
    topic: Optional[str] = None
    partition: Optional[Int] = None
    invariant: str
    detail: Optional[str] = None
    duration_ms: Optional[Long] = None


METALOG_TABLES: dict[str, type[BaseModel]] = {
    "kafka_records": KafkaRecord,
    "audit": AuditRow,
    "audit_invariants": AuditInvariant,
}

_ARROW: dict[str, pa.Schema] = {name: model_arrow_schema(m) for name, m in {**TABLES, **METALOG_TABLES}.items()}
_STRUCT = {name: pa.struct(list(sch)) for name, sch in _ARROW.items()}     # rows_to_arrow's one-shot type
_REQUIRED = {name: [i for i, f in enumerate(sch) if not f.nullable] for name, sch in _ARROW.items()}


def arrow_schema(table: str) -> pa.Schema:
    """Arrow schema of an output table (derived from its model)."""
    try:
        return _ARROW[table]
    except KeyError:
        raise KeyError(f"unknown output table {table!r} (expected one of {', '.join(TABLES)})") from None


def spark_schema(table: str):
    """pyspark StructType of an output table (pyspark imported lazily)."""
    return spark_schema_from_arrow(arrow_schema(table))


def columns(table: str) -> tuple[str, ...]:
    return tuple(arrow_schema(table).names)


def partition_state_arrow(cols: dict[str, list], counts: list[int], reps: dict[str, list]) -> pa.Table:
    """The `partition_state` Arrow table of protocol.state_table.partition_state_columns: each column
    converted on its own, replica_states assembled from its flat child columns and the rows' counts
    (no dict per row or per replica). Raises ValueError like rows_to_arrow."""
    from itertools import accumulate

    schema = arrow_schema("partition_state")
    arrays = []
    for field in schema:
        name = field.name
        try:
            if name == "replica_states":
                st = field.type.value_type
                children = [pa.array(reps[f.name], type=f.type) for f in st]
                offsets = pa.array(list(accumulate(counts, initial=0)), type=pa.int32())
                arr = pa.ListArray.from_arrays(offsets,
                                               pa.StructArray.from_arrays(children, fields=list(st)),
                                               type=field.type)
            else:
                arr = pa.array(cols[name], type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
            raise ValueError(f"partition_state.{name}: cannot convert values to {field.type}: {e}") from e
        if not field.nullable and arr.null_count:
            raise ValueError(f"partition_state.{name} is required but a row has no value")
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def rows_to_arrow(table: str, rows: list[dict]) -> pa.Table:
    """Build the Arrow table of `rows` (dicts keyed by column name; a missing
    key is null). Column-wise, no per-row validation; raises ValueError on a
    null in a non-nullable column, an unknown column in the first row, or a
    value Arrow cannot convert."""
    schema = arrow_schema(table)
    if rows:
        extra = set(rows[0]).difference(schema.names)
        if extra:
            raise ValueError(f"{table}: unknown column(s) {sorted(extra)} (columns are {schema.names})")
        # one conversion of the rows as a struct array (Arrow reads each dict once, in C++: about 2x the
        # column-by-column path below), checked for nulls in required columns; any failure falls through
        # to the column path, which names the column and the row
        try:
            tbl = pa.Table.from_struct_array(pa.array(rows, type=_STRUCT[table]))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            tbl = None
        if tbl is not None and not any(tbl.column(i).null_count for i in _REQUIRED[table]):
            return tbl
    arrays = []
    for field in schema:
        name = field.name
        col = [r.get(name) for r in rows]
        try:
            arr = pa.array(col, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
            raise ValueError(f"{table}.{name}: cannot convert values to {field.type}: {e}") from e
        if not field.nullable and arr.null_count:
            i = next(i for i, v in enumerate(col) if v is None)
            raise ValueError(f"{table}.{name} is required but row {i} has no value: {rows[i]!r}")
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)
