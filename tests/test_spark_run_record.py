"""One replay record for both engines (jobs/runinfo.py), through the real command line: a Spark
replay writes `_run.json` with its effective config, app id and totals like the in-process engine;
`compare` reads the real min.insync.replicas of Spark tables; a tables directory holding another
replay is refused by both engines (before Spark starts) unless --overwrite."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conf import load_defaults
from protocol.config import EngineConfig
from tests.spark_streams import make_stream

pytestmark = pytest.mark.spark

ISRFLOW = str(Path(sys.executable).with_name("isrflow"))


def _run(*args, timeout=600):
    return subprocess.run([ISRFLOW, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _info(tables) -> dict:
    return json.loads((Path(tables) / "_run.json").read_text())


def test_run_record_guard_and_compare(tmp_path):
    stream, n_rows = make_stream(tmp_path / "stream", 31, 300, n_files=3, partitions=3)
    spark_t, local_t = tmp_path / "spark", tmp_path / "local"

    p = _run("replay", stream, "--tables", spark_t, "--engine", "spark", "--buckets", "2",
             "--set", "min.insync.replicas=2")
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    info = _info(spark_t)
    assert info["engine"] == "spark" and info["app_id"].startswith("isrflow-spark-")
    assert info["stream"] == str(stream.resolve())
    # the effective config: every default plus the override
    want = EngineConfig({**load_defaults(), "min.insync.replicas": "2"}).raw
    assert info["config"] == dict(sorted(want.items()))
    assert info["sink"] == summary["sink"] and info["buckets"] == 2 and info["checkpoint"]
    tot = info["totals"]
    assert tot["input_rows"] == n_rows == tot["applied"] + tot["rejected"] == summary["input_rows"]
    assert tot["batches"] >= 1 and tot["partitions"] == summary["partitions"] > 0

    # compare / report read the real config of Spark tables (no "Kafka default 1" fallback)
    from jobs.compare import summarize
    assert "_run.json config (min.insync.replicas=2)" in summarize(spark_t)["min_isr_source"]

    # another replay into the Spark tables: refused by both engines, before Spark starts
    for extra in (("--engine", "local"), ("--engine", "spark", "--set", "min.insync.replicas=1")):
        p = _run("replay", stream, "--tables", spark_t, *extra, timeout=120)
        assert p.returncode == 1 and "holds the tables of another replay" in p.stderr, (extra, p.stderr[-2000:])
    assert _info(spark_t)["app_id"] == info["app_id"]

    # a local replay's directory is refused by the Spark engine (`run` as well)
    p = _run("replay", stream, "--tables", local_t, "--engine", "local")
    assert p.returncode == 0, p.stderr
    assert _info(local_t)["engine"] == "local" and _info(local_t)["totals"]["input_rows"] == n_rows
    p = _run("replay", stream, "--tables", local_t, "--engine", "spark", timeout=120)
    assert p.returncode == 1 and "holds the tables of another replay" in p.stderr, p.stderr[-2000:]
    p = _run("run", stream, "--tables", local_t, "--checkpoint", tmp_path / "ck", timeout=120)
    assert p.returncode == 1 and "holds the tables of another replay" in p.stderr, p.stderr[-2000:]

    # --overwrite replaces the Spark replay (tables, _run.json and its checkpoint)
    p = _run("replay", stream, "--tables", spark_t, "--engine", "local", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert _info(spark_t)["engine"] == "local" and not (spark_t / "_spark_checkpoint").exists()
    from tests.delta_compare import diff_tables
    assert diff_tables(local_t, spark_t) == {}
