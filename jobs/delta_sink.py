"""Writing output tables with delta-rs, each micro-batch exactly once.

Layout: ``<tables_dir>/<table>/`` is one Delta table per entry of
``schemas.tables.TABLES``.

Idempotency (see research/spark_notes.md Q6): every write carries the Delta
app transaction ``(app_id, batch_id)``. Before writing a table for batch N
the sink reads that table's recorded ``transaction_version(app_id)`` and
skips the table if it is >= N (delta-rs does not enforce monotonicity, so
the guard is here). Each table is guarded independently, so a crash between
two tables' commits is repaired by replaying the batch: tables that already
have batch N skip it, the others write it. A table with no rows for a batch
is not written at all (its replay has no rows either). ``progress`` is
written last, so its row for batch N means every table has batch N.
One writer at a time per table and app_id is assumed (the native sink's driver and
executors take turns on a table; `refresh` reads the other's commits before a skip check).

``partition_state`` holds one row per (topic, partition); the sink keeps the
full latest state in memory as one Arrow table in key order (loaded from the
table on start) with each key's row position, upserts each batch's changed
partitions into it (a `take` when every key is known, a sort when some are
new) and overwrites the table, with the same guard. A batch thus converts
only its own rows, not the whole state, from Python to Arrow.
"""

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake

from schemas.tables import TABLES, arrow_schema, rows_to_arrow


class SinkError(Exception):
    """A readable error about the tables directory or a table."""


Rows = Union[list[dict], pa.Table]


def _plain_type(t: pa.DataType) -> pa.DataType:
    """The same type without view layouts (PySpark and many readers reject
    string_view / binary_view / list_view)."""
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        vf = t.value_field
        inner = pa.field(vf.name, _plain_type(vf.type), vf.nullable)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            pa.field(t.key_field.name, _plain_type(t.key_type), False),
            pa.field(t.item_field.name, _plain_type(t.item_type), t.item_field.nullable),
        )
    return t


def plain_arrow(table) -> pa.Table:
    """arro3 / pyarrow table -> pyarrow table without view types."""
    if not isinstance(table, pa.Table):
        table = pa.table(table)
    schema = pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in table.schema])
    return table if schema == table.schema else table.cast(schema)


def _to_arrow_table(dt: DeltaTable, columns=None, filter=None) -> pa.Table:
    """The table's current snapshot, read with pyarrow over the active files.

    Not dt.to_pyarrow_table() / to_pyarrow_dataset(): with deltalake 1.6.6
    these scan through delta-rs's object store and the interpreter then
    often aborts at exit ("terminate called without an active exception",
    rc 134; delta-io/delta-rs#2184). Reading the log's active Parquet files
    is exact for tables without deletion vectors or column mapping (delta-rs
    writes neither); other tables fall back to delta-rs."""
    proto = dt.protocol()
    features = set(proto.reader_features or [])
    if features & {"deletionVectors", "columnMapping"}:
        t = dt.to_pyarrow_table()
        t = t.filter(filter) if filter is not None else t
        return t.select(columns) if columns is not None else t
    schema = pa.schema(dt.schema().to_arrow())
    # file_uris() percent-encodes (spaces, <, >, ...): turn file:// URIs back into plain paths
    from urllib.parse import unquote, urlparse
    files = []
    for u in dt.file_uris():
        pu = urlparse(u)
        files.append(unquote(pu.path) if pu.scheme in ("file", "") else u)
    # columns / filter (a pyarrow.compute expression): read only those (the scan skips the rest)
    return pds.dataset(files, format="parquet", schema=schema).to_table(columns=columns, filter=filter)


