"""Input events: the one source of truth (SPEC section 2).

* ``EventColumns`` is the wide row: every input column with its type.
  ``EVENT_ARROW_SCHEMA`` / ``event_spark_schema()`` are derived from it.
* One pydantic model per event type (``EVENT_MODELS``) says which columns
  the type uses, which are required, and their bounds. Cross-column rules
  live in each model's ``cross_check`` (shared by pydantic and the fast
  path).
* ``validate(row)`` is the hot-path validator. It is *compiled* at import
  time from the models' field metadata (required, type, bounds, enum
  values, defaults) into one small Python function per event type, so it
  cannot drift from the models; ``parse_event(row)`` is the pydantic path.

Conventions shared by both paths:
* a null column is the same as an absent one (Parquet rows carry every
  column): a null required column is "missing", a null optional column
  takes the model default;
* columns a type does not use are ignored and come out as None;
* values are strict: an integer column takes a JSON integer (not "3", not
  3.0, not true); ``epoch_start_offsets`` keys may be integer strings
  ("5", as JSON must write them) and map columns may arrive as Arrow's
  list of (key, value) pairs; ``config`` values are turned into strings
  (booleans as ``true``/``false``).
"""

import re
import typing
from typing import Annotated, Any, Literal, Optional

import annotated_types as at
import pyarrow as pa
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from schemas._derive import (
    Arrow,
    Int,
    Long,
    arrow_type_of,
    field_annotation,
    is_text,
    model_arrow_schema,
    spark_schema_from_arrow,
    unwrap,
)

# --------------------------------------------------------------------------
# Normalizers / shared rule functions (used by pydantic AND the fast path)
# --------------------------------------------------------------------------

_INT_STR = re.compile(r"-?[0-9]+\Z")


def _pairs(v: Any, what: str):
    if isinstance(v, dict):
        return v.items()
    if isinstance(v, list):
        for item in v:
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise ValueError(f"must be a map ({what}), got a list element {_fmt(item)}")
        return v
    raise ValueError(f"must be a map ({what}), got {type(v).__name__} {_fmt(v)}")


def normalize_epoch_start_offsets(v: Any) -> Any:
    """JSON object {"5": 120} or Arrow [(5, 120)] -> {5: 120}."""
    out = {}
    for k, val in _pairs(v, "leader epoch -> start offset"):
        if type(k) is str:
            if not _INT_STR.match(k) or len(k) > 40:
                raise ValueError(f"key {_short(k)} is not an integer leader epoch")
            k = int(k)
        elif type(k) is not int:
            raise ValueError(f"key {_fmt(k)} is not an integer leader epoch")
        if k in out:
            raise ValueError(f"leader epoch {k} appears twice")
        out[k] = val
    return out


def normalize_config(v: Any) -> Any:
    """Config map: keys strings, values strings (bool -> true/false), null kept."""
    out = {}
    for k, val in _pairs(v, "config name -> value"):
        if type(k) is not str or not k:
            raise ValueError(f"config name {_fmt(k)} is not a non-empty string")
        if not is_text(k):
            raise ValueError(f"config name {_short(k)} is not valid Unicode text")
        if val is None:
            pass
        elif type(val) is str:
            if not is_text(val):
                raise ValueError(f"config {_short(k)} value {_short(val)} is not valid Unicode text")
        elif type(val) is bool:
            val = "true" if val else "false"
        elif type(val) in (int, float):
            val = str(val)
        else:
            raise ValueError(f"config {_short(k)} value {_fmt(val)} is not a string or number")
        out[k] = val
    return out


def _unique(v: list) -> list:
    if len(set(v)) != len(v):
        raise ValueError(f"{_short_list(v)} has duplicate broker ids")
    return v


def _text(v: str) -> str:
    if not is_text(v):
        raise ValueError(f"{_short(v)} is not valid Unicode text (lone surrogate)")
    return v


UNIQUE = AfterValidator(_unique)
TEXT = AfterValidator(_text)  # a string column written to the output tables: must be UTF-8-encodable

# --------------------------------------------------------------------------
# Column type vocabulary (each written once)
# --------------------------------------------------------------------------

# Headroom (the output columns are int32 / int64, and the protocol adds to some input values):
# an epoch of the input leaves 2**30 increments before int32 ends (one per partition change),
# an offset or time leaves 2**62 (a produce adds at most 2**31 - 1 records, a timer adds an
# interval). A value beyond these is rejected with its column and limit, never overflows a table.
EPOCH_MAX = 2**30 - 1
OFFSET_MAX = TS_MAX = 2**62 - 1

