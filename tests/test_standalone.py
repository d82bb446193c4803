"""A real Spark standalone cluster (issue 11.4): a master and two workers started from the pyspark
installation on 127.0.0.1 (the pip wheel has no sbin/start-*.sh, so the JVM classes are run
directly), `spark-submit --master spark://... jobs/spark_job.py replay ...` against it (with the
delta-spark JARs given with --jars when ./dev setup cached them: the native sink then writes from
the executors), and the tables must equal the in-process engine's. Two workers, one executor JVM
each with its own Python workers: closures must pickle, the code must ship to the executors
(ship_code), and the buckets' state checkpoint must be shared between them. Bounded; every process
it starts is stopped. (No Docker engine on these machines: docker/ is not exercised here.)"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.local_engine import replay_local
from protocol.config import EngineConfig
from tests.delta_compare import diff_tables, progress_totals

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} after {timeout}s:\n" +
                         (path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"))


def _errors(log: str) -> str:
    """The interesting part of a spark-submit log: our error line and Python tracebacks."""
    lines = [ln for ln in log.splitlines() if " INFO " not in ln and " WARN " not in ln]
    keep = [i for i, ln in enumerate(lines) if "isrflow: error" in ln or "Traceback" in ln or "Error" in ln]
    start = keep[0] if keep else max(0, len(lines) - 40)
    return "\n".join(lines[start:start + 60])


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_standalone_cluster_matches_in_process_engine(tmp_path):
    import pyspark
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    home = Path(pyspark.__file__).resolve().parent
    cp = f"{home / 'conf'}:{home / 'jars'}/*"
    # SPARK_SCALA_VERSION: the worker builds executor command lines with Spark's launcher, which
    # otherwise looks for a source build ("Cannot find any build directories"; spark-class sets it)
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_SCALA_VERSION="2.13", SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(tmp_path / "logs"), PYSPARK_PYTHON=sys.executable)
    mport, mweb = _port(), _port()
    url = f"spark://127.0.0.1:{mport}"
    procs = []
    try:
        mlog = tmp_path / "master.log"
        master = subprocess.Popen([java, "-Xmx256m", "-cp", cp, "org.apache.spark.deploy.master.Master",
                                   "--host", "127.0.0.1", "--port", str(mport), "--webui-port", str(mweb)],
                                  env=env, stdout=open(mlog, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(master)
        _wait_for(mlog, "I have been elected leader", master, 120)
        workers = []
        for k in (1, 2):
            # one core and one executor each: the buckets' tasks are spread over two executor JVMs
            wlog = tmp_path / f"worker{k}.log"
            worker = subprocess.Popen([java, "-Xmx256m", "-cp", cp, "org.apache.spark.deploy.worker.Worker",
                                       "--host", "127.0.0.1", "--webui-port", str(_port()), "--cores", "1",
                                       "--memory", "1g", "--work-dir", str(tmp_path / f"work{k}"), url],
                                      env=env, stdout=open(wlog, "wb"), stderr=subprocess.STDOUT,
                                      start_new_session=True)
            procs.append(worker)
            workers.append((wlog, worker))
        for wlog, worker in workers:
            _wait_for(wlog, "Successfully registered with master", worker, 120)

        stream = str(ROOT / "examples" / "demo")
        tables = tmp_path / "cluster"
        from jobs.jars import spark_extra_jars
        jars = spark_extra_jars()
        cmd = [str(VENV_BIN / "spark-submit"), "--master", url, "--driver-memory", "1g",
               "--conf", "spark.executor.memory=768m", "--conf", "spark.ui.enabled=false"]
        if jars:
            cmd += ["--jars", ",".join(jars)]
        cmd += [str(ROOT / "jobs" / "spark_job.py"), "replay", stream, "--tables", str(tables),
                "--max-files-per-trigger", "2"]
        sub = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=open(tmp_path / "submit.log", "wb"),
                               text=True, start_new_session=True)
        procs.append(sub)
        out, _ = sub.communicate(timeout=600)
        assert sub.returncode == 0, _errors((tmp_path / "submit.log").read_text(errors="replace"))
        summary = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
        assert summary["input_rows"] == summary["applied"] + summary["rejected"] > 0
        assert summary["sink"] == ("delta-spark" if any("delta-spark" in j for j in jars) else "delta-rs")
        info = json.loads((tables / "_run.json").read_text())
        assert info["master"] == url and info["engine"] == "spark"
        # an executor really ran on each worker, and each ran tasks of the query (Spark's executor
        # log names every task it finishes)
        for k in (1, 2):
            logs = list((tmp_path / f"work{k}").rglob("stderr"))
            assert logs, f"no executor ran on worker {k}"
            assert any("Finished task" in f.read_text(errors="replace") for f in logs), f"worker {k} ran no task"

        replay_local(stream, str(tmp_path / "local"), EngineConfig({}))
        assert diff_tables(tables, tmp_path / "local") == {}
        assert progress_totals(tables)["input_rows"] == summary["input_rows"]
    finally:
        for p in reversed(procs):
            _stop(p)
