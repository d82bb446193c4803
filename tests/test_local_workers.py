"""The parallel local replay (`isrflow replay --engine local --workers N`, and the audit's replay): N
spawned processes, each the partitions of one bucket, give the same tables as one process -- every
table row for row, the progress rows too -- on hostile input, on a simulated cluster with faults,
timers and explicit delivery, and on a real recording's audit."""
from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.delta_sink import read_table
from jobs.local_engine import _receive, replay_local
from protocol.config import EngineConfig
from tests.delta_compare import diff_tables
from tests.test_hostile_input import hostile_lines, odd_parquet, random_schedule, write_lines

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = sorted((ROOT / "tests" / "data" / "kafka").glob("*/metadata"))


def _progress(tables) -> list[dict]:
    return sorted(read_table(str(tables), "progress").to_pylist(), key=lambda r: r["batch_id"])


def _assert_same(stream, tmp_path, cfg: EngineConfig, workers=(2, 3), batch_rows=100) -> dict:
    one = replay_local(str(stream), str(tmp_path / "w1"), cfg, batch_rows=batch_rows)
    for w in workers:
        got = replay_local(str(stream), str(tmp_path / f"w{w}"), cfg, batch_rows=batch_rows, workers=w)
        assert diff_tables(tmp_path / "w1", tmp_path / f"w{w}") == {}, w
        assert _progress(tmp_path / f"w{w}") == _progress(tmp_path / "w1"), w
        for k in ("input_rows", "applied", "rejected", "batches", "partitions"):
            assert got[k] == one[k], (w, k)
        assert got["workers"] == w
    return one


@pytest.mark.parametrize("seed", [1, 4])
def test_hostile_streams_same_tables(tmp_path, seed):
    """Rows that fail validation, out-of-order and time-leaping rows, core rejections, undecodable
    files: each rejection is output once (by the worker of its partition, or worker 0), every batch
    boundary falls at the same row."""
    lines = hostile_lines(random_schedule(seed, 300, partitions=5), seed)
    s = write_lines(tmp_path / "s", lines, n_files=2)
    odd_parquet(s / "part-900.parquet")
    (s / "part-901.parquet").write_bytes(b"PAR1 not really")
    one = _assert_same(s, tmp_path, EngineConfig({}))
    assert one["rejected"] > 10 and one["batches"] >= 3


def test_simulated_faults_timers_and_explicit_delivery(tmp_path):
    """Broker crashes and restarts, session expiry, ISR expiration timers, explicit metadata and
    AlterPartition delivery: broker-wide rows act in every worker, partition rows in one."""
    from jobs.simulate import simulate
    s = tmp_path / "s"
    sim = simulate(str(s), brokers=5, partitions=24, rf=3, duration_ms=20_000, seed=7,
                   faults="crash:2@3s+4s,partition:3@9s+5s,unclean-crash:4@12s+4s,elect:preferred@17s",
                   delivery="explicit")
    assert sim["rows"] > 3000
    cfg = EngineConfig({"delivery.metadata": "explicit", "delivery.alter_partition": "explicit",
                        "broker.session.timeout.ms": "3000"})
    one = _assert_same(s, tmp_path, cfg, workers=(2,), batch_rows=1000)
    assert one["partitions"] == 24
    names = {n for n in ("elections", "alter_partition", "metadata_log") if read_table(str(tmp_path / "w1"), n).num_rows}
    assert names == {"elections", "alter_partition", "metadata_log"}


@pytest.mark.skipif(not RECORDINGS, reason="no real recordings")
def test_audit_with_two_workers_equals_one(tmp_path):
    from jobs.metalog.audit import run_audit
    rec = RECORDINGS[0]
    a = run_audit(rec, tmp_path / "a", workers=1)
    b = run_audit(rec, tmp_path / "b", workers=2)
    assert (a["replay"]["workers"], b["replay"]["workers"]) == (1, 2)
    assert diff_tables(tmp_path / "a", tmp_path / "b", names=("audit", "audit_invariants", "metadata_log")) == {}
    assert {k: a[k] for k in ("decisions", "agree", "differ")} == {k: b[k] for k in ("decisions", "agree", "differ")}


