"""The `isrflow` commands not covered by test_cli.py, as a user runs them (real subprocesses):
`replay --config FILE`, `compare` (text and JSON, both orders and equal runs), `report`, a tiny
`bench`, and an in-process replay committed in several micro-batches."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.delta_sink import read_table

ISRFLOW = str(Path(sys.executable).parent / "isrflow")
ROOT = Path(__file__).resolve().parents[1]


def run(*args, check=True, cwd=None):
    p = subprocess.run([ISRFLOW, *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def lrs(tmp_path_factory):
    """A last-replica-standing stream replayed with ELR on (A) and, via --config FILE, ELR off (B)."""
    d = tmp_path_factory.mktemp("cli")
    s = d / "s"
    run("simulate", "--out", str(s), "--scenario", "last-replica-standing", "--seed", "3", "--partitions", "4",
        "--duration", "2m", "--format", "json")
    run("replay", str(s), "--tables", str(d / "on"), "--engine", "local")
    props = d / "elr-off.properties"
    props.write_text("# what-if: no KIP-966\neligible.leader.replicas.enable = false\n")
    run("replay", str(s), "--tables", str(d / "off"), "--engine", "local", "--config", str(props))
    return d


def test_config_file_properties_and_json_equal_set(lrs, tmp_path):
    off = read_table(str(lrs / "off"), "violations")
    assert off.num_rows > 0
    run_info = json.loads((lrs / "off" / "_run.json").read_text())
    assert "false" in json.dumps(run_info)
    # the same setting as JSON and as --set gives the same tables
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"eligible.leader.replicas.enable": "false"}))
    run("replay", str(lrs / "s"), "--tables", str(tmp_path / "j"), "--engine", "local", "--config", str(js))
    run("replay", str(lrs / "s"), "--tables", str(tmp_path / "x"), "--engine", "local",
        "--set", "eligible.leader.replicas.enable=false")
    key = lambda t: sorted((r["seq"], r["invariant"], r["detail"]) for r in t.to_pylist())   # noqa: E731
    assert key(read_table(str(tmp_path / "j"), "violations")) == key(off)
    assert key(read_table(str(tmp_path / "x"), "violations")) == key(off)
    # --set overrides --config
    run("replay", str(lrs / "s"), "--tables", str(tmp_path / "o"), "--engine", "local", "--config", str(js),
        "--set", "eligible.leader.replicas.enable=true")
    assert read_table(str(tmp_path / "o"), "violations").num_rows == 0


def test_config_file_errors(tmp_path, lrs):
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.key=1\n")
    p = run("replay", str(lrs / "s"), "--tables", str(tmp_path / "t"), "--engine", "local", "--config", str(bad),
            check=False)
    assert p.returncode == 2 and "no.such.key" in p.stderr
    p = run("replay", str(lrs / "s"), "--tables", str(tmp_path / "t"), "--engine", "local",
            "--config", str(tmp_path / "missing.properties"), check=False)
    assert p.returncode == 2 and "configuration" in p.stderr


def test_compare_text_json_and_both_orders(lrs):
    text = run("compare", str(lrs / "on"), str(lrs / "off")).stdout
    assert "Verdict:" in text
    flat = " ".join(text.split())
    assert "eligible.leader.replicas.enable=true in A vs false in B" in flat
    assert "A is the safer configuration on this schedule" in flat
    rev = " ".join(run("compare", str(lrs / "off"), str(lrs / "on")).stdout.split())
    assert "B is the safer configuration on this schedule" in rev
    r = json.loads(run("compare", str(lrs / "on"), str(lrs / "off"), "--json").stdout)
    assert r["same_stream"] is True
    m = {x["key"]: x for x in r["metrics"]}
    assert m["acked_lost.records"]["a"] == 0 and m["acked_lost.records"]["b"] > 0
    assert m["violations.total"]["b"] == read_table(str(lrs / "off"), "violations").num_rows
    same = " ".join(run("compare", str(lrs / "on"), str(lrs / "on")).stdout.split())
    assert "Both are safe on this schedule." in same and "safer" not in same


def test_compare_missing_dir_fails(tmp_path, lrs):
    p = run("compare", str(lrs / "on"), str(tmp_path / "nope"), check=False)
    assert p.returncode == 1 and "error" in p.stderr


def test_report_from_the_command_line(lrs, tmp_path):
    out = tmp_path / "r.html"
    p = run("report", "--tables", str(lrs / "on"), "--compare", str(lrs / "off"), "--out", str(out))
    assert p.stdout.strip().endswith("r.html")
    html = out.read_text()
    assert html.lstrip().lower().startswith("<!doctype html") or "<html" in html[:200].lower()
    assert "AckedRecordsDurable" in html
    assert "http://" not in html and "https://" not in html.replace("https://kafka.apache.org", "")  # self-contained


def test_bench_tiny(tmp_path):
    out = tmp_path / "b.json"
    p = run("bench", "--partitions", "10", "--events", "1500", "--engines", "local", "--out", str(out),
            "--work", str(tmp_path / "w"))
    assert "partitions" in p.stdout and "local ev/s" in p.stdout
    res = json.loads(out.read_text())
    (entry,) = res["runs"]
    assert entry["partitions"] == 10 and entry["rows"] == 1500
    assert entry["local"]["returncode"] == 0 and entry["local"]["events_per_s"] > 0
    assert entry["core"]["core_events_per_s"] > 0


def test_local_replay_in_several_batches_equals_one_batch(lrs, tmp_path):
    """The in-process engine committing every 97 rows: several Delta commits, progress per batch,
    identical tables (the CLI has no batch-size option for --engine local, so this drives
    replay_local in a subprocess), then read back with `isrflow sql`."""
    code = ("import sys; from jobs.local_engine import replay_local; from protocol.config import EngineConfig; "
            "from conf import load_defaults; "
            "print(replay_local(sys.argv[1], sys.argv[2], EngineConfig(dict(load_defaults())), batch_rows=97))")
    p = subprocess.run([sys.executable, "-c", code, str(lrs / "s"), str(tmp_path / "b")], capture_output=True,
                       text=True, timeout=300, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr
    prog = json.loads(run("sql", "--tables", str(tmp_path / "b"), "--format", "json",
                          "SELECT count(*) AS n, sum(input_rows) AS i, sum(applied) AS a, sum(rejected) AS r "
                          "FROM progress").stdout)
    one = read_table(str(lrs / "on"), "progress").to_pylist()
    assert len(one) == 1
    assert prog["n"] > 5 and prog["i"] == one[0]["input_rows"] == prog["a"] + prog["r"]
    for t in ("metadata_log", "elections", "hwm", "produce", "alter_partition"):
        a = sorted(map(repr, read_table(str(tmp_path / "b"), t).to_pylist()))
        b = sorted(map(repr, read_table(str(lrs / "on"), t).to_pylist()))
        assert a == b, t
