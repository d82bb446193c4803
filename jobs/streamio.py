"""Reading an input stream directory (SPEC section 2) without Spark.

A stream is a directory of JSON-lines or Parquet files; file NAMES give the
stream order (not modification times). Hidden (``.``) and ``_``-prefixed
files are ignored, sub-directories are not read.
"""

import json
import sys
from itertools import repeat
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from protocol.cluster import CREATING_TYPES, Foreign, creation_of
from schemas._derive import fits, is_text, safe_text
from schemas.events import ValidEvent, plain_event_maker, plain_rows
from schemas.tables import arrow_schema

# Parquet batches find their plain rows column-wise (schemas.events.plain_rows); tests turn it off
# to compare with the row path
PLAIN_ROWS = True

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
STREAM_SUFFIXES = JSON_SUFFIXES + PARQUET_SUFFIXES


class StreamError(Exception):
    """The stream path cannot be read (missing, not a stream, unreadable)."""


def _is_stream_file(p: Path) -> bool:
    return (
        not p.name.startswith((".", "_"))
        and p.suffix.lower() in STREAM_SUFFIXES
        and p.is_file()
    )


def list_stream_files(path) -> list[Path]:
    """The stream's files in name order. `path` may also be a single file."""
    p = Path(path)
    if p.is_file():
        if p.suffix.lower() not in STREAM_SUFFIXES:
            raise StreamError(f"{p}: not a stream file (expected {', '.join(STREAM_SUFFIXES)})")
        return [p]
    if not p.exists():
        raise StreamError(f"stream {p} does not exist")
    if not p.is_dir():
        raise StreamError(f"stream {p} is neither a directory nor a file")
    try:
        entries = list(p.iterdir())
    except OSError as e:
        raise StreamError(f"cannot list stream directory {p}: {e.strerror or e}") from e
    return sorted((f for f in entries if _is_stream_file(f)), key=lambda f: f.name)


RawRow = tuple[Optional[dict], Optional[str], Optional[str]]

# Bad input never ends a replay: whatever a stream file holds, its rows come out of here as
# (row, text, None) or (None, text, reason); a reason names the file and the line / row.


def _escaped(line: str) -> str:
    """A line read with surrogateescape, its undecodable bytes written as \\xNN."""
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _utf8_error(line: str) -> str:
    i = next(i for i, c in enumerate(line) if "\udc80" <= c <= "\udcff")
    return f"not valid UTF-8 (byte \\x{ord(line[i]) - 0xDC00:02x} at character {i + 1})"


