"""Reading a stream for the in-process engine: row chunks and windows.

A fetch or a produce reads a dozen objects of its partition (the partition, its replicas, their
logs, the follower's state, the invariants' records). At 1k partitions they stay in the
processor's cache from one row of a partition to its next; at 100k partitions, rows of the same
partition are ~100k rows apart and every row meets its partition's objects out of cache: a row cost
the core ~1.8x what it costs at 1k partitions (docs/core-speed.md). Rows of COMMUTING_TYPES
(protocol.cluster) of different partitions commute, so a long run of them can be applied grouped
by partition, each partition's rows in stream order: its first row brings the partition's objects
into the cache, its next rows find them there.

`iter_stream_items` gives the stream as the engine feeds it, in stream order:
- a list of at most CHUNK_ROWS rows (as iter_raw_rows(events=True) gives them), or
- a `Window`: consecutive plain Parquet rows of COMMUTING_TYPES (schemas.events.plain_mask), at
  most WINDOW_ROWS of them, kept as Arrow until the engine asks for them, sorted by partition or
  in stream order (`Window.rows`). The engine asks for them sorted only when the core allows it
  (protocol.cluster.Cluster.commutes: the stream order check and the broker sessions).
No item holds rows on both sides of a multiple of `cut` rows, the engine's batch boundaries, so a
batch holds the same rows whether or not its windows are grouped.
"""
from __future__ import annotations

from itertools import islice, repeat
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from protocol.cluster import COMMUTING_TYPES
from schemas.events import plain_event_maker, plain_mask

from . import streamio
from .streamio import (PARQUET_SUFFIXES, Plain, _batch_rows, _column, _iter_json, _parquet_batches, _plain_events,
                       list_stream_files)

# rows of a row chunk (LocalEngine.feed_rows: long runs for the core, little memory)
CHUNK_ROWS = 4096
# A window's largest size. On the bench's 100k-partition stream (1M rows, the core in-process,
# 4096-row calls, 2026-11-29): rows in stream order 10.6-10.8 s; grouped in windows of 64k rows
# 9.5 s, 128k 8.5 s, 256k 7.8 s, the whole 500k-row batch 7.6-7.9 s. A window's Arrow columns
# and, while it is fed, its Python values stay in memory (~60 MB at 256k rows).
WINDOW_ROWS = 1 << 18
# A run of commuting rows within a Parquet batch shorter than this stays in the row chunks: its
# partitions could hardly repeat, and a window costs a sort and its own conversion. A run at
# either end of a batch may go on in the next one, so it is a window whatever its length (the
# engine feeds a window this short in stream order).
MIN_RUN = 256
# Parquet batch size (as iter_raw_rows)
_PARQUET_BATCH = 65536
# rows of a window made into Python values at a time (Window.rows)
_SLICE = 16384
_COMMUTING = pa.array(sorted(COMMUTING_TYPES), pa.string())
_BY_PARTITION = [("topic", "ascending"), ("partition", "ascending")]


def chunked(rows, n: int | None = None) -> Iterator[list]:
    """`rows` in lists of n (default CHUNK_ROWS), each made when it is asked for."""
    n = CHUNK_ROWS if n is None else n
    while True:
        chunk = list(islice(rows, n))
        if not chunk:
            return
        yield chunk


