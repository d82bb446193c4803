"""One replay record for both engines: the tables directory's `_run.json`.

Every replay or run (``--engine local`` and ``--engine spark``, ``isrflow`` or ``spark-submit``)
goes through the same steps:

1. ``app_id``: the Delta app-transaction id of this replay (local: engine + config + the
   stream's file names; spark: config + checkpoint path, because Spark's batch ids restart with
   a new checkpoint). The same replay resumes under the same id; anything else is another one.
2. ``check_tables_dir``: a tables directory whose ``_run.json`` names another app id holds
   another replay and is refused unless ``--overwrite`` (which clears it first).
3. ``write_run_info``: ``_run.json`` = stream, engine, app id and the *effective* config (the
   engine defaults merged with the overrides), plus engine details (checkpoint, buckets, sink).
   ``compare`` and ``report`` read the config from here.
4. one ``progress`` row per micro-batch (``progress_row``), written last in each batch.
5. ``finish_run_info``: the totals over the ``progress`` table (so across restarts) and the
   partition count go into ``_run.json`` when the replay (or a stopped ``run``) ends.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

RUN_FILE = "_run.json"


def read_run_info(tables_dir) -> dict | None:
    try:
        info = json.loads((Path(tables_dir) / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def check_tables_dir(tables_dir, app_id: str, overwrite: bool, also_remove=()) -> None:
    """Refuses to mix two replays in one tables directory (the Delta guard is per app id).
    overwrite: remove the directory (and also_remove, e.g. an outside checkpoint) first."""
    root = Path(tables_dir)
    if overwrite:
        for d in (root, *also_remove):
            if d and Path(d).exists():
                shutil.rmtree(d)
        return
    if not root.exists():
        return
    prev = (read_run_info(root) or {}).get("app_id")
    if prev and prev != app_id:
        from .delta_sink import SinkError
        raise SinkError(f"{tables_dir} holds the tables of another replay (another stream, config, engine or "
                        f"checkpoint: {prev}, this one is {app_id}); use a fresh --tables directory or --overwrite")


def stream_id(stream) -> str:
    """A stream's name in the run record: a directory's absolute path, or a source's URI
    (jobs.kafka_source.KafkaSpec: kafka://HOST:PORT/TOPIC)."""
    uri = getattr(stream, "uri", None)
    if uri:
        return uri
    s = str(stream)
    return s if "://" in s else str(Path(s).resolve())


def write_run_info(tables_dir, stream, config, engine: str, app_id: str, **extra) -> dict:
    """`_run.json` beside the tables: what produced them (compare and report read it).
    Keeps the totals of an earlier invocation of the same replay until finish_run_info."""
    root = Path(tables_dir)
    root.mkdir(parents=True, exist_ok=True)
    prev = read_run_info(root) or {}
    info = {"stream": stream_id(stream) if stream else None, "engine": engine, "app_id": app_id,
            "config": dict(sorted(config.raw.items()))}
    info.update({k: v for k, v in extra.items() if v is not None})
    if prev.get("app_id") == app_id and "totals" in prev:
        info["totals"] = prev["totals"]
    _write(root, info)
    return info


def _write(root: Path, info: dict) -> None:
    tmp = root / f".{RUN_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(info, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, root / RUN_FILE)


def progress_row(batch_id: int, engine: str, input_rows: int, applied: int, rejected: int, min_seq, max_seq,
                 max_ts_ms) -> dict:
    """The one `progress` row of a micro-batch (input_rows = applied + rejected per batch)."""
    return {"batch_id": batch_id, "engine": engine, "input_rows": input_rows, "applied": applied,
            "rejected": rejected, "min_seq": min_seq, "max_seq": max_seq, "max_ts_ms": max_ts_ms}


def table_totals(tables_dir) -> dict:
    """Totals over the committed `progress` rows and the number of partitions in
    `partition_state` (read with pyarrow over the Delta log: works for tables of either sink)."""
    from .delta_sink import SinkError, read_table
    tot = {"input_rows": 0, "applied": 0, "rejected": 0, "batches": 0, "partitions": 0}
    try:
        prog = read_table(str(tables_dir), "progress")
        for k in ("input_rows", "applied", "rejected"):
            tot[k] = sum(v or 0 for v in prog[k].to_pylist())
        tot["batches"] = prog.num_rows
        tot["max_ts_ms"] = max((v for v in prog["max_ts_ms"].to_pylist() if v is not None), default=None)
        tot["partitions"] = read_table(str(tables_dir), "partition_state").num_rows
    except SinkError:
        pass
    return tot


def finish_run_info(tables_dir, **extra) -> dict:
    """Records the totals (over every committed batch, restarts included) in `_run.json`."""
    root = Path(tables_dir)
    info = read_run_info(root) or {}
    info["totals"] = table_totals(root)
    info.update({k: v for k, v in extra.items() if v is not None})
    _write(root, info)
    return info["totals"]
