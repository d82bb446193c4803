"""The `isrflow` command as a user runs it: real subprocesses, real Delta tables read back."""
import json
import subprocess
import sys
from pathlib import Path

from jobs.delta_sink import read_table

ROOT = Path(__file__).resolve().parents[1]
ISRFLOW = str(Path(sys.executable).parent / "isrflow")
DEMO = str(ROOT / "examples" / "demo")
DEMO_ROWS = sum(1 for f in Path(DEMO).glob("*.jsonl") for line in f.read_text().splitlines() if line.strip())


def run(*args, check=True):
    p = subprocess.run([ISRFLOW, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_replay_local_writes_tables_and_accounts_for_every_row(tmp_path):
    out = run("replay", DEMO, "--tables", str(tmp_path / "t"), "--engine", "local")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["input_rows"] == summary["applied"] + summary["rejected"] == DEMO_ROWS
    progress = read_table(str(tmp_path / "t"), "progress").to_pylist()
    assert sum(r["applied"] + r["rejected"] for r in progress) == sum(r["input_rows"] for r in progress) == DEMO_ROWS
    assert read_table(str(tmp_path / "t"), "metadata_log").num_rows > 0
    assert (tmp_path / "t" / "_run.json").exists()


def test_replay_twice_is_idempotent_and_refuses_another_config(tmp_path):
    t = str(tmp_path / "t")
    run("replay", DEMO, "--tables", t, "--engine", "local")
    n = read_table(t, "metadata_log").num_rows
    run("replay", DEMO, "--tables", t, "--engine", "local")
    assert read_table(t, "metadata_log").num_rows == n
    p = run("replay", DEMO, "--tables", t, "--engine", "local", "--set", "min.insync.replicas=2", check=False)
    assert p.returncode == 1 and "another replay" in p.stderr
    run("replay", DEMO, "--tables", t, "--engine", "local", "--set", "min.insync.replicas=2", "--overwrite")


def test_unusable_arguments_fail_clearly(tmp_path):
    p = run("replay", str(tmp_path / "missing"), "--tables", str(tmp_path / "t"), check=False)
    assert p.returncode == 1 and "does not exist" in p.stderr
    p = run("replay", DEMO, "--tables", str(tmp_path / "t"), "--set", "no.such.key=1", check=False)
    assert p.returncode == 2 and "unknown config key" in p.stderr
    p = run("replay", DEMO, "--tables", str(tmp_path / "t"), "--set", "min.insync.replicas=zero", check=False)
    assert p.returncode == 2 and "min.insync.replicas" in p.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run("replay", DEMO, "--tables", str(blocker / "t"), "--engine", "local", check=False)
    assert p.returncode == 1 and "error" in p.stderr


def test_sql_over_the_tables(tmp_path):
    t = str(tmp_path / "t")
    run("replay", DEMO, "--tables", t, "--engine", "local")
    p = run("sql", "--tables", t, "--format", "json",
            "SELECT election, count(*) AS n FROM elections GROUP BY election ORDER BY election")
    got = [json.loads(x) for x in p.stdout.splitlines()]
    assert got and all(r["n"] > 0 for r in got)
    p = run("sql", "--tables", t, "SELECT nope FROM elections", check=False)
    assert p.returncode == 1 and "SQL failed" in p.stderr


def test_simulate_then_replay_shows_the_elr_difference(tmp_path):
    s = str(tmp_path / "s")
    run("simulate", "--out", s, "--scenario", "last-replica-standing", "--seed", "3", "--partitions", "4",
        "--duration", "2m")
    run("replay", s, "--tables", str(tmp_path / "on"), "--engine", "local")
    run("replay", s, "--tables", str(tmp_path / "off"), "--engine", "local",
        "--set", "eligible.leader.replicas.enable=false")
    assert read_table(str(tmp_path / "on"), "violations").num_rows == 0
    inv = set(read_table(str(tmp_path / "off"), "violations").column("invariant").to_pylist())
    assert "AckedRecordsDurable" in inv and "LeaderCompleteness" in inv
