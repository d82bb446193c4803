"""The Spark engine's input: a Python streaming data source over a stream directory.

Why not Spark's file source: it orders files by modification time, while SPEC §2 orders a
stream by file NAME; and the engine needs each row's exact stream position. This source
(pyspark >= 4.2 Python Data Source API) plans micro-batches over the files in name order:

* offset = {"files": k, "last": name of file k-1} (k files consumed). `maxFilesPerTrigger`
  is a ReadMaxFiles limit; Trigger.AvailableNow is supported (the target is fixed when the
  query starts); in `run` mode new files are picked up (they must sort after the consumed
  ones; a file that sorts before them is an error, not silently skipped).
* one input partition (read task) per file of the micro-batch; the tasks run in parallel.
  Each parses, validates, and runs the GLOBAL
  seq / ts_ms order check (SPEC §2: a row whose seq is not after the last applied seq, or
  whose ts_ms goes back, is rejected). That check is a sequential scan over the whole
  stream; its carry (last applied seq, stream time) after the first k files is a pure
  function of those files, so it is stored in ``<checkpoint>/isrflow_carry/<k>.json``
  when a batch ends at k and read back by the batch starting at k (recomputed from the
  files if missing). The scan is exactly the in-process engine's check, across
  micro-batches and buckets. A task whose file is not the batch's first derives its
  carry from the batch's carry over the files before its own (carry_after): a Parquet
  file whose seq / ts_ms columns are monotone needs only a vectorized check and the
  validation of its last rows; any other file is scanned without routing.
* the pre-stage routing: partition-scoped rows go to their bucket (a CreatePartition or
  PartitionRecord also to every other one, in a NOTES item: its topic exists, with its replication
  factor, Cluster.note_creation),
  broker-scoped rows and topic-wide AlterConfig to every bucket (the stateless explode), rows rejected here to
  the bucket of their partition (bucket 0 if none). Rows are packed: one output row per
  (bucket, chunk of input rows) holding a pickled list of items, so Spark moves a few
  large values instead of a row per event; payloads are zstd-compressed pickles (pack /
  unpack). An applied row's item is its columns' names and values: a plain Parquet row
  (schemas.events.plain_rows) is read as its event already and keeps its file's columns,
  any other row is validated here and carries every event column; the bucket makes the
  event from them (chunk_events). The bucket column holds the bucket's grouping key
  (jobs.buckets.group_keys: key % n_buckets == bucket, chosen so buckets spread evenly over
  the shuffle partitions).

Output columns (SCHEMA): bucket, pos (first stream position of the chunk: file index << 32
| row), et_ms (the stream time after the chunk + 1 ms; the event-time column: with a 1 ms
watermark delay the watermark is exactly the stream time after the previous batches, and
no row is ever behind it), n_in / min_seq / max_seq (chunk statistics, on one row of the
chunk), payload.
"""
from __future__ import annotations

import io
import json
import operator
import os
import pickle
import zlib
from pathlib import Path

import pyarrow as pa

from protocol.cluster import CREATING_TYPES, NARROWABLE_TYPES, PARTITION_TYPES, Foreign, creation_of, order_reject_reason
from schemas._derive import safe_text
from schemas.events import EVENT_COLUMNS, plain_event_maker, validate

from .buckets import bucket_lookup, bucket_of, group_keys, loose_bucket
from .local_engine import replay_gc
from .streamio import loose
from .streamio import VALUES, Plain, iter_file_rows, list_stream_files, row_to_json

SCHEMA = "bucket int, pos long, et_ms long, n_in long, min_seq long, max_seq long, payload binary"
FORMAT = "isrflow"
CHUNK_ROWS = 50_000
# a chunk item: a row to apply, a row the source rejected, a run of other buckets' creations
# (CreatePartition, PartitionRecord rows: NOTES, Cluster.note_creation)
APPLY, REJECTED, NOTES = 0, 1, 2


class SourceError(RuntimeError):
    pass


def _rej(ev: dict, raw_json: str, reason: str) -> dict:
    return {"topic": ev.get("topic"), "partition": ev.get("partition"), "seq": ev.get("seq"), "idx": 0,
            "ts_ms": ev.get("ts_ms"), "raw": raw_json, "reason": safe_text(reason)}


