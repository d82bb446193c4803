"""The in-process engine: the protocol core driven row by row, without Spark.

It is the reference the Spark engine must match row for row, and the fast path for small
replays. Micro-batches here are groups of input rows committed to Delta together.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from protocol.cluster import Cluster
from protocol.config import EngineConfig
from schemas._derive import safe_text
from schemas.events import validate

from .streamio import iter_raw_rows, list_stream_files, loose, row_to_json


def fingerprint(stream, config: EngineConfig, engine: str) -> str:
    """An app id for the Delta transactions: the same replay resumes, another one is refused."""
    h = hashlib.sha1()
    h.update(engine.encode())
    h.update(json.dumps(sorted(config.raw.items())).encode())
    for f in list_stream_files(stream):
        h.update(os.fsencode(f.name))     # any file name, even one that is not UTF-8
    return f"isrflow-{engine}-{h.hexdigest()[:12]}"


# The cluster state is long-lived (dozens of container objects per partition, kept to the end),
# yet Python's cyclic GC rescans all of it in every full collection, and full collections keep
# coming while the state and the output grow: at 100k partitions that cost the core about a
# quarter of its time (the main reason events/s fell with the partition count; 1k: no change).
# While a replay loop runs (`replay_gc`), automatic collection is off and the engine collects
# only the young generations itself every _YOUNG_ROWS rows: every transient cycle is young when
# it dies, so it is still freed; objects that survive are left to the (later) full collections.
_YOUNG_ROWS = 1 << 15


@contextmanager
def replay_gc():
    """Automatic GC off for the duration of a replay loop (restored after), see above."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class LocalEngine:
    """Feeds raw rows through validation and the protocol; yields output rows by table."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self.cluster = Cluster(config)
        self.input_rows = 0
        self.min_seq = None
        self.max_seq = None

    def feed(self, raw: dict | None, text: str | None, err: str | None) -> None:
        self.input_rows += 1
        if not self.input_rows % _YOUNG_ROWS and not gc.isenabled():
            gc.collect(1)
        cl = self.cluster
        if err is not None:
            cl.reject({}, row_to_json(raw, text), err, True)
            return
        ev, reason = validate(raw)
        if ev is None:
            cl.reject(loose(raw), row_to_json(raw, text), safe_text(reason), True)
            return
        seq = ev["seq"]
        if self.min_seq is None or seq < self.min_seq:
            self.min_seq = seq
        if self.max_seq is None or seq > self.max_seq:
            self.max_seq = seq
        before = cl.rejected
        cl.apply(ev)
        if cl.rejected != before:
            # the core's rejection: attach the original row
            rows = cl.out.tables["rejected"]
            if rows and rows[-1]["raw"] is None:
                rows[-1]["raw"] = row_to_json(raw, text)

    def drain(self, final: bool) -> tuple[dict, list[dict]]:
        cl = self.cluster
        if final:
            cl.finish()
        tables = cl.drain()
        state = cl.partition_state_rows(cl.touched)
        cl.touched = set()
        return tables, state


# the replay record (app id guard, _run.json, progress rows, totals) is shared with the Spark engine
from .runinfo import check_tables_dir, finish_run_info, progress_row, write_run_info  # noqa: E402


def replay_local(stream: str, tables_dir: str, config: EngineConfig, *, batch_rows: int = 500_000,
                 progress=None, overwrite: bool = False) -> dict:
    """Replays the whole stream into Delta tables under tables_dir. Returns a summary."""
    from .delta_sink import DeltaSink

    app_id = fingerprint(stream, config, "local")
    check_tables_dir(tables_dir, app_id, overwrite)
    sink = DeltaSink(tables_dir, app_id=app_id)
    write_run_info(tables_dir, stream, config, "local", app_id)
    eng = LocalEngine(config)
    t0 = time.perf_counter()
    batch_id = 0
    in_batch = 0
    applied_before = rejected_before = 0
    totals = {"input_rows": 0, "applied": 0, "rejected": 0, "batches": 0}

    def commit(final: bool):
        nonlocal batch_id, applied_before, rejected_before, in_batch
        tables, state = eng.drain(final)
        cl = eng.cluster
        tables["progress"] = [progress_row(batch_id, "local", in_batch, cl.applied - applied_before,
                                           cl.rejected - rejected_before, eng.min_seq, eng.max_seq, cl.max_ts)]
        applied_before, rejected_before = cl.applied, cl.rejected
        sink.commit(batch_id, tables, state)
        if progress:
            el = time.perf_counter() - t0
            progress(f"batch {batch_id}: {eng.input_rows} rows, {eng.input_rows / max(el, 1e-9):,.0f} rows/s")
        batch_id += 1
        in_batch = 0

    with replay_gc():
        for raw, text, err in iter_raw_rows(stream):
            eng.feed(raw, text, err)
            in_batch += 1
            if in_batch >= batch_rows:
                commit(False)
        commit(True)
    cl = eng.cluster
    el = time.perf_counter() - t0
    totals.update(input_rows=eng.input_rows, applied=cl.applied, rejected=cl.rejected, batches=batch_id,
                  seconds=round(el, 3), events_per_s=round(eng.input_rows / max(el, 1e-9)),
                  partitions=len(cl.partitions), tables=str(Path(tables_dir)))
    finish_run_info(tables_dir)
    return totals