def _ensure_dir(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SinkError(f"cannot create tables directory {root}: {e.strerror or e}") from e
    if not root.is_dir():
        raise SinkError(f"tables directory {root} is not a directory")
    probe = root / f".isrflow-write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise SinkError(f"tables directory {root} is not writable: {e.strerror or e}") from e


def _field_names(schema: pa.Schema) -> list[str]:
    return list(schema.names)


class DeltaSink:
    """One Delta table per output table under `tables_dir`; commit() writes a
    micro-batch to all of them exactly once."""

    def __init__(self, tables_dir: str, app_id: str = "isrflow"):
        self.root = Path(tables_dir)
        self.app_id = app_id
        _ensure_dir(self.root)
        self._dts: dict[str, DeltaTable] = {}
        for name in TABLES:
            self._dts[name] = self._open_or_create(name)
        # partition_state as committed (read back on a restart), in key order
        want = arrow_schema("partition_state")
        have = _to_arrow_table(self._dts["partition_state"])
        self._state = _keyed(have.select(want.names).cast(want))

    # -- tables ------------------------------------------------------------
    def table_path(self, name: str) -> str:
        return str(self.root / name)

    def _open_or_create(self, name: str) -> DeltaTable:
        path = self.table_path(name)
        want = arrow_schema(name)
        try:
            if DeltaTable.is_deltatable(path):
                dt = DeltaTable(path)
                have = pa.schema(dt.schema().to_arrow())
                if _field_names(have) != _field_names(want):
                    raise SinkError(
                        f"table {name} at {path} has columns {_field_names(have)}, "
                        f"expected {_field_names(want)}: it was written by another version; "
                        f"use a fresh --tables directory"
                    )
                return dt
            if os.path.exists(path) and os.listdir(path):
                raise SinkError(f"{path} exists and is not a Delta table")
            return DeltaTable.create(path, schema=want)
        except SinkError:
            raise
        except Exception as e:
            raise SinkError(f"cannot open or create table {name} at {path}: {e}") from e

    def refresh(self, names) -> None:
        """Brings these tables' snapshots up to date with commits made by another writer since this
        sink last read them (the native sink's executors append to the tables its driver also commits
        to), so that the skip of a batch a table already holds sees them."""
        for name in names:
            try:
                self._dts[name].update_incremental()
            except Exception as e:
                raise SinkError(f"cannot read table {name} at {self.table_path(name)}: {e}") from e

    def committed_batch(self, name: str) -> Optional[int]:
        """The last batch id recorded in table `name` by this app (None: none)."""
        return self._dts[name].transaction_version(self.app_id)

    def _done(self, name: str, batch_id: int) -> bool:
        v = self._dts[name].transaction_version(self.app_id)
        return v is not None and v >= batch_id

    def _to_arrow(self, name: str, rows: Rows) -> pa.Table:
        if isinstance(rows, pa.Table):
            want = arrow_schema(name)
            try:
                data = rows.select(want.names).cast(want)
            except Exception as e:
                raise SinkError(f"{name}: batch does not match the table schema: {e}") from e
            for f in want:
                if not f.nullable and data.column(f.name).null_count:
                    raise SinkError(f"{name}.{f.name} is required but the batch has nulls in it")
            return data
        try:
            return rows_to_arrow(name, rows)
        except ValueError as e:
            raise SinkError(str(e)) from e

    def _write(self, name: str, data: pa.Table, batch_id: int, mode: str) -> None:
        dt = self._dts[name]
        props = CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)])
        try:
            write_deltalake(dt, data, mode=mode, commit_properties=props)
            dt.update_incremental()
        except Exception as e:
            raise SinkError(f"writing batch {batch_id} to table {name} at {self.table_path(name)} failed: {e}") from e

    # -- the micro-batch ---------------------------------------------------
    def commit(
        self,
        batch_id: int,
        rows_by_table: dict[str, Rows],
        partition_state: Optional[Rows] = None,
    ) -> dict[str, int]:
        """Append each table's rows of micro-batch `batch_id` exactly once and
        upsert `partition_state` rows (by topic, partition).

        Returns {table: rows written} (0 for tables skipped because they
        already hold this batch, or that had no rows)."""
        if batch_id < 0:
            raise SinkError(f"batch id must be >= 0, got {batch_id}")
        unknown = set(rows_by_table).difference(TABLES)
        if unknown or "partition_state" in rows_by_table:
            bad = sorted(unknown | ({"partition_state"} & set(rows_by_table)))
            raise SinkError(
                f"unknown table(s) {bad} in batch {batch_id} "
                f"(partition_state goes in the partition_state argument)"
            )
        written: dict[str, int] = {}
        order = [n for n in TABLES if n in rows_by_table and n != "progress"]
        if partition_state is not None:
            order.append("partition_state")
        if "progress" in rows_by_table:
            order.append("progress")
        for name in order:
            if name == "partition_state":
                written[name] = self._commit_state(batch_id, partition_state)
                continue
            rows = rows_by_table[name]
            n = rows.num_rows if isinstance(rows, pa.Table) else len(rows)
            if n == 0 or self._done(name, batch_id):
                written[name] = 0
                continue
            self._write(name, self._to_arrow(name, rows), batch_id, "append")
            written[name] = n
        return written

    def _commit_state(self, batch_id: int, rows: Rows) -> int:
        new = self._to_arrow("partition_state", rows)
        if new.num_rows:
            self._state = _upsert(self._state, new)
        if not new.num_rows or self._done("partition_state", batch_id):
            return 0
        self._write("partition_state", self._state, batch_id, "overwrite")
        return self._state.num_rows

    @property
    def partition_state(self) -> dict[tuple, dict]:
        """Latest partition_state row per (topic, partition), as committed."""
        return {(r["topic"], r["partition"]): r for r in self._state.to_pylist()}

    def table(self, name: str) -> DeltaTable:
        return self._dts[name]


