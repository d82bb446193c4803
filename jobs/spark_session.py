"""The one place that builds the Spark session (settings from conf/spark.conf)."""
from __future__ import annotations

import os
import sys


def _prepare_env() -> None:
    # Python workers must run the project's interpreter; keep Spark on loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # glibc gives every thread that mallocs its own 64 MB arena (up to 8 per core); the JVM's
    # native allocations (RocksDB state store, Arrow buffers, Parquet) come from dozens of threads
    # and fragment them: measured 2.5 GB resident for a 1.5 GB heap, 1.0 GB with two arenas, at the
    # same speed. Set before the JVM starts, so only a JVM this process launches gets it (under
    # spark-submit, export it yourself: docs/spark-engine.md).
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")


def spark_conf(master: str | None = None, shuffle_partitions: int | None = None) -> dict[str, str]:
    from conf import spark_defaults
    c = dict(spark_defaults())
    if master:
        c["spark.master"] = master
    if shuffle_partitions:
        c["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))
    c.setdefault("spark.pyspark.python", os.environ.get("PYSPARK_PYTHON", sys.executable))
    c.setdefault("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
    c.update(delta_conf())
    # the driver JVM maps the class archive `./dev setup` built for these settings, if any
    from .jvm_archive import apply
    return apply(c)


def delta_conf() -> dict[str, str]:
    """delta-spark (and spark-sql-kafka) from the JAR cache that `./dev setup` fills
    (jobs/jars.py), with Delta's SQL extension and catalog; {} when the cache is empty
    (delta-rs then writes the tables) or ISRFLOW_NO_JARS=1. Under spark-submit the JVM is
    already running: pass the same JARs with --jars (`python -c "from jobs.jars import
    spark_extra_jars; print(','.join(spark_extra_jars()))"`)."""
    if os.environ.get("ISRFLOW_NO_JARS") == "1":
        return {}
    from .jars import spark_extra_jars
    jars = spark_extra_jars()
    if not any("delta-spark" in os.path.basename(j) for j in jars):
        return {}
    return {"spark.jars": ",".join(jars),
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog"}


def get_spark(master: str | None = None, shuffle_partitions: int | None = None, app_name: str = "isrflow"):
    """The active session if there is one (spark-submit, tests), else a new one.

    Settings that a running session cannot change (master, memory) are only applied when
    the session is created; runtime SQL settings (shuffle partitions) are set either way.
    """
    _prepare_env()
    from pyspark.sql import SparkSession
    conf = spark_conf(master, shuffle_partitions)
    active = SparkSession.getActiveSession()
    if active is None:
        if os.environ.get("ISRFLOW_SPARK_SUBMIT") and "spark.sql.extensions" in conf:
            from pyspark import SparkContext
            SparkContext._ensure_initialized()      # the JVM spark-submit started: are --jars on it?
            try:
                SparkContext._jvm.org.apache.spark.util.Utils.classForName(
                    "io.delta.sql.DeltaSparkSessionExtension", True, False)
            except Exception:
                for k in delta_conf():      # spark-submit without --jars: no Delta on the classpath
                    conf.pop(k, None)
        b = SparkSession.builder.appName(app_name)
        for k, v in conf.items():
            if k in ("spark.master", "spark.jars") and os.environ.get("ISRFLOW_SPARK_SUBMIT"):
                continue  # spark-submit --master / --jars win
            b = b.config(k, v)
        spark = b.getOrCreate()
    else:
        spark = active
    for k in ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone",
              "spark.sql.streaming.stateStore.providerClass",
              "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"):
        if k in conf:
            spark.conf.set(k, conf[k])
    if shuffle_partitions:
        spark.conf.set("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))
    spark.sparkContext.setLogLevel(os.environ.get("ISRFLOW_SPARK_LOG_LEVEL", "ERROR"))
    if not getattr(spark, "_isrflow_code_shipped", False):
        ship_code(spark)
        spark._isrflow_code_shipped = True
    return spark


def has_delta_jars(spark) -> bool:
    """True when the delta-spark JARs are on the classpath (never required)."""
    try:
        jvm = spark.sparkContext._jvm
        # through Spark's class loader: JARs given with spark.jars / --jars are not on py4j's
        jvm.org.apache.spark.util.Utils.classForName("io.delta.tables.DeltaTable", True, False)
        return True
    except Exception:
        return False


def ship_code(spark) -> None:
    """Non-local masters: add the project's packages as a zip (executors may not have
    them installed). Local masters import them from the driver's environment."""
    master = spark.sparkContext.master or ""
    if master.startswith("local") and not master.startswith("local-cluster"):
        return
    import tempfile
    import zipfile
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    fd, path = tempfile.mkstemp(prefix="isrflow-code-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in ("protocol", "schemas", "jobs", "conf"):
            for f in sorted((root / pkg).rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, f.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(path)


def await_idle(spark, timeout: float = 60.0) -> bool:
    """Wait until the session runs no Spark job (two looks 0.1 s apart), at most `timeout` seconds;
    True when idle. The Spark engine waits so before it reports (spark_engine._quiesce), so the
    process ends with no Spark job in flight."""
    import time
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    quiet = 0
    while time.monotonic() < deadline:
        quiet = quiet + 1 if not tracker.getActiveJobsIds() else 0
        if quiet >= 2:
            return True
        time.sleep(0.1)
    return False
