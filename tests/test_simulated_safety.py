"""200 simulated fault schedules (every preset, different seeds) under the default, safe
configuration (KIP-966 ELR on, no unclean election): not one invariant violation."""
import pytest

from jobs.local_engine import LocalEngine
from jobs.simulate import simulate
from jobs.streamio import iter_raw_rows
from protocol.config import EngineConfig

PRESETS = ["last-replica-standing", "rolling-restart", "zone-outage", "flaky-network", "reassignment"]


@pytest.mark.parametrize("preset", PRESETS)
def test_simulated_schedules_are_safe(preset, tmp_path):
    for seed in range(40):
        out = tmp_path / f"s{seed}"
        s = simulate(str(out), scenario=preset, seed=seed, partitions=4, duration_ms=90_000, fmt="parquet")
        eng = LocalEngine(EngineConfig(s.get("engine_config") or {}))
        for row in iter_raw_rows(str(out)):
            eng.feed(*row)
        tables, _ = eng.drain(True)
        assert eng.cluster.applied + eng.cluster.rejected == s["rows"]
        v = tables.get("violations", [])
        assert not v, (preset, seed, v[:2])
