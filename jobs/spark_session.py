"""The one place that builds the Spark session (settings from conf/spark.conf)."""
from __future__ import annotations

import os
import sys


def _prepare_env() -> None:
    # Python workers must run the project's interpreter; keep Spark on loopback.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_conf(master: str | None = None, shuffle_partitions: int | None = None) -> dict[str, str]:
    from conf import spark_defaults
    c = dict(spark_defaults())
    if master:
        c["spark.master"] = master
    if shuffle_partitions:
        c["spark.sql.shuffle.partitions"] = str(int(shuffle_partitions))
    c.setdefault("spark.pyspark.python", os.environ.get("PYSPARK_PYTHON", sys.executable))
    c.setdefault("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
    return c


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
        b = SparkSession.builder.appName(app_name)
        for k, v in conf.items():
            if k == "spark.master" and os.environ.get("ISRFLOW_SPARK_SUBMIT"):
                continue  # spark-submit --master wins
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
        jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
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
