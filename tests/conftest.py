"""Shared fixtures. `spark`: ONE Spark session for the whole test run (starting one costs
~6-10 s; see research/spark_notes.md Q9). Tests that do not ask for it never start Spark."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from jobs.spark_session import get_spark
    s = get_spark("local[2]")
    yield s
    s.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: starts Spark (a shared session or an isrflow subprocess)")
    config.addinivalue_line("markers", "kafka: starts a real Kafka 4.4.0 cluster (jobs/lab; run under flock /tmp/isrflow-heavy.lock)")