TsMs = Annotated[Long, at.Ge(0), at.Le(TS_MAX)]
Topic = Annotated[str, at.MinLen(1), TEXT]
PartitionId = Annotated[Int, at.Ge(0)]
BrokerId = Annotated[Int, at.Ge(0)]
LeaderId = Annotated[Int, at.Ge(-1)]  # -1: no leader
Epoch = Annotated[Int, at.Ge(0), at.Le(EPOCH_MAX)]  # leader_epoch / partition_epoch of a record
RequestEpoch = Annotated[Int, at.Ge(-1)]  # epochs a request carries (-1: unknown)
BrokerEpoch = Annotated[Long, at.Ge(0)]
PrevBrokerEpoch = Annotated[Long, at.Ge(-1)]  # -1: unclean shutdown
# a fetch's ReplicaState.ReplicaEpoch; -1 (Kafka's default: the request carries none) is never
# checked against the leader's cache (B3) and leaves the follower ISR-eligible by its epoch (B5)
FetchBrokerEpoch = Annotated[Long, at.Ge(-1)]
Offset = Annotated[Long, at.Ge(0), at.Le(OFFSET_MAX)]
SeqRef = Annotated[Long, at.Ge(0)]  # a seq the row refers to (compared, never added to)
Records = Annotated[Int, at.Ge(1)]
Acks = Int  # any integer is a valid request; the protocol answers INVALID_REQUIRED_ACKS
BrokerIds = Annotated[list[BrokerId], UNIQUE]
NonEmptyBrokerIds = Annotated[list[BrokerId], at.MinLen(1), UNIQUE]
OffsetSpec = Literal["LATEST", "EARLIEST"]
Isolation = Literal["READ_UNCOMMITTED", "READ_COMMITTED"]
ElectionType = Literal["PREFERRED", "UNCLEAN", "DESIGNATED"]
RecoveryState = Literal["RECOVERED", "RECOVERING"]
Config = Annotated[dict[str, Optional[str]], BeforeValidator(normalize_config)]
EpochStartOffsets = Annotated[dict[Epoch, Offset], BeforeValidator(normalize_epoch_start_offsets)]

_STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)


class EventColumns(BaseModel):
    """The wide input row: every column of the stream, in schema order.
    Only ``seq``, ``ts_ms`` and ``type`` are non-nullable."""

    model_config = _STRICT

    seq: Long
    ts_ms: TsMs
    type: str
    topic: Optional[Topic] = None
    partition: Optional[PartitionId] = None
    broker: Optional[BrokerId] = None
    offset_spec: Optional[OffsetSpec] = None
    isolation: Optional[Isolation] = None
    broker_epoch: Optional[BrokerEpoch] = None
    previous_broker_epoch: Optional[PrevBrokerEpoch] = None
    replicas: Optional[BrokerIds] = None
    records: Optional[Records] = None
    acks: Optional[Acks] = None
    target: Optional[BrokerId] = None
    fetch_offset: Optional[Offset] = None
    last_fetched_epoch: Optional[RequestEpoch] = None
    current_leader_epoch: Optional[RequestEpoch] = None
    log_end_offset: Optional[Offset] = None
    up_to_seq: Optional[SeqRef] = None
    election_type: Optional[ElectionType] = None
    clean: Optional[bool] = None
    config: Optional[Config] = None
    isr: Optional[BrokerIds] = None
    elr: Optional[BrokerIds] = None
    last_known_elr: Optional[BrokerIds] = None
    leader: Optional[LeaderId] = None
    leader_epoch: Optional[Epoch] = None
    partition_epoch: Optional[Epoch] = None
    leader_recovery_state: Optional[RecoveryState] = None
    epoch_start_offsets: Optional[EpochStartOffsets] = None
    hwm: Optional[Offset] = None


# --------------------------------------------------------------------------
# One model per event type
# --------------------------------------------------------------------------


class EventBase(BaseModel):
    """Common columns. Subclasses narrow ``type`` to their name and
    redeclare topic/partition/broker as required where the type needs them."""

    model_config = _STRICT

    seq: Long
    ts_ms: TsMs
    type: str
    topic: Optional[Topic] = None
    partition: Optional[PartitionId] = None
    broker: Optional[BrokerId] = None

    @classmethod
    def cross_check(cls, d: dict) -> Optional[str]:
        """Cross-column rule over the validated values; a reason or None."""
        return None

    @model_validator(mode="after")
    def _cross_columns(self):
        reason = type(self).cross_check(self.__dict__)
        if reason:
            raise ValueError(reason)
        return self


class PartitionEvent(EventBase):
    topic: Topic
    partition: PartitionId


class BrokerEvent(EventBase):
    broker: BrokerId


class PartitionBrokerEvent(PartitionEvent):
    broker: BrokerId


# Control plane ---------------------------------------------------------------


