"""protocol.topic_configs against the real Kafka 4.4.0: LogConfig of kafka-storage-4.4.0, run by
java/lab/TopicConfigOracle.java with a default broker's log config, as the controller's
ControllerConfigurationValidator runs it.

* The table (TOPIC_CONFIGS: names, order, types, validators) is LogConfig.configDefCopy()'s.
* For every case below (each key's type and bounds, Kafka's order among bad keys, unknown names, the
  checks across keys), isrflow's answer to a CreatePartition's config (config.checked_topic_config)
  is Kafka's: accepted where Kafka accepts, INVALID_CONFIG with Kafka's message where it refuses.
"""
from __future__ import annotations


import pytest

from protocol.config import checked_topic_config
from protocol.topic_configs import BOOLEAN, DOUBLE, INT, LIST, LONG, STRING, TOPIC_CONFIGS, java_double
from tests.kafka_oracle import ask, needs_kafka_java

pytestmark = needs_kafka_java


def _oracle(lines: list[str]) -> list[str]:
    """Kafka's answer to each line (see TopicConfigOracle)."""
    return ask("TopicConfigOracle", lines)


def _validator_text(v) -> str:
    """A TOPIC_CONFIGS validator as ConfigDef's toString prints it."""
    if v is None:
        return "null"
    if v[0] == "range":
        return f"[{v[1]},...]" if v[2] is None else f"[{v[1]},...,{v[2]}]"
    if v[0] == "in":
        return "[" + ", ".join(v[1]) + "]"
    if v[0] == "gzip":
        return "[1,...,9] or -1"
    return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


def _values(typ: str, validator) -> list[str]:
    """Values that reach every branch of a key's check."""
    if typ in (INT, LONG):
        big = str(2 ** 31 if typ == INT else 2 ** 63)
        out = ["abc", "", " 7 ", "+0", "1_000", "1e3", "-1", "0", big, "-" + big, str(int(big) - 1)]
        if validator is not None and validator[0] == "range":
            lo, hi = validator[1], validator[2]
            out += [str(lo - 1), str(lo), f" {lo - 1} "]
            if hi is not None:
                out += [str(hi), str(hi + 1)]
        if validator == ("gzip",):
            out += ["-2", "1", "9", "10"]
        return out
    if typ == DOUBLE:
        return ["abc", "", "0.5", "2", "-0.5", "1e10", "-1e-10", "NaN", "0.5f", "1D", "Infinity", "-Infinity",
                "1e-5", ".5", "5.", "1", "0", "1.0000001", "12345678.5", "inf", "-0.001", "-0.00099", "10000000",
                "9999999.5", "-0.0"]
    if typ == BOOLEAN:
        return ["true", "TRUE", " false ", "False", "yes", "1", ""]
    if typ == STRING:
        return [*validator[1], validator[1][0].upper(), f" {validator[1][-1]} ", "foo", ""]
    if validator[0] == "in":
        return ["compact", "compact,delete", " compact , delete ", "Compact", "compact,foo", "", "compact,,delete",
                "delete,compact,delete"]
    return ["*", "0:1,1:2", "0:1, x", "", " * ", "0:1,*", "x", "0:1,", "10:20 , 3:4"]


CASES: list[dict] = [{name: v} for name, typ, validator in TOPIC_CONFIGS for v in _values(typ, validator)] + [
    {"retention.ms": "abc", "segment.bytes": "x"},          # LogConfig's order, not the request's
    {"segment.bytes": "x", "retention.ms": "abc"},
    {"no.such": "1"},
    {"no.such": "1", "retention.ms": "abc"},                # names first
    {"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5", "retention.ms": "abc"},
    {"remote.storage.enable": "true", "cleanup.policy": "compact"},
    {"remote.storage.enable": "true", "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"remote.storage.enable": "false", "remote.log.copy.disable": "true", "local.retention.ms": "5"},
]


def test_the_table_is_kafka_4_4_logconfig():
    out = _oracle(["DUMP"])
    got = out[:out.index("END")]
    assert got == [f"{name}\t{typ}\t{_validator_text(v)}" for name, typ, v in TOPIC_CONFIGS]


def test_every_answer_is_kafkas():
    kafka = _oracle(["\t".join(x for kv in case.items() for x in kv) for case in CASES])
    assert len(kafka) == len(CASES)
    wrong = []
    for case, want in zip(CASES, kafka):
        bad, _ = checked_topic_config(case, creation=True)
        got = "OK" if bad is None else bad[1]
        if bad is not None:
            assert bad[0] == "INVALID_CONFIG"
        if got != want:
            wrong.append(f"{case}: isrflow {got!r}, Kafka {want!r}")
    assert not wrong, "\n".join(wrong)
    assert sum(w != "OK" for w in kafka) > len(CASES) // 3     # the cases reach the refusals too


def test_doubles_print_as_java_prints_them():
    """topic_configs.java_double is Double#toString, which Kafka's range messages print."""
    values = ["0", "-0.0", "0.001", "0.00099", "-0.001", "1e7", "9999999.5", "10000000.5", "NaN", "Infinity",
              "-Infinity", "1e-300", "123456789.123", "0.5", "-2", "1e21", "1.5e-7", "1.7976931348623157e308",
              "0.1", "100", "2.5e-3"]
    java = _oracle([f"DOUBLE\t{v}" for v in values])
    assert [java_double(float(v.replace("Infinity", "inf"))) for v in values] == java
