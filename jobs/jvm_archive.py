"""The Spark driver JVM's class-data-sharing archive (JDK 17 dynamic CDS, JEP 350).

Why: every Spark command starts a JVM that loads, parses and verifies some 12,000 classes from
Spark's and Delta's JARs before it does any work. A dynamic archive holds those classes already
parsed and verified; a JVM maps it instead. Measured here (2 cores, `isrflow` commands one after the
other, docs/spark-engine.md#the-jvms-class-archive): the session 3.6 -> 2.1 s, its first job
1.6 -> 0.8 s, a first Delta read 2.9 -> 2.3 s.

How:
  * `./dev setup` (`python -m jobs.jvm_archive`) builds it once per key (below): a training run in a
    child process -- a Spark replay of the bundled demo stream through the Delta sink's Spark
    appends, then a Delta read through SQL -- whose JVM writes the classes it loaded when it exits
    (-XX:ArchiveClassesAtExit). A second child then starts a JVM on the archive and counts the
    classes it loaded from it (-Xlog:class+load); only an archive that served classes is moved into
    place, and a sidecar `.json` naming its size is written after it.
  * spark_session.spark_conf adds -XX:SharedArchiveFile to the driver's JVM options when an archive
    for the session's key is in place (`apply`).

The key is what the archive depends on: the java binary, pyspark (its version and JARs), the extra
JARs of spark.jars and the JVM options. Another key (a new JDK, a JAR resolved anew, other options)
finds no archive, and the session starts as it would without one, until setup builds the new one.

Safety: a JVM given a truncated archive dies at once with SIGBUS (tried here), so an archive is
used only when its sidecar exists and names the file's size; it is written under a temporary name
and renamed. A JVM whose classpath does not match an archive ignores it (tried: it starts as
without). ISRFLOW_JVM_ARCHIVE=0 turns the archive off; ISRFLOW_JVM_ARCHIVE=DIR keeps archives in
DIR instead of <checkout>/.cache/jvm. JVM options that already choose an archive or -Xshare are
left alone.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .jars import ROOT, pyspark_jar_dir
ENV = "ISRFLOW_JVM_ARCHIVE"
# internal: JVM options a training or checking child adds instead of the archive (build())
_CHILD_OPTS_ENV = "_ISRFLOW_JVM_CHILD_OPTS"
_OPTS_KEY = "spark.driver.extraJavaOptions"
# options that already decide class sharing: theirs, not ours
_OWN_FLAGS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")
# a class the JVM took from the dynamic archive is logged with this source (-Xlog:class+load)
_SHARED_SOURCE = "source: shared objects file (top)"


def archive_dir() -> Path | None:
    """Where archives live; None when ISRFLOW_JVM_ARCHIVE=0."""
    v = os.environ.get(ENV, "").strip()
    if v in ("0", "off", "false", "no"):
        return None
    return Path(v) if v else ROOT / ".cache" / "jvm"


def _java_binary() -> str | None:
    # the one pyspark's launcher runs: $JAVA_HOME/bin/java, else java on the PATH
    home = os.environ.get("JAVA_HOME")
    j = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(j) if j and os.path.exists(j) else None


def _base_opts(opts: str) -> str:
    return " ".join(o for o in opts.split() if not o.startswith(_OWN_FLAGS))


def archive_key(conf: dict) -> str | None:
    """The key of the archive a session with Spark settings `conf` can use (None: no java)."""
    java = _java_binary()
    jars = pyspark_jar_dir()
    if java is None or jars is None:
        return None
    import pyspark
    st = os.stat(java)
    parts = [java, str(st.st_size), str(st.st_mtime_ns), pyspark.__version__, str(jars)]
    parts += sorted(p.name for p in jars.glob("*.jar"))
    for j in filter(None, conf.get("spark.jars", "").split(",")):
        try:
            parts += [j, str(os.stat(j).st_size)]
        except OSError:
            parts += [j, "missing"]
    parts.append(_base_opts(conf.get(_OPTS_KEY, "")))
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def _paths(d: Path, key: str) -> tuple[Path, Path]:
    return d / f"spark-{key}.jsa", d / f"spark-{key}.json"


def _whole(jsa: Path, meta: Path) -> bool:
    """The archive is in place whole: its sidecar (written after it) names its size."""
    try:
        return jsa.stat().st_size == json.loads(meta.read_text(encoding="utf-8"))["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def usable_archive(conf: dict) -> Path | None:
    """The archive for `conf`'s key when it is in place whole."""
    d = archive_dir()
    key = archive_key(conf) if d is not None else None
    if key is None:
        return None
    jsa, meta = _paths(d, key)
    return jsa if _whole(jsa, meta) else None


