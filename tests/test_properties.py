"""Property tests over random schedules (hypothesis draws the seeds and shapes; tests.gen plays
the environment). Safe configurations never break an invariant; unsafe ones break the right one
at the right event; the engine is deterministic, its state survives encoding, and bucketing the
partitions (the Spark engine's layout) changes nothing."""
import zlib

from hypothesis import HealthCheck, given, settings, strategies as st

from protocol.cluster import Cluster
from protocol.codec import decode_cluster, encode_cluster
from protocol.config import EngineConfig
from schemas.events import validate
from tests.engine_util import canonical, rows, run_events
from tests.gen import random_schedule
from tests.streams import S

SAFE = {"min.insync.replicas": "2"}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

schedules = st.builds(
    dict,
    seed=st.integers(0, 10**9),
    n_events=st.integers(50, 400),
    brokers=st.integers(3, 5),
    partitions=st.integers(1, 3),
    explicit_ap=st.booleans(),
    explicit_md=st.booleans(),
)


@FAST
@given(schedules)
def test_safe_configuration_never_violates(shape):
    events = random_schedule(max_unclean=1, **shape)           # KIP-966 tolerates min ISR - 1 lossy crashes
    out = run_events(events, SAFE)
    assert not out.get("violations"), out["violations"][:3]
    assert out["_cluster"].applied + out["_cluster"].rejected == len(events)


@FAST
@given(schedules, st.sampled_from(["true", "false"]))
def test_recovery_manager_and_elr_modes_are_safe_within_tolerance(shape, manager):
    events = random_schedule(max_unclean=1, **shape)
    out = run_events(events, dict(SAFE, **{"unclean.recovery.manager.enabled": manager}))
    assert not out.get("violations"), out["violations"][:3]


@settings(max_examples=25, deadline=None)
@given(schedules)
def test_same_stream_twice_gives_identical_tables(shape):
    events = random_schedule(max_unclean=2, **shape)
    assert canonical(run_events(events, SAFE)) == canonical(run_events(events, SAFE))


@settings(max_examples=25, deadline=None)
@given(schedules, st.integers(1, 40))
def test_state_encoding_between_batches_changes_nothing(shape, every):
    events = random_schedule(max_unclean=2, **shape)
    assert canonical(run_events(events, SAFE)) == canonical(run_events(events, SAFE, roundtrip_every=every))


def run_bucketed(events, config, n_buckets, batch):
    """The Spark engine's layout, in-process: buckets of partitions, each with its own registry,
    encoded between micro-batches, timers fired at each batch end up to the stream's time so far."""
    cfg = EngineConfig(config)

    def owns(i):
        return lambda key: zlib.crc32(f"{key[0]}|{key[1]}".encode()) % n_buckets == i
    blobs = [None] * n_buckets
    out = {}
    seen_ts = 0
    for start in range(0, len(events), batch):
        chunk = events[start:start + batch]
        seen_ts = max([seen_ts] + [e["ts_ms"] for e in chunk])
        for i in range(n_buckets):
            cl = (decode_cluster(blobs[i], cfg, emit_global=i == 0, owns=owns(i)) if blobs[i]
                  else Cluster(cfg, emit_global=i == 0, owns=owns(i)))
            for raw in chunk:
                ev, _ = validate(raw)
                cl.apply(ev)
            cl.finish(seen_ts)
            for k, v in cl.drain().items():
                out.setdefault(k, []).extend(v)
            blobs[i] = encode_cluster(cl)
    out["partition_state"] = []
    for i in range(n_buckets):
        out["partition_state"] += decode_cluster(blobs[i], cfg, owns=owns(i)).partition_state_rows()
    return out


@settings(max_examples=20, deadline=None)
@given(schedules, st.integers(1, 4), st.integers(1, 60), st.booleans())
def test_bucketed_layout_matches_single_cluster(shape, n_buckets, batch, creations):
    """creations: partitions added later, some not of their topic's replication factor: a bucket
    refuses those as the single cluster does, also when the topic's first partition is another's."""
    shape = dict(shape, partitions=3)
    events = random_schedule(max_unclean=2, topics=2, creations=creations, **shape)
    assert canonical(run_events(events, SAFE)) == canonical(run_bucketed(events, SAFE, n_buckets, batch))


def test_timers_due_before_a_broker_change_see_the_broker_as_it_was():
    """Found by the property above: t1-1's preferred-leader rebalance is due at 300000 and no row
    reaches t1-1 until a BrokerFence of its preferred leader at 303257. The rebalance runs at its
    time, with broker 1 still unfenced, so broker 1 is elected (leader epoch 8) -- in one cluster
    (Cluster.catch_up before the fence) as in buckets that fire timers at every micro-batch end."""
    shape = {"seed": 1, "n_events": 165, "brokers": 4, "partitions": 3, "explicit_ap": False,
             "explicit_md": False}
    events = random_schedule(max_unclean=2, topics=2, **shape)
    single = run_events(events, SAFE)
    assert canonical(single) == canonical(run_bucketed(events, SAFE, 1, 1))
    el = [r for r in single["elections"] if (r["topic"], r["partition"], r["ts_ms"]) == ("t1", 1, 300000)]
    assert [(r["election"], r["new_leader"], r["leader_epoch"]) for r in el] == [("PREFERRED", 1, 8)]
    fence = next(e for e in events if e["type"] == "BrokerFence" and e["broker"] == 1 and e["ts_ms"] == 303257)
    assert el[0]["seq"] < fence["seq"]


