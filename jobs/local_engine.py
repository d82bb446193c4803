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
from schemas.tables import partition_state_arrow

from .buckets import loose_bucket, owns_fn
from .streamio import Foreign, Plain, from_ipc, list_stream_files, loose, row_to_json, to_ipc
from .windows import CHUNK_ROWS as _CHUNK_ROWS, MIN_RUN, Window, chunked, iter_stream_items


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
# only the young generations itself (`LocalEngine.collect_young`): every transient cycle is young
# when it dies, so it is still freed; objects that survive are left to the (later) full collections.
# A young collection still walks every object allocated since the last one that is alive at that
# moment (the batch's output rows, new partitions): at 100k partitions, one every 32k rows cost the
# core 13-23% of its time and found no garbage after the first. So the interval adapts: it starts
# at _YOUNG_ROWS and doubles (up to _YOUNG_MAX) after each collection that found (next to) no
# garbage; one that finds some sets it back, so a stream that makes cycles keeps them collected
# every 32k rows.
_YOUNG_ROWS = 1 << 15
_YOUNG_MAX = 1 << 22
# Even walked once, new partitions cost: the creation of 100k partitions left ~3M objects for the
# young collections to walk (0.8 s of a 10 s replay) only to find them all alive. So the first
# point of the schedule and, while the collections find no garbage, every other point freezes
# instead (gc.freeze(): the young objects move, unwalked, to the permanent generation, which no
# collection walks), and the point _SAMPLE_ROWS rows after a freeze collects: a sample of the rows
# since, which decides whether the next point may freeze again. The sample is short because it
# walks everything those rows made: 32k rows of creations are ~1.5M objects (0.2 s), 4k rows a
# tenth of that. Reference counting still frees frozen objects; only a cycle made before a freeze
# and dead after it waits, until the loop ends (replay_gc unfreezes) or until a sample finds
# garbage: then everything is unfrozen and collected once (a full walk) and this schedule never
# freezes again, as before this rule. "No garbage" is fewer than one object freed in _CLEAN_RATIO
# walked (gc.get_count()[0] before the collection), so a frozen cycle is expected to hold under
# 0.1% of what a freeze moved; the first collection of a replay frees a few dozen objects of the
# start-up among ~1M.
_SAMPLE_ROWS = 1 << 12
_CLEAN_RATIO = 1000
# whether a YoungGC may freeze now: set by the innermost replay_gc that found nothing frozen (it
# unfreezes at its end what was frozen during it), so no freeze outlives the loop it was made in
_FREEZE_OK = [False]
# whether a YoungGC froze objects that are still frozen. Kept here rather than asked of
# gc.get_freeze_count(), which counts the permanent generation by walking it: ~0.14 s for the
# ~3M objects a 100k-partition replay freezes, once at every loop's end
_FROZEN = [False]


class YoungGC:
    """The young-collection schedule of a replay loop that runs with automatic GC off (replay_gc;
    see _YOUNG_ROWS): `at` is the input row before which the next young collection runs, `every`
    the interval, doubled after a collection that found no garbage, and `freeze_next` whether that
    point freezes instead of collecting (see _CLEAN_RATIO); `frozen` whether this schedule froze
    since its last collection that found garbage, and `may_freeze` false once such a collection
    followed a freeze. The in-process engine (LocalEngine) and each bucket call of the Spark engine
    (jobs.spark_engine.process_bucket) keep one each."""

    __slots__ = ("every", "at", "freeze_next", "frozen", "may_freeze")

    def __init__(self) -> None:
        self.every = _YOUNG_ROWS
        self.at = _YOUNG_ROWS
        # the first point freezes: the sample after it judges the rows before it too. A first
        # collection walked everything the replay had made so far (at 100k partitions: the first
        # 32k creations, ~1.5M objects, 0.25 s) to free a few dozen objects of the start-up
        self.freeze_next = True
        self.frozen = False
        self.may_freeze = True

    def collect(self, row: int) -> int:
        """The young collection (or freeze) before input row `row`; sets the next one's row.
        Returns the objects freed (0 after a freeze, and when automatic GC is on: then the
        interpreter collects by itself)."""
        if gc.isenabled():
            self.at = row + self.every
            return 0
        if self.freeze_next and self.may_freeze and _FREEZE_OK[0]:
            gc.freeze()
            _FROZEN[0] = self.frozen = True
            self.freeze_next = False
            self.at = row + _SAMPLE_ROWS       # the sample that judges the rows after the freeze
            return 0
        young = gc.get_count()[0]
        freed = gc.collect(1)
        if freed * _CLEAN_RATIO <= young:
            self.every = min(self.every * 2, _YOUNG_MAX)
            self.freeze_next = self.may_freeze
        else:
            if self.frozen and _FROZEN[0]:
                # cycles made before a freeze may be dead in the permanent generation: one full walk
                gc.unfreeze()
                _FROZEN[0] = False
                freed += gc.collect()
                self.may_freeze = False
            self.frozen = False
            self.every = _YOUNG_ROWS
            self.freeze_next = False
        self.at = row + self.every
        return freed

    def run(self, cl: Cluster, evs: list, i: int, n: int, done: int,
            window: bool = False) -> tuple[int, int, int]:
        """cl.apply_run(evs, i, ..., window) up to evs[n - 1], and not past the row before the next
        young collection's (`done` rows fed so far): the caller collects before that row."""
        return cl.apply_run(evs, i, min(n, i + max(1, self.at - done - 1)), window)


