"""The public conformance scenarios, through the real `isrflow` command (a subprocess per scenario)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "check_scenarios.py"
ISRFLOW = Path(sys.executable).parent / "isrflow"


def test_public_scenarios_local_engine():
    proc = subprocess.run([sys.executable, str(CHECK), "--cmd", str(ISRFLOW), "--engine", "local",
                           str(ROOT / "tests" / "scenarios")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")
