"""Reading a KRaft metadata log: a `__cluster_metadata-0` directory, one segment or snapshot file, or the text
that `kafka-dump-log --cluster-metadata-decoder` prints.

Bad input never stops the import and is never skipped silently: every problem becomes an ``Issue``
(file, byte offset, what, how many records it cost) and the rest is read.
"""
from __future__ import annotations

import json
import re
import struct
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path

from ..local_engine import replay_gc
from . import codec
from .codec import (BATCH_HEADER, COMPRESSION, CONTROL_NAMES, METADATA_NAMES, TOKEN_TO_KEY, DecodeError,
                    UnknownRecord, crc32c, decode_control_value, decode_metadata_value, decompress)

_HDR = struct.Struct(">qiibIhiqqqhii")
# frame, apiKey, version, partitionId, topicId, tagged-field count, first tag, its size, ISR length + 1
_PCR_HEAD = struct.Struct(">BBBi16sBBBB")


_RecBase = namedtuple("_RecBase", "file pos base_offset offset epoch ts control type api_key version data snapshot batch")


class Rec(_RecBase):
    """One record of the metadata log (or of a snapshot). A tuple (built with ``_new``, no __init__ cost):

    file, pos (byte position of its batch in the file; None for text), base_offset, offset, epoch (the raft
    epoch of the batch: partitionLeaderEpoch), ts (append time, ms), control, type (PartitionChangeRecord,
    LeaderChange, ... or Unknown(<key>)), api_key (control records: -100 - control type), version, data (Kafka's
    JSON view, tagged fields at their default left out; None: undecoded), snapshot (snapshot file name, None
    for the log), batch (running batch number: batch grouping)."""

    __slots__ = ()

    def __repr__(self):
        return f"Rec({self.offset} {self.type} v{self.version} {self.data})"


_new = tuple.__new__


def mkrec(file, pos, base_offset, offset, epoch, ts, control, type_, api_key, version, data, snapshot=None, batch=0):
    return _new(Rec, (file, pos, base_offset, offset, epoch, ts, control, type_, api_key, version, data, snapshot,
                      batch))


@dataclass
class Issue:
    file: str
    pos: int | None           # byte offset in the file (line number for text dumps, see `unit`)
    kind: str                 # truncated | crc | magic | compression | record | unknown-type | unknown-version | ...
    message: str
    skipped: int = 0          # records not imported because of it
    unit: str = "byte"

    def text(self) -> str:
        where = f"{self.file}" + (f" at {self.unit} {self.pos}" if self.pos is not None else "")
        return f"{where}: {self.message}" + (f" ({self.skipped} record(s) skipped)" if self.skipped else "")


@dataclass
class MetaLog:
    records: list = field(default_factory=list)        # the log, offset order
    snapshots: dict = field(default_factory=dict)      # file name -> (end offset, epoch, [Rec])
    issues: list = field(default_factory=list)
    files: list = field(default_factory=list)
    base_snapshot: str | None = None                  # snapshot the history starts from (log start > 0)
    batches: int = 0

    def skipped(self) -> int:
        return sum(i.skipped for i in self.issues)


# The cyclic garbage collector off while decoding and converting: a log's millions of small acyclic objects
# (records, their dicts and lists, events, rows) made its older generations walk the whole growing heap again
# and again, more than half of the decode time of a 1M-record log. The replay's own pause, one mechanism.
gc_paused = replay_gc


_SNAP_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint$")


class _Batches:
    n = 0