def apply(conf: dict) -> dict:
    """`conf` with the driver's JVM options naming the archive, when one is usable (see above)."""
    opts = conf.get(_OPTS_KEY, "")
    if any(o.startswith(_OWN_FLAGS) for o in opts.split()):
        return conf
    child = os.environ.get(_CHILD_OPTS_ENV)
    if child:
        extra = child
    else:
        jsa = usable_archive(conf)
        if jsa is None:
            return conf
        extra = f"-XX:SharedArchiveFile={jsa}"
    return {**conf, _OPTS_KEY: f"{opts} {extra}".strip()}


# ---------------------------------------------------------------- building
def _child(mode: str, opts: str, timeout: float) -> subprocess.CompletedProcess:
    """`python -m jobs.jvm_archive MODE` whose Spark driver JVM gets `opts` (the archive to write
    or to check, and the class log) instead of an archive of ours."""
    env = {**os.environ, _CHILD_OPTS_ENV: opts, "ISRFLOW_SINK_DRIVER_BYTES": "0"}
    env.pop(ENV, None)
    return subprocess.run([sys.executable, "-m", "jobs.jvm_archive", mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def build(force: bool = False, log=lambda m: print(m, file=sys.stderr), timeout: float = 900) -> Path | None:
    """Builds the archive for today's Spark settings unless one is in place (or `force`).
    Returns its path, or None (no java, turned off, or the build failed: said through `log`;
    Spark then runs as without an archive)."""
    from .spark_session import spark_conf
    conf = spark_conf()
    d = archive_dir()
    key = archive_key(conf) if d is not None else None
    if key is None:
        log("jvm archive: off (ISRFLOW_JVM_ARCHIVE=0) or no java/pyspark: Spark starts without one")
        return None
    jsa, meta = _paths(d, key)
    if not force and _whole(jsa, meta):
        return jsa
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".spark-{key}.{os.getpid()}.jsa"
    tmp.unlink(missing_ok=True)
    log(f"building the Spark JVM's class archive {jsa} (a training replay of examples/demo, ~1 min) ...")
    try:
        r = _child("--train", f"-XX:ArchiveClassesAtExit={tmp}", timeout)
        if r.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            log(f"jvm archive: the training run failed (rc {r.returncode}); Spark starts without one\n"
                + r.stderr[-2000:])
            return None
        with tempfile.TemporaryDirectory() as td:
            classes_log = Path(td) / "classes.log"
            r = _child("--check", f"-XX:SharedArchiveFile={tmp} -Xlog:class+load=info:file={classes_log}",
                       timeout)
            shared = _count_shared(classes_log)
        if r.returncode != 0 or shared == 0:
            log(f"jvm archive: a JVM on it loaded {shared} classes from it (rc {r.returncode}); "
                f"Spark starts without one\n" + r.stderr[-2000:])
            return None
        size = tmp.stat().st_size
        os.replace(tmp, jsa)
        side = meta.with_suffix(f".{os.getpid()}.tmp")
        side.write_text(json.dumps({"size": size, "classes_from_archive_at_check": shared,
                                    "java": _java_binary()}, indent=1) + "\n", encoding="utf-8")
        os.replace(side, meta)      # last: the sidecar says the archive is whole
    finally:
        tmp.unlink(missing_ok=True)
    for old in d.glob("spark-*.js*"):           # other keys' archives: stale
        if old not in (jsa, meta):
            old.unlink(missing_ok=True)
    log(f"jvm archive: {size / 2**20:.0f} MB, {shared:,} classes served at the check")
    return jsa


def _count_shared(classes_log: Path) -> int:
    try:
        with open(classes_log, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if _SHARED_SOURCE in line)
    except OSError:
        return 0


def _train() -> None:
    """What a Spark command does, once: a replay through the Delta sink's Spark appends (the
    parent sets ISRFLOW_SINK_DRIVER_BYTES=0), then a Delta read through SQL. The JVM writes the
    archive when this process exits."""
    from protocol.config import EngineConfig
    from .spark_engine import replay_spark
    from .spark_session import get_spark
    with tempfile.TemporaryDirectory() as td:
        tables = os.path.join(td, "tables")
        replay_spark(str(ROOT / "examples" / "demo"), tables, EngineConfig())
        get_spark().sql(f"SELECT election, count(*) FROM delta.`{tables}/elections` GROUP BY election").collect()


def _check() -> None:
    from .spark_session import get_spark
    get_spark().range(10).count()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.jvm_archive",
                                 description="Build the Spark driver JVM's class archive (see the module's doc).")
    ap.add_argument("--force", action="store_true", help="build anew even when one is in place")
    ap.add_argument("--status", action="store_true", help="print the usable archive (or none) and exit")
    ap.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.train:
        _train()
        return 0
    if a.check:
        _check()
        return 0
    if a.status:
        from .spark_session import spark_conf
        print(usable_archive(spark_conf()) or "none")
        return 0
    try:
        build(force=a.force)
    except (OSError, subprocess.SubprocessError) as e:     # a read-only cache, a training run that hung
        print(f"jvm archive: not built ({e}); Spark starts without one", file=sys.stderr)
    return 0        # never fails setup: without an archive Spark only starts slower


if __name__ == "__main__":
    sys.exit(main())
