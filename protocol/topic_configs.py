"""Kafka 4.4.0's topic configs: every name LogConfig accepts, with its type and validator, and the
check of a value as Kafka's controller makes it (ControllerConfigurationValidator -> LogConfig
#validate: validateNames, then ConfigDef#parse in LogConfig's definition order, then
validateTopicLogConfigValues). The one place these rules are written.

isrflow models three topic configs (config.TOPIC_KEYS); a real cluster's CreateTopics and
IncrementalAlterConfigs carry any of these, and Kafka accepts them when they parse. So isrflow checks
every one as Kafka does (same answer, same message) and keeps it with the topic, as Kafka does: a
later change is checked together with the configs it leaves (config.checked_topic_config), so
min.compaction.lag.ms of one request is held against max.compaction.lag.ms set by an earlier one.

TOPIC_CONFIGS is LogConfig.configDefCopy() of kafka-storage-4.4.0 in its order (Kafka reports the
first bad key in that order, whatever the request's). tests/test_kafka44_topic_configs.py runs the
real LogConfig (java/lab/TopicConfigOracle.java) and holds the table, 485 answers and a chain of
changes against it.
"""
from __future__ import annotations

import re
from decimal import Decimal

INT, LONG, DOUBLE, BOOLEAN, STRING, LIST = "INT", "LONG", "DOUBLE", "BOOLEAN", "STRING", "LIST"
_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1
_BOUNDS = {INT: (-_INT_MAX - 1, _INT_MAX), LONG: (-_LONG_MAX - 1, _LONG_MAX)}

# (name, type, validator): ("range", at least or None, at most or None) | ("in", strings) (a LIST:
# each item) | ("gzip",) (CompressionType's level: 1..9 or -1) | ("throttled",)
# (ThrottledReplicaListValidator) | None
TOPIC_CONFIGS: tuple = (
    ("segment.bytes", INT, ("range", 1048576, None)),
    ("segment.ms", LONG, ("range", 1, None)),
    ("segment.jitter.ms", LONG, ("range", 0, None)),
    ("segment.index.bytes", INT, ("range", 4, None)),
    ("flush.messages", LONG, ("range", 1, None)),
    ("flush.ms", LONG, ("range", 0, None)),
    ("retention.bytes", LONG, None),
    ("retention.ms", LONG, ("range", -1, None)),
    ("max.message.bytes", INT, ("range", 0, None)),
    ("max.decompressed.message.bytes", INT, ("range", 1, 2147483639)),
    ("index.interval.bytes", INT, ("range", 0, None)),
    ("delete.retention.ms", LONG, ("range", 0, None)),
    ("min.compaction.lag.ms", LONG, ("range", 0, None)),
    ("max.compaction.lag.ms", LONG, ("range", 1, None)),
    ("file.delete.delay.ms", LONG, ("range", 0, None)),
    ("min.cleanable.dirty.ratio", DOUBLE, ("range", 0, 1)),
    ("cleanup.policy", LIST, ("in", ("compact", "delete"))),
    ("unclean.leader.election.enable", BOOLEAN, None),
    ("min.insync.replicas", INT, ("range", 1, None)),
    ("compression.type", STRING, ("in", ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))),
    ("compression.gzip.level", INT, ("gzip",)),
    ("compression.lz4.level", INT, ("range", 1, 17)),
    ("compression.zstd.level", INT, ("range", -131072, 22)),
    ("preallocate", BOOLEAN, None),
    ("message.timestamp.type", STRING, ("in", ("CreateTime", "LogAppendTime"))),
    ("message.timestamp.before.max.ms", LONG, ("range", 0, None)),
    ("message.timestamp.after.max.ms", LONG, ("range", 0, None)),
    ("leader.replication.throttled.replicas", LIST, ("throttled",)),
    ("follower.replication.throttled.replicas", LIST, ("throttled",)),
    ("remote.storage.enable", BOOLEAN, None),
    ("local.retention.ms", LONG, ("range", -2, None)),
    ("local.retention.bytes", LONG, ("range", -2, None)),
    ("remote.log.copy.disable", BOOLEAN, None),
    ("remote.copy.lag.ms", LONG, ("range", -1, None)),
    ("remote.copy.lag.bytes", LONG, ("range", -1, None)),
    ("remote.log.delete.on.disable", BOOLEAN, None),
    ("errors.deadletterqueue.group.enable", BOOLEAN, None),
    ("internal.segment.bytes", INT, None),
)
KAFKA_TOPIC_CONFIG_NAMES = frozenset(name for name, _, _ in TOPIC_CONFIGS)

