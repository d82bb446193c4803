"""The `isrflow` command line (SPEC §4)."""
from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

EXIT_USAGE = 2
EXIT_FAIL = 1


def _fail(msg: str, code: int = EXIT_FAIL):
    print(f"isrflow: error: {msg}", file=sys.stderr)
    sys.exit(code)


def load_config(args) -> "EngineConfig":
    from protocol.config import ConfigError, EngineConfig
    from conf import load_defaults, parse_config_file
    overrides = dict(load_defaults())
    try:
        if getattr(args, "config", None):
            overrides.update(parse_config_file(args.config))
        for kv in getattr(args, "set", None) or []:
            if "=" not in kv:
                _fail(f"--set {kv!r}: expected KEY=VALUE", EXIT_USAGE)
            k, v = kv.split("=", 1)
            overrides[k.strip()] = v.strip()
        return EngineConfig(overrides)
    except (ConfigError, OSError) as e:
        _fail(f"configuration: {e}", EXIT_USAGE)


def _add_engine_args(p):
    p.add_argument("stream", nargs="?", default=None,
                   help="stream directory (JSON-lines or Parquet files, name order = stream order); "
                        "omitted with --source kafka")
    p.add_argument("--tables", required=True, help="directory of the output Delta tables")
    p.add_argument("--config", help="config file (key=value properties or JSON)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="config override (Kafka names)")


def _kafka_spec(args):
    """--source kafka: the topic to read (jobs/kafka_source.py: one partition, stream order), or None."""
    if args.source != "kafka":
        if args.stream is None:
            _fail("a stream directory is needed (or --source kafka --bootstrap-servers H:P --topic T)", EXIT_USAGE)
        if args.bootstrap_servers or args.topic:
            _fail("--bootstrap-servers / --topic need --source kafka", EXIT_USAGE)
        return None
    if args.stream is not None:
        _fail(f"--source kafka reads a topic, not the stream directory {args.stream!r}", EXIT_USAGE)
    if not args.bootstrap_servers or not args.topic:
        _fail("--source kafka needs --bootstrap-servers HOST:PORT and --topic NAME", EXIT_USAGE)
    if args.engine != "spark":
        _fail("--source kafka needs --engine spark (Spark's Kafka source keeps the offsets in its checkpoint)",
              EXIT_USAGE)
    from jobs.jars import spark_extra_jars
    if not any("spark-sql-kafka" in j for j in spark_extra_jars()):
        _fail("--source kafka needs spark-sql-kafka-0-10 in the JAR cache: run ./dev setup")
    from jobs.kafka_source import KafkaSpec
    return KafkaSpec(args.bootstrap_servers, args.topic, args.max_offsets_per_trigger)


def cmd_replay(args) -> int:
    from jobs.delta_sink import SinkError
    from jobs.streamio import StreamError, list_stream_files
    config = load_config(args)
    kafka = _kafka_spec(args)
    if kafka is not None:
        return _replay_kafka(args, config, kafka)
    try:
        files = list_stream_files(args.stream)
    except StreamError as e:
        _fail(str(e))
    if not files:
        _fail(f"stream {args.stream} has no .jsonl/.json/.ndjson/.parquet files")
    if args.overwrite and args.tables and Path(args.tables).exists():
        import shutil
        shutil.rmtree(args.tables)      # tables, _run.json and any Spark checkpoint inside
    try:
        if args.engine == "local":
            from jobs.local_engine import replay_local
            summary = replay_local(args.stream, args.tables, config, overwrite=args.overwrite, workers=args.workers,
                                   batch_rows=args.batch_rows,
                                   progress=(lambda m: print(m, file=sys.stderr, flush=True)) if args.progress else None)
        else:
            from jobs.spark_engine import replay_spark
            summary = replay_spark(args.stream, args.tables, config, checkpoint=args.checkpoint,
                                   max_files_per_trigger=args.max_files_per_trigger,
                                   shuffle_partitions=args.shuffle_partitions, master=args.master,
                                   n_buckets=args.buckets, sink=args.sink, overwrite=args.overwrite,
                                   progress=(lambda m: print(m, file=sys.stderr, flush=True)) if args.progress else None)
    except (SinkError, StreamError) as e:
        _fail(str(e))
    print(json.dumps(summary))
    return 0


def cmd_sql(args) -> int:
    from jobs.delta_sink import SinkError, sql
    try:
        if args.engine == "spark":
            from jobs.spark_sql import spark_sql
            t = spark_sql(args.tables, args.query, master=args.master)
        else:
            t = sql(args.tables, args.query)
    except SinkError as e:
        _fail(str(e))
    if args.format == "json":
        for r in t.to_pylist():
            print(json.dumps(r, default=str))
    else:
        print(_render(t, args.limit))
    return 0


def _render(t, limit: int) -> str:
    rows = t.slice(0, limit).to_pylist()
    cols = t.column_names
    cells = [[("null" if r[c] is None else str(r[c])) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    line = " | ".join(c.ljust(w) for c, w in zip(cols, widths))
    out = [line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    if t.num_rows > limit:
        out.append(f"... {t.num_rows - limit} more rows")
    out.append(f"({t.num_rows} rows)")
    return "\n".join(out)


def cmd_simulate(args) -> int:
    from jobs import simulate as sim
    try:
        summary = sim.run_from_args(args)
    except (ValueError, FileExistsError) as e:
        _fail(str(e), EXIT_USAGE)
    print(json.dumps(summary, default=str))
    return 0


def cmd_compare(args) -> int:
    from jobs.compare import compare, format_compare
    try:
        r = compare(args.tables_a, args.tables_b, min_isr=args.min_isr)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    print(json.dumps(r, indent=1) if args.json else format_compare(r))
    return 0


def cmd_report(args) -> int:
    from jobs.report import build_report
    try:
        path = build_report(args.tables, args.out, compare_dir=args.compare, partitions=args.partition or None,
                            max_partitions=args.max_partitions, min_isr=args.min_isr)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    print(path)
    return 0


def cmd_bench(args) -> int:
    from jobs.bench import bench, format_table
    parts = [int(x) for x in args.partitions.split(",") if x.strip()]
    engines = [x.strip() for x in args.engines.split(",") if x.strip()]
    res = bench(parts, args.events, engines, out_json=args.out, work=args.work,
                log=lambda m: print(m, file=sys.stderr))
    print(format_table(res))
    return 0


def cmd_import(args) -> int:
    """A real KRaft metadata log -> an isrflow stream (+ the kafka_records table). See docs/metadata-import.md."""
    from jobs.metalog.importer import import_metadata, summary_line
    try:
        summary, _res, _ml = import_metadata(args.metadata, args.out, tables=args.tables, overwrite=args.overwrite)
    except OSError as e:
        _fail(str(e))
    for line in summary["issues"]:
        print(f"isrflow import: {line}", file=sys.stderr)
    print(summary_line(summary), file=sys.stderr)
    print(json.dumps({k: v for k, v in summary.items() if k != "issues"}))
    return 0


def cmd_audit(args) -> int:
    """Import, replay and compare every real controller decision with isrflow's."""
    from jobs.metalog.audit import run_audit, summary_line
    from protocol.config import ConfigError
    overrides = {}
    for kv in args.set or []:
        if "=" not in kv:
            _fail(f"--set {kv!r}: expected KEY=VALUE", EXIT_USAGE)
        k, v = kv.split("=", 1)
        overrides[k.strip()] = v.strip()
    try:
        summary = run_audit(args.metadata, args.tables, engine=args.engine, stream_dir=args.stream,
                            overrides=overrides, workers=args.workers)
    except OSError as e:
        _fail(str(e))
    except ConfigError as e:
        _fail(f"configuration: {e}", EXIT_USAGE)
    for line in summary["import"]["issues"]:
        print(f"isrflow audit: {line}", file=sys.stderr)
    print(summary_line(summary))
    return 0


def _whole(v: str, hi: int | None = None, what: str = "") -> int:
    """A whole number >= 1 (and <= hi) from the command line, or argparse's usage error."""
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1 or (hi is not None and n > hi):
        want = f"from 1 to {hi}" if hi is not None else "of at least 1"
        raise argparse.ArgumentTypeError(f"{what}{v!r}: expected a whole number {want}")
    return n


def _workers_arg(v: str) -> int:
    return _whole(v, 64, "--workers ")


def _engine_parsers(sub) -> None:
    """replay and run: the engines over a stream directory or a Kafka topic."""
    for name in ("replay", "run"):
        p = sub.add_parser(name, help="replay a stream" if name == "replay" else "continuous streaming job")
        _add_engine_args(p)
        p.add_argument("--engine", choices=["spark", "local"], default="spark")
        p.add_argument("--checkpoint", help="Spark checkpoint directory")
        p.add_argument("--max-files-per-trigger", type=int, default=None)
        p.add_argument("--shuffle-partitions", type=int, default=None)
        p.add_argument("--master", default=None, help="Spark master (default local[2])")
        p.add_argument("--progress", action="store_true", help="print progress on stderr")
        p.add_argument("--overwrite", action="store_true", help="replace the tables directory if it holds another replay")
        p.add_argument("--buckets", type=int, default=None,
                       help="spark engine: number of state buckets (frozen in the checkpoint; default 16)")
        if name == "replay":
            p.add_argument("--workers", type=_workers_arg, default=1,
                           help="local engine: processes replaying in parallel, each a share of the partitions "
                                "(same tables; default 1)")
            p.add_argument("--batch-rows", type=_whole, default=500_000,
                           help="local engine: input rows per micro-batch, one Delta commit each (default 500000)")
        p.add_argument("--sink", choices=["delta-spark", "delta-rs"], default=None,
                       help="spark engine: Delta writer (default: delta-spark when its JARs are there, else delta-rs)")
        p.add_argument("--source", choices=["files", "kafka"], default="files",
                       help="files: the stream directory (default); kafka: partition 0 of --topic, in offset order")
        p.add_argument("--bootstrap-servers", default=None, help="--source kafka: HOST:PORT[,HOST:PORT]")
        p.add_argument("--topic", default=None, help="--source kafka: the topic holding the event rows (JSON values)")
        p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                       help="--source kafka: at most this many records per micro-batch")
        if name == "run":
            p.add_argument("--trigger-seconds", type=float, default=5.0, help="processing-time trigger interval")
        p.set_defaults(fn=cmd_replay if name == "replay" else cmd_run)


def _stream_parsers(sub) -> None:
    """Commands that make or move streams: publish, simulate, lab, import."""
    p = sub.add_parser("publish", help="write a stream directory to a Kafka topic (for run --source kafka)")
    p.add_argument("stream", help="stream directory")
    p.add_argument("--bootstrap-servers", required=True, help="HOST:PORT[,HOST:PORT]")
    p.add_argument("--topic", required=True, help="created with one partition when missing")
    p.add_argument("--replication-factor", type=int, default=1, help="for a topic this creates")
    p.add_argument("--master", default=None, help="Spark master (default local[2])")
    p.set_defaults(fn=cmd_publish)

    p = sub.add_parser("simulate", help="generate a simulated event stream")
    from jobs.simulate import add_arguments as sim_args
    sim_args(p)
    p.set_defaults(fn=cmd_simulate)

    from jobs.lab import add_parser as lab_parser
    lab_parser(sub)

    p = sub.add_parser("import", help="a KRaft metadata log (__cluster_metadata-0 dir, segment, snapshot or "
                                      "kafka-dump-log text) as an isrflow stream")
    p.add_argument("metadata", help="__cluster_metadata-0 directory, a .log segment, a .checkpoint snapshot, or "
                                    "the text of kafka-dump-log --cluster-metadata-decoder")
    p.add_argument("--out", required=True, help="stream directory to write")
    p.add_argument("--tables", default=None, help="write kafka_records here (default: OUT/_tables)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.set_defaults(fn=cmd_import)


def _analysis_parsers(sub) -> None:
    """Commands over the output tables: sql, compare, report, audit, bench."""
    p = sub.add_parser("sql", help="SQL over the output tables")
    p.add_argument("--tables", required=True)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--engine", choices=["delta-rs", "spark"], default="delta-rs",
                   help="delta-rs (DataFusion, default) or spark (Spark SQL + Delta)")
    p.add_argument("--master", default=None, help="spark engine: Spark master (default local[2])")
    p.add_argument("query")
    p.set_defaults(fn=cmd_sql)

    p = sub.add_parser("compare", help="what-if: two replays of one schedule side by side")
    p.add_argument("tables_a")
    p.add_argument("tables_b")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--min-isr", type=int, default=None, help="min ISR for under-min-ISR time (default: from _run.json)")
    p.set_defaults(fn=cmd_compare)

    p = sub.add_parser("report", help="one self-contained HTML report with plots")
    p.add_argument("--tables", required=True)
    p.add_argument("--compare", default=None, help="a second tables directory (what-if)")
    p.add_argument("--out", default="report.html")
    p.add_argument("--partition", action="append", help="partition to plot, e.g. t0-3 (repeatable)")
    p.add_argument("--max-partitions", type=int, default=6)
    p.add_argument("--min-isr", type=int, default=None)
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("bench", help="events/s and memory of both engines on the same simulated streams")
    p.add_argument("--partitions", default="1000,10000,100000", help="comma-separated partition counts")
    p.add_argument("--events", type=int, default=1_000_000, help="events per stream")
    p.add_argument("--engines", default="local,spark",
                   help="comma-separated: local, local2 (the local engine with --workers 2), local-compiled (the "
                        "local engine and the core with ISRFLOW_CORE=compiled: protocol/ built by mypyc, built "
                        "first if needed), spark, kafka (the "
                        "Spark engine reading a topic of a one-broker Kafka 4.4.0 on loopback, after `isrflow "
                        "publish`), spark-batches (the Spark engine's latency per 1,000-row micro-batch, one file per "
                        "batch after the set-up rows, with each sink), import (metadata-log import + audit)")
    p.add_argument("--out", default="bench.json", help="results as JSON")
    p.add_argument("--work", default=None, help="keep streams and tables here")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("audit", help="replay a real metadata log and compare each controller decision")
    p.add_argument("metadata", help="as for import")
    p.add_argument("--tables", required=True, help="output tables (replaced): the replay, kafka_records, audit, "
                                                   "audit_invariants")
    p.add_argument("--engine", choices=["local", "spark"], default="local")
    p.add_argument("--workers", type=_workers_arg, default=None,
                   help="local engine: replay processes (default: 2 on a machine with 2+ cores for a log of "
                        "50,000+ events, else 1)")
    p.add_argument("--stream", default=None, help="where to write the imported stream (default: TABLES.stream)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="engine config override")
    p.set_defaults(fn=cmd_audit)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="isrflow", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    _engine_parsers(sub)
    _stream_parsers(sub)
    _analysis_parsers(sub)
    args = ap.parse_args(argv)
    return args.fn(args)


def _replay_kafka(args, config, kafka) -> int:
    """replay --source kafka: every record in the topic now (trigger availableNow), then stop."""
    from jobs.delta_sink import SinkError
    from jobs.spark_engine import replay_spark
    if args.overwrite and Path(args.tables).exists():
        import shutil
        shutil.rmtree(args.tables)
    try:
        summary = replay_spark(kafka, args.tables, config, checkpoint=args.checkpoint,
                               shuffle_partitions=args.shuffle_partitions, master=args.master,
                               n_buckets=args.buckets, sink=args.sink, overwrite=args.overwrite,
                               progress=(lambda m: print(m, file=sys.stderr, flush=True)) if args.progress else None)
    except SinkError as e:
        _fail(str(e))
    print(json.dumps(summary))
    return 0


def cmd_publish(args) -> int:
    """A stream directory -> partition 0 of a Kafka topic, row for row in stream order."""
    from jobs.kafka_source import KafkaSpec, publish
    from jobs.spark_session import get_spark
    from jobs.streamio import StreamError, list_stream_files
    try:
        if not list_stream_files(args.stream):
            _fail(f"stream {args.stream} has no .jsonl/.json/.ndjson/.parquet files")
    except StreamError as e:
        _fail(str(e))
    spark = get_spark(args.master)
    try:
        summary = publish(spark, args.stream, KafkaSpec(args.bootstrap_servers, args.topic),
                          replication_factor=args.replication_factor)
    except ValueError as e:
        _fail(str(e))
    print(json.dumps(summary))
    return 0


def cmd_run(args) -> int:
    from jobs.spark_engine import run_spark
    config = load_config(args)
    if not args.checkpoint:
        _fail("run needs --checkpoint DIR", EXIT_USAGE)
    if args.engine == "local":
        _fail("run needs --engine spark (the continuous job is a Spark streaming query)", EXIT_USAGE)
    kafka = _kafka_spec(args)
    from jobs.delta_sink import SinkError
    try:
        summary = run_spark(kafka or args.stream, args.tables, config, checkpoint=args.checkpoint, master=args.master,
                            trigger_seconds=args.trigger_seconds, max_files_per_trigger=args.max_files_per_trigger,
                            shuffle_partitions=args.shuffle_partitions, n_buckets=args.buckets, sink=args.sink,
                            overwrite=args.overwrite)
    except SinkError as e:
        _fail(str(e))
    print(json.dumps(summary))
    return 0


def entry() -> None:
    """The `isrflow` console script (and `python -m jobs.cli`): main(), then the process exit.

    A replay leaves its cluster state behind as cyclic garbage (partitions and their replicas point
    at each other): millions of objects at 100k partitions, which the interpreter's last full
    collection at exit would walk and free one by one (~4 s at 100k partitions, 1M rows, 15% of
    the whole run) just before the OS reclaims the memory anyway. gc.freeze() moves every object
    to the permanent generation, which that collection skips. Only here, at the process's end:
    main() called in a longer-lived process (the tests) keeps the normal collector."""
    try:
        rc = main()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()
    sys.exit(rc)


if __name__ == "__main__":
    entry()
