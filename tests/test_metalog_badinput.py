"""Bad metadata input: a clear message naming the file and byte offset, the rest imported, nothing skipped silently."""
import shutil
import struct
from pathlib import Path

import pytest

from jobs.metalog.codec import encode_metadata
from jobs.metalog.importer import import_metadata
from jobs.metalog.reader import read_binary, read_metadata
from jobs.metalog.synth import SegmentWriter, synthetic_log

DATA = Path(__file__).parent / "data" / "kafka"
REC = DATA / "sigkill-restart" / "metadata"


def _segment(tmp_path, n=600):
    w = synthetic_log(n, partitions=10, batch_size=20)
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    w.write(d / "00000000000000000000.log")
    return d, d / "00000000000000000000.log", w


def _batch_positions(data: bytes):
    pos, out = 0, []
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((pos, base, 12 + length))
        pos += 12 + length
    return out


def test_truncated_segment(tmp_path):
    d, seg, w = _segment(tmp_path)
    data = seg.read_bytes()
    batches = _batch_positions(data)
    pos, base, size = batches[-3]
    seg.write_bytes(data[:pos + size // 2])
    ml = read_metadata(d)
    [issue] = [i for i in ml.issues if i.kind == "truncated"]
    assert issue.file == seg.name and issue.pos == pos
    assert f"byte {pos}" in issue.text() and "truncated batch" in issue.text()
    assert issue.skipped > 0
    assert ml.records[-1].offset == base - 1          # everything before it was imported


def test_crc_mismatch_skips_only_that_batch(tmp_path):
    d, seg, w = _segment(tmp_path)
    data = bytearray(seg.read_bytes())
    pos, base, size = _batch_positions(bytes(data))[10]
    data[pos + size - 3] ^= 0xFF
    seg.write_bytes(bytes(data))
    ml = read_metadata(d)
    [issue] = ml.issues
    assert issue.kind == "crc" and issue.pos == pos and "CRC mismatch" in issue.message
    assert issue.skipped == struct.unpack_from(">i", data, pos + 57)[0]
    offsets = {r.offset for r in ml.records}
    assert base not in offsets and len(offsets) == w.offset - issue.skipped


def test_unknown_record_type_and_version_are_counted(tmp_path):
    w = SegmentWriter()
    w.batch([(12, 0, {"name": "metadata.version", "featureLevel": 33})])
    raw_unknown_type = b"\x01\x63\x00\x00"          # frame 1, apiKey 99, version 0, no tagged fields
    raw_future_version = b"\x01\x05\x07" + encode_metadata(5, 2, {"partitionId": 0, "topicId": "AAAAAAAAAAAAAAAAAAAAAA"})[3:]
    from jobs.metalog.codec import encode_batch
    w.out += encode_batch(w.offset, 1, w.ts, [(None, raw_unknown_type), (None, raw_future_version)])
    w.offset += 2
    w.batch([(20, 0, {})])
    p = w.write(tmp_path / "00000000000000000000.log")
    issues = []
    recs = read_binary(p, issues)
    kinds = sorted(i.kind for i in issues)
    assert kinds == ["unknown-type", "unknown-version"]
    assert any("unknown metadata record type 99" in i.message for i in issues)
    assert any("PartitionChangeRecord version 7" in i.message for i in issues)
    assert [r.type for r in recs] == ["FeatureLevelRecord", "Unknown(99)", "PartitionChangeRecord", "NoOpRecord"]
    assert recs[1].data is None and recs[2].data is None
    summary, res, ml = import_metadata(p, tmp_path / "s")
    assert res.counts["undecoded"] == 2
    assert len(summary["issues"]) == 2


def test_garbage_in_a_record_is_reported(tmp_path):
    w = SegmentWriter()
    good = encode_metadata(12, 0, {"name": "x", "featureLevel": 1})
    from jobs.metalog.codec import encode_batch
    w.out += encode_batch(0, 1, 1, [(None, good + b"\x00\x00"), (None, good)])
    p = w.write(tmp_path / "a.log")
    issues = []
    recs = read_binary(p, issues)
    assert len(recs) == 1 and recs[0].offset == 1
    [i] = issues
    assert i.kind == "record" and "offset 0" in i.message and "garbage" in i.message and i.skipped == 1


@pytest.mark.skipif(not REC.exists(), reason="no real recording")
def test_snapshot_without_its_log(tmp_path):
    snap = max(REC.glob("*.checkpoint"))
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(snap, d / snap.name)
    summary, res, ml = import_metadata(d, tmp_path / "s")
    assert any("snapshot without its log" in i for i in summary["issues"])
    types = {e["type"] for e in res.events}
    assert {"BrokerRegister", "PartitionRecord"} <= types
    assert summary["records"] == 0 and summary["snapshot_records"] > 0


@pytest.mark.skipif(not REC.exists(), reason="no real recording")
def test_truncated_real_segment_and_log_without_start(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(REC, d)
    seg = d / "00000000000000000000.log"
    data = seg.read_bytes()
    seg.write_bytes(data[:len(data) - 10])
    summary, res, ml = import_metadata(d, tmp_path / "s")
    assert summary["skipped"] >= 1
    assert any("00000000000000000000.log at byte" in i and "truncated" in i for i in summary["issues"])
    assert summary["records"] > 0


def test_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no \\*.log segments"):
        read_metadata(tmp_path)
