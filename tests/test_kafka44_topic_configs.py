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


# keys with values on both sides of their own checks and of the check across keys (compaction lags)
_CHAIN_VALUES = {
    "min.compaction.lag.ms": ["0", "100", "5000", "-1", "abc"],
    "max.compaction.lag.ms": ["1", "1000", "9000", "0"],
    "retention.ms": ["-1", "1000", "x"],
    "cleanup.policy": ["compact", "delete", "compact,delete", "foo"],
    "segment.bytes": ["1048576", "100"],
    "min.insync.replicas": ["1", "2", "0"],
    "unclean.leader.election.enable": ["true", "false", "maybe"],
    "remote.storage.enable": ["false", "true"],
}


def _line(cfg: dict) -> str:
    return "\t".join(x for kv in sorted(cfg.items()) for x in kv)


def test_a_change_is_checked_with_the_configs_it_leaves():
    """Seeded chains of topic-wide AlterConfig rows (sets and deletions) after a CreatePartition with
    configs: each answer is Kafka's for the whole config the change leaves
    (ConfigurationControlManager#validateAlterConfig: the topic's configs with the change merged in,
    to LogConfig#validate), asked of the real LogConfig one change at a time, the topic's configs
    following Kafka's answers. The cluster is re-made from its encoded state every third row (the
    Spark engine's state store), so the configs kept also survive the codec."""
    import random

    from tests.engine_util import run_events
    from tests.kafka_oracle import Session
    from tests.streams import S

    rng = random.Random(4404)
    keys = sorted(_CHAIN_VALUES)
    lags = ["min.compaction.lag.ms", "max.compaction.lag.ms"] * 3      # drawn more often: they conflict
    across = refused = 0
    with Session("TopicConfigOracle") as kafka:
        for chain in range(60):
            s = S().up(1, 2)
            kept: dict = {}
            while True:             # a creation Kafka accepts: the chain is about the changes
                kept = {k: rng.choice(_CHAIN_VALUES[k]) for k in rng.sample(keys, rng.randint(0, 3))}
                if kafka.ask1(_line(kept)) == "OK":
                    break
            s.create([1, 2], config=kept)
            want = {}
            for _ in range(8):
                change = {k: (None if rng.random() < 0.25 else rng.choice(_CHAIN_VALUES[k]))
                          for k in rng.sample(keys + lags, rng.randint(1, 3))}
                whole = dict(kept)
                for k, v in change.items():
                    if v is None:
                        whole.pop(k, None)
                    else:
                        whole[k] = v
                answer = kafka.ask1(_line(whole))
                seq = s.add(type="AlterConfig", topic="t", config=change)
                want[seq] = answer
                if answer == "OK":
                    kept = whole
                else:
                    refused += 1
                    # refused for a key the change leaves alone
                    across += answer.startswith("conflict topic config") and len(change.keys() & set(lags)) < 2
            out = run_events(s.events, roundtrip_every=3)
            got = {r["seq"]: "OK" if r["result"] == "NONE" else r["detail"]
                   for r in out["admin"] if r["type"] == "AlterConfig"}
            assert got == want, f"chain {chain}: {s.events}"
            assert {r["result"] for r in out["admin"] if r["type"] == "AlterConfig"} <= {"NONE", "INVALID_CONFIG"}
    assert across >= 10 and refused >= 60        # the chains reach the check across requests


def test_a_partitions_own_change_is_checked_with_its_topics_configs():
    """isrflow's partition-level AlterConfig (no Kafka counterpart) is checked like a topic's, with
    the partition's configs: its topic's, its own over them."""
    from tests.engine_util import run_events
    from tests.streams import S

    s = S().up(1, 2)
    s.create([1, 2], config={"max.compaction.lag.ms": "1000"})
    bad = s.alter_config(partition=0, min_compaction_lag_ms=5000)
    own = s.alter_config(partition=0, max_compaction_lag_ms=9000)
    ok = s.alter_config(partition=0, min_compaction_lag_ms=5000)
    topic_bad = s.alter_config(min_compaction_lag_ms=5000)          # the topic's own max is still 1000
    out = run_events(s.events)
    got = {r["seq"]: (r["result"], r["detail"]) for r in out["admin"] if r["type"] == "AlterConfig"}
    conflict = ("INVALID_CONFIG", "conflict topic config setting min.compaction.lag.ms (5000) > "
                                  "max.compaction.lag.ms (1000)")
    assert got == {bad: conflict, own: ("NONE", None), ok: ("NONE", None), topic_bad: conflict}
