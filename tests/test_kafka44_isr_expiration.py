"""Issue 14.2: the leader's ISR-expiration check runs every replica.lag.time.max.ms / 2 (rule B8).

Source: ReplicaManager#startup schedules "isr-expiration" (maybeShrinkIsr) with period
config.replicaLagTimeMaxMs / 2. isrflow derives the period from the lag unless
isr.expiration.interval.ms is set (0 = only on Tick rows, for streams that record every check)."""
from protocol.config import EngineConfig
from tests.engine_util import rows, run_events
from tests.streams import S


def _lagging_follower_2():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(100).fetch(2); s.fetch(3)                # 2 last caught up at 100
    s.at(200).produce(1, 1, acks=1)
    s.at(300).fetch(3); s.fetch(3)
    s.at(50_000).fetch(3)
    return s


def _first_shrink(out):
    r = rows(out, "alter_partition", phase="PROPOSED", change="SHRINK")[0]
    return r["ts_ms"], r["proposed_isr"]


def test_period_follows_the_lag():
    out = run_events(_lagging_follower_2().events, {"replica.lag.time.max.ms": "12000"})
    # out of sync from 100 + 12000 + 1; checks every 6000 -> 18000
    assert _first_shrink(out) == (18_000, [1, 3])
    assert rows(out, "metadata_log", cause="AlterPartition")[0]["isr"] == [1, 3]


def test_default_lag_gives_kafkas_15_seconds():
    assert EngineConfig().isr_interval_ms == 15_000
    assert EngineConfig({"replica.lag.time.max.ms": "10000"}).isr_interval_ms == 5_000
    assert _first_shrink(run_events(_lagging_follower_2().events)) == (45_000, [1, 3])


def test_explicit_interval_overrides_and_zero_means_tick_only():
    out = run_events(_lagging_follower_2().events,
                     {"replica.lag.time.max.ms": "12000", "isr.expiration.interval.ms": "15000"})
    assert _first_shrink(out) == (15_000, [1, 3])
    s = _lagging_follower_2()
    s.at(60_000).tick(1)
    out = run_events(s.events, {"replica.lag.time.max.ms": "12000", "isr.expiration.interval.ms": "0"})
    assert _first_shrink(out) == (60_000, [1, 3])


def test_a_tick_naming_a_partition_checks_that_partition_alone():
    """Two partitions led by 1, follower 2 lagging on both: a Tick naming t-1 shrinks t-1 only and
    touches nothing else; a Tick naming topic t (no partition) checks both; a broker-wide Tick too."""
    def stream(narrow: dict):
        s = S().up(1, 2, 3)
        s.create([1, 2, 3])
        s.partition = 1
        s.create([1, 2, 3])
        for ts, step in ((100, lambda: (s.fetch(2), s.fetch(3))), (200, lambda: s.produce(1, 1, acks=1)),
                         (300, lambda: (s.fetch(3), s.fetch(3)))):
            for p in (0, 1):
                s.partition = p
                s.at(ts)
                step()
        s.at(60_000).add(type="Tick", broker=1, **narrow)
        return s.events
    cfg = {"replica.lag.time.max.ms": "12000", "isr.expiration.interval.ms": "0"}

    def shrunk(out):
        return sorted(r["partition"] for r in rows(out, "metadata_log", cause="AlterPartition"))

    one = run_events(stream({"topic": "t", "partition": 1}), cfg, finish=False)
    assert shrunk(one) == [1]
    tick_seq = len(stream({}))
    assert [r["partition"] for r in rows(one, "partition_state", seq=tick_seq)] == [1]
    assert shrunk(run_events(stream({"topic": "t"}), cfg, finish=False)) == [0, 1]
    assert shrunk(run_events(stream({"topic": "u"}), cfg, finish=False)) == []
    assert shrunk(run_events(stream({}), cfg, finish=False)) == [0, 1]
    bad = run_events(stream({"topic": "t", "partition": 7}), cfg, finish=False)
    assert "unknown partition t-7" in rows(bad, "rejected")[0]["reason"]
