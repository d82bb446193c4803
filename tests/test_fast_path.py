"""The protocol core's fast paths change no output (issue 12).

* `broker.fetch.steady_request`: the common follower fetch skips fetch_request / fetch_error /
  check_fetch_position when it can prove they would pass the request through. Every schedule is
  replayed with the fast path and with it switched off: all tables equal, row for row.
* `Partition.t_wake`: timers.advance skips the scan of the purgatories while the event time is
  below it, so it must never exceed the deadline of any parked produce -- checked after every event.
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

CONFIGS = [{}, {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"},
           {"unclean.leader.election.enable": "true", "eligible.leader.replicas.enable": "false",
            "min.insync.replicas": "1"}, {"output.fetch": "all"}]


def _tables(out):
    return {k: v for k, v in out.items() if not k.startswith("_")}


def _slow(monkeypatch):
    monkeypatch.setattr(fetch_mod, "steady_request", lambda *a: None)


@pytest.mark.parametrize("seed", range(40))
def test_steady_fetch_changes_no_row(seed, monkeypatch):
    cfg = CONFIGS[seed % len(CONFIGS)]
    evs = random_schedule(seed, 400, explicit_ap=seed % 3 == 1, explicit_md=seed % 3 == 2)
    fast = _tables(run_events(evs, cfg))
    with monkeypatch.context() as m:
        _slow(m)
        slow = _tables(run_events(evs, cfg))
    assert fast == slow


def _simulated(tmp_path, **kw):
    simulate(str(tmp_path / "s"), duration_ms=20_000, seed=3, **kw)
    return [raw for raw, _, err in iter_raw_rows(str(tmp_path / "s")) if err is None]


@pytest.mark.parametrize("kw", [dict(brokers=3, partitions=20, rf=3),
                                dict(brokers=3, partitions=5, rf=3,
                                     faults="isolate:2@3s+6s,unclean-crash:1:lose=50%:frac=1@8s+5s")])
def test_steady_fetch_on_simulated_streams(tmp_path, monkeypatch, kw):
    evs = _simulated(tmp_path, **kw)
    fast = _tables(run_events(evs))
    with monkeypatch.context() as m:
        _slow(m)
        slow = _tables(run_events(evs))
    assert fast == slow


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