class CreatePartition(PartitionEvent):
    type: Literal["CreatePartition"]
    # empty or repeated ids are a well-formed request Kafka answers INVALID_REPLICA_ASSIGNMENT (admin row)
    replicas: list[BrokerId]
    config: Optional[Config] = None


class AlterConfig(EventBase):
    type: Literal["AlterConfig"]
    topic: Topic
    partition: Optional[PartitionId] = None  # null: every partition of the topic
    config: Config


class BrokerRegister(BrokerEvent):
    type: Literal["BrokerRegister"]
    broker_epoch: BrokerEpoch
    previous_broker_epoch: PrevBrokerEpoch


class BrokerUnfence(BrokerEvent):
    type: Literal["BrokerUnfence"]


class BrokerFence(BrokerEvent):
    type: Literal["BrokerFence"]


class BrokerControlledShutdown(BrokerEvent):
    type: Literal["BrokerControlledShutdown"]


class Reassign(PartitionEvent):
    type: Literal["Reassign"]
    replicas: Optional[list[BrokerId]] = None  # null: cancel; [] / repeated ids: INVALID_REPLICA_ASSIGNMENT (admin row)


class ElectLeaders(PartitionEvent):
    type: Literal["ElectLeaders"]
    election_type: ElectionType
    target: Optional[BrokerId] = None

    @classmethod
    def cross_check(cls, d):
        if d["election_type"] == "DESIGNATED" and d["target"] is None:
            return "election_type DESIGNATED needs a target broker"
        return None


class PartitionRecord(PartitionEvent):
    type: Literal["PartitionRecord"]
    replicas: NonEmptyBrokerIds
    isr: BrokerIds
    elr: BrokerIds = Field(default_factory=list)
    last_known_elr: BrokerIds = Field(default_factory=list)
    leader: LeaderId
    leader_epoch: Epoch
    partition_epoch: Epoch
    leader_recovery_state: RecoveryState = "RECOVERED"
    config: Optional[Config] = None

    @classmethod
    def cross_check(cls, d):
        replicas = d["replicas"]
        for col in ("isr", "elr", "last_known_elr"):
            extra = [b for b in d[col] if b not in replicas]
            if extra:
                return f"{col} {d[col]} has brokers {extra} that are not in replicas {replicas}"
        if d["leader"] != -1 and d["leader"] not in replicas:
            return f"leader {d['leader']} is not in replicas {replicas}"
        return None


class ReplicaSnapshot(PartitionBrokerEvent):
    type: Literal["ReplicaSnapshot"]
    epoch_start_offsets: EpochStartOffsets
    log_end_offset: Offset
    hwm: Offset

    @classmethod
    def cross_check(cls, d):
        leo = d["log_end_offset"]
        if d["hwm"] > leo:
            return f"hwm {d['hwm']} is above log_end_offset {leo}"
        prev = None
        for epoch in sorted(d["epoch_start_offsets"]):
            start = d["epoch_start_offsets"][epoch]
            if start > leo:
                return f"epoch_start_offsets: epoch {epoch} starts at {start}, above log_end_offset {leo}"
            if prev is not None and start < prev[1]:
                return (
                    f"epoch_start_offsets: epoch {epoch} starts at {start}, "
                    f"before epoch {prev[0]} (at {prev[1]})"
                )
            prev = (epoch, start)
        return None


# Environment -----------------------------------------------------------------


class BrokerCrash(BrokerEvent):
    type: Literal["BrokerCrash"]
    clean: bool


class ReplicaLogLoss(PartitionBrokerEvent):
    type: Literal["ReplicaLogLoss"]
    log_end_offset: Offset


# Message delivery ------------------------------------------------------------


class AlterPartitionArrive(PartitionEvent):
    type: Literal["AlterPartitionArrive"]


class AlterPartitionResponse(PartitionEvent):
    type: Literal["AlterPartitionResponse"]


class MetadataSync(BrokerEvent):
    type: Literal["MetadataSync"]
    up_to_seq: Optional[SeqRef] = None  # null: everything committed so far


# Data plane ------------------------------------------------------------------


class Produce(PartitionBrokerEvent):
    type: Literal["Produce"]
    records: Records
    acks: Acks


class Fetch(PartitionBrokerEvent):
    type: Literal["Fetch"]
    target: Optional[BrokerId] = None
    broker_epoch: Optional[FetchBrokerEpoch] = None
    fetch_offset: Optional[Offset] = None
    last_fetched_epoch: Optional[RequestEpoch] = None
    current_leader_epoch: Optional[RequestEpoch] = None


