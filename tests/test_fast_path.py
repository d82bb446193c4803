"""The protocol core's fast paths change no output (issue 12).

* `broker.fetch.steady_request`: the common follower fetch skips fetch_request / fetch_error /
  check_fetch_position when it can prove they would pass the request through. Every schedule is
  replayed with the fast path and with it switched off: all tables equal, row for row.
* `Partition.t_wake`: timers.advance skips the scan of the purgatories while the event time is
  below it, so it must never exceed the deadline of any parked produce -- checked after every event.
* `broker.metadata_cache.apply_metadata` reindexes a partition for a new replica only when its
  broker is not indexed yet: the broker index must still equal every partition's hosts.
* `leader.maybe_increment_hw` stops as soon as the candidate HWM cannot pass the current one.
"""
from __future__ import annotations

import pytest

from jobs.simulate import simulate
from jobs.streamio import iter_raw_rows
from protocol.broker import fetch as fetch_mod
from protocol.cluster import Cluster
from protocol.config import EngineConfig
from schemas.events import validate
from tests.engine_util import run_events
from tests.gen import random_schedule
from tests.streams import S

CONFIGS = [{}, {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"},
           {"unclean.leader.election.enable": "true", "eligible.leader.replicas.enable": "false",
            "min.insync.replicas": "1"}, {"output.fetch": "all"}]


def _tables(out):
    return {k: v for k, v in out.items() if not k.startswith("_")}


def _slow(monkeypatch):
    monkeypatch.setattr(fetch_mod, "steady_request", lambda *a: None)


def _both_ways(evs, cfg=None, spy=None):
    """The tables of `evs` with the fast path switched off, after checking that it on (wrapped by
    `spy`, when given: spy(real steady_request) -> its stand-in) gives the same tables."""
    with pytest.MonkeyPatch.context() as m:
        if spy is not None:
            m.setattr(fetch_mod, "steady_request", spy(fetch_mod.steady_request))
        fast = _tables(run_events(evs, cfg))
    with pytest.MonkeyPatch.context() as m:
        _slow(m)
        slow = _tables(run_events(evs, cfg))
    assert fast == slow
    return slow


def _taken_by_kind(kind):
    """({kind: [fetches, taken by the fast path]}, a spy for _both_ways) over the fetches whose
    follower replica exists; kind(frep) names the class of a fetch, None leaves it out."""
    seen: dict = {}

    def spy(real):
        def counting(p, ev, b, frep, brokers):
            lrep = real(p, ev, b, frep, brokers)
            k = kind(frep) if frep is not None else None
            if k is not None:
                n = seen.setdefault(k, [0, 0])
                n[0] += 1
                n[1] += lrep is not None
            return lrep
        return counting
    return seen, spy


@pytest.mark.parametrize("seed", range(40))
def test_steady_fetch_changes_no_row(seed):
    cfg = CONFIGS[seed % len(CONFIGS)]
    _both_ways(random_schedule(seed, 400, explicit_ap=seed % 3 == 1, explicit_md=seed % 3 == 2), cfg)


def _simulated(tmp_path, **kw):
    simulate(str(tmp_path / "s"), duration_ms=20_000, seed=3, **kw)
    return [raw for raw, _, err in iter_raw_rows(str(tmp_path / "s")) if err is None]


@pytest.mark.parametrize("kw", [dict(brokers=3, partitions=20, rf=3),
                                dict(brokers=3, partitions=5, rf=3,
                                     faults="isolate:2@3s+6s,unclean-crash:1:lose=50%:frac=1@8s+5s")])
def test_steady_fetch_on_simulated_streams(tmp_path, kw):
    _both_ways(_simulated(tmp_path, **kw))


def test_steady_fetch_never_serves_past_a_leader_that_lost_its_tail():
    """The leader lost its log's tail in an unclean crash and, back with stale metadata, leads
    again in the same leader epoch: a follower's latest epoch equals the leader's but its LEO is
    past the leader's. Only the full path may answer (DIVERGING_EPOCH, truncation to the
    leader's LEO); the fast path must refuse it by the LEO test alone."""
    s = S()
    s.up(1, 2, 3)
    created = s.create([1, 2, 3])
    for b in (1, 2, 3):
        s.sync(b)
    s.at(10).produce(1, 5)
    for _ in range(2):
        s.fetch(2)
        s.fetch(3)
    s.at(20).crash(1)
    s.loss(1, 2)
    s.at(20_000).restart(1, clean=False)     # after its old session ran out
    s.unfence(1)
    s.sync(1, up_to=created)                  # broker 1 sees itself leading epoch 0 again
    s.at(20_010).fetch(2)                     # broker 2 still follows 1 in epoch 0, LEO 5
    cfg = {"delivery.metadata": "explicit"}
    slow = _both_ways(s.events, cfg)
    last = [r for r in slow["fetch"] if r["broker"] == 2][-1]
    assert (last["result"], last["diverging_epoch"], last["diverging_end_offset"], last["truncated_to"]) == \
        ("DIVERGING_EPOCH", 0, 2, 2)


def test_steady_fetch_compares_the_latest_epochs_not_the_first():
    """Follower 3 holds records of leader epoch 1 that the new leader 1 (elected uncleanly in epoch 4)
    never had: both logs start in epoch 0, their latest epochs differ (3's cache [(0, 0), (1, 2),
    (2, 5)] against 1's [(0, 0), (4, 2)]), and the follower is not past the leader's LEO. Only the
    full path may answer (DIVERGING_EPOCH at the end of epoch 0 in the leader's log, truncation to
    it): the fast path must refuse it by the latest epochs."""
    s = S()
    s.up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(10).produce(1, 2, acks=1)
    s.fetch_round(2, 3)                          # every log [0, 2) in epoch 0
    s.at(20).fence(1)                            # leader 2, epoch 1
    s.produce(2, 3, acks=1)                      # 2: [2, 5) in epoch 1
    s.fetch(3)                                   # 3 copies them
    s.at(30).fence(2)                            # leader 3, epoch 2 (its cache: (2, 5))
    s.fence(3)                                   # nobody left: leaderless, epoch 3
    s.at(40).unfence(1)                          # elected uncleanly, epoch 4, log [0, 2)
    s.produce(1, 5, acks=1)                      # 1: [2, 7) in epoch 4
    s.at(50).unfence(3)                          # 3 follows 1 in epoch 4
    f = s.fetch(3)
    cfg = {"unclean.leader.election.enable": "true", "eligible.leader.replicas.enable": "false",
           "min.insync.replicas": "1"}
    slow = _both_ways(s.events, cfg)
    row = [r for r in slow["fetch"] if r["seq"] == f][-1]
    assert (row["result"], row["diverging_epoch"], row["truncated_to"]) == ("DIVERGING_EPOCH", 0, 2)


def test_steady_fetch_compares_the_leaders_latest_epoch_not_its_first():
    """Follower 2's latest epoch is the leader's *first*: 2 holds [0, 5) all in epoch 0 and never
    led, while the new leader 3 holds [0, 2) in epoch 0 and [2, 7) in its own epoch 1 (3's cache
    [(0, 0), (1, 2)]). 2 is not past 3's LEO (5 <= 7), so only the epoch test can refuse the fast
    path: C3 finds that epoch 0 ends at 2 in the leader's log, and 2 must truncate [2, 5) before it
    fetches epoch 1's records -- on the fast path, 2 would append [5, 7) behind records the
    leader never had."""
    s = S()
    s.up(1, 2, 3)
    s.create([1, 3, 2])                          # 3 is the next leader, 2 never leads
    s.at(10).produce(1, 2, acks=1)
    s.fetch_round(2, 3)                          # every log [0, 2) in epoch 0
    s.produce(1, 3, acks=1)                      # 1: [2, 5) in epoch 0
    s.fetch(2)                                   # 2 copies them; 3 does not
    s.at(20).fence(1)                            # leader 3, epoch 1, log [0, 2)
    s.at(30).produce(3, 5, acks=1)               # 3: [2, 7) in epoch 1
    f = s.fetch(2)
    slow = _both_ways(s.events)
    row = [r for r in slow["fetch"] if r["seq"] == f][-1]
    assert (row["result"], row["target"], row["diverging_epoch"], row["diverging_end_offset"],
            row["truncated_to"]) == ("DIVERGING_EPOCH", 3, 0, 2, 2)


def test_steady_fetch_takes_followers_with_empty_logs(tmp_path):
    """Early in a stream (here: 300 ms of a 300-partition cluster) most leaders have taken no
    produce yet, so most fetches come from followers whose logs hold no epoch: the fast path
    takes them (last fetched epoch -1, nothing for C3 to check), with the same tables."""
    simulate(str(tmp_path / "s"), brokers=6, partitions=300, rf=3, duration_ms=300, seed=5)
    evs = [raw for raw, _, err in iter_raw_rows(str(tmp_path / "s")) if err is None]
    seen, spy = _taken_by_kind(lambda frep: "empty" if not frep.log.cache else None)
    _both_ways(evs, spy=spy)
    taken = seen["empty"][1]
    fetches = sum(1 for e in evs if e["type"] == "Fetch")
    assert taken > fetches // 2, (taken, fetches)


def test_steady_fetch_takes_followers_whose_logs_hold_epochs(tmp_path):
    """The fast path is a speed-up only if it holds for the common fetch: a follower with records
    on the leader's latest epoch, its log holding that one epoch or several after leader changes
    (the test compares the latest epochs, not the first, and only when the follower has any).
    On a faulted stream (an isolation and an unclean crash) most such fetches, and some of
    followers with several epochs, are taken, with the same tables."""
    evs = _simulated(tmp_path, brokers=3, partitions=5, rf=3,
                     faults="isolate:2@3s+6s,unclean-crash:1:lose=50%:frac=1@8s+5s")
    # several epochs? -> [fetches, taken]
    seen, spy = _taken_by_kind(lambda frep: len(frep.log.cache) > 1 if frep.log.cache else None)
    _both_ways(evs, spy=spy)
    (one, one_taken), (several, several_taken) = seen[False], seen[True]
    assert one_taken > 0.8 * one, seen
    assert several > 20 and several_taken > 0.8 * several, seen


def _check_wake(cl: Cluster) -> None:
    for p in cl.partitions.values():
        for rep in p.reps.values():
            for pr in rep.purgatory:
                assert pr.deadline >= p.t_wake, (p.key, rep.broker, pr.deadline, p.t_wake)


@pytest.mark.parametrize("seed", range(20))
def test_wake_bound_never_passes_a_parked_deadline(seed):
    cl = Cluster(EngineConfig({"request.timeout.ms": "3000"} if seed % 2 else {}))
    for raw in random_schedule(seed, 400):
        ev, _ = validate(raw)
        if ev is not None:
            cl.apply(ev)
            _check_wake(cl)
    cl.finish()
    _check_wake(cl)


def _check_index(cl: Cluster) -> None:
    inverse: dict[int, set] = {}
    for key, p in cl.partitions.items():
        # its hosts, and NO_LEADER (-1) exactly while it is leaderless (Partition.index_keys)
        want = p.hosts() | ({-1} if p.leader == -1 else set())
        assert sorted(p.indexed) == sorted(want), (key, p.indexed, want)
        for b in p.indexed:
            inverse.setdefault(b, set()).add(key)
    assert {b: ks for b, ks in cl.by_broker.items() if ks} == inverse


@pytest.mark.parametrize("seed", range(24))
def test_broker_index_is_every_partitions_hosts(seed):
    """After every event (stale metadata snapshots included: explicit delivery, reassignments)."""
    cl = Cluster(EngineConfig({"delivery.metadata": "explicit"} if seed % 2 else {}))
    for raw in random_schedule(seed, 400, explicit_md=seed % 2 == 1):
        ev, _ = validate(raw)
        if ev is not None:
            cl.apply(ev)
            _check_index(cl)


def test_young_collections_back_off_only_while_they_find_no_garbage():
    """jobs.local_engine: with automatic GC off, the replay loop collects the young generations
    itself; the interval doubles after a collection that found no garbage and falls back to
    _YOUNG_ROWS after one that freed a cycle, so cycles made by the rows are still collected.
    (Freezing off here: the next test.)"""
    import gc

    from jobs import local_engine as le

    eng = le.LocalEngine(EngineConfig({}))
    with le.replay_gc():
        gc.collect()
        eng.young.may_freeze = False
        assert eng.collect_young() == 0
        assert eng.young.every == 2 * le._YOUNG_ROWS
        assert eng.collect_young() == 0
        assert eng.young.every == 4 * le._YOUNG_ROWS
        for _ in range(30):                 # grows to the cap, never past it
            eng.collect_young()
        assert eng.young.every == le._YOUNG_MAX
        a, b = [], []
        a.append(b)
        b.append(a)                         # a cycle, unreachable once the names go
        del a, b
        assert eng.collect_young() >= 2
        assert eng.young.every == le._YOUNG_ROWS
        assert eng.young.at == eng.input_rows + le._YOUNG_ROWS
        # a cycle among many live young objects is "no garbage" (_CLEAN_RATIO): the interval grows
        live = [[i] for i in range(4 * le._CLEAN_RATIO)]
        a, b = [], []
        a.append(b)
        b.append(a)
        del a, b
        assert eng.collect_young() == 2
        assert eng.young.every == 2 * le._YOUNG_ROWS
        del live
        # feed() collects when input_rows reaches young.at
        eng.young.at = eng.input_rows + 1
        eng.feed({"seq": 1, "ts_ms": 0, "type": "BrokerRegister", "broker": 1, "broker_epoch": 1}, None, None)
        assert eng.young.at == eng.input_rows + 4 * le._YOUNG_ROWS
        assert eng.input_rows == 1
    assert gc.isenabled()


class _Node:
    """A cycle's member that a weak reference can watch."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def _dead_cycle():
    """A weak reference to a two-node cycle that nothing else holds."""
    import weakref
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_young_collections_freeze_every_other_point_while_they_find_no_garbage():
    """jobs.local_engine.YoungGC: the first point, and after a collection that found no garbage the
    next point, freezes (the young objects go, unwalked, to the permanent generation) and the point
    _SAMPLE_ROWS rows later collects again, as a sample; a cycle frozen while dead stays until a
    sample finds garbage, which unfreezes and collects everything, the frozen cycle too, and ends
    the freezing; replay_gc unfreezes at its end, knowing without counting that something is frozen
    (jobs.local_engine._FROZEN)."""
    import gc

    from jobs import local_engine as le

    assert gc.get_freeze_count() == 0 and not le._FROZEN[0]
    eng = le.LocalEngine(EngineConfig({}))
    y = eng.young
    with le.replay_gc():
        gc.collect()
        assert y.freeze_next and not y.frozen           # the first point freezes
        live = [[i] for i in range(1000)]
        frozen_cycle = _dead_cycle()
        every, row = y.every, eng.input_rows
        assert eng.collect_young() == 0                        # the freeze: nothing walked
        assert gc.get_freeze_count() >= 1000 and y.frozen and not y.freeze_next and le._FROZEN[0]
        assert y.at == row + le._SAMPLE_ROWS and y.every == every
        gc.collect(1)
        assert frozen_cycle() is not None, "a young collection walked the frozen objects"
        assert eng.collect_young() == 0 and y.freeze_next       # the sample: clean, so freeze again
        assert y.every == 2 * every
        assert eng.collect_young() == 0 and gc.get_freeze_count() >= 1000
        _dead_cycle()                                           # garbage in the next sample
        assert eng.collect_young() >= 4                         # both cycles, the frozen one too
        assert frozen_cycle() is None
        assert gc.get_freeze_count() == 0 and not y.may_freeze and not y.frozen and not le._FROZEN[0]
        assert y.every == le._YOUNG_ROWS and not y.freeze_next
        assert eng.collect_young() == 0 and not y.freeze_next   # no freeze again: it collects
        assert eng.collect_young() == 0 and gc.get_freeze_count() == 0
        del live
    assert gc.isenabled()

    # what a loop froze is unfrozen at its end; a nested loop, which finds the heap frozen, neither
    # freezes nor unfreezes
    eng = le.LocalEngine(EngineConfig({}))
    with le.replay_gc():
        eng.young.freeze_next = True
        eng.collect_young()
        n = gc.get_freeze_count()
        assert n > 0
        with le.replay_gc():
            inner = le.YoungGC()
            inner.freeze_next = True
            inner.collect(1)
            assert inner.frozen is False and 0 < gc.get_freeze_count() <= n   # (frozen objects may die)
            # the inner loop's clean collection (with freezing not allowed) left freeze_next set;
            # one that finds garbage clears it, so the next point collects again
            _dead_cycle()
            assert inner.collect(2) >= 2 and not inner.freeze_next
        assert 0 < gc.get_freeze_count() <= n
        eng.young.freeze_next = True                # the outer loop may freeze again
        eng.collect_young()
        assert not eng.young.freeze_next and eng.young.at == eng.input_rows + le._SAMPLE_ROWS
    assert gc.get_freeze_count() == 0 and gc.isenabled() and not le._FROZEN[0]

    # a schedule that froze in an ended loop (a Spark worker's, kept across bucket calls) knows that
    # its freeze is undone: garbage found in the next loop needs no full walk and ends no freezing
    assert eng.young.frozen
    with le.replay_gc():
        _dead_cycle()
        assert eng.collect_young() >= 2
        assert eng.young.may_freeze and not eng.young.frozen
    # no freeze outside a replay loop, even with automatic GC off
    gc.disable()
    try:
        y = le.YoungGC()
        y.freeze_next = True
        y.collect(1)
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()

    # a heap frozen before the loop (jobs.cli.entry's at the process's end) is left frozen
    gc.freeze()
    try:
        n = gc.get_freeze_count()
        with le.replay_gc():
            y = le.YoungGC()
            y.freeze_next = True
            y.collect(1)
            assert not y.frozen
        assert 0 < gc.get_freeze_count() <= n
    finally:
        gc.unfreeze()


def test_console_script_exits_without_walking_the_heap(monkeypatch, capsys):
    """jobs.cli.entry (the `isrflow` script): main's exit code, its output flushed, and the heap frozen
    so the interpreter's exit collection skips the replay's cyclic cluster state (see entry)."""
    import gc
    import tomllib
    from pathlib import Path

    from jobs import cli

    with open(Path(__file__).resolve().parents[1] / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["isrflow"] == "jobs.cli:entry"
    assert gc.get_freeze_count() == 0
    monkeypatch.setattr("sys.argv", ["isrflow", "replay", "--tables", "/nonexistent-isrflow-t"])
    try:
        with pytest.raises(SystemExit) as ex:
            cli.entry()
        assert ex.value.code == cli.EXIT_USAGE       # no stream given: main's usage error, as is
        assert "a stream directory is needed" in capsys.readouterr().err
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()                                # this test process goes on


@pytest.mark.parametrize("seed", range(12))
def test_partition_state_columns_are_the_rows(seed):
    """protocol.state_table: the engines' column-wise projection (to Arrow without row dicts) is the
    table's schema and gives exactly the rows of partition_state_rows, for every partition and for
    a subset (in any order), in key order."""
    import pyarrow as pa

    from protocol.state_table import PARTITION_COLUMNS, REPLICA_COLUMNS
    from schemas.tables import arrow_schema, partition_state_arrow, rows_to_arrow

    sch = arrow_schema("partition_state")
    assert list(PARTITION_COLUMNS) + ["replica_states"] == sch.names
    assert list(REPLICA_COLUMNS) == [f.name for f in sch.field("replica_states").type.value_type]
    cl = Cluster(EngineConfig({"delivery.metadata": "explicit"} if seed % 2 else {}))
    for raw in random_schedule(seed, 400, explicit_md=seed % 2 == 1):
        ev, _ = validate(raw)
        if ev is not None:
            cl.apply(ev)
    keys = sorted(cl.partitions)
    # subsets in key order, in reverse and as a set (the touched set): the rows come in key order
    for subset in (None, keys[::2], keys[::-1], set(keys), [], [("no-such-topic", 0)] + keys[:1]):
        rows = cl.partition_state_rows(subset)
        assert [(r["topic"], r["partition"]) for r in rows] == sorted((r["topic"], r["partition"]) for r in rows)
        got = partition_state_arrow(*cl.partition_state_columns(subset))
        assert got.equals(rows_to_arrow("partition_state", rows))
        assert got.to_pylist() == rows
        assert got.schema == sch and isinstance(got, pa.Table)
    assert any(r["replica_states"] for r in cl.partition_state_rows())


def test_partition_state_key_order_is_sorted_keys():
    """protocol.state_table._key_order (the rows' order, sorted per topic as ints) is sorted() of the
    (topic, partition) keys, for topics that sort apart by code point and keys in any order."""
    import random

    from protocol.state_table import _key_order

    rnd = random.Random(3)
    topics = ["b", "a", "B", "é", "a-b", "zz", "t\u20ac"]
    keys = {(rnd.choice(topics), rnd.choice((0, 1, 2, 255, 256, 257, 70_000, 2**31 - 1))) for _ in range(300)}
    for given in (keys, sorted(keys, reverse=True), rnd.sample(sorted(keys), len(keys)), []):
        assert _key_order(given) == sorted(keys if given else [])


def test_arrow_buffers_come_from_the_system_allocator_unless_the_user_chose_one():
    """jobs/__init__: an isrflow process allocates Arrow's buffers with the C library's allocator
    (pyarrow's default mimalloc handed freed pages back and faulted them in, zeroed, every batch),
    whether pyarrow was imported before jobs (a Spark worker) or after; a pool the user named in
    ARROW_DEFAULT_MEMORY_POOL wins."""
    import os
    import subprocess
    import sys

    def backend(code: str, **env) -> str:
        e = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
        e.update(env)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                              check=True).stdout.strip()

    after = "import jobs, pyarrow as pa; print(pa.default_memory_pool().backend_name)"
    before = "import pyarrow as pa; pa.array([1]); import jobs; print(pa.default_memory_pool().backend_name)"
    assert backend(after) == "system"
    assert backend(before) == "system"
    assert backend(after, ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"
    assert backend(before, ARROW_DEFAULT_MEMORY_POOL="jemalloc") == "jemalloc"
