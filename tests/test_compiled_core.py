"""The compiled core (protocol/ built by mypyc, ISRFLOW_CORE=compiled; jobs.compiled) against the
pure-Python one: the same streams through both, every table compared row for row. Real
subprocesses of the `isrflow` command, with the build this checkout's source makes (~1 min, kept
in .cache/compiled while protocol/ is unchanged)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import compiled
from tests.delta_compare import diff_tables

ROOT = Path(__file__).resolve().parents[1]
ISRFLOW = Path(sys.executable).parent / "isrflow"
CHECK = ROOT / "tools" / "check_scenarios.py"


@pytest.fixture(scope="module")
def build():
    return compiled.build(log=lambda *_: None).parent


def _env(core: str, build_dir: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (compiled.ENV, compiled.DIR_ENV)}
    env[compiled.ENV] = core
    if build_dir is not None:
        env[compiled.DIR_ENV] = str(build_dir)
    return env


def _run(argv: list, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([str(ISRFLOW), *map(str, argv)], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p


def test_the_build_is_compiled_and_the_default_is_not(build):
    probe = "import jobs, jobs.compiled as c; print(c.is_compiled())"
    out = {core: subprocess.run([sys.executable, "-c", probe], env=_env(core, build), capture_output=True,
                                text=True, timeout=60).stdout.strip() for core in ("compiled", "pure")}
    assert out == {"compiled": "True", "pure": "False"}
    assert sorted(p.name.split(".")[0] for p in (build / "src" / "protocol").glob("*.so")) == \
        sorted(p.stem for p in (ROOT / "protocol").glob("*.py"))


def test_public_scenarios_pass_compiled(build):
    p = subprocess.run([sys.executable, str(CHECK), "--cmd", str(ISRFLOW), "--engine", "local",
                        str(ROOT / "tests" / "scenarios")], env=_env("compiled", build),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].endswith(" 0 failed")


# fault-heavy simulations: elections clean and unclean, ELR, fencing, divergence, reassignment,
# explicit metadata / AlterPartition delivery (the simulator drives the protocol itself, so it runs
# compiled too and must write the same stream)
SIMULATIONS = {
    "zone-outage": ["--scenario", "zone-outage", "--partitions", "12", "--duration", "4m"],
    "last-replica": ["--scenario", "last-replica-standing", "--partitions", "8", "--duration", "4m",
                     "--delivery", "explicit"],
    "reassignment": ["--scenario", "reassignment", "--partitions", "10", "--duration", "4m"],
    "flaky-unclean": ["--scenario", "flaky-network", "--partitions", "10", "--duration", "4m",
                      "--set", "unclean.leader.election.enable=true"],
    "crashes": ["--partitions", "16", "--topics", "2", "--duration", "5m", "--faults",
                "crash:1@40s,partition:2@90s+40s,crash:3@150s,crash:4@160s"],
}


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_simulated_streams_give_identical_tables(build, tmp_path, name):
    args = SIMULATIONS[name]
    streams = {}
    for core in ("pure", "compiled"):
        s = tmp_path / f"stream-{core}"
        _run(["simulate", "--out", s, "--seed", "7", *args], _env(core, build))
        streams[core] = s
    sims = {core: json.loads((s / "_simulation.json").read_text()) for core, s in streams.items()}
    assert sims["pure"]["core"] == sims["compiled"]["core"]            # final state digest, violations
    files = sorted(f.name for f in streams["pure"].iterdir())
    assert files == sorted(f.name for f in streams["compiled"].iterdir())
    for f in files:
        if f != "_simulation.json":
            assert (streams["pure"] / f).read_bytes() == (streams["compiled"] / f).read_bytes(), f
    cfg = []
    for a, b in zip(args, args[1:]):
        if a == "--set":
            cfg += ["--set", b]
    tables = {}
    for core, workers in (("pure", 1), ("compiled", 1), ("compiled", 2)):
        t = tmp_path / f"tables-{core}-{workers}"
        _run(["replay", streams["pure"], "--tables", t, "--engine", "local", "--workers", workers, *cfg],
             _env(core, build))
        tables[core, workers] = t
    assert diff_tables(tables["pure", 1], tables["compiled", 1]) == {}
    assert diff_tables(tables["pure", 1], tables["compiled", 2]) == {}


_ROUNDTRIP = """
import json, sys
import jobs
from jobs.streamio import iter_raw_rows
from tests.engine_util import canonical, run_events
rows = [raw for raw, _, err in iter_raw_rows(sys.argv[1]) if err is None]
out = run_events(rows, json.loads(sys.argv[2]), roundtrip_every=37)
print(json.dumps(canonical(out)))
"""


def test_state_decoded_between_batches_gives_identical_rows(build, tmp_path):
    """The Spark engine's buckets encode their partitions after every micro-batch and decode
    them in the next (protocol.codec): every 37 rows here, pure and compiled alike."""
    s = tmp_path / "s"
    _run(["simulate", "--out", s, "--seed", "3", "--scenario", "zone-outage", "--partitions", "6",
          "--duration", "3m"], _env("pure"))
    outs = {}
    for core in ("pure", "compiled"):
        p = subprocess.run([sys.executable, "-c", _ROUNDTRIP, str(s), "{}"], env=_env(core, build), cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-4000:]
        outs[core] = json.loads(p.stdout)
    assert outs["pure"] == outs["compiled"]
    assert len(outs["pure"]["metadata_log"]) > 10 and outs["pure"]["elections"]


def test_a_stale_or_missing_build_is_refused(build, tmp_path):
    """A build made from another protocol/ is never run (it could give other tables)."""
    stale = tmp_path / "stale"
    (stale / "src").mkdir(parents=True)
    (stale / "src" / compiled.DIGEST_FILE).write_text("0" * 64 + "\n")
    for env, msg in ((_env("compiled", stale), "built from another protocol/"),
                     (_env("compiled", tmp_path / "none"), "there is no compiled core"),
                     (_env("fast", build), "use compiled")):
        p = subprocess.run([str(ISRFLOW), "--help"], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and msg in p.stderr, p.stderr
    assert compiled.is_current(build)


def test_bench_measures_the_compiled_core_beside_the_pure_one(build, tmp_path):
    out = tmp_path / "bench.json"
    p = _run(["bench", "--partitions", "200", "--events", "20000", "--engines", "local,local-compiled",
              "--out", out], _env("pure", build))
    run = json.loads(out.read_text())["runs"][0]
    assert run["rows"] == 20000
    assert run["core"]["core_events_per_s"] > 0 and run["core_compiled"]["core_events_per_s"] > 0
    assert run["local-compiled"]["returncode"] == 0 and run["local-compiled"]["events_per_s"] > 0
    assert run["local-compiled"]["summary"]["input_rows"] == 20000
    assert run["core_compiled_over_core"] > 0 and run["local-compiled_over_local"] > 0
    assert "core ev/s compiled" in p.stdout.splitlines()[0]