class Tick(EventBase):
    type: Literal["Tick"]
    broker: Optional[BrokerId] = None  # null: every broker
    # topic: only that topic's partitions; topic + partition: that one partition's check

    @classmethod
    def cross_check(cls, d):
        if d["partition"] is not None and d["topic"] is None:
            return (f"Tick names partition {d['partition']} but no topic: name both (one partition's "
                    "ISR check), only a topic, or neither (every partition of the broker)")
        return None


class ListOffsets(PartitionBrokerEvent):
    type: Literal["ListOffsets"]
    offset_spec: OffsetSpec
    isolation: Optional[Isolation] = None  # null: READ_UNCOMMITTED
    current_leader_epoch: Optional[RequestEpoch] = None


class ConsumerFetch(PartitionBrokerEvent):
    type: Literal["ConsumerFetch"]
    fetch_offset: Offset
    current_leader_epoch: Optional[RequestEpoch] = None


EVENT_MODELS: dict[str, type[EventBase]] = {
    m.__name__: m
    for m in (
        CreatePartition,
        AlterConfig,
        BrokerRegister,
        BrokerUnfence,
        BrokerFence,
        BrokerControlledShutdown,
        Reassign,
        ElectLeaders,
        PartitionRecord,
        ReplicaSnapshot,
        BrokerCrash,
        ReplicaLogLoss,
        AlterPartitionArrive,
        AlterPartitionResponse,
        MetadataSync,
        Produce,
        Fetch,
        Tick,
        ListOffsets,
        ConsumerFetch,
    )
}
EVENT_TYPES: tuple[str, ...] = tuple(EVENT_MODELS)

# Event types that address one partition (topic + partition required).
PARTITION_EVENT_TYPES = frozenset(
    n for n, m in EVENT_MODELS.items() if m.model_fields["partition"].is_required()
)

# --------------------------------------------------------------------------
# Derived schemas
# --------------------------------------------------------------------------

EVENT_ARROW_SCHEMA: pa.Schema = model_arrow_schema(EventColumns)
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_ARROW_SCHEMA.names)


def event_spark_schema():
    """pyspark StructType of the input stream (derived from EventColumns)."""
    return spark_schema_from_arrow(EVENT_ARROW_SCHEMA)


def _check_models_against_columns() -> None:
    for name, model in EVENT_MODELS.items():
        for col, fi in model.model_fields.items():
            if col not in EVENT_ARROW_SCHEMA.names:
                raise TypeError(f"{name}.{col} is not an input column")
            want = EVENT_ARROW_SCHEMA.field(col).type
            got, _ = arrow_type_of(field_annotation(fi))
            if col != "type" and got != want:
                raise TypeError(f"{name}.{col} is {got}, input column is {want}")


_check_models_against_columns()

# --------------------------------------------------------------------------
# Pydantic path
# --------------------------------------------------------------------------


def parse_event(row: dict) -> EventBase:
    """Validate a raw row with pydantic. Raises pydantic.ValidationError or
    ValueError (unknown/missing type)."""
    clean = {k: v for k, v in row.items() if v is not None}
    t = clean.get("type")
    model = EVENT_MODELS.get(t) if type(t) is str else None
    if model is None:
        raise ValueError(f"unknown event type {t!r}")
    return model.model_validate(clean)


def event_to_dict(ev: EventBase) -> dict:
    """Model -> normalized event dict with exactly EVENT_COLUMNS as keys."""
    d = ev.model_dump()
    return {c: d.get(c) for c in EVENT_COLUMNS}


# --------------------------------------------------------------------------
# Fast path: compiled from the models
# --------------------------------------------------------------------------


def _short(v: Any, n: int = 60) -> str:
    """repr(v), cut to about n characters (a reason names the value, it does not copy it)."""
    r = repr(v)
    if len(r) > n:
        r = r[: n - 3] + "..."
    return r


def _short_list(v: list, n: int = 60) -> str:
    r = str(v)
    return r if len(r) <= n else r[: n - 4] + "...]"


def _fmt(v: Any) -> str:
    return f"{type(v).__name__} {_short(v)}"


def _type_err(label: str, v: Any, expected: str) -> str:
    return f"{label} must be {expected}, got {_fmt(v)}"


def _lo_err(label: str, v: Any, lo: int) -> str:
    if lo == 0:
        return f"{label} {v} is negative"
    return f"{label} {v} must be >= {lo}"


def _hi_err(label: str, v: Any, hi: int) -> str:
    return f"{label} {v} must be <= {hi}"


def _int_err(label: str, v: Any, lo: int, hi: int) -> str:
    if type(v) is not int:
        return _type_err(label, v, "an integer")
    if v < lo:
        return _lo_err(label, v, lo)
    return _hi_err(label, v, hi)