def read_binary(path: Path, issues: list, snapshot: str | None = None, counter: _Batches | None = None) -> list:
    """Every decodable record of a record-batch v2 file.

    Batch after batch: framed by its length (a batch that does not fit in the file ends the reading), trusted
    (a wrong magic or CRC skips that batch alone, as does a payload that does not decompress), and its records
    decoded (`_decode_batch`). The checks are inline and only the problems go to helpers: a log of small
    batches pays no Python call per batch but the decoding one."""
    data = path.read_bytes()
    name = path.name
    out = []
    append = out.append
    counter = counter or _Batches()
    unpack_hdr = _HDR.unpack_from
    pos = 0
    n = len(data)
    # `while True`, not `while pos < n`: CPython 3.11 specializes a function's bytecode only once an unconditional
    # backward jump (or a call) warmed it up, and `while pos < n` ends in a conditional one (unspecialized, this
    # loop costs about a tenth more on a log of one-record batches)
    while True:
        if pos >= n:
            break
        hdr = unpack_hdr(data, pos) if n - pos >= BATCH_HEADER else None
        if hdr is None or not BATCH_HEADER - 12 <= hdr[1] <= n - pos - 12:     # the length counts what follows it
            issues.append(_unframed_rest(data, pos, hdr, name))
            break
        total = 12 + hdr[1]
        if hdr[3] != 2 or crc32c(data[pos + 21:pos + total]) != hdr[4]:      # CRC-32C: after the crc field
            issues.append(_untrusted_batch(data, pos, total, hdr, name))
        else:
            buf = data[pos + BATCH_HEADER:pos + total]
            if hdr[5] & 7:
                buf = _decompressed(buf, pos, hdr, name, issues)
            if buf is not None:
                counter.n += 1
                _decode_batch(buf, hdr, name, pos, snapshot, counter.n, append, issues)
        pos += total
    return out


def _unframed_rest(data: bytes, pos: int, hdr: tuple | None, name: str) -> Issue:
    """Why nothing from `pos` on can be framed: zero padding at the end of the file, a cut header, an impossible
    length (the only way to the next batch), or a batch cut short."""
    left = len(data) - pos
    if hdr is None:
        if data[pos:].count(0) == left:
            return Issue(name, pos, "padding", f"{left} trailing zero byte(s) ignored")
        return Issue(name, pos, "truncated", f"truncated batch header: {left} byte(s) left, a header has "
                     f"{BATCH_HEADER}", skipped=1)
    base, length, last_delta, count = hdr[0], hdr[1], hdr[6], hdr[12]
    if length == 0 and base == 0 and data[pos:].count(0) == left:
        return Issue(name, pos, "padding", f"{left} trailing zero byte(s) ignored")
    if length < BATCH_HEADER - 12:
        return Issue(name, pos, "truncated", f"batch at base offset {base} has an impossible length {length}; "
                     f"the rest of the file ({left} bytes) is unreadable", skipped=max(count, 1))
    return Issue(name, pos, "truncated", f"truncated batch (base offset {base}): its header says {12 + length} "
                 f"bytes, the file has {left} left", skipped=max(last_delta + 1, count, 1))


def _untrusted_batch(data: bytes, pos: int, total: int, hdr: tuple, name: str) -> Issue:
    """Why a framed batch is skipped: not magic 2, or a CRC that does not match (the next batch is still found)."""
    base, magic, crc, count = hdr[0], hdr[3], hdr[4], hdr[12]
    if magic != 2:
        return Issue(name, pos, "magic", f"batch at base offset {base} has magic {magic}, not 2",
                     skipped=max(count, 0))
    computed = crc32c(data[pos + 21:pos + total])
    return Issue(name, pos, "crc", f"CRC mismatch in batch at base offset {base}: stored {crc:#010x}, "
                 f"computed {computed:#010x}", skipped=max(count, 0))


def _decompressed(buf: bytes, pos: int, hdr: tuple, name: str, issues: list) -> bytes | None:
    """The records of a compressed batch, or None (and the reason as an Issue): the batch is skipped."""
    codec_id = hdr[5] & 7
    try:
        return decompress(codec_id, buf)
    except Exception as e:      # noqa: BLE001 - any codec failure is reported the same way
        issues.append(Issue(name, pos, "compression", f"batch at base offset {hdr[0]}: cannot decompress "
                            f"{COMPRESSION.get(codec_id, codec_id)}: {e}", skipped=max(hdr[12], 0)))
        return None


