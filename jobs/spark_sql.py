"""`isrflow sql --engine spark`: Spark SQL over the output tables, each registered by name.

With the delta-spark JARs (./dev setup) a table is read with Delta's own reader
(`spark.read.format("delta")`, the same as ``SELECT * FROM delta.`/path```); without them the
table's active Parquet files are read with the schema from its Delta log (exact for tables without
deletion vectors or column mapping, which neither sink writes; research/spark_notes.md Q7).
"""
from __future__ import annotations

import os

import pyarrow as pa


def register_tables(spark, tables_dir: str) -> list[str]:
    """Registers every Delta table under tables_dir as a temporary view named after it."""
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    from .delta_sink import SinkError, list_tables
    from .spark_session import has_delta_jars

    names = list_tables(tables_dir)
    if not names:
        raise SinkError(f"no Delta tables under {tables_dir}")
    native = has_delta_jars(spark)
    for name in names:
        path = os.path.abspath(os.path.join(tables_dir, name))
        if native:
            df = spark.read.format("delta").load(path)
        else:
            dt = DeltaTable(path)
            if set(dt.protocol().reader_features or []) & {"deletionVectors", "columnMapping"}:
                raise SinkError(f"table {name} uses deletion vectors or column mapping: "
                                "Spark SQL needs the delta-spark JARs for it (./dev setup)")
            schema = from_arrow_schema(pa.schema(dt.schema().to_arrow()))
            files = dt.file_uris()
            df = (spark.read.schema(schema).option("basePath", path).parquet(*files) if files
                  else spark.createDataFrame([], schema))
        df.createOrReplaceTempView(name)
    return names


def spark_sql(tables_dir: str, query: str, *, master: str | None = None, spark=None) -> pa.Table:
    from .delta_sink import SinkError, plain_arrow
    from .spark_session import get_spark

    spark = spark or get_spark(master)
    register_tables(spark, tables_dir)
    try:
        return plain_arrow(spark.sql(query).toArrow())
    except Exception as e:      # AnalysisException, ParseException, ...
        msg = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
        raise SinkError(f"Spark SQL failed: {msg}") from e
