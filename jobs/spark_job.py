"""spark-submit entry point: the same jobs as the `isrflow` command, on any Spark master.

    spark-submit --master spark://host:7077 [--jars <delta-spark JARs>] jobs/spark_job.py replay STREAM --tables DIR [...]
    spark-submit jobs/spark_job.py run STREAM --tables DIR --checkpoint DIR [...]

Arguments are exactly `isrflow`'s; `replay`/`run` use the Spark engine unless told
otherwise, and the master, memory and other settings given to spark-submit win over
conf/spark.conf. STREAM, --tables and --checkpoint must be on a filesystem every worker
sees. The project's packages are shipped to the executors (a zip added with addPyFile)
when they are not installed there. With the delta-spark JARs given to --jars (the ones
jobs/jars.py lists from .cache/jars/spark) the native Delta sink writes from the executors;
without them delta-rs writes from the driver (docs/spark-engine.md).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ["ISRFLOW_SPARK_SUBMIT"] = "1"
    if argv and argv[0] in ("replay", "run") and "--engine" not in argv:
        argv[1:1] = ["--engine", "spark"]
    from jobs.cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