def _key_codes(t: pa.Table, topics: pa.Array) -> np.ndarray:
    """Each row's (topic, partition) as one int64 that orders as the pair does: the topic's index
    in `topics` (sorted, so the index orders as the name) times 2**32, plus the partition (an
    int32, so it never reaches the next topic's range)."""
    code = pc.index_in(t.column("topic"), value_set=topics).to_numpy(zero_copy_only=False)
    part = t.column("partition").to_numpy()
    return code.astype(np.int64) * (1 << 32) + part.astype(np.int64)


def _keyed(t: pa.Table) -> pa.Table:
    """t in key order (Arrow orders strings by UTF-8 bytes, which is Python's code point order)."""
    return t.sort_by([("topic", "ascending"), ("partition", "ascending")])


def _upsert(state: pa.Table, new: pa.Table) -> pa.Table:
    """state (in key order) with new's rows replacing those of the same key (the last one of a key
    in new wins) and the new keys added, in key order. Column-wise: at 100k partitions a batch
    upserts ~100k rows; a Python loop over the keys placed the two batches of a 1M-row replay in
    0.51 s, this in 0.14 s (docs/core-speed.md)."""
    n, m = state.num_rows, new.num_rows
    topics = pc.unique(pa.chunked_array(state.column("topic").chunks + new.column("topic").chunks,
                                        type=state.schema.field("topic").type))
    topics = topics.take(pc.array_sort_indices(topics))
    ks, kn = _key_codes(state, topics), _key_codes(new, topics)
    # new's keys, each once (its last row), in key order: a stable sort keeps a key's rows in input
    # order, so the last of each run of equal keys is the key's last row
    order = np.argsort(kn, kind="stable")
    kn = kn[order]
    last = np.ones(m, dtype=bool)
    last[:-1] = kn[1:] != kn[:-1]
    rows_new, kn = order[last], kn[last]
    if n == 0:
        return new.take(pa.array(rows_new))
    at = np.searchsorted(ks, kn)
    found = at < n
    found[found] = ks[at[found]] == kn[found]
    both = pa.concat_tables([state, new])
    if found.all():
        idx = np.arange(n, dtype=np.int64)
        idx[at] = n + rows_new
        return both.take(pa.array(idx))
    keep = np.ones(n, dtype=bool)
    keep[at[found]] = False
    rows = np.concatenate([np.flatnonzero(keep), n + rows_new])
    keys = np.concatenate([ks[keep], kn])
    return both.take(pa.array(rows[np.argsort(keys, kind="stable")]))


# -- reading -----------------------------------------------------------------


def _open(tables_dir, name: str) -> DeltaTable:
    path = os.path.join(str(tables_dir), name)
    if not DeltaTable.is_deltatable(path):
        raise SinkError(f"no Delta table {name!r} under {tables_dir}")
    return DeltaTable(path)


def read_table(tables_dir: str, name: str, columns=None, filter=None) -> pa.Table:
    """The current content of one table as a pyarrow Table (optionally only `columns`, and the rows
    the pyarrow.compute expression `filter` keeps)."""
    return plain_arrow(_to_arrow_table(_open(tables_dir, name), columns, filter))


def list_tables(tables_dir: str) -> list[str]:
    """Names of the Delta tables under tables_dir (sorted)."""
    root = Path(tables_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and DeltaTable.is_deltatable(str(p)))


def sql(tables_dir: str, query: str) -> pa.Table:
    """Run a DataFusion SQL query over every table under tables_dir, each
    registered under its name (``SELECT * FROM metadata_log ...``)."""
    names = list_tables(tables_dir)
    if not names:
        raise SinkError(f"no Delta tables under {tables_dir}")
    qb = QueryBuilder()
    for name in names:
        qb.register(name, DeltaTable(os.path.join(str(tables_dir), name)))
    try:
        result = qb.execute(query).read_all()
    except Exception as e:
        raise SinkError(f"SQL failed: {e}") from e
    return plain_arrow(result)