# ----------------------------------------------------------------------------- the scan
def scan(files: list[tuple[int, str]], carry: tuple[int, int], n_buckets: int, chunk_rows: int = CHUNK_ROWS,
         route: bool = True, max_jump: int = 0):
    """Read files [(index, path)] in order from `carry` = (last applied seq, stream time).
    Yields output tuples (see SCHEMA) when route, and finally returns the new carry via
    StopIteration.value (use `run_scan`). max_jump: input.max.time.jump.ms (0: no limit)."""
    def rows():
        for fi, path in files:
            for rowno, (raw, text, err) in enumerate(iter_file_rows(Path(path), events=VALUES)):
                yield (fi << 32) | rowno, raw, text, err
    return (yield from scan_rows(rows(), carry, n_buckets, chunk_rows, route, max_jump=max_jump))


def scan_rows(rows, carry: tuple[int, int], n_buckets: int, chunk_rows: int = CHUNK_ROWS, route: bool = True,
              keep_raw: bool = False, max_jump: int = 0):
    """The scan over rows [(stream position, raw row, raw text, parse error)] in stream order (files or a Kafka
    topic partition, see jobs/kafka_source.py): validation, the global order check from `carry`, routing to
    buckets, chunking. keep_raw: an applied row carries its raw JSON instead of its position (a source that
    cannot re-read a row by position, like Kafka, gives the core's rejections their raw text this way).
    max_jump: input.max.time.jump.ms, checked here for the whole stream (protocol.cluster.order_reject_reason)."""
    last_seq, max_ts = carry
    chunk = _Chunk(n_buckets)
    n_in, min_seq, max_seq, chunk_pos = 0, None, None, None
    all_b = range(n_buckets)
    bucket = bucket_lookup(n_buckets)

    def flush():
        nonlocal chunk, n_in, min_seq, max_seq, chunk_pos
        first = True
        buckets = chunk.done()
        for b in sorted(buckets):
            yield (b, chunk_pos, max_ts + 1, n_in if first else 0, min_seq if first else None,
                   max_seq if first else None, pack(buckets[b]))
            first = False
        chunk = _Chunk(n_buckets)
        n_in = 0
        min_seq = max_seq = None
        chunk_pos = None

    for pos, raw, text, err in rows:
        if n_in >= chunk_rows:
            yield from flush()
        if chunk_pos is None:
            chunk_pos = pos
        n_in += 1
        if text.__class__ is Plain:
            # a plain Parquet row comes as its values, valid as they stand (iter_file_rows(events=VALUES))
            seq, ts, typ, topic, part = text.key(raw)
            names, values = text.names, raw
        else:
            got = _validated(raw, err)
            if got[0] is None:            # unreadable or invalid: the bucket of what it names
                if route:
                    lo = {} if err is not None else loose(raw)
                    b = 0 if err is not None else loose_bucket(lo, n_buckets)
                    chunk.put(b, (REJECTED, _rej(lo, row_to_json(raw, text), got[1])))
                continue
            seq, ts, typ, topic, part, names, values = got
        if min_seq is None or seq < min_seq:
            min_seq = seq
        if max_seq is None or seq > max_seq:
            max_seq = seq
        scoped = typ in PARTITION_TYPES or (typ in NARROWABLE_TYPES and part is not None)
        if seq <= last_seq or ts < max_ts or (max_jump and ts - max_ts > max_jump and last_seq > 0):
            why = order_reject_reason(typ, seq, ts, last_seq, max_ts, max_jump)
            if route:
                b = bucket_of(topic, part, n_buckets) if scoped else 0
                key = {"topic": topic, "partition": part, "seq": seq, "ts_ms": ts}
                chunk.put(b, (REJECTED, _rej(key, row_to_json(raw, text), why)))
        else:
            last_seq, max_ts = seq, ts
            if route:
                # an applied row's item: (APPLY, its columns' names, their values, its stream position,
                # re-read only if the core rejects it); a names tuple is pickled once per chunk, and the
                # bucket makes the event (chunk_events)
                item = (APPLY, names, values, row_to_json(raw, text) if keep_raw else pos)
                if scoped:
                    chunk.put(own := bucket(topic, part), item)
                    if typ in CREATING_TYPES:
                        chunk.note(own, names, values, seq, ts, typ, topic)
                else:
                    for b in all_b:
                        chunk.put(b, item)
    if n_in:
        yield from flush()
    return (last_seq, max_ts)