class Window:
    """Consecutive plain rows of COMMUTING_TYPES (see the module). After `close`: `n` rows,
    `first_seq`, `first_ts`, `last_seq`, `last_ts`, `monotone` (seq strictly increasing and ts_ms
    never decreasing from row to row) and `max_step` (the largest ts_ms step between two rows):
    what Cluster.commutes asks."""

    __slots__ = ("pieces", "schema", "foreign", "n", "batch", "first_seq", "first_ts", "last_seq", "last_ts",
                 "monotone", "max_step")

    def __init__(self, schema: pa.Schema, foreign=None):
        self.pieces: list = []
        self.schema = schema
        self.foreign = foreign
        self.n = 0

    def add(self, piece: pa.RecordBatch) -> None:
        self.pieces.append(piece)
        self.n += piece.num_rows

    def close(self) -> "Window":
        self.batch = pa.concat_batches(self.pieces) if len(self.pieces) > 1 else self.pieces[0]
        self.pieces = []
        seq = self.batch.column("seq").to_numpy(zero_copy_only=False)
        ts = self.batch.column("ts_ms").to_numpy(zero_copy_only=False)
        self.first_seq, self.first_ts = int(seq[0]), int(ts[0])
        self.last_seq, self.last_ts = int(seq[-1]), int(ts[-1])
        dseq, dts = np.diff(seq), np.diff(ts)
        self.monotone = bool((dseq > 0).all() and (dts >= 0).all())
        self.max_step = int(dts.max()) if len(dts) else 0
        return self

    def rows(self, grouped: bool) -> Iterator:
        """The rows as iter_raw_rows(events=True, foreign=self.foreign) gives them: when `grouped`, sorted by (topic, partition), each partition's rows in stream order (Arrow's
        sort is stable), and a parallel replay worker's own rows only (the others' rows are left
        out, not Foreign: see Cluster.commutes); else in stream order. Python values are made
        _SLICE rows at a time, as the rows are taken (a whole window's would be ~60 MB)."""
        b = self.batch
        # the columns null throughout are left out (as iter_raw_rows does), before the sort moves rows
        names = tuple(c for c, col in zip(b.schema.names, b.columns) if col.null_count < b.num_rows)
        b = b.select(names)
        if grouped:
            if self.foreign is not None:
                b = b.filter(pa.array(self._own(b), pa.bool_()))
            b = b.take(pc.sort_indices(b, sort_keys=_BY_PARTITION))
        return self._rows(b, names, self.foreign if not grouped else None)

    @staticmethod
    def _rows(b: pa.RecordBatch, names: tuple, foreign) -> Iterator:
        make = plain_event_maker(names)
        layout = Plain(names)
        for at in range(0, b.num_rows, _SLICE):
            conv = [_column(c) for c in b.slice(at, _SLICE).columns]
            cols = [c for c, _ in conv]
            if not all(exact for _, exact in conv):
                # cannot be, for rows the batch check found plain and Arrow found valid (_runs):
                # validate() then judges them, as iter_raw_rows would have them judged
                yield from ((dict(zip(names, vals)), None, None) for vals in zip(*cols))
            elif foreign is not None:
                yield from _plain_events(list(names), cols, repeat(True), foreign, make)
            else:
                for vals in zip(*cols):
                    yield make(*vals), layout, None

    def _own(self, b: pa.RecordBatch) -> list[bool]:
        """Which rows of b the worker applies (not self.foreign's), asked once per partition."""
        foreign = self.foreign
        seen: dict = {}
        out = []
        for typ, topic, part in zip(*(b.column(c).to_pylist() for c in ("type", "topic", "partition"))):
            key = (topic, part)
            mine = seen.get(key)
            if mine is None:
                mine = seen[key] = not foreign(typ, topic, part)
            out.append(mine)
        return out


def _runs(batch: pa.RecordBatch) -> tuple[list[tuple[int, int]], pa.BooleanArray | None]:
    """The runs (start, end) of `batch` that go to windows: consecutive plain rows of
    COMMUTING_TYPES, MIN_RUN rows at least unless at an end of the batch; and the batch's
    plain_mask when it was computed (the rows around the windows take it: _batch_rows)."""
    names = batch.schema.names
    if not streamio.PLAIN_ROWS or not {"type", "topic", "partition", "ts_ms"} <= set(names):
        return [], None
    try:
        batch.validate(full=True)       # UTF-8 too: every column then converts exactly (_column)
    except pa.ArrowInvalid:
        return [], None
    plain = plain_mask(batch)
    if plain is None:
        return [], None
    m = pc.and_(plain, pc.fill_null(pc.is_in(batch.column("type"), value_set=_COMMUTING), False))
    g = m.to_numpy(zero_copy_only=False)
    if not g.any():
        return [], plain
    n = len(g)
    d = np.diff(g.astype(np.int8), prepend=0, append=0)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    keep = (ends - starts >= MIN_RUN) | (starts == 0) | (ends == n)
    return list(zip(starts[keep].tolist(), ends[keep].tolist())), plain