class _Spec:
    """What the compiler needs to know about one (possibly nested) value."""

    def __init__(self, annotation: Any):
        tp, meta, self.nullable = unwrap(annotation)
        self.kind = None
        self.lo = self.hi = None
        self.min_len = None
        self.unique = False
        self.text = False
        self.choices = None
        self.normalizer = None
        self.elem = self.key = self.value = None
        for m in meta:
            if isinstance(m, at.Ge):
                self.lo = m.ge if self.lo is None else max(self.lo, m.ge)
            elif isinstance(m, at.Le):
                self.hi = m.le if self.hi is None else min(self.hi, m.le)
            elif isinstance(m, at.MinLen):
                self.min_len = m.min_length
            elif m is UNIQUE:
                self.unique = True
            elif m is TEXT:
                self.text = True
            elif isinstance(m, BeforeValidator):
                self.normalizer = m.func
            elif isinstance(m, Arrow):
                pass
            else:
                raise TypeError(f"fast validator: unsupported metadata {m!r} in {annotation!r}")
        origin = typing.get_origin(tp)
        if tp is int:
            self.kind = "int"
        elif tp is str:
            self.kind = "str"
        elif tp is bool:
            self.kind = "bool"
        elif origin is Literal:
            self.kind = "lit"
            self.choices = typing.get_args(tp)
        elif origin is list:
            self.kind = "list"
            self.elem = _Spec(typing.get_args(tp)[0])
        elif origin is dict:
            self.kind = "map"
            k, v = typing.get_args(tp)
            self.key, self.value = _Spec(k), _Spec(v)
        else:
            raise TypeError(f"fast validator: unsupported type {annotation!r}")


class _Gen:
    def __init__(self, tname: str):
        self.tname = tname
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "_type_err": _type_err,
            "_lo_err": _lo_err,
            "_hi_err": _hi_err,
            "_int_err": _int_err,
            "_fmt": _fmt,
            "_short": _short,
            "_short_list": _short_list,
            "_is_text": is_text,
        }
        self.n = 0
        self.prefix = f'f"{tname} row seq {{seq}}: "'

    def const(self, value: Any) -> str:
        self.n += 1
        name = f"_c{self.n}"
        self.ns[name] = value
        return name

    def fail(self, ind: str, msg_expr: str) -> None:
        self.lines.append(f"{ind}    return None, {self.prefix} + {msg_expr}")

    def check(self, spec: _Spec, var: str, label_expr: str, ind: str) -> None:
        """Emit checks of non-None value `var` against spec (may rebind var)."""
        L = self.lines
        k = spec.kind
        if k == "int":
            # one chained test on the happy path; the message is worked out
            # only on failure
            lo, hi = spec.lo, spec.hi
            if lo is None or hi is None:
                raise TypeError("fast validator: integers need both bounds (use Int or Long)")
            L.append(f"{ind}if type({var}) is not int or not ({lo} <= {var} <= {hi}):")
            self.fail(ind, f"_int_err({label_expr}, {var}, {lo}, {hi})")
        elif k == "str":
            L.append(f"{ind}if type({var}) is not str:")
            self.fail(ind, f"_type_err({label_expr}, {var}, 'a string')")
            if spec.min_len:
                L.append(f"{ind}if len({var}) < {spec.min_len}:")
                self.fail(ind, f"{label_expr} + ' must not be empty'")
            if spec.text:
                L.append(f"{ind}if not {var}.isascii() and not _is_text({var}):")
                self.fail(ind, f"{label_expr} + ' ' + _short({var}) + ' is not valid Unicode text (lone surrogate)'")
        elif k == "bool":
            L.append(f"{ind}if type({var}) is not bool:")
            self.fail(ind, f"_type_err({label_expr}, {var}, 'true or false')")
        elif k == "lit":
            choices = self.const(frozenset(spec.choices))
            text = ", ".join(spec.choices)
            L.append(f"{ind}if type({var}) is not str or {var} not in {choices}:")
            self.fail(ind, f"{label_expr} + ' ' + _short({var}) + ' must be one of {text}'")
        elif k == "list":
            L.append(f"{ind}if type({var}) is not list:")
            self.fail(ind, f"_type_err({label_expr}, {var}, 'a list')")
            ev = f"{var}_e"
            L.append(f"{ind}for {ev} in {var}:")
            if spec.elem.kind != "int":
                raise TypeError("fast validator: only lists of integers are supported")
            self.check(spec.elem, ev, f"{label_expr} + ' element'", ind + "    ")
            if spec.min_len:
                L.append(f"{ind}if len({var}) < {spec.min_len}:")
                self.fail(ind, f"{label_expr} + ' must not be empty'")
            if spec.unique:
                L.append(f"{ind}if len(set({var})) != len({var}):")
                self.fail(ind, f"{label_expr} + ' ' + _short_list({var}) + ' has duplicate broker ids'")
        elif k == "map":
            if spec.normalizer is not None:
                fn = self.const(spec.normalizer)
                L.append(f"{ind}try:")
                L.append(f"{ind}    {var} = {fn}({var})")
                L.append(f"{ind}except ValueError as _exc:")
                L.append(f"{ind}    return None, {self.prefix} + {label_expr} + ' ' + str(_exc)")
            else:
                L.append(f"{ind}if type({var}) is not dict:")
                self.fail(ind, f"_type_err({label_expr}, {var}, 'a map')")
            kv, vv = f"{var}_k", f"{var}_v"
            L.append(f"{ind}for {kv}, {vv} in {var}.items():")
            self.check(spec.key, kv, f"{label_expr} + ' key'", ind + "    ")
            if spec.value.nullable:
                L.append(f"{ind}    if {vv} is not None:")
                self.check(spec.value, vv, f"{label_expr} + '[' + _short({kv}) + ']'", ind + "        ")
            else:
                L.append(f"{ind}    if {vv} is None:")
                self.fail(ind + "    ", f"{label_expr} + '[' + _short({kv}) + '] is null'")
                self.check(spec.value, vv, f"{label_expr} + '[' + _short({kv}) + ']'", ind + "    ")
        else:  # pragma: no cover
            raise TypeError(k)