_INTEGER = re.compile(r"[+-]?\d+")                  # Integer/Long#parseLong (Unicode digits too)
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")   # Double#parseDouble
_LIST_SPLIT = re.compile(r"\s*,\s*")                 # ConfigDef.COMMA_WITH_WHITESPACE
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
_THROTTLED = ("must be the literal '*' or a list of replicas in the following format: "
              "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
# LogConfig#validateRemoteStorageOnlyIfSystemEnabled, on a cluster without tiered storage
# (remote.log.storage.system.enable=false, Kafka's default): isrflow models no remote storage
NO_TIERED_STORAGE = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                     "with remote log storage.")


def java_double(x: float) -> str:
    """Double#toString: how Kafka's message prints a parsed DOUBLE (with the shortest digits that
    read back as x; Java 17 prints a few values, subnormals such as 4.9E-324, with others)."""
    if x != x:
        return "NaN"
    if x == float("inf"):
        return "Infinity"
    if x == float("-inf"):
        return "-Infinity"
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        s = repr(x)
        return s if "." in s else s + ".0"
    # computerized scientific notation, with the shortest digits (as Double#toString gives them)
    d = Decimal(repr(abs(x)))
    digits = "".join(map(str, d.normalize().as_tuple().digits)).rstrip("0") or "0"
    return ("-" if x < 0 else "") + digits[0] + "." + (digits[1:] or "0") + "E" + str(d.adjusted())


def _parse(name: str, typ: str, v) -> tuple:
    """ConfigDef#parseType: (the parsed value, None) or (None, Kafka's message)."""
    t = str(v).strip()
    if typ in (INT, LONG):
        if _INTEGER.fullmatch(t):
            n = int(t)
            lo, hi = _BOUNDS[typ]
            if lo <= n <= hi:
                return n, None
        return None, f"Invalid value {v} for configuration {name}: Not a number of type {typ}"
    if typ == DOUBLE:
        if _DOUBLE.fullmatch(t):
            return float(t.rstrip("fFdD").replace("Infinity", "inf")), None
        return None, f"Invalid value {v} for configuration {name}: Not a number of type DOUBLE"
    if typ == BOOLEAN:
        if t.lower() in ("true", "false"):
            return t.lower() == "true", None
        return None, f"Invalid value {v} for configuration {name}: Expected value to be either true or false"
    if typ == LIST:
        return ([] if not t else _LIST_SPLIT.split(t)), None
    return t, None


def _invalid(name: str, value, validator) -> str | None:
    """The validator's message for a parsed value, or None."""
    kind = validator[0]
    if kind == "range":
        lo, hi = validator[1], validator[2]
        shown = java_double(value) if isinstance(value, float) else value
        if lo is not None and value < lo:
            return f"Invalid value {shown} for configuration {name}: Value must be at least {lo}"
        if hi is not None and value > hi:
            return f"Invalid value {shown} for configuration {name}: Value must be no more than {hi}"
        return None
    if kind == "in":
        choices = validator[1]
        if isinstance(value, list) and "" in value:      # ConfigDef.ValidList, before each item's check
            return f"Configuration '{name}' values must not be empty."
        for item in (value if isinstance(value, list) else [value]):
            if item not in choices:
                return f"Invalid value {item} for configuration {name}: String must be one of: {', '.join(choices)}"
        return None
    if kind == "gzip":
        if not (1 <= value <= 9 or value == -1):
            return f"Invalid value {value} for configuration {name}: Value must be between 1 and 9 or equal to -1"
        return None
    items = [s.strip() for s in value]      # throttled
    if all(_REPLICA.fullmatch(s) for s in items) or "".join(items) == "*":
        return None
    return f"Invalid value [{', '.join(value)}] for configuration {name}: {name} {_THROTTLED}"


def kafka_config_error(cfg: dict) -> str | None:
    """Kafka's message for the first reason its controller refuses the topic config `cfg` (names
    -> string values, no None), or None: an unknown name (LogConfig#validateNames: "Unknown topic
    config name: K"; names outside KAFKA_TOPIC_CONFIG_NAMES, which the caller may have taken out
    first), then each value in LogConfig's order (its type, then its validator), then the checks
    across keys (min.compaction.lag.ms > max.compaction.lag.ms; remote storage on a cluster without
    it)."""
    for k in cfg:
        if k not in KAFKA_TOPIC_CONFIG_NAMES:
            return f"Unknown topic config name: {k}"
    parsed = {}
    for name, typ, validator in TOPIC_CONFIGS:
        if name not in cfg:
            continue
        value, bad = _parse(name, typ, cfg[name])
        if bad is None and validator is not None:
            bad = _invalid(name, value, validator)
        if bad is not None:
            return bad
        parsed[name] = value
    lo, hi = parsed.get("min.compaction.lag.ms", 0), parsed.get("max.compaction.lag.ms", _LONG_MAX)
    if lo > hi:
        return f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})"
    if parsed.get("remote.storage.enable"):
        return NO_TIERED_STORAGE
    return None
