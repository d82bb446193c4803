"""Kafka wire encodings used by the metadata log: varints, versioned flexible messages, record batch v2.

Reference (Kafka source paths):
* record batch v2: clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java,
  DefaultRecord.java (varint record framing), ByteUtils.java (varints, zigzag);
* a metadata record's value: server-common/.../serialization/AbstractApiMessageSerde.java —
  unsigned varint frame version (1), unsigned varint apiKey, unsigned varint version, then the message
  in the flexible encoding (compact strings/arrays: length + 1, 0 = null; a tagged-field section after
  every struct: count, then (tag, size, bytes) each);
* control records (batch attribute bit 5): key = int16 version, int16 type; value = the message
  (LeaderChangeMessage, SnapshotHeaderRecord, ...) without the frame.

The generic reader is driven by ``schema_data`` (generated from Kafka 4.4.0's own JSON schemas).
PartitionChangeRecord — most of a real metadata log after NoOps — has a hand-written fast path
(``decode_pcr``), checked against the generic reader by the tests.
"""
from __future__ import annotations

import base64
import struct

from .schema_data import CONTROL, METADATA

try:                                    # hardware CRC32C (SSE4.2 / ARMv8); pure Python fallback below
    from crc32c import crc32c as _crc32c_fast
except ImportError:                     # pragma: no cover - exercised only without the package
    _crc32c_fast = None

# ----------------------------------------------------------------------------- CRC32C
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data) -> int:
    if _crc32c_fast is not None:
        return _crc32c_fast(data)
    c = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in bytes(data):
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


class DecodeError(Exception):
    """A value that does not decode; ``pos`` is the byte position inside the buffer."""

    def __init__(self, msg: str, pos: int | None = None):
        super().__init__(msg)
        self.pos = pos


