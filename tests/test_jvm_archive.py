"""The Spark driver JVM's class archive (jobs/jvm_archive.py): built by a real training run, used
by a real Spark session in another process, and never used when it is not whole."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import jvm_archive as ja
from jobs.jars import ROOT

pytestmark = pytest.mark.skipif(ja._java_binary() is None, reason="needs java")

_OPTS = ja._OPTS_KEY
# a child process: a Spark session as any isrflow command makes it; prints the JVM's own arguments
_SESSION = ("from jobs.spark_session import get_spark; s = get_spark(); "
            "mx = s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean(); "
            "print('ARGS', ' '.join(mx.getInputArguments())); print('COUNT', s.range(7).count())")


def _session(archive_env: str) -> str:
    env = {**os.environ, ja.ENV: archive_env}
    env.pop(ja._CHILD_OPTS_ENV, None)
    r = subprocess.run([sys.executable, "-c", _SESSION], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.startswith(("ARGS", "COUNT")))
    assert out["COUNT"] == "7"
    return out["ARGS"]


def _fake(tmp_path: Path, monkeypatch, size_in_sidecar=None) -> Path:
    """An archive file in place for today's key (its bytes no JVM reads here)."""
    monkeypatch.setenv(ja.ENV, str(tmp_path))
    conf = {"spark.jars": "", _OPTS: "-XX:TieredStopAtLevel=1"}
    jsa, meta = ja._paths(tmp_path, ja.archive_key(conf))
    jsa.write_bytes(b"x" * 100)
    meta.write_text(json.dumps({"size": 100 if size_in_sidecar is None else size_in_sidecar}))
    return jsa


def test_apply_names_a_whole_archive_only(tmp_path, monkeypatch):
    conf = {"spark.jars": "", _OPTS: "-XX:TieredStopAtLevel=1"}
    jsa = _fake(tmp_path, monkeypatch)
    assert ja.apply(conf)[_OPTS] == f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={jsa}"
    assert conf[_OPTS] == "-XX:TieredStopAtLevel=1"            # the caller's dict is not changed
    # options that already decide class sharing are the user's
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa"):
        c = {**conf, _OPTS: f"-Xmx1g {own}"}
        assert ja.apply(c) == c
    # a truncated archive (its size is not the sidecar's): a JVM would die of SIGBUS on it
    jsa.write_bytes(b"x" * 99)
    assert ja.usable_archive(conf) is None and ja.apply(conf) == conf
    # no sidecar: not known to be whole
    jsa.write_bytes(b"x" * 100)
    jsa.with_suffix(".json").unlink()
    assert ja.apply(conf) == conf
    # turned off
    _fake(tmp_path, monkeypatch)
    monkeypatch.setenv(ja.ENV, "0")
    assert ja.archive_dir() is None and ja.apply(conf) == conf


def test_the_key_follows_what_the_archive_depends_on(tmp_path):
    jar = tmp_path / "delta-spark_2.13-4.4.0.jar"
    jar.write_bytes(b"a")
    base = {"spark.jars": str(jar), _OPTS: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    k = ja.archive_key(base)
    assert k and ja.archive_key(dict(base)) == k
    # the archive's own flag is not part of the key (a session that uses it has the same key)
    assert ja.archive_key({**base, _OPTS: base[_OPTS] + " -XX:SharedArchiveFile=/a.jsa"}) == k
    assert ja.archive_key({**base, _OPTS: "-XX:TieredStopAtLevel=1"}) != k      # other JVM options
    assert ja.archive_key({**base, "spark.jars": ""}) != k                       # other JARs
    jar.write_bytes(b"ab")
    assert ja.archive_key(base) != k                                            # a JAR resolved anew


def _setup_archive(into: Path) -> Path | None:
    """A copy in `into` of the archive `./dev setup` built for today's settings in this checkout's
    cache (`./dev test` runs that setup first), or None when there is none in place."""
    from jobs.spark_session import spark_conf
    conf = spark_conf()
    jsa = ja.usable_archive(conf)
    if jsa is None:
        return None
    assert not list(jsa.parent.glob(".spark-*"))            # its build left no temporary file
    copy, meta = ja._paths(into, ja.archive_key(conf))
    shutil.copyfile(jsa.with_suffix(".json"), meta)
    shutil.copyfile(jsa, copy)
    return copy


def test_build_then_a_session_maps_it(tmp_path, monkeypatch):
    """The whole path: a training replay writes the archive, a checking JVM loads classes from it,
    and a later Spark session (another process) starts on it; cut short, it is not used. The build
    is the setup's when `./dev test` made one a moment ago (a second training run would add ~50 s
    to the suite and check the same code); without it, this test builds one itself."""
    jsa = _setup_archive(tmp_path)
    monkeypatch.setenv(ja.ENV, str(tmp_path))
    msgs = []
    if jsa is None:
        jsa = ja.build(force=True, log=msgs.append)
    assert jsa is not None, "\n".join(msgs)
    meta = json.loads(jsa.with_suffix(".json").read_text())
    assert meta["size"] == jsa.stat().st_size > 50 * 2**20
    assert meta["classes_from_archive_at_check"] > 5000     # Spark's and Delta's classes, not a few
    assert not list(tmp_path.glob(".spark-*"))              # no temporary file left
    assert ja.build(log=msgs.append) == jsa                 # in place: not built again
    args = _session(str(tmp_path))
    assert f"-XX:SharedArchiveFile={jsa}" in args.split()
    # cut short (a disk that filled, a copy that stopped): the session starts without it
    os.chmod(jsa, 0o644)
    with open(jsa, "r+b") as f:
        f.truncate(meta["size"] // 2)
    args = _session(str(tmp_path))
    assert "SharedArchiveFile" not in args


def test_setup_goes_on_when_the_archive_cannot_be_built(tmp_path):
    """`./dev setup` runs `python -m jobs.jvm_archive` under `set -e`: a cache it cannot write
    must not stop the setup (Spark only starts slower)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {**os.environ, ja.ENV: str(blocker / "jvm")}
    r = subprocess.run([sys.executable, "-m", "jobs.jvm_archive"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "jvm archive: not built" in r.stderr and "Not a directory" in r.stderr