@contextmanager
def replay_gc():
    """Automatic GC off for the duration of a replay loop (restored after), see above; the Spark
    source's scan runs under it too (jobs.spark_source). Young collections may freeze objects during
    it only if nothing was frozen when it began; what they froze is unfrozen at its end."""
    was = gc.isenabled()
    gc.disable()
    outer = _FREEZE_OK[0]
    mine = gc.get_freeze_count() == 0      # (a walk of nothing, or of what someone else froze)
    _FREEZE_OK[0] = mine
    try:
        yield
    finally:
        _FREEZE_OK[0] = outer
        if mine and _FROZEN[0]:
            gc.unfreeze()
            _FROZEN[0] = False
        if was:
            gc.enable()


class LocalEngine:
    """Feeds raw rows through validation and the protocol; yields output rows by table.

    `worker` of `workers` (a parallel replay, see _replay_workers): every row is fed, the partitions of
    bucket `worker` (jobs.buckets, as the Spark engine's) are applied here, broker- and cluster-wide rows
    everywhere, and each row that is output once (a rejection, a global row) is output by one worker only."""

    def __init__(self, config: EngineConfig, worker: int = 0, workers: int = 1):
        self.config = config
        self.worker, self.workers = worker, workers
        owns = owns_fn(worker, workers) if workers > 1 else None
        self.cluster = Cluster(config, emit_global=worker == 0, owns=owns, sees_all=True)
        self.input_rows = 0
        self.grouped_rows = 0           # input rows applied grouped by partition (feed_window)
        self.young = YoungGC()
        self.min_seq = None
        self.max_seq = None

    def feed(self, raw: dict | None, text: str | None, err: str | None) -> None:
        """One row, as iter_raw_rows yields it: feed_rows([(raw, text, err)])."""
        self.feed_rows([(raw, text, err)])

    def feed_window(self, w: Window) -> None:
        """The rows of a Window (jobs.windows), grouped by partition when the core allows it
        (Cluster.commutes; a window shorter than MIN_RUN is not worth its sort), else in stream
        order. Grouped, every row of the window passes the stream order check, so the window's
        first and last seq bound the batch's seq range, and a parallel replay worker counts the
        other workers' rows of it as input rows without seeing them."""
        cl = self.cluster
        grouped = w.n >= MIN_RUN and w.monotone and cl.commutes(w.first_seq, w.first_ts, w.last_ts,
                                                                w.max_step)
        rows = self.window_rows(w, grouped)
        before = self.input_rows
        for chunk in self.chunks(rows):
            self.feed_rows(chunk, grouped)
        if grouped:
            cl.end_window(w.last_seq, w.last_ts)
            self.input_rows = before + w.n
            self.grouped_rows += w.n
            if self.min_seq is None or w.first_seq < self.min_seq:
                self.min_seq = w.first_seq
            if self.max_seq is None or w.last_seq > self.max_seq:
                self.max_seq = w.last_seq

    def window_rows(self, w: Window, grouped: bool):
        """w.rows(grouped) (the bench times it as reading: jobs.bench.core_measure)."""
        return w.rows(grouped)

    def chunks(self, rows):
        """A window's rows in lists of _CHUNK_ROWS, made as they are fed (the bench times the
        making as reading)."""
        return chunked(rows, _CHUNK_ROWS)

    def feed_rows(self, rows: list, window: bool = False) -> None:
        """Feeds `rows` ((raw, text, err) as iter_raw_rows yields them) in order. Each run of events
        (plain rows read as their events, another worker's Foreign rows, rows validate() accepts)
        goes to the core in one call (Cluster.apply_run): the loop runs in the core, and stops after
        a row the core rejects, whose own text is attached here, and before the next young
        collection's row. A row that is no event is rejected here (_validated). window: the rows
        of a window the core allowed to apply grouped (feed_window), every one an event."""
        cl = self.cluster
        # a plain row's event, or another worker's row (its seq and ts_ms); None: validate() judges it
        evs = [r[0] if r[1].__class__ is Plain or r[0].__class__ is Foreign else None for r in rows]
        n = len(rows)
        i = 0
        young = self.young
        while i < n:
            if self.input_rows + 1 >= young.at:
                self.collect_young(self.input_rows + 1)       # before that row
            if evs[i] is None:
                ev = self._validated(*rows[i])
                if ev is None:
                    self.input_rows += 1
                    i += 1
                    continue
                evs[i] = ev
            before = cl.rejected
            k, lo, hi = young.run(cl, evs, i, n, self.input_rows, window)
            self.input_rows += k - i
            if self.min_seq is None or lo < self.min_seq:
                self.min_seq = lo
            if self.max_seq is None or hi > self.max_seq:
                self.max_seq = hi
            if cl.rejected != before:
                # the core's rejection of rows[k - 1]: attach the original row
                out = cl.out.tables["rejected"]
                if out and out[-1]["raw"] is None:
                    raw, text, _ = rows[k - 1]
                    out[-1]["raw"] = row_to_json(raw, text)
            i = k

    def _validated(self, raw, text, err):
        """The event of a row the reader did not make one of (validate()), or None after writing
        its rejection (by one worker only: the one of its partition, or worker 0)."""
        cl = self.cluster
        if err is not None:
            if self.worker == 0:
                cl.reject({}, row_to_json(raw, text), err, True)
            return None
        ev, reason = validate(raw)
        if ev is None:
            lo = loose(raw)
            if self.workers == 1 or loose_bucket(lo, self.workers) == self.worker:
                cl.reject(lo, row_to_json(raw, text), safe_text(reason), True)
        return ev

    def collect_young(self, row: int | None = None) -> int:
        """The young collection while a replay loop has automatic GC off (see _YOUNG_ROWS), before
        input row number `row` (default: the last one counted), and the next one's row: twice as
        far when this one freed nothing. Returns the objects freed."""
        return self.young.collect(self.input_rows if row is None else row)

    def drain(self, final: bool) -> tuple[dict, "pa.Table"]:
        """The output rows since the last drain by table, and the `partition_state` rows of the
        partitions touched since then (as Arrow, built column-wise: see protocol.state_table)."""
        cl = self.cluster
        if final:
            cl.finish()
        tables = cl.drain()
        state = partition_state_arrow(*cl.partition_state_columns(cl.take_touched()))
        return tables, state