# ----------------------------------------------------------------------------- varints
def read_uvarint(buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        result |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long", pos)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """Zigzag-encoded signed varint/varlong."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def write_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varint(out: bytearray, v: int) -> None:
    write_uvarint(out, (v << 1) ^ (v >> 63))


# ----------------------------------------------------------------------------- UUIDs
_UUID_CACHE: dict = {}


def uuid_str(raw: bytes) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding (22 characters)."""
    s = _UUID_CACHE.get(raw)
    if s is None:
        s = base64.urlsafe_b64encode(raw).decode()[:22]
        if len(_UUID_CACHE) < 1_000_000:
            _UUID_CACHE[raw] = s
    return s


def uuid_bytes(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "==")


ZERO_UUID = uuid_str(bytes(16))

# ----------------------------------------------------------------------------- generic messages
_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
          "int32": struct.Struct(">i"), "uint32": struct.Struct(">I"), "int64": struct.Struct(">q"),
          "float64": struct.Struct(">d")}


def _in(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def field_default(f):
    """The Java default of a field (what Kafka's JSON converter compares against to omit tagged fields)."""
    name, typ, _vers, nullable, _tag, _tv, default, _sub = f
    if default == "null":
        return None
    if typ.startswith("[]"):
        return []
    if typ in _FIXED:
        if default is None or default == "":
            return 0
        d = str(default)
        return int(d, 16) if d.lower().startswith("0x") else (float(d) if typ == "float64" else int(d))
    if typ == "bool":
        return default == "true"
    if typ == "string":
        return default if default is not None else ""
    if typ == "uuid":
        return ZERO_UUID
    if typ == "bytes":
        return ""
    return None


def _read_value(typ: str, sub, version: int, buf, pos: int):
    st = _FIXED.get(typ)
    if st is not None:
        return st.unpack_from(buf, pos)[0], pos + st.size
    if typ == "bool":
        return buf[pos] != 0, pos + 1
    if typ == "uuid":
        if pos + 16 > len(buf):
            raise DecodeError("uuid past the end", pos)
        return uuid_str(bytes(buf[pos:pos + 16])), pos + 16
    if typ == "string" or typ == "bytes":
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        n -= 1
        if pos + n > len(buf):
            raise DecodeError(f"{typ} of {n} bytes past the end", pos)
        raw = bytes(buf[pos:pos + n])
        if typ == "string":
            try:
                return raw.decode("utf-8"), pos + n
            except UnicodeDecodeError as e:
                raise DecodeError(f"string is not UTF-8: {e}", pos) from None
        return base64.b64encode(raw).decode(), pos + n
    if typ == "struct":
        return read_struct(sub, version, buf, pos)
    if typ.startswith("[]"):
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        n -= 1
        if n > len(buf) - pos:
            raise DecodeError(f"array of {n} elements past the end", pos)
        et = "struct" if typ == "[]struct" else typ[2:]
        if et == "int32":
            end = pos + 4 * n
            if end > len(buf):
                raise DecodeError("int32 array past the end", pos)
            return list(struct.unpack_from(f">{n}i", buf, pos)), end
        out = []
        for _ in range(n):
            v, pos = _read_value(et, sub, version, buf, pos)
            out.append(v)
        return out, pos
    raise DecodeError(f"unsupported type {typ}", pos)


def read_struct(fields, version: int, buf, pos: int) -> tuple[dict, int]:
    """One flexible struct: its fields for `version`, then its tagged-field section.

    The result is Kafka's JSON view: a tagged field at its default is left out."""
    out = {}
    tagged = {}
    for f in fields:
        name, typ, vers, _nullable, tag, tv, _default, sub = f
        if not _in(vers, version):
            continue
        if tag is not None and _in(tv, version):
            tagged[tag] = f
            continue
        out[name], pos = _read_value(typ, sub, version, buf, pos)
    n, pos = read_uvarint(buf, pos)
    unknown = 0
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise DecodeError(f"tagged field {tag} past the end", pos)
        f = tagged.get(tag)
        if f is None:
            unknown += 1
        else:
            v, p2 = _read_value(f[1], f[7], version, buf, pos)
            if p2 != end:
                raise DecodeError(f"tagged field {f[0]} has {size} bytes, its value {p2 - pos}", pos)
            if v != field_default(f):
                out[f[0]] = v
        pos = end
    if unknown:
        out["_unknownTaggedFields"] = unknown
    return out, pos


def _write_value(out: bytearray, typ: str, sub, version: int, v) -> None:
    st = _FIXED.get(typ)
    if st is not None:
        out += st.pack(v)
    elif typ == "bool":
        out.append(1 if v else 0)
    elif typ == "uuid":
        out += uuid_bytes(v or ZERO_UUID)
    elif typ == "string" or typ == "bytes":
        if v is None:
            out.append(0)
        else:
            raw = v.encode() if typ == "string" else base64.b64decode(v)
            write_uvarint(out, len(raw) + 1)
            out += raw
    elif typ == "struct":
        write_struct(out, sub, version, v or {})
    elif typ.startswith("[]"):
        if v is None:
            out.append(0)
            return
        write_uvarint(out, len(v) + 1)
        et = "struct" if typ == "[]struct" else typ[2:]
        for x in v:
            _write_value(out, et, sub, version, x)
    else:
        raise ValueError(f"unsupported type {typ}")


def write_struct(out: bytearray, fields, version: int, data: dict) -> None:
    tagged = []
    for f in fields:
        name, typ, vers, _nullable, tag, tv, _default, sub = f
        if not _in(vers, version):
            continue
        v = data.get(name, field_default(f))
        if tag is not None and _in(tv, version):
            if v != field_default(f):
                tagged.append((tag, f, v))
            continue
        _write_value(out, typ, sub, version, v)
    write_uvarint(out, len(tagged))
    for tag, f, v in sorted(tagged, key=lambda x: x[0]):
        body = bytearray()
        _write_value(body, f[1], f[7], version, v)
        write_uvarint(out, tag)
        write_uvarint(out, len(body))
        out += body


def encode_metadata(api_key: int, version: int, data: dict) -> bytes:
    """A metadata record's value: frame version 1, apiKey, version, message."""
    name, valid, _flex, fields = METADATA[api_key]
    out = bytearray()
    write_uvarint(out, 1)
    write_uvarint(out, api_key)
    write_uvarint(out, version)
    write_struct(out, fields, version, data)
    return bytes(out)


def encode_control(ctype: int, data: dict) -> tuple[bytes, bytes]:
    """(key, value) of a control record: key int16 version 0 + int16 type; value the message at v0."""
    name, valid, _flex, fields = CONTROL[ctype]
    version = data.get("version", 0)
    out = bytearray()
    write_struct(out, fields, version, dict(data, version=version))
    return struct.pack(">hh", 0, ctype), bytes(out)


# ----------------------------------------------------------------------------- fast PartitionChangeRecord
_I32 = struct.Struct(">i")
_PCR_LIST_TAGS = {0: "isr", 2: "replicas", 3: "removingReplicas", 4: "addingReplicas",
                  6: "eligibleLeaderReplicas", 7: "lastKnownElr"}


_ARR = [struct.Struct(f">{n}i") for n in range(64)]


def decode_pcr(buf, pos: int, end: int, version: int) -> dict:
    """PartitionChangeRecord v0-2 body at buf[pos:end] (after the frame) -> Kafka's JSON view."""
    raw = buf[pos + 4:pos + 20]
    tid = _UUID_CACHE.get(raw)
    if tid is None:
        tid = uuid_str(bytes(raw))
    n = buf[pos + 20]
    if n == 1 and buf[pos + 21] == 0:               # ISR only (a leader's AlterPartition): the common case
        size = buf[pos + 22]
        cnt = buf[pos + 23] - 1
        if size < 0x80 and 0 <= cnt < 31 and size == 1 + 4 * cnt and pos + 23 + size == end:
            return {"partitionId": _I32.unpack_from(buf, pos)[0], "topicId": tid,
                    "isr": list(_ARR[cnt].unpack_from(buf, pos + 24))}
    d = {"partitionId": _I32.unpack_from(buf, pos)[0], "topicId": tid}
    pos += 21
    if n >= 0x80:
        raise DecodeError("too many tagged fields", pos)
    unknown = 0
    arr = _ARR
    for _ in range(n):
        tag = buf[pos]
        size = buf[pos + 1]
        if size < 0x80 and tag < 0x80:
            pos += 2
        else:
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
        fend = pos + size
        if fend > end:
            raise DecodeError(f"tagged field {tag} past the end", pos)
        if tag == 0 or (1 < tag < 5) or (5 < tag < 8 and version >= 2):
            cnt = buf[pos]
            if cnt:
                if cnt >= 0x80:
                    cnt, p = read_uvarint(buf, pos)
                else:
                    p = pos + 1
                cnt -= 1
                if p + 4 * cnt != fend:
                    raise DecodeError(f"{_PCR_LIST_TAGS[tag]}: {cnt} replicas in {size} bytes", pos)
                d[_PCR_LIST_TAGS[tag]] = list((arr[cnt] if cnt < 64 else struct.Struct(f">{cnt}i")).unpack_from(buf, p))
        elif tag == 1:
            if size != 4:
                raise DecodeError("leader is not 4 bytes", pos)
            v = _I32.unpack_from(buf, pos)[0]
            if v != -2:
                d["leader"] = v
        elif tag == 5:
            v = buf[pos]
            v = v - 256 if v > 127 else v
            if v != -1:
                d["leaderRecoveryState"] = v
        elif tag == 8 and version >= 1:
            cnt, p = read_uvarint(buf, pos)
            if cnt:
                d["directories"] = [uuid_str(bytes(buf[p + 16 * i:p + 16 * i + 16])) for i in range(cnt - 1)]
        else:
            unknown += 1
        pos = fend
    if pos != end:
        raise DecodeError(f"{end - pos} byte(s) of garbage after the record", pos)
    if unknown:
        d["_unknownTaggedFields"] = unknown
    return d


# ----------------------------------------------------------------------------- record values
METADATA_NAMES = {k: v[0] for k, v in METADATA.items()}
CONTROL_NAMES = {2: "LeaderChange", 3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion", 6: "KRaftVoters",
                 0: "AbortMarker", 1: "CommitMarker"}


def type_token(name: str) -> str:
    """PartitionChangeRecord -> PARTITION_CHANGE_RECORD (MetadataRecordType's name)."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.upper())
    return "".join(out)


TOKEN_TO_KEY = {type_token(v[0]): k for k, v in METADATA.items()}


def decode_metadata_value(buf, pos: int, end: int):
    """(api_key, version, data) of a framed metadata value; DecodeError when it does not decode.

    An unknown apiKey or a version above the schema's raises ``UnknownRecord`` (the caller counts it)."""
    b0 = buf[pos]
    if b0 == 1 and pos + 3 <= end and buf[pos + 1] == 5 and buf[pos + 2] <= 2:
        version = buf[pos + 2]
        return 5, version, decode_pcr(buf, pos + 3, end, version)
    frame, pos = read_uvarint(buf, pos)
    if frame != 1:
        raise DecodeError(f"frame version {frame} (only 1 is supported; 0 was KRaft's 2.8 preview)", pos)
    api_key, pos = read_uvarint(buf, pos)
    version, pos = read_uvarint(buf, pos)
    sch = METADATA.get(api_key)
    if sch is None:
        raise UnknownRecord(api_key, version, f"unknown metadata record type {api_key} (version {version})")
    if not _in(sch[1], version):
        raise UnknownRecord(api_key, version,
                            f"{sch[0]} version {version} is above the supported {sch[1][0]}-{sch[1][1]}")
    data, p = read_struct(sch[3], version, memoryview(buf)[:end], pos)
    if p != end:
        raise DecodeError(f"{end - p} byte(s) of garbage after {sch[0]}", p)
    return api_key, version, data


def decode_control_value(ctype: int, buf, pos: int, end: int) -> dict:
    sch = CONTROL.get(ctype)
    if sch is None:
        raise UnknownRecord(-1, 0, f"unknown control record type {ctype}")
    version = struct.unpack_from(">h", buf, pos)[0] if end - pos >= 2 else 0
    data, p = read_struct(sch[3], version, memoryview(buf)[:end], pos)
    return data


class UnknownRecord(Exception):
    def __init__(self, api_key: int, version: int, msg: str):
        super().__init__(msg)
        self.api_key = api_key
        self.version = version


# ----------------------------------------------------------------------------- batch writer (tests, bench)
_HDR = struct.Struct(">qiibIhiqqqhii")     # 61 bytes
BATCH_HEADER = _HDR.size
COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        import gzip
        return gzip.compress(data)
    import cramjam
    if codec == 2:      # Kafka's snappy is xerial-framed (snappy-java SnappyOutputStream)
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 32768):
            blk = bytes(cramjam.snappy.compress_raw(data[i:i + 32768]))
            out += struct.pack(">i", len(blk)) + blk
        return bytes(out)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"compression {codec}")


