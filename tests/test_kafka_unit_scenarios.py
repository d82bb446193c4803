"""Scenarios translated from Kafka's own unit tests (ReplicationControlManagerTest,
PartitionChangeBuilderTest, PartitionTest, ReplicaTest; each names its test in `source`), run through
the real `isrflow` command like the public scenarios (tests/test_scenarios.py). Kept out of the
mutation tier: ~40 replays; the rules they cover have their own fast tests (tests/test_rules_*.py)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "check_scenarios.py"
ISRFLOW = Path(sys.executable).parent / "isrflow"
SCENARIOS = ROOT / "tests" / "scenarios_kafka"


def test_kafka_unit_test_scenarios_local_engine():
    files = sorted(SCENARIOS.glob("*.json"))
    assert len(files) >= 30
    proc = subprocess.run([sys.executable, str(CHECK), "--cmd", str(ISRFLOW), "--engine", "local", str(SCENARIOS)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{len(files)} passed, 0 failed"