class _Chunk:
    """One chunk's items per bucket (scan_rows), and the chunk's creations (CreatePartition and
    PartitionRecord rows) as notes for the buckets that do not own them: each is pickled once, as
    (seq, ts_ms, protocol.cluster.creation_of),
    and a bucket's notes since its previous item go before its next item (and at the chunk's end) as
    one NOTES item: (NOTES, their topics, their pickles back to back). From the notes every bucket
    learns which topics exist, with their replication factors (protocol.cluster.Foreign,
    Cluster.note_creation); one that
    knows the factor of every topic in a NOTES item drops it unread (noted_creations): only a topic's
    first creation that succeeds sets its factor. (With 100,000 creations over 16 buckets, a note item
    per bucket and creation, each unpickled in its bucket, cost a 1M-row Spark replay ~9%.)"""

    __slots__ = ("n_buckets", "items", "pickles", "topics", "upto")

    def __init__(self, n_buckets: int):
        self.n_buckets = n_buckets
        self.items: dict[int, list] = {}
        self.pickles: list[bytes] = []
        self.topics: list[str] = []
        self.upto: dict[int, int] = {}      # bucket -> the notes it has (or owns) so far

    def put(self, b: int, item) -> None:
        items = self.items.get(b)
        if items is None:
            items = self.items[b] = []
        if self.pickles and self.upto.get(b, 0) < len(self.pickles):
            self._notes(b, items)
        items.append(item)

    def _notes(self, b: int, items: list) -> None:
        i, j = self.upto.get(b, 0), len(self.pickles)
        items.append((NOTES, frozenset(self.topics[i:j]), b"".join(self.pickles[i:j])))
        self.upto[b] = j

    def note(self, own: int, names, values, seq: int, ts: int, typ: str, topic: str) -> None:
        """A creation (protocol.cluster.CREATING_TYPES) that bucket `own` applies (put before): a note
        for the others, (seq, ts_ms) and its creation_of."""
        at = _CREATION_AT.get(names)
        if at is None:
            at = _CREATION_AT[names] = tuple(names.index(c) if c in names else None for c in ("replicas", "config"))
        replicas, config = (None if i is None else values[i] for i in at)
        self.pickles.append(pickle.dumps((seq, ts, creation_of(typ, topic, replicas, config)), protocol=5))
        self.topics.append(topic)
        self.upto[own] = len(self.pickles)

    def done(self) -> dict[int, list]:
        """The items per bucket, each bucket's notes to the chunk's end included."""
        if self.pickles:
            for b in range(self.n_buckets):
                if self.upto.get(b, 0) < len(self.pickles):
                    self._notes(b, self.items.setdefault(b, []))
        return self.items


# a column layout's positions of replicas and config (a plain row's own columns, or EVENT_COLUMNS)
_CREATION_AT: dict = {}


def _known(notes, known: dict) -> bool:
    """Whether every topic of a NOTES item has its replication factor in `known` (Cluster.topic_rf)."""
    return all(t in known for t in notes[1])


def without_known_notes(items: list, known: dict) -> list:
    """A chunk's items less its NOTES items whose topics all have a replication factor in the bucket
    already (`known`: Cluster.topic_rf) as the chunk starts: dropped here, they do not cut the chunk's
    runs of rows (Cluster.apply_run); the others are read as the bucket reaches them (noted_creations)."""
    if not known:
        return items
    return [it for it in items if it[0] != NOTES or not _known(it, known)]


