"""A safety set that can tell safe from unsafe. Every schedule in it is replayed twice:

* under the safe default (KIP-966 ELR on, no unclean election, min ISR 2): no violation at all;
* under an unsafe configuration (ELR off, unclean election on, min ISR 1 -- the topic's AlterConfig
  rows rewritten to say so): committed data is lost (LeaderCompleteness / AckedRecordsDurable /
  HighWatermarkMonotonic). This paired negative is what makes the zero above mean something.

A third run simulates each schedule closed-loop under the unsafe configuration itself (the simulator
drives the protocol core under that config, so clients follow the leaders the unsafe core elects):
committed data is lost there too, and the simulator's own core saw the same violations.

Only schedules that pass both are kept. The simulator presets `rolling-restart`, `zone-outage`
(6 brokers), `flaky-network` and `reassignment` are *not* in the set: they never lose data even under
the unsafe configuration (clean restarts, or one lossy crash while the ISR has other members), so
they cannot discriminate (docs/testing.md). The fault schedules below (simulator `--faults`
grammar) shrink the ISR to one replica before that replica loses its log, the shape that separates
KIP-966 from the unclean configuration; the random schedules (tests/gen.py) add variety.
"""
import pytest

from jobs.local_engine import LocalEngine
from jobs.simulate import simulate
from jobs.streamio import iter_raw_rows
from protocol.config import EngineConfig
from tests.engine_util import run_events
from tests.gen import random_schedule

UNSAFE = {"eligible.leader.replicas.enable": "false", "unclean.leader.election.enable": "true",
          "min.insync.replicas": "1"}
LOSS = {"LeaderCompleteness", "AckedRecordsDurable", "HighWatermarkMonotonic"}

SCHEDULES = {
    "last-replica-standing": dict(scenario="last-replica-standing"),
    # both followers cut off, the leader alone commits, then crashes losing 60% of its log
    "isolated-followers-leader-loses-log": dict(
        brokers=3, faults="isolate:2@10s+60s,isolate:3@12s+60s,unclean-crash:1:lose=60%:frac=1@40s+20s"),
    # followers come back while the lossy leader is still down: an unclean election of a stale follower
    "followers-return-while-leader-down": dict(
        brokers=3, faults="isolate:2@10s+30s,isolate:3@10s+30s,unclean-crash:1:lose=1:frac=1@25s+50s"),
    # one follower isolated, the other restarts cleanly, the leader crashes uncleanly meanwhile
    "restart-during-isolation": dict(
        brokers=3, faults="isolate:3@5s+60s,crash:2@10s+20s,unclean-crash:1:lose=50%:frac=1@20s+10s"),
    # two racks cut off, then the third rack's zone outage (lossy)
    "zone-outage-after-isolation": dict(
        brokers=3, racks=3,
        faults="isolate:2@10s+50s,isolate:3@10s+50s,zone-outage:rack0:lose=50%:frac=1@30s+20s"),
}
SEEDS = range(8)


def unsafe_rows(rows):
    """The same schedule, with the topics' own config rows saying min ISR 1 and unclean election on."""
    for raw, text, err in rows:
        if raw is not None and raw.get("type") == "AlterConfig":
            raw = dict(raw)
            raw["config"] = dict(raw.get("config") or {}, **{"min.insync.replicas": "1",
                                                              "unclean.leader.election.enable": "true"})
            text = None
        yield raw, text, err


def replay(stream, config, unsafe):
    eng = LocalEngine(EngineConfig(config))
    rows = iter_raw_rows(stream)
    for row in (unsafe_rows(rows) if unsafe else rows):
        eng.feed(*row)
    tables, _ = eng.drain(True)
    assert eng.cluster.applied + eng.cluster.rejected == eng.input_rows
    return tables.get("violations", [])


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_simulated_schedules_safe_and_their_unsafe_pair_loses_data(name, tmp_path):
    for seed in SEEDS:
        out = tmp_path / f"s{seed}"
        s = simulate(str(out), seed=seed, partitions=4, duration_ms=90_000, fmt="parquet", **SCHEDULES[name])
        base = s.get("engine_config") or {}
        safe = replay(str(out), base, unsafe=False)
        assert not safe, (name, seed, safe[:2])
        assert s["core"]["violations"] == 0 and s["core"]["rejected_rows"] == 0
        bad = replay(str(out), dict(base, **UNSAFE), unsafe=True)
        names = {v["invariant"] for v in bad}
        assert names & LOSS, (name, seed, sorted(names))


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_unsafe_config_simulated_closed_loop_loses_data(name, tmp_path):
    """The what-if done the closed-loop way: the same fault schedule and workload simulated under
    the unsafe configuration itself (clients follow the leaders the unsafe core elects). Committed
    data is lost on every seed; the simulator's core, checking the invariants after every step,
    sees exactly the violations the replay reports."""
    unsafe_topic = {"unclean.leader.election.enable": "true"}
    for seed in SEEDS:
        out = tmp_path / f"s{seed}"
        s = simulate(str(out), seed=seed, partitions=4, duration_ms=90_000, fmt="parquet",
                     config=UNSAFE,
                     **dict(SCHEDULES[name], min_isr=1, topic_config=unsafe_topic))
        bad = replay(str(out), s["engine_config"], unsafe=False)
        assert {v["invariant"] for v in bad} & LOSS, (name, seed)
        assert s["core"]["violations"] == len(bad) and s["core"]["rejected_rows"] == 0


# seeds kept by the paired-negative criterion (17 and 25 lose nothing even when unsafe: dropped)
RANDOM_SEEDS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21, 22, 23, 24]


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_schedules_safe_and_their_unsafe_pair_loses_data(seed):
    # KIP-966 with min ISR 2 tolerates one lossy crash (max_unclean=1)
    events = random_schedule(seed, 300, brokers=3, partitions=2, max_unclean=1, explicit_ap=seed % 3 == 1,
                             explicit_md=seed % 3 == 2)
    safe = run_events(events, {"min.insync.replicas": "2"})
    assert not safe.get("violations"), safe["violations"][:2]
    bad = run_events(events, UNSAFE)
    assert {v["invariant"] for v in bad.get("violations", [])} & LOSS, seed
