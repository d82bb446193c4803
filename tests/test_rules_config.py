"""protocol/config.py: Kafka-named settings, their bounds and topic-level overrides (SPEC §4)."""
import pytest

from protocol.config import ConfigError, EngineConfig, parse_strategy, validate_topic_config


def test_defaults_are_a_kip966_cluster():
    c = EngineConfig()
    t = c.topic_conf()
    assert (t.min_isr, t.unclean, t.strategy) == (1, False, "Balanced")
    assert (c.elr, c.recovery_manager, c.lag_ms, c.request_timeout_ms) == (True, False, 30000, 30000)
    assert (c.auto_rebalance, c.rebalance_interval_ms, c.unclean_interval_ms) == (True, 300_000, 300_000)
    assert (c.ap_immediate, c.md_immediate, c.fetch_all) == (True, True, False)


@pytest.mark.parametrize("key, ok, bad", [
    ("min.insync.replicas", "1", "0"),
    ("request.timeout.ms", "1", "0"),
    ("replica.lag.time.max.ms", "0", "-1"),
    ("leader.imbalance.check.interval.seconds", "1", "0"),
    ("unclean.leader.election.interval.ms", "1", "0"),
])
def test_integer_lower_bounds(key, ok, bad):
    EngineConfig({key: ok})
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        EngineConfig({key: bad})


@pytest.mark.parametrize("v, want", [("true", True), ("TRUE", True), ("1", True), ("yes", True),
                                     ("false", False), ("0", False), ("no", False)])
def test_booleans(v, want):
    assert EngineConfig({"eligible.leader.replicas.enable": v}).elr is want
    assert EngineConfig({"unclean.leader.election.enable": v}).topic_conf().unclean is want


def test_bad_values_and_unknown_keys():
    with pytest.raises(ConfigError, match="expected true or false"):
        EngineConfig({"eligible.leader.replicas.enable": "maybe"})
    with pytest.raises(ConfigError, match="expected an integer"):
        EngineConfig({"request.timeout.ms": "soon"})
    with pytest.raises(ConfigError, match="unknown config key"):
        EngineConfig({"no.such": "1"})
    with pytest.raises(ConfigError, match="expected one of"):
        EngineConfig({"delivery.metadata": "sometimes"})
    c = EngineConfig({"delivery.alter_partition": "explicit", "delivery.metadata": "EXPLICIT", "output.fetch": "all"})
    assert (c.ap_immediate, c.md_immediate, c.fetch_all) == (False, False, True)


def test_strategies_and_aliases():
    assert [parse_strategy(x) for x in ("Aggressive", "proactive", "balanced", "BALANCED", "None", "manual")] == [
        "Aggressive", "Aggressive", "Balanced", "Balanced", "None", "None"]
    with pytest.raises(ConfigError):
        parse_strategy("random")


def test_topic_overrides_layer_in_order():
    c = EngineConfig({"min.insync.replicas": "2"})
    t = c.topic_conf({"min.insync.replicas": "3"}, None, {"unclean.leader.election.enable": "true"})
    assert (t.min_isr, t.unclean, t.strategy) == (3, True, "Balanced")
    assert c.topic_conf().min_isr == 2
    assert validate_topic_config({"min.insync.replicas": " 2 "}) == {"min.insync.replicas": "2"}
    with pytest.raises(ConfigError, match="Unknown topic config name: request.timeout.ms"):
        validate_topic_config({"request.timeout.ms": "5"})
    with pytest.raises(ConfigError):
        validate_topic_config({"min.insync.replicas": "0"})
    # isrflow's own topic key (KIP-966's strategy is no Kafka 4.4.0 topic config): parse_strategy's check
    with pytest.raises(ConfigError, match="expected Aggressive, Balanced or None"):
        validate_topic_config({"unclean.recovery.strategy": "random"})
    assert validate_topic_config({"unclean.recovery.strategy": " proactive "}) == {"unclean.recovery.strategy": "proactive"}


def test_engine_defaults_are_written_once():
    """protocol.config.DEFAULTS (the core reads no files) and conf/engine.properties (what users
    read and copy) are the same keys with the same values: one list, checked here."""
    from conf import load_defaults
    from protocol.config import DEFAULTS
    shipped = load_defaults()
    assert list(shipped) == list(DEFAULTS)
    assert shipped == DEFAULTS


def test_one_boolean_parser_for_engine_and_simulator():
    """`yes` means true to the engine; the simulator has no config parser of its own to disagree:
    it writes the topic config verbatim into its CreateTopic rows and the core it drives
    (jobs/sim_core.py) parses them with protocol.config like any replay."""
    import ast
    import inspect
    import jobs.simulate
    from protocol.config import parse_bool
    assert EngineConfig({"unclean.leader.election.enable": "yes"}).topic_conf().unclean is True
    assert parse_bool("k", "yes") is True
    tree = ast.parse(inspect.getsource(jobs.simulate))
    called = {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
              for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not called & {"parse_bool", "parse_int", "topic_conf", "effective_min_isr"}


def test_effective_min_isr_and_election_mode():
    from protocol.config import effective_min_isr
    assert effective_min_isr(2, 3) == 2 and effective_min_isr(3, 2) == 2 and effective_min_isr(2, 0) == 2
    assert EngineConfig({}).topic_conf().election == "ONLINE"
    assert EngineConfig({"unclean.leader.election.enable": "true"}).topic_conf().election == "UNCLEAN"