def noted_creations(item, known: dict) -> list:
    """A NOTES item's notes as Foreign rows (protocol.cluster), in order; none when the bucket knows
    the replication factor of every topic in it already (`known`: Cluster.topic_rf): the rows' place
    in the stream order matters to no bucket but their own."""
    if _known(item, known):
        return []
    buf = io.BytesIO(item[2])
    load = pickle.Unpickler(buf).load
    out = []
    while buf.tell() < len(item[2]):
        n = load()
        out.append(Foreign(*n))
    return out


# a validated row's values, every event column (EVENT_COLUMNS order)
_event_values = operator.itemgetter(*EVENT_COLUMNS)


def _validated(raw, err) -> tuple:
    """A row the reader did not find plain: (seq, ts_ms, type, topic, partition, EVENT_COLUMNS, its
    event's values) when validate() accepts it, else (None, why not); err: the reader's parse error."""
    if err is not None:
        return None, err
    ev, reason = validate(raw)
    if ev is None:
        return None, reason
    return ev["seq"], ev["ts_ms"], ev["type"], ev["topic"], ev["partition"], EVENT_COLUMNS, _event_values(ev)


def chunk_events(items: list) -> list:
    """The events of a chunk's items, in order (scan_rows): an applied row's (names, values) made
    into the event validate() gives for it (EVENT_COLUMNS order, every column:
    schemas.events.plain_event_maker); None for any other item (a row the source rejected, a NOTES
    item: noted_creations), which the bucket handles itself."""
    out: list = []
    names = make = None
    for item in items:
        if item[0] != APPLY:
            out.append(None)
            continue
        if item[1] is not names:
            names = item[1]
            make = plain_event_maker(names)
        out.append(make(*item[2]))
    return out


# A chunk's payload: b"Z" + the pickle's size (8 bytes, little endian) + zstd(pickle of its items).
# zstd, not zlib: on the bench's 1M-row streams (16 buckets) zlib level 1 took 0.27 / 0.49 s to
# compress the payloads of the 1k / 100k-partition stream (to 11.2 / 21.7 MB) and 0.12 / 0.24 s
# to decompress them; zstd 0.10 / 0.15 s (11.9 / 17.4 MB), decompressed in about half the time.
_ZSTD = b"Z"


def pack(items: list) -> bytes:
    """A chunk's payload (_ZSTD; 3.5-7x fewer bytes through Spark's shuffle than the pickle)."""
    data = pickle.dumps(items, protocol=5)
    return _ZSTD + len(data).to_bytes(8, "little") + pa.compress(data, codec="zstd", asbytes=True)


def unpack(payload: bytes) -> list:
    # a payload (_ZSTD), a zlib stream (they start with 0x78, "x": payloads before zstd) or a
    # plain pickle (protocol >= 2: 0x80)
    data = bytes(payload)
    head = data[:1]
    if head == _ZSTD:
        return pickle.loads(pa.decompress(data[9:], decompressed_size=int.from_bytes(data[1:9], "little"),
                                          codec="zstd", asbytes=True))
    return pickle.loads(zlib.decompress(data) if head == b"x" else data)


# ----------------------------------------------------------------------------- carries
def _fast_file_carry(path: str, carry: tuple[int, int], max_jump: int = 0):
    """The carry after one Parquet file without the row-by-row scan, when the file's order
    check is trivially satisfied: seq / ts_ms are non-null signed integer columns, the
    first row is after `carry` and seq strictly increases / ts_ms never decreases over
    ALL rows. Then every valid row passes the check (any subset of a monotone sequence is
    monotone) and the carry is the (seq, ts_ms) of the last valid row. With a time-jump
    limit, the file's whole time span (from the carry's time) must be within it: a subset's
    steps are then within it too. None: not provable this way (the caller scans the file)."""
    if not path.lower().endswith(".parquet"):
        return None
    try:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq
        tbl = pq.read_table(path)
        n = tbl.num_rows
        if n == 0:
            return carry
        if "seq" not in tbl.column_names or "ts_ms" not in tbl.column_names:
            return None
        sc, tc = tbl.column("seq"), tbl.column("ts_ms")
        if sc.null_count or tc.null_count or not (pa.types.is_signed_integer(sc.type)
                                                   and pa.types.is_signed_integer(tc.type)):
            return None
        sq = sc.to_numpy().astype(np.int64, copy=False)
        ts = tc.to_numpy().astype(np.int64, copy=False)
        if int(sq[0]) <= carry[0] or int(ts[0]) < carry[1]:
            return None
        if n > 1 and not (bool((sq[1:] > sq[:-1]).all()) and bool((ts[1:] >= ts[:-1]).all())):
            return None
        if max_jump and int(ts[-1]) - (carry[1] if carry[0] > 0 else int(ts[0])) > max_jump:
            return None
        for i in range(n - 1, max(-1, n - 1 - 1000), -1):
            row = tbl.slice(i, 1).to_pylist()[0]
            ev, _ = validate(row)
            ev2, _ = validate({k: v for k, v in row.items() if v is not None})
            if (ev is None) != (ev2 is None):
                return None
            if ev is not None:
                if ev["seq"] != int(sq[i]) or ev["ts_ms"] != int(ts[i]):
                    return None
                return (ev["seq"], ev["ts_ms"])
        return carry if n <= 1000 else None
    except Exception:
        return None