def test_a_timer_due_at_a_broker_rows_own_time_fires_after_that_row():
    """The boundary of Cluster.catch_up: only timers due *before* a broker row fire ahead of it; one
    due at the row's own time runs after it, as for any row at that time. Broker 1, the preferred
    leader, is back in the ISR after a fence; the periodic rebalance is due at 300000. A BrokerFence
    of broker 1 at exactly 300000 (or before) leaves 2 the leader; at 300001 it comes after the
    rebalance, which elected 1."""
    def elections(fence_at):
        s = S().up(1, 2, 3)
        s.create([1, 2, 3])
        s.at(100).fetch_round(2, 3)
        s.at(1000).fence(1)
        s.at(2000).unfence(1)
        s.at(3000).fetch_round(1, 2, 3, times=3)
        s.at(fence_at).fence(1)
        s.at(310_000).fetch_round(2, 3)
        out = run_events(s.events, finish=False)
        return [(r["ts_ms"], r["election"], r["new_leader"]) for r in out["elections"]]
    assert elections(300_000) == [(1000, "ISR", 2)]
    assert elections(299_999) == [(1000, "ISR", 2)]
    assert elections(300_001) == [(1000, "ISR", 2), (300_000, "PREFERRED", 1), (300_001, "ISR", 2)]


def last_replica_standing():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(100).produce(1, 5, acks=-1)
    s.fetch_round(2, 3)
    s.at(1000).fence(3)
    s.at(2000).fence(2)
    s.produce(1, 2, acks=1)
    s.at(3000).crash(1)
    s.loss(1, 3)
    s.fence(1)
    restart = s.at(4000).restart(1, clean=False)
    unfence = s.unfence(1)
    s.at(5000).unfence(2)
    return s.events, restart, unfence


def test_elr_off_last_replica_standing_violates_at_the_election():
    events, restart, unfence = last_replica_standing()
    out = run_events(events, {"min.insync.replicas": "2", "eligible.leader.replicas.enable": "false"})
    v = {(r["invariant"], r["seq"]) for r in out["violations"]}
    assert ("UncleanExclusion", restart) in v                 # the lossy replica stays in the ISR
    assert ("LeaderCompleteness", unfence) in v               # and is elected without committed data
    assert ("AckedRecordsDurable", unfence) in v
    assert min(r["seq"] for r in out["violations"]) == restart


def test_elr_on_last_replica_standing_is_safe():
    events, _, _ = last_replica_standing()
    out = run_events(events, {"min.insync.replicas": "2"})
    assert not out.get("violations")
    assert rows(out, "elections", new_leader=2, election="ELR")


def replay_with_length_oracle(events, config):
    """Replays event by event with an oracle that does not use the checker: per partition, the true
    HWM is the highest HWM any leader reached (the `hwm` table); whenever the controller's leader is
    running with a log shorter than that, the loss must be reported at that very event --
    LeaderCompleteness, or HighWatermarkMonotonic when the new leader already advanced its HWM over
    the lost offsets within the event (makeLeader runs B6 before the end-of-event check).
    (The checker also compares record identities; this oracle only lengths, so it is a lower bound.)
    After a report both sides rebase on the checker's new true HWM."""
    cl = Cluster(EngineConfig(config))
    true_hwm: dict = {}
    expected, reported = [], []
    for raw in events:
        ev, _ = validate(raw)
        cl.apply(ev)
        out = cl.drain()
        for r in out.get("hwm", []):
            key = (r["topic"], r["partition"])
            true_hwm[key] = max(true_hwm.get(key, 0), r["new_hwm"])
        viol = {(r["topic"], r["partition"], r["invariant"]) for r in out.get("violations", [])}
        for key, p in cl.partitions.items():
            lrep = p.reps.get(p.leader) if p.leader >= 0 else None
            br = cl.brokers.get(p.leader) if p.leader >= 0 else None
            if lrep is not None and br is not None and br.alive and lrep.log.leo < true_hwm.get(key, 0):
                expected.append((key, raw["seq"]))
            if (*key, "LeaderCompleteness") in viol:
                # the leader lacks committed records: the true HWM fell too
                assert (*key, "HighWatermarkMonotonic") in viol
            if (*key, "HighWatermarkMonotonic") in viol:
                reported.append((key, raw["seq"]))
                true_hwm[key] = p.inv.committed_end
    return expected, reported


UNSAFE = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true",
          "eligible.leader.replicas.enable": "false"}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**9))
def test_unclean_election_losing_data_is_reported(seed):
    """Unsafe: unclean elections with many lossy crashes. Whenever the running leader's log is shorter
    than the true HWM (an independent oracle), the loss is reported at that same event."""
    events = random_schedule(seed, 300, max_unclean=4)
    expected, reported = replay_with_length_oracle(events, UNSAFE)
    assert set(expected) <= set(reported), sorted(set(expected) - set(reported))[:3]


def test_unsafe_configuration_is_caught_in_most_schedules():
    """The property above is not vacuous: over fixed seeds the unsafe configuration loses data (by the
    oracle) in many schedules."""
    caught = 0
    for seed in range(12):
        events = random_schedule(seed, 300, max_unclean=4)
        expected, reported = replay_with_length_oracle(events, UNSAFE)
        caught += bool(expected)
        assert set(expected) <= set(reported)
    assert caught >= 8, caught
