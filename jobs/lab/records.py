"""A minimal reader of KRaft metadata-log files (segments and snapshots): record batches (v2,
uncompressed) -> (offset, batch CreateTime, record type name, version). Only the record envelope
is decoded, not the record fields: enough to check a recording (which types, how many, where) —
the importer (`isrflow import`) does the real decoding."""
from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

# common/metadata/*Record.json "apiKey" in kafka-metadata-4.4.0.jar
TYPES = {0: "REGISTER_BROKER_RECORD", 1: "UNREGISTER_BROKER_RECORD", 2: "TOPIC_RECORD",
         3: "PARTITION_RECORD", 4: "CONFIG_RECORD", 5: "PARTITION_CHANGE_RECORD",
         7: "FENCE_BROKER_RECORD", 8: "UNFENCE_BROKER_RECORD", 9: "REMOVE_TOPIC_RECORD",
         10: "DELEGATION_TOKEN_RECORD", 11: "USER_SCRAM_CREDENTIAL_RECORD", 12: "FEATURE_LEVEL_RECORD",
         14: "CLIENT_QUOTA_RECORD", 15: "PRODUCER_IDS_RECORD", 17: "BROKER_REGISTRATION_CHANGE_RECORD",
         18: "ACCESS_CONTROL_ENTRY_RECORD", 19: "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", 20: "NO_OP_RECORD",
         21: "ZK_MIGRATION_STATE_RECORD", 22: "REMOVE_USER_SCRAM_CREDENTIAL_RECORD",
         23: "BEGIN_TRANSACTION_RECORD", 24: "END_TRANSACTION_RECORD", 25: "ABORT_TRANSACTION_RECORD",
         26: "REMOVE_DELEGATION_TOKEN_RECORD", 27: "REGISTER_CONTROLLER_RECORD", 28: "CLEAR_ELR_RECORD",
         29: "UNREGISTER_CONTROLLER_RECORD"}
# control record key type (int16 after the int16 version)
CONTROL = {0: "ABORT", 1: "COMMIT", 2: "LeaderChange", 3: "SnapshotHeader", 4: "SnapshotFooter",
           5: "KRaftVersion", 6: "KRaftVoters"}


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = v = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return (v >> 1) ^ -(v & 1), i
        shift += 7


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    shift = v = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return v, i
        shift += 7


def read_file(path) -> list[dict]:
    """Every record of one .log segment or .checkpoint snapshot."""
    b = Path(path).read_bytes()
    out, pos = [], 0
    while pos + 61 <= len(b):
        base_offset, length = struct.unpack_from(">qi", b, pos)
        if length <= 0:
            break
        end = pos + 12 + length
        epoch, magic = struct.unpack_from(">ib", b, pos + 12)
        attrs, = struct.unpack_from(">h", b, pos + 21)
        first_ts, = struct.unpack_from(">q", b, pos + 27)
        count, = struct.unpack_from(">i", b, pos + 57)
        control = bool(attrs & 0x20)
        if magic != 2 or attrs & 0x07:
            out.append({"offset": base_offset, "type": "UNREADABLE_BATCH", "epoch": epoch})
            pos = end
            continue
        i = pos + 61
        for _ in range(count):
            rlen, i = _varint(b, i)
            j = i + 1                               # attributes int8
            _, j = _varint(b, j)                    # timestamp delta
            odelta, j = _varint(b, j)
            klen, j = _varint(b, j)
            key = b[j:j + klen] if klen > 0 else b""
            j += max(klen, 0)
            vlen, j = _varint(b, j)
            val = b[j:j + vlen] if vlen > 0 else b""
            rec = {"offset": base_offset + odelta, "ts_ms": first_ts, "epoch": epoch}
            if control:
                ctype = struct.unpack_from(">h", key, 2)[0] if len(key) >= 4 else -1
                rec.update(type=CONTROL.get(ctype, f"CONTROL_{ctype}"), control=True)
            else:
                _frame, k = _uvarint(val, 0)
                api, k = _uvarint(val, k)
                ver, k = _uvarint(val, k)
                rec.update(type=TYPES.get(api, f"TYPE_{api}"), version=ver)
            out.append(rec)
            i += rlen
        pos = end
    return out


def summary(metadata_dir) -> dict:
    """Per file: record count and record-type counts."""
    res = {}
    for f in sorted(Path(metadata_dir).iterdir()):
        if f.suffix in (".log", ".checkpoint"):
            recs = read_file(f)
            res[f.name] = {"records": len(recs), "types": dict(Counter(r["type"] for r in recs))}
    return res
