"""Engine configuration: Kafka's own config names plus `delivery.*` and `output.*`.

Defaults follow a current Kafka cluster with KIP-966 on (SPEC §4). Topic-level keys may be
overridden per topic or partition (AlterConfig); the rest are engine-wide.
"""
from __future__ import annotations

from .messages import ONLINE, UNCLEAN
from .topic_configs import kafka_config_error

# The one list of engine defaults. conf/engine.properties ships the same keys and values (the
# protocol core reads no files); tests/test_rules_config.py fails if the two drift apart.
DEFAULTS: dict[str, str] = {
    "min.insync.replicas": "1",
    "replica.lag.time.max.ms": "30000",
    "eligible.leader.replicas.enable": "true",
    "unclean.leader.election.enable": "false",
    "unclean.recovery.manager.enabled": "false",
    "unclean.recovery.strategy": "Balanced",
    "request.timeout.ms": "30000",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "unclean.leader.election.interval.ms": "300000",
    # "" (unset): replica.lag.time.max.ms / 2, as Kafka schedules it (rule B8); an explicit value
    # overrides it, 0 = only on Tick rows (streams that record every check)
    "isr.expiration.interval.ms": "",
    # Kafka's controller default (broker.session.timeout.ms); 0: sessions not modelled (SPEC §2)
    "broker.session.timeout.ms": "9000",
    # a row whose ts_ms is more than this past the stream's time is rejected (0: no limit). Timers
    # fire at every period they cross, so a corrupt ts_ms of 2^62 would make a replay fire a
    # refused ISR shrink ~10^14 times; a week covers any real gap between rows of a live stream.
    "input.max.time.jump.ms": "604800000",
    "delivery.alter_partition": "immediate",
    "delivery.metadata": "immediate",
    "output.fetch": "errors",
}

# Keys a topic (or one partition) may override with AlterConfig / CreatePartition.config.
TOPIC_KEYS = frozenset({"min.insync.replicas", "unclean.leader.election.enable", "unclean.recovery.strategy"})

_STRATEGIES = {"aggressive": "Aggressive", "proactive": "Aggressive", "balanced": "Balanced",
               "manual": "None", "none": "None"}


class ConfigError(ValueError):
    pass


def parse_bool(key: str, v: str) -> bool:
    """The one boolean parser for config values (engine, topic overrides, the simulator)."""
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ConfigError(f"{key}={v!r}: expected true or false")


def parse_int(key: str, v: str, lo: int = 0) -> int:
    try:
        n = int(str(v).strip())
    except ValueError:
        raise ConfigError(f"{key}={v!r}: expected an integer") from None
    if n < lo:
        raise ConfigError(f"{key}={v!r}: must be >= {lo}")
    return n


def _choice(key: str, v: str, choices: tuple[str, ...]) -> str:
    s = str(v).strip().lower()
    if s not in choices:
        raise ConfigError(f"{key}={v!r}: expected one of {', '.join(choices)}")
    return s


def parse_strategy(v: str) -> str:
    s = str(v).strip().lower()
    if s not in _STRATEGIES:
        raise ConfigError(f"unclean.recovery.strategy={v!r}: expected Aggressive, Balanced or None "
                          "(aliases proactive, balanced, manual)")
    return _STRATEGIES[s]


def validate_topic_config(cfg: dict, strict: bool = False) -> dict:
    """Checks a topic config (names -> values; None: an AlterConfig's deletion) and returns it
    normalized: every key kept (Kafka keeps a topic's configs whether or not isrflow models them, and
    checks a change against them: checked_topic_config), the keys isrflow models (TOPIC_KEYS)
    stripped, the others as Kafka stores them (the request's string), None kept (merge_config).
    Every key but `unclean.recovery.strategy` (isrflow's, KIP-966: parse_strategy, last) is checked
    as Kafka's controller checks it (protocol.topic_configs: Kafka's order and messages; "Unknown
    topic config name: K" for a name Kafka does not know). A None value is no error whatever its key:
    Kafka validates the config a change leaves, so deleting a key that is not set changes nothing.
    strict=False (the engine's own config, a recorded PartitionRecord's) reads
    unclean.leader.election.enable as parse_bool does (1/0, yes/no too); strict, as Kafka's ConfigDef
    (true or false, any case). Raises ConfigError."""
    kafka = {k: v for k, v in cfg.items() if v is not None and k != "unclean.recovery.strategy"}
    unclean = kafka.get("unclean.leader.election.enable")
    if not strict and unclean is not None:
        kafka["unclean.leader.election.enable"] = str(parse_bool("unclean.leader.election.enable", unclean)).lower()
    bad = kafka_config_error(kafka)
    if bad is not None:
        raise ConfigError(bad)
    strategy = cfg.get("unclean.recovery.strategy")
    if strategy is not None:
        parse_strategy(strategy)
    return _normalized(cfg)