# The hot loop of the import, deliberately one piece: the record framing (each varint read in place when it has
# one or two bytes) and the ISR-only PartitionChangeRecord (most of a busy log) cost no Python call per record;
# only control records and problems go through helpers. A record that does not frame ends its batch (the rest
# of the batch is skipped); one that frames but does not decode is skipped alone.
def _decode_batch(buf, hdr, name, pos, snapshot, bno, append, issues,
                  pcr_head=_PCR_HEAD.unpack_from, uuids=codec._UUID_CACHE, arr=codec._ARR) -> None:
    """The records of one readable batch, given to `append` (the last three arguments: bound once, as locals)."""
    base, _len, epoch, _magic, _crc, attrs, _last, base_ts, max_ts, _pid, _pep, _bseq, count = hdr
    control = bool(attrs & 0x20)
    ts_fixed = max_ts if attrs & 0x08 else None          # LogAppendTime: the broker's time for every record
    p, blen = 0, len(buf)
    try:
        for i in range(count):
            rstart = p
            b = buf[p]                                   # length
            if b < 0x80:
                rl, p = (b >> 1 if not b & 1 else -1), p + 1
            elif buf[p + 1] < 0x80:
                rl, p = ((b & 0x7F) | (buf[p + 1] << 7)) >> 1, p + 2
            else:
                rl, p = codec.read_varint(buf, p)
            rend = p + rl
            if rl <= 0 or rend > blen:
                raise DecodeError(f"record length {rl} runs past its batch", rstart)
            b = buf[p + 1]                               # timestamp delta, after the record attributes
            if b == 0:
                tsd, p = 0, p + 2
            elif b < 0x80:
                tsd, p = (b >> 1) ^ -(b & 1), p + 2
            else:
                tsd, p = codec.read_varint(buf, p + 1)
            b = buf[p]                                   # offset delta
            if b < 0x80:
                od, p = b >> 1, p + 1
            elif buf[p + 1] < 0x80:
                od, p = ((b & 0x7F) | (buf[p + 1] << 7)) >> 1, p + 2
            else:
                od, p = codec.read_varint(buf, p)
            if buf[p] == 1:                              # key -1: metadata records have none
                kl, p = -1, p + 1
            else:
                kl, p = codec.read_varint(buf, p)
            kp, p = p, (p + kl if kl > 0 else p)         # the key (control records: their type)
            b = buf[p]                                   # value
            if b < 0x80:
                vl, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                vl, p = codec.read_varint(buf, p)
            vp, p = p, rend
            offset = base + od
            ts = ts_fixed if ts_fixed is not None else base_ts + tsd
            if control:
                append(_control_record(buf, kp, kl, vp, vl, name, pos, base, offset, epoch, ts, snapshot, bno,
                                       issues))
            elif vl <= 0:
                issues.append(Issue(name, pos, "record", f"offset {offset}: record without a value", skipped=1))
            else:
                try:
                    if vl >= 27:                             # ISR-only PartitionChangeRecord: inline
                        f1, k5, v, pid, tid, ntag, tag0, size, n1 = pcr_head(buf, vp)      # n1: ISR length + 1
                        if (f1 == 1 and k5 == 5 and v <= 2 and ntag == 1 and tag0 == 0 and 1 <= n1 < 32
                                and size == 4 * n1 - 3 and vl == 23 + 4 * n1):
                            t = uuids.get(tid) or codec.uuid_str(tid)
                            isr = list(arr[n1 - 1].unpack_from(buf, vp + 27))
                            append(_new(Rec, (name, pos, base, offset, epoch, ts, False, "PartitionChangeRecord", 5,
                                              v, {"partitionId": pid, "topicId": t, "isr": isr}, snapshot, bno)))
                            continue
                    if buf[vp] == 1 and buf[vp + 1] == 5 and buf[vp + 2] <= 2:     # PartitionChangeRecord
                        v = buf[vp + 2]
                        append(_new(Rec, (name, pos, base, offset, epoch, ts, False, "PartitionChangeRecord", 5,
                                          v, codec.decode_pcr(buf, vp + 3, vp + vl, v), snapshot, bno)))
                    else:
                        k, v, d = decode_metadata_value(buf, vp, vp + vl)
                        append(mkrec(name, pos, base, offset, epoch, ts, False, METADATA_NAMES[k], k, v, d,
                                     snapshot, bno))
                except UnknownRecord as e:
                    append(_undecoded_record(e, name, pos, base, offset, epoch, ts, snapshot, bno, issues))
                except (DecodeError, IndexError, struct.error, ValueError) as e:
                    issues.append(Issue(name, pos, "record", f"offset {offset} (batch base offset {base}): cannot "
                                        f"decode the record: {e}", skipped=1))
    except (DecodeError, IndexError, struct.error) as e:
        issues.append(Issue(name, pos, "record", f"batch at base offset {base}: record {i} of {count} does not "
                            f"parse ({e}); the rest of the batch is skipped", skipped=count - i))


