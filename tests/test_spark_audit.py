"""`isrflow audit --engine spark`: the same real Kafka 4.4.0 recording audited through the Spark
engine gives the same verdicts, decision for decision, as through the in-process engine."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobs.delta_sink import read_table
from jobs.metalog import audit

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[1]


def _verdicts(tables) -> list[tuple]:
    rows = read_table(str(tables), "audit").to_pylist()
    return sorted((r["offset"], r["topic"], r["partition"], r["verdict"], tuple(r["isrflow_isr"] or ()),
                   r["isrflow_leader"], r["isrflow_elr"] and tuple(r["isrflow_elr"])) for r in rows)


def test_audit_through_spark_equals_local(spark, tmp_path):
    src = str(ROOT / "tests" / "data" / "kafka" / "elections" / "metadata")
    local = audit.run_audit(src, tmp_path / "local")
    sp = audit.run_audit(src, tmp_path / "spark", engine="spark")
    assert sp["decisions"] == local["decisions"] == 39
    assert (sp["agree"], sp["differ"], sp["kafka_only"], sp["isrflow_only"]) == (39, 0, 0, 0), \
        audit.summary_line(sp)
    assert _verdicts(tmp_path / "spark") == _verdicts(tmp_path / "local")
    assert sp["replay"]["rejected"] == 0 and sp["replay"]["input_rows"] == local["replay"]["input_rows"]
    from jobs.runinfo import read_run_info
    assert read_run_info(tmp_path / "spark")["engine"] == "spark"
    assert read_run_info(tmp_path / "local")["engine"] == "local"
