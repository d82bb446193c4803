"""Reading a KRaft metadata log: a `__cluster_metadata-0` directory, one segment or snapshot file, or the text
that `kafka-dump-log --cluster-metadata-decoder` prints.

Bad input never stops the import and is never skipped silently: every problem becomes an ``Issue``
(file, byte offset, what, how many records it cost) and the rest is read.
"""
from __future__ import annotations

import gc
import json
import re
import struct
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

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


@contextmanager
def gc_paused():
    """The cyclic garbage collector off for a while. Decoding and converting a log allocate millions of small
    acyclic objects (records, their dicts and lists, events, rows); with the collector on, every few hundred
    allocations it runs and its older generations walk the whole growing heap again: more than half of the
    decode time of a 1M-record log. Reference counting still frees everything; nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_SNAP_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint$")


class _Batches:
    n = 0


def read_binary(path: Path, issues: list, snapshot: str | None = None, counter: _Batches | None = None) -> list:
    """Every decodable record of a record-batch v2 file."""
    data = path.read_bytes()
    name = path.name
    out = []
    append = out.append
    n = len(data)
    pos = 0
    counter = counter or _Batches()
    unpack_hdr = _HDR.unpack_from
    dec_meta = decode_metadata_value
    dec_pcr = codec.decode_pcr
    pcr_head = _PCR_HEAD.unpack_from
    uuids = codec._UUID_CACHE
    arr = codec._ARR
    while pos < n:
        if n - pos < BATCH_HEADER:
            if data[pos:].count(0) == n - pos:
                issues.append(Issue(name, pos, "padding", f"{n - pos} trailing zero byte(s) ignored"))
            else:
                issues.append(Issue(name, pos, "truncated",
                                    f"truncated batch header: {n - pos} byte(s) left, a header has {BATCH_HEADER}",
                                    skipped=1))
            break
        (base, length, epoch, magic, crc, attrs, last_delta, base_ts, max_ts, _pid, _pe, _bs,
         count) = unpack_hdr(data, pos)
        total = 12 + length
        if length == 0 and base == 0 and data[pos:].count(0) == n - pos:
            issues.append(Issue(name, pos, "padding", f"{n - pos} trailing zero byte(s) ignored"))
            break
        if length < BATCH_HEADER - 12:
            issues.append(Issue(name, pos, "truncated",
                                f"batch at base offset {base} has an impossible length {length}; "
                                f"the rest of the file ({n - pos} bytes) is unreadable", skipped=max(count, 1)))
            break
        if pos + total > n:
            issues.append(Issue(name, pos, "truncated",
                                f"truncated batch (base offset {base}): its header says {total} bytes, "
                                f"the file has {n - pos} left", skipped=max(last_delta + 1, count, 1)))
            break
        if magic != 2:
            issues.append(Issue(name, pos, "magic", f"batch at base offset {base} has magic {magic}, not 2",
                                skipped=max(count, 0)))
            pos += total
            continue
        computed = crc32c(data[pos + 21:pos + total])
        if computed != crc:
            issues.append(Issue(name, pos, "crc",
                                f"CRC mismatch in batch at base offset {base}: stored {crc:#010x}, "
                                f"computed {computed:#010x}", skipped=max(count, 0)))
            pos += total
            continue
        codec_id = attrs & 7
        control = bool(attrs & 0x20)
        buf = data[pos + BATCH_HEADER:pos + total]
        if codec_id:
            try:
                buf = decompress(codec_id, buf)
            except Exception as e:      # noqa: BLE001 - any codec failure is reported the same way
                issues.append(Issue(name, pos, "compression",
                                    f"batch at base offset {base}: cannot decompress "
                                    f"{COMPRESSION.get(codec_id, codec_id)}: {e}", skipped=max(count, 0)))
                pos += total
                continue
        counter.n += 1
        bno = counter.n
        ts_fixed = max_ts if attrs & 0x08 else None
        p = 0
        blen = len(buf)
        for i in range(count):
            rstart = p
            try:
                b = buf[p]
                if b < 0x80:
                    rl = b >> 1 if not b & 1 else -1
                    p += 1
                elif buf[p + 1] < 0x80:
                    rl = ((b & 0x7F) | (buf[p + 1] << 7)) >> 1
                    p += 2
                else:
                    rl, p = codec.read_varint(buf, p)
                rend = p + rl
                if rl <= 0 or rend > blen:
                    raise DecodeError(f"record length {rl} runs past its batch", rstart)
                b = buf[p + 1]                           # after the record attributes
                if b == 0:
                    tsd = 0
                    p += 2
                elif b < 0x80:
                    tsd = (b >> 1) ^ -(b & 1)
                    p += 2
                else:
                    tsd, p = codec.read_varint(buf, p + 1)
                b = buf[p]
                if b < 0x80:
                    od = b >> 1
                    p += 1
                elif buf[p + 1] < 0x80:
                    od = ((b & 0x7F) | (buf[p + 1] << 7)) >> 1
                    p += 2
                else:
                    od, p = codec.read_varint(buf, p)
                b = buf[p]
                if b == 1:                               # key -1: metadata records have none
                    kl = -1
                    p += 1
                else:
                    kl, p = codec.read_varint(buf, p)
                kp = p
                if kl > 0:
                    p += kl
                b = buf[p]
                if b < 0x80:
                    vl = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    vl, p = codec.read_varint(buf, p)
                vp = p
                offset = base + od
                ts = ts_fixed if ts_fixed is not None else base_ts + tsd
                if control:
                    ctype = struct.unpack_from(">h", buf, kp + 2)[0] if kl >= 4 else -1
                    tname = CONTROL_NAMES.get(ctype, f"UnknownControl({ctype})")
                    try:
                        cdata = decode_control_value(ctype, buf, vp, vp + vl) if vl > 0 else {}
                    except UnknownRecord:
                        cdata = None
                        issues.append(Issue(name, pos, "unknown-type",
                                            f"offset {offset}: unknown control record type {ctype} (kept undecoded)"))
                    append(mkrec(name, pos, base, offset, epoch, ts, True, tname, -100 - ctype,
                               (cdata or {}).get("version", 0), cdata, snapshot, bno))
                elif vl <= 0:
                    issues.append(Issue(name, pos, "record", f"offset {offset}: record without a value", skipped=1))
                else:
                    try:
                        if vl >= 27:                             # ISR-only PartitionChangeRecord: inline
                            f1, k5, v, pid, tid, ntag, tag0, size, cnt = pcr_head(buf, vp)
                            cnt -= 1
                            if (f1 == 1 and k5 == 5 and v <= 2 and ntag == 1 and tag0 == 0 and 0 <= cnt < 31
                                    and size == 1 + 4 * cnt and vl == 27 + 4 * cnt):
                                t = uuids.get(tid) or codec.uuid_str(tid)
                                append(_new(Rec, (name, pos, base, offset, epoch, ts, False, "PartitionChangeRecord",
                                                  5, v, {"partitionId": pid, "topicId": t,
                                                         "isr": list(arr[cnt].unpack_from(buf, vp + 27))},
                                                  snapshot, bno)))
                                p = rend
                                continue
                        if buf[vp] == 1 and buf[vp + 1] == 5 and buf[vp + 2] <= 2:     # PartitionChangeRecord
                            v = buf[vp + 2]
                            append(_new(Rec, (name, pos, base, offset, epoch, ts, False, "PartitionChangeRecord", 5,
                                              v, dec_pcr(buf, vp + 3, vp + vl, v), snapshot, bno)))
                        else:
                            k, v, d = dec_meta(buf, vp, vp + vl)
                            append(mkrec(name, pos, base, offset, epoch, ts, False, METADATA_NAMES[k], k, v, d,
                                       snapshot, bno))
                    except UnknownRecord as e:
                        kind = "unknown-version" if e.api_key in METADATA_NAMES else "unknown-type"
                        issues.append(Issue(name, pos, kind, f"offset {offset}: {e} (kept undecoded)"))
                        tname = METADATA_NAMES.get(e.api_key, f"Unknown({e.api_key})")
                        append(mkrec(name, pos, base, offset, epoch, ts, False, tname, e.api_key, e.version, None,
                                   snapshot, bno))
                    except (DecodeError, IndexError, struct.error, ValueError) as e:
                        issues.append(Issue(name, pos, "record",
                                            f"offset {offset} (batch base offset {base}): cannot decode the "
                                            f"record: {e}", skipped=1))
                p = rend
            except (DecodeError, IndexError, struct.error) as e:
                issues.append(Issue(name, pos, "record",
                                    f"batch at base offset {base}: record {i} of {count} does not parse ({e}); "
                                    f"the rest of the batch is skipped", skipped=count - i))
                break
        pos += total
    return out


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
    """Records of the text `kafka-dump-log --cluster-metadata-decoder` prints (one or more files)."""
    counter = counter or _Batches()
    log, snaps = [], {}
    cur_file = path.name
    cur_snap = None
    batch = None
    target = log
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if line.startswith("Dumping "):
                cur_file = Path(line[8:].strip()).name
                m = _SNAP_NAME.search(cur_file)
                cur_snap = cur_file if (m or cur_file.endswith(".checkpoint")) else None
                if cur_snap:
                    end, ep = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
                    snaps[cur_snap] = (end, ep, [])
                    target = snaps[cur_snap][2]
                else:
                    target = log
                continue
            if line.startswith("Snapshot end offset:"):
                m = re.match(r"Snapshot end offset: (\d+), epoch: (\d+)", line)
                if cur_snap is None:
                    cur_snap = cur_file if cur_file.endswith(".checkpoint") else f"{cur_file}#snapshot"
                    snaps[cur_snap] = (0, 0, [])
                    target = snaps[cur_snap][2]
                if m:
                    snaps[cur_snap] = (int(m.group(1)), int(m.group(2)), snaps[cur_snap][2])
                continue
            if line.startswith("baseOffset:"):
                kv = dict(_KV.findall(line))
                try:
                    counter.n += 1
                    batch = {"base": int(kv["baseOffset"]), "epoch": int(kv.get("partitionLeaderEpoch", -1)),
                             "control": kv.get("isControl") == "true", "pos": int(kv.get("position", 0)),
                             "ts": int(kv.get("CreateTime", -1)), "no": counter.n,
                             "valid": kv.get("isvalid", "true") == "true"}
                    if not batch["valid"]:
                        issues.append(Issue(cur_file, lineno, "crc",
                                            f"batch at base offset {batch['base']} is marked isvalid: false",
                                            unit="line"))
                except (KeyError, ValueError) as e:
                    issues.append(Issue(cur_file, lineno, "record", f"unreadable batch header ({e})", unit="line"))
                    batch = None
                continue
            if not line.startswith("| offset:"):
                if line.strip() and not line.startswith(("Log starting offset", "Starting offset")):
                    if "Error" in line or "skipping" in line:
                        issues.append(Issue(cur_file, lineno, "record", f"dump says: {line.strip()[:200]}",
                                            skipped=1, unit="line"))
                continue
            m = re.match(r"\| offset: (\d+)(?: CreateTime: (-?\d+))?", line)
            if not m or batch is None:
                issues.append(Issue(cur_file, lineno, "record", "record line outside a batch", skipped=1,
                                    unit="line"))
                continue
            offset = int(m.group(1))
            ts = int(m.group(2)) if m.group(2) else batch["ts"]
            try:
                if "payload: " in line:
                    payload = json.loads(line.split("payload: ", 1)[1])
                    token = payload.get("type")
                    key = TOKEN_TO_KEY.get(token)
                    if key is None:
                        issues.append(Issue(cur_file, lineno, "unknown-type",
                                            f"offset {offset}: unknown record type {token} (kept undecoded)",
                                            unit="line"))
                        target.append(mkrec(cur_file, None, batch["base"], offset, batch["epoch"], ts, False,
                                          f"Unknown({token})", -1, payload.get("version", 0), None, cur_snap,
                                          batch["no"]))
                        continue
                    target.append(mkrec(cur_file, None, batch["base"], offset, batch["epoch"], ts, False,
                                      METADATA_NAMES[key], key, payload.get("version", 0), payload.get("data", {}),
                                      cur_snap, batch["no"]))
                    continue
                cm = _CTRL_RE.search(line)
                if cm:
                    data = json.loads(cm.group(2))
                    ct = _CTRL_TEXT[cm.group(1)]
                    target.append(mkrec(cur_file, None, batch["base"], offset, batch["epoch"], ts, True,
                                      CONTROL_NAMES[ct], -100 - ct, data.get("version", 0), data, cur_snap,
                                      batch["no"]))
                    continue
                issues.append(Issue(cur_file, lineno, "record", f"offset {offset}: no payload on the line",
                                    skipped=1, unit="line"))
            except (json.JSONDecodeError, AttributeError) as e:
                issues.append(Issue(cur_file, lineno, "record", f"offset {offset}: payload is not JSON ({e})",
                                    skipped=1, unit="line"))
    return log, snaps


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