def test_a_worker_that_dies_is_named():
    recv, send = mp.Pipe(duplex=False)
    send.close()
    with pytest.raises(RuntimeError, match="replay worker 1 died"):
        _receive(recv, 1)
    recv, send = mp.Pipe(duplex=False)
    send.send("Traceback ...\nValueError: boom")
    with pytest.raises(RuntimeError, match="(?s)replay worker 0 failed:\nTraceback .*boom"):
        _receive(recv, 0)


def test_cli_workers(tmp_path):
    lines = hostile_lines(random_schedule(2, 120, partitions=3), 2)
    s = write_lines(tmp_path / "s", lines, n_files=1)
    isrflow = [sys.executable, "-m", "jobs.cli"]
    r = subprocess.run(isrflow + ["replay", str(s), "--tables", str(tmp_path / "t"), "--engine", "local",
                                  "--workers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["workers"] == 2 and summary["input_rows"] == summary["applied"] + summary["rejected"]
    bad = subprocess.run(isrflow + ["replay", str(s), "--tables", str(tmp_path / "u"), "--engine", "local",
                                    "--workers", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--workers '0': expected a whole number from 1 to 64" in bad.stderr


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        st = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return st.rsplit(")", 1)[1].split()[0] != "Z"


def test_killed_parallel_replay_restarts_to_the_same_tables(tmp_path):
    """SIGKILL of `isrflow replay --workers 2` right after a commit, then again mid-run: the workers die
    with their parent (their next send breaks the pipe), and the same command run again skips the
    committed batches and ends with the tables of an uninterrupted one-process replay."""
    import os
    import signal
    import time

    from jobs.simulate import simulate
    s = tmp_path / "s"
    sim = simulate(str(s), brokers=5, partitions=40, rf=3, duration_ms=30_000, seed=3,
                   faults="crash:1@6s+5s,partition:2@14s+4s")
    assert sim["rows"] > 10_000
    ref = tmp_path / "ref"
    replay_local(str(s), str(ref), EngineConfig({}), batch_rows=800)
    t = tmp_path / "t"
    argv = [sys.executable, "-m", "jobs.cli", "replay", str(s), "--tables", str(t), "--engine", "local",
            "--workers", "2", "--batch-rows", "800", "--progress"]
    for kill_after, delay in (("batch 2:", 0.0), ("batch 5:", 0.05)):
        p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            if line.startswith(kill_after):
                break
        time.sleep(delay)
        kids = _children(p.pid)
        assert len(kids) >= 2, kids            # the two workers (and perhaps a resource tracker)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        p.stderr.close()
        deadline = time.time() + 20
        while any(_alive(k) for k in kids) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(_alive(k) for k in kids), "a worker outlived its killed parent"
    committed = len(_progress(t))
    assert 3 <= committed < len(_progress(ref))          # the kills left the replay part-way
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert diff_tables(ref, t) == {}
    assert _progress(t) == _progress(ref)


@pytest.mark.parametrize("creations", [False, True])
def test_foreign_plain_rows_skip_the_dict_and_keep_the_order_check(tmp_path, creations):
    """A worker reads another worker's plain Parquet rows as Foreign (no dict, no validation: only
    the order check moves, Cluster.pass_foreign). Rows that go back in seq or time, rows past the
    time-jump limit and invalid rows sit among them, in every worker's partitions: the tables are
    still the single process's, and the owner alone writes each rejection. creations: partitions
    added later, some not of their topic's replication factor; another worker's CreatePartition
    comes as a Foreign row with its creation, from which each worker learns the topic's factor."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.streamio import Foreign, iter_raw_rows
    from protocol.cluster import Cluster
    from schemas.events import EVENT_ARROW_SCHEMA
    from tests.gen import random_schedule

    rnd = random.Random(11)
    rows = []
    for ev in random_schedule(5, 600, partitions=6, brokers=4, creations=creations):
        r = dict(ev)
        x = rnd.random()
        if x < 0.04:
            r["seq"] = max(1, r["seq"] - rnd.randint(1, 30))         # goes back in seq
        elif x < 0.08:
            r["ts_ms"] = max(0, r["ts_ms"] - rnd.randint(1, 5000))   # goes back in time
        elif x < 0.10:
            r["ts_ms"] = r["ts_ms"] + 400_000                        # past the jump limit
        elif x < 0.12 and r.get("partition") is not None:
            r["partition"] = -1                                      # invalid: not plain
        rows.append({k: r.get(k) for k in EVENT_ARROW_SCHEMA.names})
    s = tmp_path / "s"
    s.mkdir()
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(pa.Table.from_pylist(part, schema=EVENT_ARROW_SCHEMA), s / f"part-{i:05d}.parquet")
    cfg = EngineConfig({"input.max.time.jump.ms": "300000"})

    from jobs.buckets import owns_fn
    for k in range(2):
        cl = Cluster(cfg, owns=owns_fn(k, 2), sees_all=True)
        raws = [raw for raw, _, _ in iter_raw_rows(s, foreign=cl.is_foreign, events=True)]
        kinds = [type(raw).__name__ for raw in raws]
        assert 100 < kinds.count(Foreign.__name__) < len(rows) - 100, k      # both kinds, in each worker
        noted = [raw.creation for raw in raws if type(raw) is Foreign and raw.creation is not None]
        assert noted and (len(noted) > 8) is creations and all(len(c[1]) >= 1 for c in noted), noted

    one = _assert_same(s, tmp_path, cfg, workers=(2, 3), batch_rows=70)
    reasons = [r["reason"] for r in read_table(str(tmp_path / "w1"), "rejected").to_pylist()]
    assert sum("seq" in r and "not after" in r for r in reasons) > 5, reasons[:5]
    assert one["rejected"] > 30
    refused = [r for r in read_table(str(tmp_path / "w1"), "admin").to_pylist()
               if "not consistent with previous partitions" in (r["detail"] or "")]
    assert (len(refused) > 3) is creations, refused


def test_a_stream_ending_on_a_batch_boundary_ends_with_that_batch(tmp_path):
    """jobs.local_engine._batches: rows = k * batch_rows gives k batches, the final timers firing in
    the k-th (no extra batch without input rows that rewrites every partition's state row), with
    the tables of a replay cut elsewhere; with one row more, k + 1 batches."""
    import pyarrow.parquet as pq

    from jobs.simulate import simulate
    s = tmp_path / "s"
    simulate(str(s), brokers=4, partitions=12, rf=3, duration_ms=8_000, seed=3, fmt="parquet",
             faults="crash:2@2s+3s")
    n = sum(pq.ParquetFile(f).metadata.num_rows for f in s.glob("*.parquet"))
    cut = n // 3 * 3
    from jobs.bench import cut_stream
    cut_stream(str(s), cut)
    cfg = EngineConfig({})
    third = replay_local(str(s), str(tmp_path / "k"), cfg, batch_rows=cut // 3)
    assert third["batches"] == 3
    prog = _progress(tmp_path / "k")
    assert [r["input_rows"] for r in prog] == [cut // 3] * 3
    whole = replay_local(str(s), str(tmp_path / "w"), cfg, batch_rows=cut + 1)
    assert whole["batches"] == 1
    assert diff_tables(tmp_path / "k", tmp_path / "w") == {}
    more = replay_local(str(s), str(tmp_path / "m"), cfg, batch_rows=cut // 3 - 1)
    assert more["batches"] == 4 and [r["input_rows"] for r in _progress(tmp_path / "m")][-1] == 3
