"""`isrflow import METADATA --out STREAM`: a real metadata log as an isrflow input stream + `kafka_records`."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa

from .convert import convert, dumps_bytes
from .reader import gc_paused, read_metadata

ROWS_PER_FILE = 100_000


def write_stream(events: list[dict], out: Path) -> list[str]:
    """The events as JSON lines (null fields left out), ROWS_PER_FILE rows a file."""
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(0, max(len(events), 1), ROWS_PER_FILE):
        name = f"metalog-{i // ROWS_PER_FILE:05d}.jsonl"
        lines = [dumps_bytes(ev if None not in ev.values() else {k: v for k, v in ev.items() if v is not None})
                 for ev in events[i:i + ROWS_PER_FILE]]
        lines.append(b"")
        (out / name).write_bytes(b"\n".join(lines))
        names.append(name)
    return names


def write_table(tables_dir, name: str, rows) -> None:
    """`rows` (dicts, or an Arrow table already built with rows_to_arrow) as the Delta table `name`."""
    from deltalake import write_deltalake

    from schemas.tables import rows_to_arrow
    path = Path(tables_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    table = rows if isinstance(rows, pa.Table) else rows_to_arrow(name, rows)
    write_deltalake(str(path), table, mode="overwrite", schema_mode="overwrite")


def settings_text(settings: dict) -> str:
    lines = ["# written by `isrflow import`: the engine settings under which the imported stream means what the",
             "# metadata log says (see docs/metadata-import.md). Use: isrflow replay STREAM --config THIS_FILE"]
    lines += [f"{k}={v}" for k, v in sorted(settings.items())]
    return "\n".join(lines) + "\n"


def import_metadata(src, out, tables=None, overwrite: bool = False, log=None) -> dict:
    with gc_paused():           # millions of small acyclic objects (see reader.gc_paused)
        summary, res, ml = import_stream(src, out, overwrite)
        write_records(summary, res, Path(tables) if tables else Path(out) / "_tables")
        return summary, res, ml


def import_stream(src, out, overwrite: bool = False):
    """The import's first phase: the log decoded and converted, the stream and its settings written.
    -> (summary, ConvertResult, MetaLog); write_records completes the import (`isrflow audit` replays the
    stream meanwhile)."""
    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} is not empty (use --overwrite)")
        shutil.rmtree(out)
    ml = read_metadata(src)
    t1 = time.perf_counter()
    res = convert(ml)
    t2 = time.perf_counter()
    files = write_stream(res.events, out)
    (out / "_import.properties").write_text(settings_text(res.settings))
    t3 = time.perf_counter()
    types: dict[str, int] = {}
    for r in ml.records:
        types[r.type] = types.get(r.type, 0) + 1
    skipped: dict[str, int] = {}
    for i in res.issues:
        if i.skipped:
            skipped[i.kind] = skipped.get(i.kind, 0) + i.skipped
    n = len(ml.records) + sum(len(v[2]) for v in ml.snapshots.values())
    summary = {
        "source": str(src), "stream": str(out), "files": ml.files, "stream_files": files,
        "records": len(ml.records), "snapshot_records": n - len(ml.records), "batches": ml.batches,
        "history_start_offset": res.history_start, "base_snapshot": ml.base_snapshot,
        "record_types": dict(sorted(types.items())), "events": len(res.events),
        "event_types": dict(sorted((k, v) for k, v in res.counts.items()
                                   if k[0].isupper())),
        "decisions": res.counts.get("decisions", 0), "unexplained": res.counts.get("unexplained", 0),
        "skipped": sum(skipped.values()), "skipped_by_reason": skipped,
        "issues": [i.text() for i in res.issues],
        "snapshot_checks": {str(k): v for k, v in res.snapshot_checks.items()},
        "settings": res.settings,
        "seconds": {"decode": round(t1 - t0, 3), "convert": round(t2 - t1, 3), "stream": round(t3 - t2, 3)},
        "decode_records_per_s": round(n / (t1 - t0)) if t1 > t0 else None,
    }
    return summary, res, ml


def write_records(summary: dict, res, table_dir: Path) -> None:
    """The import's second phase: the records as the `kafka_records` table (its Arrow table kept on `res`
    for the audit), and the summary as _import.json next to the stream."""
    from schemas.tables import rows_to_arrow
    t0 = time.perf_counter()
    res.kafka_records_table = rows_to_arrow("kafka_records", res.kafka_records)
    write_table(table_dir, "kafka_records", res.kafka_records_table)
    summary["kafka_records"] = str(table_dir / "kafka_records")
    summary["seconds"]["records"] = round(time.perf_counter() - t0, 3)
    (Path(summary["stream"]) / "_import.json").write_text(json.dumps(summary, indent=1))


def summary_line(s: dict) -> str:
    skipped = ", ".join(f"{v} {k}" for k, v in s["skipped_by_reason"].items()) or "none"
    return (f"imported {s['records']} records ({s['batches']} batches, {s['snapshot_records']} in snapshots) -> "
            f"{s['events']} events, {s['decisions']} partition decisions, {s['unexplained']} unexplained; "
            f"skipped {s['skipped']} ({skipped}); {len(s['issues'])} issue(s)")