def carry_after(files, carry: tuple[int, int], n_buckets: int, max_jump: int = 0) -> tuple[int, int]:
    """The carry after reading files [(index, path)] from `carry` (exactly the scan's),
    each file proven by _fast_file_carry or else scanned without routing."""
    for fi, path in files:
        c = _fast_file_carry(str(path), carry, max_jump)
        if c is None:
            _, c = run_scan([(fi, str(path))], carry, n_buckets, route=False, max_jump=max_jump)
        carry = c
    return carry


def run_scan(files, carry, n_buckets, chunk_rows=CHUNK_ROWS, route=True, max_jump=0):
    out = []
    gen = scan(files, carry, n_buckets, chunk_rows, route, max_jump)
    with replay_gc():         # as a read task's scan (IsrflowStreamReader.read)
        while True:
            try:
                out.append(next(gen))
            except StopIteration as s:
                return out, s.value


# ----------------------------------------------------------------------------- carry files
def raw_rows_at(stream: str, positions) -> dict[int, str]:
    """{pos: the row as JSON} for stream positions (file index << 32 | row number), reading
    each file once. Used for the `raw` of rows the protocol core rejects."""
    files = list_stream_files(stream)
    want: dict[int, set] = {}
    for pos in positions:
        want.setdefault(pos >> 32, set()).add(pos & 0xFFFFFFFF)
    out = {}
    for fi, rows in want.items():
        last = max(rows)
        for rowno, (raw, text, err) in enumerate(iter_file_rows(files[fi])):
            if rowno in rows:
                out[(fi << 32) | rowno] = row_to_json(raw, text)
            if rowno >= last:
                break
    return out


def carry_path(carry_dir: str, k: int) -> str:
    return os.path.join(carry_dir, f"{k}.json")


def load_carry(carry_dir: str, stream: str, k: int, n_buckets: int, max_jump: int = 0) -> tuple[int, int]:
    if k == 0:
        return (0, 0)
    try:
        with open(carry_path(carry_dir, k), encoding="utf-8") as fh:
            d = json.load(fh)
        return (int(d["last_seq"]), int(d["max_ts"]))
    except (OSError, ValueError, KeyError):
        pass
    # not recorded (lost, or another writer): recompute from the first k files
    files = list_stream_files(stream)[:k]
    if len(files) < k:
        raise SourceError(f"stream {stream} has {len(files)} files, the checkpoint has consumed {k}")
    carry = carry_after([(i, str(f)) for i, f in enumerate(files)], (0, 0), n_buckets, max_jump)
    save_carry(carry_dir, k, carry)
    return carry


def save_carry(carry_dir: str, k: int, carry: tuple[int, int]) -> None:
    os.makedirs(carry_dir, exist_ok=True)
    final = carry_path(carry_dir, k)
    tmp = f"{final}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"last_seq": carry[0], "max_ts": carry[1]}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)


# ----------------------------------------------------------------------------- Spark API
try:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark without the Python data source API
    DataSource = DataSourceStreamReader = SupportsTriggerAvailableNow = object
    InputPartition = object