def to_ipc(tbl: pa.Table) -> bytes:
    """An Arrow table as IPC stream bytes (how a table crosses a process: Spark rows, replay workers)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tbl.schema) as w:
        w.write_table(tbl)
    return sink.getvalue().to_pybytes()


def from_ipc(data) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(bytes(data))).read_all()


_orjson_loads = orjson.loads


def _has_float(v) -> bool:
    t = type(v)
    if t is float:
        return True
    if t is list:
        return any(_has_float(x) for x in v)
    if t is dict:
        return any(_has_float(x) for x in v.values())
    return False


def _loads_no_float(line: str):
    """json.loads, through orjson first (about 3x faster), for a line in which no number can be one orjson
    reads as a float (see _float_free). A line orjson refuses -- bad JSON, but also what Python's json reads
    and orjson does not (NaN, lone surrogate escapes, nesting past 1024) -- is read by json.loads, and so is
    a value that is not an object (json's value for the reason)."""
    try:
        obj = _orjson_loads(line)
    except ValueError:
        return json.loads(line)
    if type(obj) is not dict:
        return json.loads(line)
    return obj


def _loads(line: str):
    """_loads_no_float for any line: a row orjson read with a float in it is read again by json.loads, since
    orjson turns an integer past 64 bits into a float where json keeps the integer (and no event column is
    a float: such a row is rejected either way, with json's value in the reason). Rows and error texts are
    exactly json's."""
    obj = _loads_no_float(line)
    if type(obj) is dict:
        for v in obj.values():
            if type(v) is float or (type(v) in (list, dict) and _has_float(v)):
                return json.loads(line)
    return obj


_DIGITS_AS_0 = bytes.maketrans(b"123456789", b"000000000")
_FLOAT_MARKS = (b"0.", b"0e", b"0E", b"0" * 19)
_CHUNK = 1 << 23


def _float_free(f: Path) -> bool:
    """Can no number in the file be one orjson reads as a float? A JSON number is read as a float only with
    a fraction or an exponent (a digit then '.', 'e' or 'E') or past 64 bits (19 digits or more): if the file
    has no such bytes anywhere (strings included: a false alarm only costs the slower check), every line
    orjson reads is exactly json's and _loads' per-value float check can be skipped (a whole stream read
    about 1.2x faster)."""
    try:
        with open(f, "rb") as fh:
            tail = b""
            while True:
                chunk = fh.read(_CHUNK)
                if not chunk:
                    return True
                t = tail + chunk.translate(_DIGITS_AS_0)
                if any(m in t for m in _FLOAT_MARKS):
                    return False
                tail = t[-18:]
    except OSError:
        return False            # the read below reports it


def _iter_json(f: Path) -> Iterator[RawRow]:
    # Text mode: json.loads(str) is ~1.5x faster than on bytes. Bytes that are not UTF-8 come
    # in as lone surrogates (surrogateescape): such a line is rejected (JSON is UTF-8; a topic
    # name must not silently change), its raw text shows them as \xNN.
    name = safe_text(f.name)
    loads = _loads_no_float if _float_free(f) else _loads
    try:
        fh = open(f, "r", encoding="utf-8", errors="surrogateescape", newline="\n")
    except OSError as e:
        raise StreamError(f"cannot open {f}: {e.strerror or e}") from e
    with fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            if not line.isascii():
                if lineno == 1 and line[0] == "\ufeff":  # a byte order mark
                    line = line[1:].strip()
                    if not line:
                        continue
                if not is_text(line):
                    yield None, _escaped(line), f"{name} line {lineno}: {_utf8_error(line)}"
                    continue
            try:
                obj = loads(line)
            except ValueError as e:  # includes integers of more than 4300 digits
                yield None, line, f"{name} line {lineno}: not valid JSON: {e}"
                continue
            except RecursionError:
                yield None, line, f"{name} line {lineno}: not valid JSON: nested too deeply"
                continue
            if type(obj) is not dict:
                yield None, line, f"{name} line {lineno}: not a JSON object (got {type(obj).__name__})"
                continue
            yield obj, line, None


class Unreadable:
    """A Parquet value Python cannot hold (e.g. a date out of range): the validator rejects it
    as a value of the wrong type, `rejected.raw` shows the reason."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"<unreadable: {self.why}>"

    __str__ = __repr__


def _scalar(a: pa.Array, i: int) -> Any:
    try:
        return a[i].as_py()
    except UnicodeDecodeError:
        # a string column holding bytes that are not UTF-8: the bytes (the row is rejected: a
        # string column must hold a string)
        try:
            return a.view(pa.binary() if pa.types.is_string(a.type) else pa.large_binary())[i].as_py()
        except Exception as e:  # pragma: no cover - nested strings
            return Unreadable(f"{a.type}: {e}")
    except Exception as e:
        return Unreadable(f"{a.type}: {e}")


def _column(a) -> tuple[list, bool]:
    """to_pylist of one column, and whether every value converted as is; values Python cannot
    convert come out as bytes / Unreadable (then False)."""
    try:
        if pa.types.is_string(a.type) or pa.types.is_large_string(a.type):
            return _strings(a), True
        return a.to_pylist(), True
    except Exception:
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        return [_scalar(a, i) for i in range(len(a))], False


def _strings(a) -> list:
    """to_pylist of a string column, each distinct value one interned object: an event's type and
    topic repeat row after row, and one shared object is made once (faster than a new object per
    row), pickles once per chunk (the Spark source), and compares with the core's stored partition
    key by identity. Invalid UTF-8 raises, as to_pylist does."""
    d = a.dictionary_encode()
    values = [None if s is None else sys.intern(s) for s in d.dictionary.to_pylist()]
    idx = d.indices
    if idx.null_count:
        values.append(None)
        idx = pc.fill_null(idx, len(values) - 1)
    return list(map(values.__getitem__, idx.to_pylist()))


class Plain:
    """The text slot of a plain Parquet row read with iter_raw_rows(events=True), whose dict is
    its validated event already (every event column), or with events=VALUES, whose values are
    (the row's own values, in its columns' order); `names` are the row's own columns, in the
    file's order, which row_to_json gives back if the core rejects the row. `key(values)` gives
    the row's (seq, ts_ms, type, topic, partition), None for a column the batch does not hold."""

    __slots__ = ("names", "key")

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.key = _key_getter(names)


_KEYS: dict[tuple, Callable] = {}


def _key_getter(names: tuple[str, ...]) -> Callable:
    """One function per column layout, generated once: (seq, ts_ms, type, topic, partition) of a
    values tuple, by position."""
    get = _KEYS.get(names)
    if get is None:
        parts = ", ".join(f"v[{names.index(c)}]" if c in names else "None"
                          for c in ("seq", "ts_ms", "type", "topic", "partition"))
        if len(_KEYS) >= 256:           # bounded whatever layouts the stream's files have
            _KEYS.clear()
        get = _KEYS[names] = eval(f"lambda v: ({parts})")  # noqa: S307 - built from column names we checked
    return get


# iter_raw_rows(events=VALUES): a plain row as its values tuple (see Plain), not its event dict
VALUES = "values"


def _iter_parquet(f: Path, batch_rows: int, foreign=None, events: bool | str = False) -> Iterator[RawRow]:
    for batch in _parquet_batches(f, batch_rows):
        if batch.__class__ is tuple:
            yield batch
        else:
            yield from _batch_rows(batch, foreign, events)


def _parquet_batches(f: Path, batch_rows: int) -> Iterator[Any]:
    """The record batches of one Parquet file; a file or a row group that cannot be read ends them
    with one rejected row (a RawRow tuple) that stands for the rest."""
    name = safe_text(f.name)
    try:
        with open(f, "rb"):
            pass
    except OSError as e:
        raise StreamError(f"cannot open {f}: {e.strerror or e}") from e
    try:
        pf = pq.ParquetFile(f)
    except Exception as e:  # ArrowInvalid ...: not a Parquet file
        yield None, None, safe_text(f"{name}: not a readable Parquet file: {e}")
        return
    done = 0
    batches = pf.iter_batches(batch_size=batch_rows)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as e:  # a corrupt row group
            yield None, None, safe_text(f"{name}: cannot read the Parquet rows after row {done}: {e}")
            return
        done += batch.num_rows
        yield batch


def _batch_rows(batch: pa.RecordBatch, foreign=None, events: bool | str = False,
                plain: list | None = None) -> Iterator[RawRow]:
    """The rows of one Parquet batch, see iter_raw_rows. plain: plain_rows of the batch when the
    caller has it already (jobs.windows: the rows around a batch's windows)."""
    # columns that are null throughout the batch are left out of the
    # dicts (absent == null for the validator): far fewer keys per row
    n = batch.num_rows
    keep = [i for i, c in enumerate(batch.columns) if c.null_count < n]
    if not keep:  # every column null (or none at all): still n rows, each rejected
        for _ in range(n):
            yield {}, None, None
        return
    names = [batch.schema.names[i] for i in keep]
    conv = [_column(batch.column(i)) for i in keep]
    cols = [c for c, _ in conv]
    if not PLAIN_ROWS or not all(exact for _, exact in conv):
        plain = None
    elif plain is None:
        plain = plain_rows(batch)
    make = (VALUES if events is VALUES else plain_event_maker(tuple(names))) if plain and events else None
    if make is not None:
        yield from _plain_events(names, cols, plain, foreign, make)
        return
    # the plain rows as ValidEvents (validate only pads them), every other row as a dict
    for ok, vals in zip(plain or repeat(False), zip(*cols)):
        yield (ValidEvent if ok else dict)(zip(names, vals)), None, None


def _plain_events(names: list, cols: list, plain: list, foreign, make) -> Iterator[RawRow]:
    """_iter_parquet's rows with events=True: a plain row as (its event, Plain, None), made by
    `make` (schemas.events.plain_event_maker; make VALUES: its values tuple), or Foreign when foreign(type, topic, partition)
    gives it to another worker (a plain row holds its seq, ts_ms and type; a column null throughout
    the batch is absent: None); every other row as its raw dict, for validate()."""
    layout = Plain(tuple(names))
    if make is VALUES:
        for ok, vals in zip(plain, zip(*cols)):
            yield (vals, layout, None) if ok else (dict(zip(names, vals)), None, None)
        return
    if foreign is None:
        for ok, vals in zip(plain, zip(*cols)):
            if ok:
                yield make(*vals), layout, None
            else:
                yield dict(zip(names, vals)), None, None
        return
    col = {n: c for n, c in zip(names, cols)}
    nones = repeat(None)
    for ok, vals, typ, topic, part, seq, ts, replicas, config in zip(plain, zip(*cols), *(
            col.get(c, nones) for c in ("type", "topic", "partition", "seq", "ts_ms", "replicas", "config"))):
        if not ok:
            yield dict(zip(names, vals)), None, None
        elif foreign(typ, topic, part):
            # another worker's creation still tells this one that its topic exists (its factor, its config);
            # the type is tested here, not in creation_of, to save a call per foreign row
            made = creation_of(typ, topic, replicas, config) if typ in CREATING_TYPES else None
            yield Foreign(seq, ts, made), None, None
        else:
            yield make(*vals), layout, None


def iter_file_rows(f: Path, batch_rows: int = 65536, foreign=None, events: bool | str = False) -> Iterator[RawRow]:
    """Rows of one stream file, see iter_raw_rows."""
    if f.suffix.lower() in PARQUET_SUFFIXES:
        return _iter_parquet(f, batch_rows, foreign, events)
    return _iter_json(f)


def iter_raw_rows(path, batch_rows: int = 65536, foreign=None, events: bool | str = False) -> Iterator[RawRow]:
    """Every row of the stream in stream order, as
    (raw dict or None, raw text or None, parse error or None).

    * JSON lines: raw text is the line; a line that is not valid JSON or not
      an object gives (None, text, "part-000.jsonl line 7: not valid JSON:
      ..."). Blank lines are skipped.
    * Parquet: raw text is None (use ``row_to_json(raw)`` when a rejected
      row needs its JSON); map columns come as lists of (key, value) pairs,
      which ``schemas.events.validate`` accepts.
    * foreign: a worker's predicate (type, topic, partition) -> bool (Cluster.is_foreign); a plain
      Parquet row it holds comes as (Foreign(seq, ts_ms), None, None). Only with events=True (a
      worker reads the rows it owns as events; not with events=VALUES).
    * events: a plain Parquet row (schemas.events.plain_rows) comes as (the event dict validate()
      would return for it, Plain(its columns), None), made without the raw row's dict; with
      events=VALUES as (its values tuple, Plain(its columns), None), for a reader that ships rows
      on rather than applying them (the Spark source); a reader that validates every row itself
      leaves it off.
    """
    if foreign is not None and events is not True:
        raise ValueError("iter_raw_rows: foreign needs events=True")
    for f in list_stream_files(path):
        yield from iter_file_rows(f, batch_rows, foreign, events)


def row_to_json(raw: Optional[dict], raw_text: Optional[str] = None) -> str:
    """The JSON text of a raw row for ``rejected.raw``: the original line when
    there is one, otherwise the dict without its null columns."""
    if raw_text.__class__ is Plain:
        # a plain row read as its event (iter_raw_rows(events=True)) or its values (events=VALUES):
        # its own columns, in its order
        raw = dict(zip(raw_text.names, raw)) if raw.__class__ is tuple else {n: raw[n] for n in raw_text.names}
    elif raw_text is not None:
        return safe_text(raw_text)
    if raw is None:
        return "null"
    try:
        clean = {k: (dict(v) if _is_pairs(v) else v) for k, v in raw.items() if v is not None}
        return json.dumps(clean, default=str, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        # map keys JSON cannot hold (bytes, structs ...): every key as text
        return json.dumps(_jsonable(raw), default=str, separators=(",", ":"))


def _is_pairs(v) -> bool:
    return type(v) is list and bool(v) and all(type(x) is tuple and len(x) == 2 for x in v)


def _jsonable(v, depth: int = 0):
    if depth > 50:
        return safe_text(repr(v))
    if isinstance(v, dict):
        return {safe_text(str(k)): _jsonable(x, depth + 1) for k, x in v.items() if x is not None}
    if _is_pairs(v):
        return {safe_text(str(k)): _jsonable(x, depth + 1) for k, x in v}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in v]
    if v is None or type(v) in (bool, int, float):
        return v
    return safe_text(str(v))


# The common columns an invalid row may still give `rejected`, each only when its value fits
# the column's type there (an out-of-range seq or partition, a lone surrogate in a topic, would
# otherwise fail the whole micro-batch when Arrow converts it).
_REJECTED = arrow_schema("rejected")
_LOOSE = tuple((k, _REJECTED.field(k).type) for k in ("topic", "partition", "seq", "ts_ms"))


def loose(raw) -> dict:
    """Best-effort common columns of an invalid row for the rejected table."""
    if not isinstance(raw, dict):
        return {}
    out = {}
    for k, t in _LOOSE:
        v = raw.get(k)
        if v is not None and fits(v, t):
            out[k] = v
    return out