def _compile(tname: str, model: type[EventBase]):
    g = _Gen(tname)
    L = g.lines
    L.append("def _validate(row, seq):")
    L.append("    get = row.get")
    out_vars: dict[str, str] = {}
    for col, fi in model.model_fields.items():
        if col in ("seq", "type"):
            continue  # checked by the dispatcher
        spec = _Spec(field_annotation(fi))
        var = f"v_{col}"
        out_vars[col] = var
        label = repr(col)
        L.append(f"    {var} = get({label})")
        if fi.is_required():
            L.append(f"    if {var} is None:")
            L.append(f"        return None, {g.prefix} + \"missing required column '{col}'\"")
            g.check(spec, var, label, "    ")
        else:
            L.append(f"    if {var} is not None:")
            g.check(spec, var, label, "        ")
            if fi.default_factory is not None:
                L.append("    else:")
                L.append(f"        {var} = {g.const(fi.default_factory)}()")
            elif fi.default is not None:
                L.append("    else:")
                L.append(f"        {var} = {g.const(fi.default)}")
    # copy of an all-None row, then this type's columns (much cheaper than a
    # 31-key dict display)
    L.append(f"    out = {g.const(dict.fromkeys(EVENT_COLUMNS))}.copy()")
    L.append("    out['seq'] = seq")
    L.append(f"    out['type'] = {tname!r}")
    for c, var in out_vars.items():
        L.append(f"    out[{c!r}] = {var}")
    if model.cross_check.__func__ is not EventBase.cross_check.__func__:
        cc = g.const(model.cross_check)
        L.append(f"    reason = {cc}(out)")
        L.append("    if reason:")
        L.append(f"        return None, {g.prefix} + reason")
    L.append("    return out, None")
    src = "\n".join(L)
    exec(compile(src, f"<validate {tname}>", "exec"), g.ns)
    fn = g.ns["_validate"]
    fn.__source__ = src
    return fn


_VALIDATORS = {name: _compile(name, m) for name, m in EVENT_MODELS.items()}
_SEQ = _Spec(field_annotation(EventBase.model_fields["seq"]))
_SEQ_LO, _SEQ_HI = _SEQ.lo, _SEQ.hi
_TYPES_TEXT = ", ".join(EVENT_TYPES)


def validate(row: dict) -> tuple[Optional[dict], Optional[str]]:
    """Hot-path validation of one raw row.

    Returns (normalized event dict, None) — keys exactly EVENT_COLUMNS — or
    (None, human-readable reason). A ValidEvent (a row `plain_rows` accepted) is only padded."""
    if type(row) is ValidEvent:
        return _PAD | row, None        # an exact dict in EVENT_COLUMNS order, as _validate makes
    seq = row.get("seq")
    if type(seq) is not int or seq < _SEQ_LO or seq > _SEQ_HI:
        t = row.get("type")
        what = ""
        if type(t) is str:
            what = f" ({t} row)" if t in _VALIDATORS else f" ({_short(t, 40)} row)"
        if seq is None:
            return None, f"row without seq{what}: missing required column 'seq'"
        return None, f"row without seq{what}: " + _int_err("seq", seq, _SEQ_LO, _SEQ_HI)
    t = row.get("type")
    fn = _VALIDATORS.get(t) if type(t) is str else None
    if fn is None:
        if t is None:
            return None, f"row seq {seq}: missing required column 'type'"
        return None, f"row seq {seq}: unknown event type {_short(t)} (expected one of {_TYPES_TEXT})"
    return fn(row, seq)