def _control_record(buf, kp, kl, vp, vl, name, pos, base, offset, epoch, ts, snapshot, bno, issues) -> Rec:
    """A control record: its type is in the key (int16 version, int16 type); one of a type this decoder does not
    know is kept undecoded (its framing was fine, the rest of the batch is readable)."""
    ctype = struct.unpack_from(">h", buf, kp + 2)[0] if kl >= 4 else -1
    tname = CONTROL_NAMES.get(ctype, f"UnknownControl({ctype})")
    try:
        cdata = decode_control_value(ctype, buf, vp, vp + vl) if vl > 0 else {}
    except UnknownRecord:
        cdata = None
        issues.append(Issue(name, pos, "unknown-type",
                            f"offset {offset}: unknown control record type {ctype} (kept undecoded)"))
    return mkrec(name, pos, base, offset, epoch, ts, True, tname, -100 - ctype, (cdata or {}).get("version", 0),
                 cdata, snapshot, bno)


def _undecoded_record(e: UnknownRecord, name, pos, base, offset, epoch, ts, snapshot, bno, issues) -> Rec:
    """A metadata record of a type or version this decoder does not know: reported, and kept without data so
    that the converter still sees (and counts) it at its offset."""
    kind = "unknown-version" if e.api_key in METADATA_NAMES else "unknown-type"
    issues.append(Issue(name, pos, kind, f"offset {offset}: {e} (kept undecoded)"))
    tname = METADATA_NAMES.get(e.api_key, f"Unknown({e.api_key})")
    return mkrec(name, pos, base, offset, epoch, ts, False, tname, e.api_key, e.version, None, snapshot, bno)


# ----------------------------------------------------------------------------- kafka-dump-log text
_KV = re.compile(r"(\w+): (\S+)")
_CTRL_TEXT = {"LeaderChange": 2, "SnapshotHeader": 3, "SnapshotFooter": 4, "KRaftVersion": 5, "KRaftVoters": 6}
_CTRL_RE = re.compile(r"\b(LeaderChange|SnapshotHeader|SnapshotFooter|KRaftVersion|KRaftVoters):? (\{.*\})\s*$")


def looks_like_dump(path: Path) -> bool:
    try:
        head = path.open("rb").read(4096)
    except OSError:
        return False
    return (b"baseOffset:" in head or head.startswith(b"Dumping ") or b"Snapshot end offset" in head
            or b"| offset:" in head or b"Log starting offset" in head)


def read_dump_text(path: Path, issues: list, counter: _Batches | None = None) -> tuple[list, dict]:
    """Records of the text `kafka-dump-log --cluster-metadata-decoder` prints (one or more files).

    Line by line: `Dumping FILE` starts a file (a snapshot or the log), `Snapshot end offset` says the file is a
    snapshot, `baseOffset:` starts a batch and `| offset:` is one of its records; any other line is skipped, but
    an error the dump itself reports there is counted."""
    dump = _DumpText(path.name, issues, counter or _Batches())
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if line.startswith("Dumping "):
                dump.start_file(line)
            elif line.startswith("Snapshot end offset:"):
                dump.snapshot_end(line)
            elif line.startswith("baseOffset:"):
                dump.start_batch(lineno, line)
            elif line.startswith("| offset:"):
                dump.record(lineno, line)
            else:
                dump.other_line(lineno, line)
    return dump.log, dump.snaps