def _normalized(cfg: dict) -> dict:
    """A checked topic config as it is kept: the modelled keys stripped, the others as given."""
    return {k: None if v is None else str(v).strip() if k in TOPIC_KEYS else str(v) for k, v in cfg.items()}


def merge_config(layer: dict, cfg: dict) -> None:
    """Applies validated changes to a layer of overrides (a topic's, or one partition's): a value sets
    its key, None deletes it (Kafka's incrementalAlterConfigs DELETE, a ConfigRecord with a null
    value: the key falls back to the layer below, in the end the engine's default)."""
    for k, v in cfg.items():
        if v is None:
            layer.pop(k, None)
        else:
            layer[k] = v


def checked_topic_config(cfg: dict, creation: bool = False,
                         existing: dict | None = None) -> tuple[tuple[str, str] | None, dict | None]:
    """A topic config change as Kafka's controller judges it: (None, the change normalized by
    validate_topic_config, strict), or ((error, message) as Kafka answers it, None): INVALID_CONFIG
    with validate_topic_config's message.
    creation (a CreatePartition's config, CreateTopics): a null value is refused before anything else,
    ReplicationControlManager#computeConfigChanges (kafka-metadata 4.4.0): INVALID_CONFIG "Null value
    not supported for topic configs: " and every null key, joined by ",". Otherwise (AlterConfig) a
    null value deletes the key (merge_config).
    existing (an AlterConfig: the configs the topic has): Kafka checks the whole config the change
    leaves, not the change alone (ConfigurationControlManager#validateAlterConfig: the topic's configs,
    the change merged in, to LogConfig#validate), so a change can conflict with an earlier one
    (min.compaction.lag.ms now above a max.compaction.lag.ms set before). Of the existing configs the
    unmodelled ones take part: the modelled three have no check across keys, and a recorded
    PartitionRecord may have set one of them in the lenient form (validate_topic_config, strict=False)
    that the strict check would refuse."""
    if creation:
        nulls = [k for k, v in cfg.items() if v is None]
        if nulls:
            return ("INVALID_CONFIG", "Null value not supported for topic configs: " + ",".join(nulls)), None
    try:
        if not existing:
            return None, validate_topic_config(cfg, strict=True)
        whole = {k: v for k, v in existing.items() if k not in TOPIC_KEYS}
        merge_config(whole, cfg)        # the change's own keys are checked as part of the whole
        validate_topic_config(whole, strict=True)
        return None, _normalized(cfg)
    except ConfigError as e:
        return ("INVALID_CONFIG", str(e)), None


def effective_min_isr(min_isr: int, n_replicas: int) -> int:
    """A11 ReplicationControlManager#getTopicEffectiveMinIsr: min.insync.replicas capped at the
    replica count (isrflow uses the partition's own count where Kafka uses partition 0's); with no
    replicas known, min.insync.replicas itself. The one place this rule is written."""
    return min_isr if not n_replicas or min_isr <= n_replicas else n_replicas


class TopicConf:
    """Effective topic-level settings of one partition."""
    __slots__ = ("min_isr", "unclean", "strategy", "election")

    def __init__(self, min_isr: int, unclean: bool, strategy: str):
        self.min_isr = min_isr
        self.unclean = unclean
        self.strategy = strategy
        # the election mode of a controller-initiated change: unclean.leader.election.enable
        # turns every ONLINE election into an UNCLEAN one (ReplicationControlManager#electionType)
        self.election = UNCLEAN if unclean else ONLINE

    def effective_min_isr(self, n_replicas: int) -> int:
        return effective_min_isr(self.min_isr, n_replicas)