# --------------------------------------------------------------------------
# Columnar fast path: the rows of an Arrow batch that validate() passes through unchanged
# --------------------------------------------------------------------------
# Most rows of a stream are plain: a type without defaults or a cross-column rule (Fetch, Produce,
# CreatePartition, ...), every one of its columns in range (a list of ids element by element, an
# optional map column null), every other column null. For such
# a row the compiled validator only copies the row into a fresh dict. `plain_rows` finds them for a
# whole Arrow batch at once, from the same models (so it cannot drift from validate), and the
# stream reader hands them over as ValidEvent dicts, which validate() only pads. Every other row,
# and every batch whose layout this check does not read, takes the row path; a doubt is always
# settled that way, since the row path is exact for every row.

class ValidEvent(dict):
    """A raw row `plain_rows` accepted, as the reader made it (its batch's columns: the same keys,
    order and JSON as the row path's dict). validate() only pads it with the other columns."""

    __slots__ = ()


_PAD = dict.fromkeys(EVENT_COLUMNS)
_MAKERS: dict[tuple, Any] = {}


def plain_event_maker(names: tuple[str, ...]):
    """make(*values) -> the event validate() returns for a plain row with these columns, in this
    order (`_PAD | ValidEvent(zip(names, values))`: every event column, in EVENT_COLUMNS order),
    built without the row's own dict: a copy of the padding and one store per column, ~0.6 us a
    row against ~2 us for the row dict and its padding. None when `names` are not distinct event
    columns. One function per column layout, generated from the names (event columns only, so no
    text of the input reaches the generated code)."""
    make = _MAKERS.get(names)
    if make is None:
        if len(set(names)) != len(names) or not set(names) <= _PAD.keys():
            return None
        args = ", ".join(f"v{i}" for i in range(len(names)))
        stores = "".join(f"    e[{c!r}] = v{i}\n" for i, c in enumerate(names))
        ns = {"_copy": _PAD.copy}
        exec(compile(f"def make({args}):\n    e = _copy()\n{stores}    return e\n",
                     f"<plain event {','.join(names)}>", "exec"), ns)
        if len(_MAKERS) >= 256:          # bounded whatever layouts the stream's files have
            _MAKERS.clear()
        make = _MAKERS[names] = ns["make"]
    return make


def _plain_columns(model: type[EventBase]) -> Optional[dict[str, tuple["_Spec", bool]]]:
    """{column: (spec, required)} of a type whose valid rows validate() passes through unchanged,
    or None (a cross-column rule, a default to fill in, a required map column, or a list that
    is not of plain integer ids)."""
    if model.cross_check.__func__ is not EventBase.cross_check.__func__:
        return None
    out = {}
    for col, fi in model.model_fields.items():
        if col in ("seq", "type"):
            continue
        spec = _Spec(field_annotation(fi))
        required = fi.is_required()
        if not required and (fi.default is not None or fi.default_factory is not None):
            return None
        if spec.kind == "map" and not required:
            pass                 # a row is plain only while it is null (_fits: no Arrow type fits)
        elif spec.kind == "list" and not _plain_list(spec):
            return None
        elif spec.kind not in ("int", "str", "bool", "lit", "list"):
            return None
        out[col] = (spec, required)
    return out


def _plain_list(spec: "_Spec") -> bool:
    """A list whose valid values validate() keeps as they are and plain_rows can check column-wise:
    non-null integers, each in range, and a minimum length (a list of unique ids is left to the row
    path: the batch check does not look for repeats)."""
    el = spec.elem
    return el.kind == "int" and not el.nullable and not spec.unique and el.normalizer is None


PLAIN_TYPES: dict[str, dict[str, tuple["_Spec", bool]]] = {
    name: cols for name, m in EVENT_MODELS.items() if (cols := _plain_columns(m)) is not None}


def _fits(spec: "_Spec", t: pa.DataType) -> bool:
    """An Arrow column of type t gives Python values of the spec's kind (unsigned, float, bool for
    an integer... are left to the row path, which names the wrong type)."""
    if spec.kind == "int":
        return pa.types.is_signed_integer(t)
    if spec.kind in ("str", "lit"):
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if spec.kind == "list":
        return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_signed_integer(t.value_type)
    if spec.kind == "map":
        return False             # a map column is plain only where it is null
    return pa.types.is_boolean(t)