# input rows per micro-batch (one Delta commit each) unless `--batch-rows` says otherwise
BATCH_ROWS = 500_000

# the replay record (app id guard, _run.json, progress rows, totals) is shared with the Spark engine
from .runinfo import check_tables_dir, finish_run_info, progress_row, write_run_info  # noqa: E402


def _batches(eng: LocalEngine, items, batch_rows: int):
    """Feeds `items` (jobs.windows.iter_stream_items with cut=batch_rows: no item crosses a batch
    boundary) in micro-batches of `batch_rows` input rows: yields (tables, partition_state (Arrow),
    stats) per batch, the last one with the final timers fired. The batch boundaries depend only on
    the row count, so every worker of a parallel replay cuts the same batches. A stream that ends
    exactly where a batch does ends with that batch: the final timers (which reach nearly every
    partition, so a batch of their own rewrote every partition's state row once more: ~1 s at 100k
    partitions) fire in it, not in an extra batch without input."""
    cl = eng.cluster
    applied_before = 0
    in_batch = 0

    def batch(final: bool):
        nonlocal applied_before, in_batch
        tables, state = eng.drain(final)
        stats = {"input_rows": in_batch, "applied": cl.applied - applied_before,
                 "rejected": len(tables.get("rejected", ())), "min_seq": eng.min_seq, "max_seq": eng.max_seq,
                 "max_ts": cl.max_ts, "partitions": len(cl.partitions)}
        applied_before = cl.applied
        in_batch = 0
        eng.min_seq = eng.max_seq = None        # the progress row's seq range is the batch's own
        return tables, state, stats

    feed_rows, feed_window = eng.feed_rows, eng.feed_window
    with replay_gc():
        for item in items:
            if in_batch >= batch_rows:      # a full batch, and the stream goes on
                yield batch(False)
            if item.__class__ is Window:
                feed_window(item)
                in_batch += item.n
            else:
                feed_rows(item)
                in_batch += len(item)
        yield batch(True)