class _DumpText:
    """A dump being read: the file and snapshot being dumped, the current batch, the list its records go to."""

    def __init__(self, file: str, issues: list, counter: _Batches):
        self.issues = issues
        self.counter = counter
        self.log: list = []
        self.snaps: dict = {}                 # snapshot name -> (end offset, epoch, [Rec])
        self.cur_file = file
        self.cur_snap = None
        self.batch = None
        self.target = self.log

    def start_file(self, line: str) -> None:
        """`Dumping PATH`: a checkpoint file's records are a snapshot (its end offset and epoch in its name), the
        others are the log."""
        self.cur_file = Path(line[8:].strip()).name
        m = _SNAP_NAME.search(self.cur_file)
        self.cur_snap = self.cur_file if (m or self.cur_file.endswith(".checkpoint")) else None
        if self.cur_snap:
            end, ep = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
            self.snaps[self.cur_snap] = (end, ep, [])
            self.target = self.snaps[self.cur_snap][2]
        else:
            self.target = self.log

    def snapshot_end(self, line: str) -> None:
        """`Snapshot end offset: N, epoch: E`: the file is a snapshot even when its name does not say so."""
        m = re.match(r"Snapshot end offset: (\d+), epoch: (\d+)", line)
        if self.cur_snap is None:
            self.cur_snap = self.cur_file if self.cur_file.endswith(".checkpoint") else f"{self.cur_file}#snapshot"
            self.snaps[self.cur_snap] = (0, 0, [])
            self.target = self.snaps[self.cur_snap][2]
        if m:
            self.snaps[self.cur_snap] = (int(m.group(1)), int(m.group(2)), self.snaps[self.cur_snap][2])

    def start_batch(self, lineno: int, line: str) -> None:
        """A batch header line; one that does not read leaves its records outside any batch (each reported)."""
        kv = dict(_KV.findall(line))
        try:
            self.counter.n += 1
            batch = {"base": int(kv["baseOffset"]), "epoch": int(kv.get("partitionLeaderEpoch", -1)),
                     "control": kv.get("isControl") == "true", "pos": int(kv.get("position", 0)),
                     "ts": int(kv.get("CreateTime", -1)), "no": self.counter.n,
                     "valid": kv.get("isvalid", "true") == "true"}
            if not batch["valid"]:
                self.issues.append(Issue(self.cur_file, lineno, "crc",
                                         f"batch at base offset {batch['base']} is marked isvalid: false",
                                         unit="line"))
        except (KeyError, ValueError) as e:
            self.issues.append(Issue(self.cur_file, lineno, "record", f"unreadable batch header ({e})", unit="line"))
            batch = None
        self.batch = batch

    def other_line(self, lineno: int, line: str) -> None:
        """Not a record: skipped, unless the dump says there that it could not read something."""
        if line.strip() and not line.startswith(("Log starting offset", "Starting offset")):
            if "Error" in line or "skipping" in line:
                self.issues.append(Issue(self.cur_file, lineno, "record", f"dump says: {line.strip()[:200]}",
                                         skipped=1, unit="line"))

    def record(self, lineno: int, line: str) -> None:
        """`| offset: N [CreateTime: T] ...`: a metadata record (`payload:`) or a control record."""
        m = re.match(r"\| offset: (\d+)(?: CreateTime: (-?\d+))?", line)
        if not m or self.batch is None:
            self.issues.append(Issue(self.cur_file, lineno, "record", "record line outside a batch", skipped=1,
                                     unit="line"))
            return
        offset = int(m.group(1))
        ts = int(m.group(2)) if m.group(2) else self.batch["ts"]
        try:
            if "payload: " in line:
                self._metadata_record(lineno, line, offset, ts)
                return
            cm = _CTRL_RE.search(line)
            if cm:
                self._control_record(cm, offset, ts)
                return
            self.issues.append(Issue(self.cur_file, lineno, "record", f"offset {offset}: no payload on the line",
                                     skipped=1, unit="line"))
        except (json.JSONDecodeError, AttributeError) as e:     # not JSON, or JSON but not an object
            self.issues.append(Issue(self.cur_file, lineno, "record", f"offset {offset}: payload is not JSON ({e})",
                                     skipped=1, unit="line"))

    def _metadata_record(self, lineno: int, line: str, offset: int, ts: int) -> None:
        """`payload: {"type": TOKEN, "version": V, "data": {...}}`; a type this decoder does not know is kept
        undecoded."""
        payload = json.loads(line.split("payload: ", 1)[1])
        token = payload.get("type")
        key = TOKEN_TO_KEY.get(token)
        b = self.batch
        if key is None:
            self.issues.append(Issue(self.cur_file, lineno, "unknown-type",
                                     f"offset {offset}: unknown record type {token} (kept undecoded)", unit="line"))
            self.target.append(mkrec(self.cur_file, None, b["base"], offset, b["epoch"], ts, False,
                                     f"Unknown({token})", -1, payload.get("version", 0), None, self.cur_snap,
                                     b["no"]))
            return
        self.target.append(mkrec(self.cur_file, None, b["base"], offset, b["epoch"], ts, False, METADATA_NAMES[key],
                                 key, payload.get("version", 0), payload.get("data", {}), self.cur_snap, b["no"]))

    def _control_record(self, cm, offset: int, ts: int) -> None:
        """`LeaderChange: {...}` (or another control type) with its JSON."""
        data = json.loads(cm.group(2))
        ct = _CTRL_TEXT[cm.group(1)]
        b = self.batch
        self.target.append(mkrec(self.cur_file, None, b["base"], offset, b["epoch"], ts, True, CONTROL_NAMES[ct],
                                 -100 - ct, data.get("version", 0), data, self.cur_snap, b["no"]))