class _Part(InputPartition):
    """Files [start, end) of a micro-batch whose files are [batch_start, ...)."""
    def __init__(self, start: int, end: int, files: list, batch_start: int | None = None, prior: list = ()):
        self.start, self.end, self.files = start, end, files
        self.batch_start = start if batch_start is None else batch_start
        self.prior = list(prior)      # files [batch_start, start): their carry leads to ours


class IsrflowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict):
        self.path = options["path"]
        self.carry_dir = options["carry_dir"]
        self.n_buckets = int(options["n_buckets"])
        self.keys = group_keys(self.n_buckets, int(options.get("key_shuffle") or 0))
        self.chunk_rows = int(options.get("chunk_rows") or CHUNK_ROWS)
        self.max_jump = int(options.get("max_time_jump_ms") or 0)
        mf = options.get("max_files_per_trigger")
        self.max_files = int(mf) if mf not in (None, "", "None") else None
        self.target = None

    def _files(self):
        return list_stream_files(self.path)

    def initialOffset(self) -> dict:
        return {"files": 0, "last": ""}

    def getDefaultReadLimit(self):
        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = len(self._files())

    def _check(self, files, off: dict) -> None:
        k = off["files"]
        if k and (len(files) < k or files[k - 1].name != off["last"]):
            raise SourceError(f"stream {self.path}: file #{k} is no longer {off['last']!r} (files must only be "
                              "added, with names that sort after the consumed ones)")

    def latestOffset(self, start: dict, limit) -> dict:
        files = self._files()
        self._check(files, start)
        n = len(files) if self.target is None else min(self.target, len(files))
        k = start["files"]
        if isinstance(limit, ReadMaxFiles):
            n = min(n, k + limit.max_files)
        if n <= k:
            return start
        return {"files": n, "last": files[n - 1].name}

    def partitions(self, start: dict, end: dict):
        s, e = start["files"], end["files"]
        if e <= s:
            return []
        files = self._files()
        self._check(files, end)
        # one read task per file (they run in parallel): each derives the order-check carry
        # at its first file from the batch's carry (see carry_after), so the check is the
        # same sequential one as a single task's
        return [_Part(i, i + 1, [(i, str(files[i]))], s, [(j, str(files[j])) for j in range(s, i)])
                for i in range(s, e)]

    def read(self, partition):
        carry = self._carry_at(partition)
        gen = scan(partition.files, carry, self.n_buckets, self.chunk_rows, max_jump=self.max_jump)
        keys = self.keys
        while True:
            try:
                # the scan builds a tuple per row, which only reference counting needs to free: it
                # works without automatic collections (with them, on the bench's 1M rows at 1k
                # partitions, ~2,500 young collections, 0.3-0.5 s of a ~3 s scan, more in a worker
                # holding pandas and pyarrow); the worker's code between two rows runs with them
                with replay_gc():
                    row = next(gen)
            except StopIteration as s:
                save_carry(self.carry_dir, partition.end, s.value)
                return
            yield (keys[row[0]],) + row[1:]

    def _carry_at(self, partition) -> tuple[int, int]:
        k = partition.start
        if k == partition.batch_start or os.path.exists(carry_path(self.carry_dir, k)):
            return load_carry(self.carry_dir, self.path, k, self.n_buckets, self.max_jump)
        # from the nearest carry recorded before k (by this batch's earlier tasks, which start in
        # file order), else the batch's own: a batch of n files then derives O(n) file carries in
        # all, not one per earlier file per task. A carry at j is a function of the first j files.
        j = next((i for i in range(k - 1, partition.batch_start, -1)
                  if os.path.exists(carry_path(self.carry_dir, i))), partition.batch_start)
        carry = load_carry(self.carry_dir, self.path, j, self.n_buckets, self.max_jump)
        carry = carry_after([f for f in partition.prior if f[0] >= j], carry, self.n_buckets, self.max_jump)
        save_carry(self.carry_dir, k, carry)
        return carry

    def commit(self, end: dict) -> None:
        pass


class IsrflowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema):
        return IsrflowStreamReader(self.options)