def _in_range(spec: "_Spec", a):
    """Where a holds a value, whether it passes spec's checks (null where a is null)."""
    import pyarrow.compute as pc
    if spec.kind == "int":
        return pc.and_(pc.greater_equal(a, spec.lo), pc.less_equal(a, spec.hi))
    if spec.kind == "list":
        # a list passes when none of its elements is null or out of range (the rows of the bad
        # elements, by their parent index), and it is long enough
        el = spec.elem
        vals = pc.list_flatten(a)
        good = pc.is_valid(vals)
        if el.lo is not None:
            good = pc.and_(good, pc.greater_equal(vals, el.lo))
        if el.hi is not None:
            good = pc.and_(good, pc.less_equal(vals, el.hi))
        bad_rows = pc.filter(pc.list_parent_indices(a), pc.invert(pc.fill_null(good, False)))
        ok = pc.invert(pc.is_in(pa.array(range(len(a)), pa.int64()), value_set=bad_rows.cast(pa.int64())))
        if spec.min_len:
            ok = pc.and_(ok, pc.greater_equal(pc.list_value_length(a), spec.min_len))
        return pc.if_else(pc.is_valid(a), ok, None)
    if spec.kind == "lit":
        return pc.if_else(pc.is_valid(a), pc.is_in(a, value_set=pa.array(list(spec.choices), a.type)), None)
    if spec.kind == "str" and spec.min_len:
        # validate counts code points (len); text checks need nothing: a string Arrow decoded to
        # Python is valid UTF-8, so it holds no lone surrogate
        return pc.greater_equal(pc.utf8_length(a), spec.min_len)
    return pc.is_valid(a)


def plain_rows(batch: pa.RecordBatch) -> Optional[list[bool]]:
    """Per row of `batch` (raw input columns, before any conversion): whether it is plain, i.e.
    validate(row) gives the row's own values, every other column None. None: the batch's layout
    is not one this check reads (no seq or type column, a repeated name, a column that is not an
    event column holding a value); every row then takes the row path."""
    mask = plain_mask(batch)
    return None if mask is None else mask.to_pylist()


def plain_mask(batch: pa.RecordBatch) -> Optional[pa.BooleanArray]:
    """plain_rows as an Arrow boolean array (no nulls)."""
    import pyarrow.compute as pc
    names = batch.schema.names
    if len(set(names)) != len(names) or "seq" not in names or "type" not in names:
        return None
    n = batch.num_rows
    cols = {c: batch.column(i) for i, c in enumerate(names)}
    seq, typ = cols["seq"], cols["type"]
    if not pa.types.is_signed_integer(seq.type) or not (pa.types.is_string(typ.type)
                                                       or pa.types.is_large_string(typ.type)):
        return None
    seq_ok = pc.fill_null(pc.and_(pc.greater_equal(seq, _SEQ_LO), pc.less_equal(seq, _SEQ_HI)), False)
    used = [c for c in names if c not in ("seq", "type") and cols[c].null_count < n]
    if any(c not in _PAD for c in used):
        return None          # the reader's dicts would hold that column's key: not validate's keys
    nulls = {c: pc.is_null(cols[c]) for c in used}
    ranged: dict[tuple, Any] = {}
    present = set(pc.unique(typ).to_pylist())
    mask = None
    for tname, spec_of in PLAIN_TYPES.items():
        if tname not in present:
            continue
        if any(req and c not in used for c, (_, req) in spec_of.items()):
            continue         # a required column null throughout: no row of this type is plain
        m = pc.fill_null(pc.equal(typ, tname), False)
        for c in used:
            sr = spec_of.get(c)
            if sr is None:                       # not this type's column
                m = pc.and_(m, nulls[c])
                continue
            spec, required = sr
            if not _fits(spec, cols[c].type):
                if required:                     # no value of it can pass
                    m = None
                    break
                m = pc.and_(m, nulls[c])         # only its null rows can be plain
                continue
            key = (c, spec.kind, spec.lo, spec.hi, spec.min_len, spec.choices,
                   spec.elem and (spec.elem.lo, spec.elem.hi))
            if key not in ranged:
                ranged[key] = pc.fill_null(_in_range(spec, cols[c]), False)
            ok = ranged[key] if required else pc.or_(nulls[c], ranged[key])
            m = pc.and_(m, ok)
        if m is not None:
            mask = m if mask is None else pc.or_(mask, m)
    if mask is None:
        return pa.array([False] * n, pa.bool_())
    return pc.and_(mask, seq_ok)


def validate_table(table: pa.Table) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Validate an Arrow table of raw rows (column-wise extraction, then the
    compiled per-row checks). Returns (valid events, [(raw row, reason)])."""
    names = table.column_names
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    good: list[dict] = []
    bad: list[tuple[dict, str]] = []
    for vals in zip(*cols):
        raw = dict(zip(names, vals))
        ev, reason = validate(raw)
        if ev is None:
            bad.append((raw, reason))
        else:
            good.append(ev)
    return good, bad