def replay_local(stream: str, tables_dir: str, config: EngineConfig, *, batch_rows: int = BATCH_ROWS,
                 progress=None, overwrite: bool = False, workers: int = 1) -> dict:
    """Replays the whole stream into Delta tables under tables_dir. Returns a summary.

    workers > 1: that many processes replay it in parallel, each the partitions of one bucket (see
    _replay_workers); the tables are the same rows as with one."""
    from .delta_sink import DeltaSink

    app_id = fingerprint(stream, config, "local")
    check_tables_dir(tables_dir, app_id, overwrite)
    sink = DeltaSink(tables_dir, app_id=app_id)
    write_run_info(tables_dir, stream, config, "local", app_id)
    t0 = time.perf_counter()
    totals = {"input_rows": 0, "applied": 0, "rejected": 0, "batches": 0, "partitions": 0}
    if workers > 1:
        batches = _replay_workers(stream, config, workers, batch_rows)
    else:
        batches = _batches(LocalEngine(config), iter_stream_items(stream, batch_rows), batch_rows)
    for batch_id, (tables, state, st) in enumerate(batches):
        tables["progress"] = [progress_row(batch_id, "local", st["input_rows"], st["applied"], st["rejected"],
                                           st["min_seq"], st["max_seq"], st["max_ts"])]
        sink.commit(batch_id, tables, state)
        for k in ("input_rows", "applied", "rejected"):
            totals[k] += st[k]
        totals["batches"] = batch_id + 1
        totals["partitions"] = st["partitions"]
        if progress:
            el = time.perf_counter() - t0
            progress(f"batch {batch_id}: {totals['input_rows']} rows, "
                     f"{totals['input_rows'] / max(el, 1e-9):,.0f} rows/s")
    el = time.perf_counter() - t0
    totals.update(seconds=round(el, 3), events_per_s=round(totals["input_rows"] / max(el, 1e-9)),
                  tables=str(Path(tables_dir)), workers=workers)
    finish_run_info(tables_dir)
    return totals


# ------------------------------------------------------------------ the parallel replay
# Each of N spawned worker processes reads the whole stream and runs a LocalEngine(worker=k) over it:
# the partitions of bucket k (jobs.buckets.bucket_of, the Spark engine's buckets) are applied there,
# broker-wide rows in every worker (each needs the brokers' state), and a row output once is output by
# one worker (LocalEngine). Reading and validation are repeated per worker; the protocol work, most of
# the time, is split. A worker sends each batch's tables as Arrow IPC; the parent concatenates them and
# commits the batch (the batch boundaries are the same in every worker: _batches).

def _replay_workers(stream: str, config: EngineConfig, workers: int, batch_rows: int):
    """Yields (tables, partition_state (Arrow), stats) per batch, merged over the workers."""
    import multiprocessing as mp

    import pyarrow as pa

    ctx = mp.get_context("spawn")       # a fresh interpreter: no threads or locks inherited (Delta, Arrow)
    procs, conns = [], []
    try:
        for k in range(workers):
            mine, theirs = ctx.Pipe(duplex=False)
            pr = ctx.Process(target=_worker_main, args=(k, workers, stream, config.raw, batch_rows, theirs),
                             name=f"isrflow-replay-worker-{k}", daemon=True)
            pr.start()
            theirs.close()
            procs.append(pr)
            conns.append(mine)
        while True:
            msgs = [_receive(c, k) for k, c in enumerate(conns)]
            if msgs[0] is None:
                break
            parts: dict[str, list] = {}
            for _, ipcs in msgs:
                for name, data in ipcs.items():
                    parts.setdefault(name, []).append(from_ipc(data))
            state = pa.concat_tables(parts.pop("partition_state"))
            st = dict(msgs[0][0])        # worker 0 sees (and counts) every row, and outputs the global ones
            for k in ("applied", "rejected", "partitions"):
                st[k] = sum(m[0][k] for m in msgs)
            yield {name: pa.concat_tables(ts) for name, ts in parts.items()}, state, st
    finally:
        for pr in procs:
            pr.join(timeout=5)
            if pr.is_alive():
                pr.kill()
                pr.join()


def _receive(conn, k: int):
    try:
        msg = conn.recv()
    except EOFError:
        raise RuntimeError(f"replay worker {k} died without a word (killed? out of memory?)") from None
    if isinstance(msg, str):
        raise RuntimeError(f"replay worker {k} failed:\n{msg}")
    return msg


def _worker_main(k: int, workers: int, stream: str, raw_config: dict, batch_rows: int, conn) -> None:
    """One worker: its batches as (stats, {table: Arrow IPC bytes}, partition_state among them), then None."""
    import traceback

    from schemas.tables import rows_to_arrow
    try:
        eng = LocalEngine(EngineConfig(raw_config), k, workers)
        items = iter_stream_items(stream, batch_rows, foreign=eng.cluster.is_foreign)
        for tables, state, st in _batches(eng, items, batch_rows):
            ipcs = {name: to_ipc(rows_to_arrow(name, rows)) for name, rows in tables.items() if rows}
            ipcs["partition_state"] = to_ipc(state)
            conn.send((st, ipcs))
        conn.send(None)
    except BaseException:               # noqa: BLE001 - the parent reports it and stops the others
        conn.send(traceback.format_exc())
    finally:
        conn.close()
        # the process ends after this: its exit collection need not walk this worker's cluster
        # state (see jobs.cli.entry); the parent waits for that exit (_replay_workers joins)
        gc.freeze()
