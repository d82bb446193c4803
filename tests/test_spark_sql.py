"""Spark SQL over the output tables (issue 11.2): tables written by either sink (and by the
in-process engine) open in Spark SQL + Delta (by name, and by path as delta.`/path`), in delta-rs
and in Polars (when installed), with the same answers; `isrflow sql --engine spark` works."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobs.delta_sink import read_table, sql
from jobs.local_engine import replay_local
from protocol.config import EngineConfig
from tests.spark_streams import make_stream

pytestmark = pytest.mark.spark

ISRFLOW = str(Path(sys.executable).with_name("isrflow"))
QUERIES = [
    "SELECT topic, partition, count(*) AS n, max(leader_epoch) AS e FROM metadata_log "
    "GROUP BY topic, partition ORDER BY topic, partition",
    "SELECT result, count(*) AS n FROM produce GROUP BY result ORDER BY result",
    "SELECT topic, partition, leader, isr FROM partition_state ORDER BY topic, partition",
    "SELECT sum(input_rows) AS i, sum(applied) AS a, sum(rejected) AS r FROM progress",
]


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory):
    from jobs.spark_engine import replay_spark
    from jobs.spark_session import has_delta_jars
    tmp = tmp_path_factory.mktemp("sql")
    stream, _ = make_stream(tmp / "stream", 51, 300, n_files=4, partitions=3)
    cfg = EngineConfig({})
    out = {"local": tmp / "local"}
    replay_local(str(stream), str(out["local"]), cfg)
    for sink in (["delta-spark"] if has_delta_jars(spark) else []) + ["delta-rs"]:
        out[sink] = tmp / sink
        replay_spark(str(stream), str(out[sink]), cfg, checkpoint=str(tmp / f"ck-{sink}"), n_buckets=4,
                     max_files_per_trigger=2, spark=spark, sink=sink)
    return out


def _norm(tbl) -> list[tuple]:
    return [tuple((k, v if not isinstance(v, list) else tuple(v)) for k, v in r.items()) for r in tbl.to_pylist()]


def test_spark_sql_equals_delta_rs_on_every_writer(spark, written):
    from jobs.spark_sql import spark_sql
    for who, tables in written.items():
        for q in QUERIES:
            assert _norm(spark_sql(str(tables), q, spark=spark)) == _norm(sql(str(tables), q)), (who, q)
    # by path, as in the README
    for who, tables in written.items():
        path = (tables / "metadata_log").resolve()
        from jobs.spark_session import has_delta_jars
        if has_delta_jars(spark):
            n = spark.sql(f"SELECT count(*) AS n FROM delta.`{path}`").collect()[0]["n"]
            assert n == read_table(str(tables), "metadata_log").num_rows, who


def test_polars_reads_every_writer(written):
    pl = pytest.importorskip("polars")
    for who, tables in written.items():
        for name in ("metadata_log", "partition_state", "progress"):
            assert pl.read_delta(str(tables / name)).height == read_table(str(tables), name).num_rows, (who, name)


def test_cli_sql_engine_spark(written):
    tables = written.get("delta-spark", written["delta-rs"])
    q = "SELECT count(*) AS n FROM metadata_log"
    p = subprocess.run([ISRFLOW, "sql", "--engine", "spark", "--tables", str(tables), "--format", "json", q],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == f'{{"n": {read_table(str(tables), "metadata_log").num_rows}}}'
    bad = subprocess.run([ISRFLOW, "sql", "--engine", "spark", "--tables", str(tables), "SELECT nope FROM x"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1 and "Spark SQL failed" in bad.stderr, bad.stderr[-2000:]