class _Items:
    """iter_stream_items' state: `pos` rows given so far, the open row chunk and window."""

    def __init__(self, cut: int, window_rows: int, foreign=None):
        self.cut = cut
        self.window_rows = window_rows
        self.foreign = foreign
        self.pos = 0
        self.buf: list = []
        self.win: Window | None = None

    def rows(self, it) -> Iterator:
        """Items of the rows of `it` (after the open window, which comes first)."""
        yield from self.close_window()
        while True:
            room = min(CHUNK_ROWS - len(self.buf), self.cut - self.pos % self.cut)
            got = list(islice(it, room))
            self.buf += got
            self.pos += len(got)
            if len(self.buf) >= CHUNK_ROWS or (got and self.pos % self.cut == 0):
                yield self.buf
                self.buf = []
            if len(got) < room:
                return

    def window(self, batch: pa.RecordBatch, s: int, e: int) -> Iterator:
        """Items of the rows s..e-1 of `batch`, a run for windows (after the open row chunk)."""
        if self.buf:
            yield self.buf
            self.buf = []
        while s < e:
            w = self.win
            if w is not None and not w.schema.equals(batch.schema):
                yield from self.close_window()
                w = None
            if w is None:
                w = self.win = Window(batch.schema, self.foreign)
            k = min(e - s, self.window_rows - w.n, self.cut - self.pos % self.cut)
            w.add(batch.slice(s, k))
            self.pos += k
            s += k
            if w.n >= self.window_rows or self.pos % self.cut == 0:
                yield from self.close_window()

    def batch(self, batch: pa.RecordBatch) -> Iterator:
        runs, plain = _runs(batch) if self.window_rows > 0 else ([], None)
        if not runs:
            known = None if plain is None else plain.to_pylist()
            yield from self.rows(_batch_rows(batch, self.foreign, True, known))
            return
        n = batch.num_rows
        in_run = np.zeros(n, dtype=bool)
        for s, e in runs:
            in_run[s:e] = True
        out = pa.array(~in_run)
        rest = (_batch_rows(batch.filter(out), self.foreign, True, plain.filter(out).to_pylist())
                if not in_run.all() else iter(()))
        at = 0
        for s, e in runs:
            if s > at:
                yield from self.rows(islice(rest, s - at))
            yield from self.window(batch, s, e)
            at = e
        if at < n:
            yield from self.rows(rest)

    def close_window(self) -> Iterator:
        if self.win is not None:
            w, self.win = self.win, None
            yield w.close()

    def flush(self) -> Iterator:
        yield from self.close_window()
        if self.buf:
            yield self.buf
            self.buf = []


def iter_stream_items(path, cut: int, window_rows: int = WINDOW_ROWS, foreign=None) -> Iterator:
    """The stream's rows in stream order, as iter_raw_rows(path, events=True, foreign=foreign)
    gives them, in items (see the module): row lists and Windows, none across a multiple of `cut`
    rows. window_rows=0 reads no windows."""
    items = _Items(cut, window_rows, foreign)
    for f in list_stream_files(path):
        if f.suffix.lower() not in PARQUET_SUFFIXES:
            yield from items.rows(_iter_json(f))
            continue
        for batch in _parquet_batches(f, _PARQUET_BATCH):
            if batch.__class__ is tuple:
                yield from items.rows(iter((batch,)))
            else:
                yield from items.batch(batch)
    yield from items.flush()