def decompress(codec: int, data) -> bytes:
    if codec == 1:
        import gzip
        return gzip.decompress(bytes(data))
    try:
        import cramjam
    except ImportError:
        raise DecodeError(f"{COMPRESSION.get(codec, codec)} compression needs the 'cramjam' package") from None
    if codec == 2:
        raw = bytes(data)
        if raw.startswith(b"\x82SNAPPY\x00"):
            out = bytearray()
            p = 16
            while p < len(raw):
                n = struct.unpack_from(">i", raw, p)[0]
                out += bytes(cramjam.snappy.decompress_raw(raw[p + 4:p + 4 + n]))
                p += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise DecodeError(f"unknown compression codec {codec}")


def encode_record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray()
    body.append(0)                       # attributes
    write_varint(body, ts_delta)
    write_varint(body, offset_delta)
    if key is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, 0)                # headers
    out = bytearray()
    write_varint(out, len(body))
    out += body
    return bytes(out)


def encode_batch(base_offset: int, epoch: int, ts_ms: int, records: list[tuple[bytes | None, bytes]],
                 control: bool = False, codec: int = 0) -> bytes:
    """A record batch v2 of (key, value) records appended at `ts_ms` by raft epoch `epoch`."""
    payload = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    payload = compress(codec, payload)
    attrs = codec | (0x20 if control else 0)
    n = len(records)
    length = BATCH_HEADER - 12 + len(payload)
    hdr = bytearray(_HDR.pack(base_offset, length, epoch, 2, 0, attrs, n - 1, ts_ms, ts_ms, -1, -1, -1, n))
    crc = crc32c(bytes(hdr[21:]) + payload)
    struct.pack_into(">I", hdr, 17, crc)
    return bytes(hdr) + payload
