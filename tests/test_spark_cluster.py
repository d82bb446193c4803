"""The Spark engine unchanged on a multi-process cluster: `local-cluster[2,1,1024]` runs a master,
two worker JVMs and their executors (separate Python workers) on loopback. Closures must pickle,
code must ship to the executors and the state checkpoint must be shared; the tables must equal
the in-process engine's."""
import json
import subprocess
import sys
from pathlib import Path

from jobs.local_engine import replay_local
from protocol.config import EngineConfig
from tests.delta_compare import diff_tables

ROOT = Path(__file__).resolve().parents[1]
ISRFLOW = str(Path(sys.executable).parent / "isrflow")


def test_multi_process_cluster_matches_in_process_engine(tmp_path):
    stream = str(ROOT / "examples" / "demo")
    p = subprocess.run([ISRFLOW, "replay", stream, "--tables", str(tmp_path / "cluster"), "--engine", "spark",
                        "--master", "local-cluster[2,1,1024]", "--max-files-per-trigger", "2"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["input_rows"] == summary["applied"] + summary["rejected"]
    replay_local(stream, str(tmp_path / "local"), EngineConfig({}))
    assert diff_tables(tmp_path / "cluster", tmp_path / "local") == {}