# ----------------------------------------------------------------------------- a directory / a file
def _snap_id(p: Path):
    m = _SNAP_NAME.search(p.name)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def read_metadata(path) -> MetaLog:
    """Everything readable under `path` (directory, segment, snapshot or dump text)."""
    with gc_paused():
        return _read_metadata(Path(path))


def _read_metadata(path: Path) -> MetaLog:
    ml = MetaLog()
    counter = _Batches()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_dir():
        segs = sorted(path.glob("*.log"), key=lambda p: (len(p.stem), p.stem))
        snaps = sorted(path.glob("*.checkpoint"), key=_snap_id)
        texts = [p for p in sorted(path.iterdir()) if p.suffix in (".txt", ".dump") and looks_like_dump(p)]
        if not segs and not snaps and texts:
            for t in texts:
                _add_text(ml, t, counter)
            return _finish(ml)
        if not segs and not snaps:
            raise FileNotFoundError(f"{path}: no *.log segments, *.checkpoint snapshots or dump text")
    else:
        segs, snaps = [], []
        if path.suffix == ".log" and not looks_like_dump(path):
            segs = [path]
        elif path.name.endswith(".checkpoint"):
            snaps = [path]
        elif looks_like_dump(path):
            _add_text(ml, path, counter)
            return _finish(ml)
        else:
            segs = [path]
    for s in segs:
        ml.files.append(s.name)
        ml.records.extend(read_binary(s, ml.issues, None, counter))
    for s in snaps:
        ml.files.append(s.name)
        end, ep = _snap_id(s)
        ml.snapshots[s.name] = (end, ep, read_binary(s, ml.issues, s.name, counter))
    return _finish(ml)


def _add_text(ml: MetaLog, path: Path, counter):
    ml.files.append(path.name)
    log, snaps = read_dump_text(path, ml.issues, counter)
    ml.records.extend(log)
    ml.snapshots.update(snaps)


def _finish(ml: MetaLog) -> MetaLog:
    # offset order, duplicates (overlapping segments) dropped and reported
    recs = ml.records
    if any(recs[i].offset >= recs[i + 1].offset for i in range(len(recs) - 1)):
        recs.sort(key=lambda r: r.offset)
        out, last = [], None
        for r in recs:
            if last is not None and r.offset == last:
                ml.issues.append(Issue(r.file, r.pos, "duplicate", f"offset {r.offset} appears twice; the "
                                       "second copy is ignored", skipped=1))
                continue
            out.append(r)
            last = r.offset
        ml.records = recs = out
    ml.batches = len({r.batch for r in recs})
    # where the history starts
    log_start = recs[0].offset if recs else None
    real_snaps = {k: v for k, v in ml.snapshots.items() if v[0] > 0 and v[2]}
    if log_start is None and real_snaps:
        name = max(real_snaps, key=lambda k: real_snaps[k][0])
        ml.base_snapshot = name
        ml.issues.append(Issue(name, None, "no-log",
                               f"snapshot without its log: imported the state as of offset {real_snaps[name][0]}; "
                               "there is no history of decisions to audit"))
    elif log_start and log_start > 0:
        cands = [k for k, v in real_snaps.items() if v[0] >= log_start]
        if cands:
            name = min(cands, key=lambda k: real_snaps[k][0])
            ml.base_snapshot = name
            end = real_snaps[name][0]
            ml.records = [r for r in recs if r.offset >= end]
        else:
            ml.issues.append(Issue(recs[0].file, recs[0].pos, "no-snapshot",
                                   f"the log starts at offset {log_start} and no snapshot covers the offsets before "
                                   "it: partitions created earlier are unknown (their changes are counted as skipped)"))
    return ml