class EngineConfig:
    """Typed engine-wide settings; `raw` keeps the Kafka-named strings."""

    def __init__(self, overrides: dict[str, str] | None = None):
        raw = dict(DEFAULTS)
        for k, v in (overrides or {}).items():
            if k not in DEFAULTS:
                raise ConfigError(f"unknown config key {k!r} (known: {', '.join(sorted(DEFAULTS))})")
            raw[k] = str(v)
        self.raw = raw
        self.lag_ms = parse_int("replica.lag.time.max.ms", raw["replica.lag.time.max.ms"], 0)
        self.elr = parse_bool("eligible.leader.replicas.enable", raw["eligible.leader.replicas.enable"])
        self.recovery_manager = parse_bool("unclean.recovery.manager.enabled", raw["unclean.recovery.manager.enabled"])
        self.request_timeout_ms = parse_int("request.timeout.ms", raw["request.timeout.ms"], 1)
        self.auto_rebalance = parse_bool("auto.leader.rebalance.enable", raw["auto.leader.rebalance.enable"])
        self.rebalance_interval_ms = 1000 * parse_int("leader.imbalance.check.interval.seconds",
                                                 raw["leader.imbalance.check.interval.seconds"], 1)
        self.unclean_interval_ms = parse_int("unclean.leader.election.interval.ms",
                                        raw["unclean.leader.election.interval.ms"], 1)
        # B8: ReplicaManager#startup schedules "isr-expiration" every replicaLagTimeMaxMs / 2
        iv = str(raw["isr.expiration.interval.ms"]).strip()
        self.isr_interval_ms = (parse_int("isr.expiration.interval.ms", iv, 0) if iv
                                else max(1, self.lag_ms // 2) if self.lag_ms > 0 else 0)
        self.session_timeout_ms = parse_int("broker.session.timeout.ms", raw["broker.session.timeout.ms"], 0)
        self.max_time_jump_ms = parse_int("input.max.time.jump.ms", raw["input.max.time.jump.ms"], 0)
        self.ap_immediate = _choice("delivery.alter_partition", raw["delivery.alter_partition"],
                                    ("immediate", "explicit")) == "immediate"
        self.md_immediate = _choice("delivery.metadata", raw["delivery.metadata"],
                                    ("immediate", "explicit")) == "immediate"
        self.fetch_all = _choice("output.fetch", raw["output.fetch"], ("errors", "all")) == "all"
        validate_topic_config({k: raw[k] for k in TOPIC_KEYS})
        self.base_topic = {k: raw[k] for k in TOPIC_KEYS}
        self._conf_cache: dict[tuple, TopicConf] = {}
        self._base_conf: TopicConf | None = None

    def topic_conf(self, *layers: dict[str, str] | None) -> TopicConf:
        if not any(layers):
            # no override at all (most partitions of most streams): the engine's own setting,
            # asked for by every new partition
            conf = self._base_conf
            if conf is None:
                conf = self._base_conf = self._conf_of(self.base_topic)
            return conf
        merged = dict(self.base_topic)
        for layer in layers:
            if layer:
                merged.update(layer)
        return self._conf_of(merged)

    def _conf_of(self, merged: dict[str, str]) -> TopicConf:
        # one shared TopicConf per distinct setting (it is never mutated): parsing the strings for
        # every partition was a tenth of a partition creation's cost
        key = (merged["min.insync.replicas"], merged["unclean.leader.election.enable"],
               merged["unclean.recovery.strategy"])
        cache = self._conf_cache
        conf = cache.get(key)
        if conf is None:
            if len(cache) >= 1024:      # bounded whatever the stream's AlterConfig rows hold
                cache.clear()
            conf = cache[key] = TopicConf(int(key[0]), parse_bool("unclean.leader.election.enable", key[1]),
                                          parse_strategy(key[2]))
        return conf
