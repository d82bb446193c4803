"""Kill test: a real `isrflow run` process is SIGKILLed at several points (before, in the
middle of and after a micro-batch's Delta commit, and, with the delta-rs sink, from outside at an arbitrary moment)
and restarted from its checkpoint; the final tables equal an uninterrupted run's (no row
twice, none missing) and input rows = applied + rejected."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.local_engine import replay_local
from protocol.config import EngineConfig
from tests.delta_compare import diff_tables, engine_info, progress_totals
from tests.spark_streams import make_stream

pytestmark = pytest.mark.spark

ISRFLOW = str(Path(sys.executable).with_name("isrflow"))


def _start(stream, tables, ck, env_extra, log, sink):
    env = dict(os.environ, **env_extra)
    cmd = [ISRFLOW, "run", str(stream), "--tables", str(tables), "--checkpoint", str(ck), "--engine", "spark",
           "--max-files-per-trigger", "1", "--trigger-seconds", "0.2", "--buckets", "4", "--sink", sink]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _reap(p, timeout=90):
    """Wait for the process and for its process group (the JVM it started) to be gone."""
    try:
        p.wait(timeout=timeout)
    finally:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                return p.returncode
            time.sleep(0.3)
        os.killpg(p.pid, signal.SIGKILL)   # leftover of the group we started
    return p.returncode


def _committed_rows(tables) -> int:
    try:
        return progress_totals(tables)["input_rows"]
    except Exception:
        return 0


def run_to_end_and_stop(p, tables, ref, n_rows: int, names=None) -> int:
    """Wait until a running `isrflow run` has committed all n_rows input rows and its tables (`names`)
    equal the reference (the final no-data batch fires the timers due by the stream's end), then
    SIGTERM it; returns its exit code."""
    deadline = time.time() + 300
    while time.time() < deadline and _committed_rows(tables) < n_rows and p.poll() is None:
        time.sleep(0.5)
    deadline = time.time() + 60
    args = () if names is None else (names,)
    while time.time() < deadline and p.poll() is None and diff_tables(ref, tables, *args) != {}:
        time.sleep(1.0)
    os.kill(p.pid, signal.SIGTERM)
    return _reap(p, timeout=120)


def _have_delta_jars() -> bool:
    from jobs.spark_session import delta_conf
    return bool(delta_conf())


@pytest.mark.parametrize("sink", ["delta-spark", "delta-rs"])
def test_kill_and_restart(tmp_path, sink):
    if sink == "delta-spark" and not _have_delta_jars():
        pytest.skip("delta-spark JARs not in the cache (./dev setup)")
    # one file per micro-batch: the native sink's batches cost ~6-10 s each here, so its stream ends
    # two batches after its last kill point; delta-rs's outside kill needs batches left after its own
    n_files = 7 if sink == "delta-spark" else 10
    stream, n_rows = make_stream(tmp_path / "stream", 21, 500, n_files=n_files, partitions=4, topics=2)
    cfg = EngineConfig(_defaults())
    ref = tmp_path / "ref"
    replay_local(str(stream), str(ref), cfg)
    tables, ck = tmp_path / "tables", tmp_path / "ck"
    log = open(tmp_path / "run.log", "ab")
    # 1-2: self-kill (SIGKILL) at a point of the sink path of a given batch: mid-commit (some tables
    # written) and after the commit (the checkpoint not yet), the two where a batch is partly or
    # wholly in the tables; "before" (nothing written) is the delta-rs run's second point.
    # The native sink commits a batch this small from the driver with delta-rs, a large one from the
    # executors (ISRFLOW_SINK_DRIVER_BYTES=0 makes it so here): it is killed in the middle of each
    # path, and each restart replays the killed batch by the other path (its skip of the tables that
    # hold the batch reads the other writer's commits).
    executors = {"ISRFLOW_SINK_DRIVER_BYTES": "0"}
    specs = ((("2:mid", executors), ("4:mid", {}), ("5:after", executors)) if sink == "delta-spark"
             else (("3:mid", {}), ("5:before", {})))
    for spec, extra in specs:
        marker = tmp_path / f"killed-{spec.replace(':', '-')}"
        p = _start(stream, tables, ck, {"ISRFLOW_TEST_KILL": spec, "ISRFLOW_TEST_KILL_MARKER": str(marker)} | extra,
                   log, sink)
        rc = _reap(p, timeout=240)
        assert rc == -signal.SIGKILL, (spec, rc, (tmp_path / "run.log").read_text()[-3000:])
        assert marker.exists()
    # 3: killed from outside once it has committed more. Where that lands is up to the moment, not
    # the sink, so the delta-rs run does it alone (a start of the native sink costs ~60 s of the suite)
    if sink == "delta-rs":
        p = _start(stream, tables, ck, {}, log, sink)
        deadline = time.time() + 240
        base = _committed_rows(tables)
        while time.time() < deadline and _committed_rows(tables) <= base and p.poll() is None:
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
        _reap(p)
    # 4: runs to the end, stopped with SIGTERM
    rc = run_to_end_and_stop(_start(stream, tables, ck, {}, log, sink), tables, ref, n_rows)
    log.close()
    text = (tmp_path / "run.log").read_text()
    assert rc == 0, text[-3000:]
    assert "isrflow run: stopped" in text
    tot = progress_totals(tables)
    assert tot["input_rows"] == n_rows == tot["applied"] + tot["rejected"]
    assert diff_tables(ref, tables) == {}
    if sink == "delta-spark":    # both of the native sink's paths wrote the tables
        writers = engine_info(tables / "metadata_log")
        assert any("Spark" in w for w in writers) and any("Spark" not in w for w in writers), writers


def _defaults():
    from conf import load_defaults
    return dict(load_defaults())
