"""Where the JVM dependencies live: resolved from Maven Central by `./dev setup` (java/*/pom.xml)
into an ignored cache, never committed. One place for every caller (Spark session, Kafka lab).

ISRFLOW_JARS overrides the cache root (default: <checkout>/.cache/jars)."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    return Path(os.environ.get("ISRFLOW_JARS") or (ROOT / ".cache" / "jars"))


def jar_dir(group: str) -> Path:
    """`spark` (delta-spark, spark-sql-kafka) or `kafka` (Kafka 4.4.0 server and clients)."""
    return cache_root() / group


def _artifact(jar_name: str) -> str:
    # "jackson-core-2.13.5.jar" -> "jackson-core"; "zstd-jni-1.5.7-3.jar" -> "zstd-jni"
    m = re.match(r"^(.*?)-\d[^/]*\.jar$", jar_name)
    return m.group(1) if m else jar_name[:-4]


def pyspark_jar_dir() -> Path | None:
    """The JARs pyspark ships (its installation's `jars/`), None without pyspark."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent / "jars"


def spark_extra_jars() -> list[str]:
    """The cached Spark-side JARs that pyspark does not ship itself.

    copy-dependencies brings the whole runtime closure, including older copies of libraries
    Spark already has (jackson, parquet, hadoop, scala-library): putting those on the classpath
    as well invites version clashes, so every artifact pyspark ships is left out."""
    d = jar_dir("spark")
    if not d.is_dir():
        return []
    own = pyspark_jar_dir()
    shipped = {_artifact(p.name) for p in own.glob("*.jar")} if own else set()
    return sorted(str(p) for p in d.glob("*.jar") if _artifact(p.name) not in shipped)


def kafka_classpath() -> str | None:
    d = jar_dir("kafka")
    return f"{d}/*" if d.is_dir() and any(d.glob("kafka_2.13-*.jar")) else None
