"""Per-file read tasks of the Spark source: the fast carry equals the sequential scan's,
and the balanced grouping keys map back to their buckets."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.buckets import _murmur3_int, group_keys
from jobs.spark_source import _fast_file_carry, carry_after, pack, run_scan, unpack


def _write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)


def _ok(seq, ts):
    return {"seq": seq, "ts_ms": ts, "type": "Tick", "broker": None}


def test_fast_carry_matches_scan(tmp_path):
    f1 = tmp_path / "a.parquet"
    _write(f1, [_ok(i, i * 10) for i in range(1, 50)])
    bad_last = tmp_path / "b.parquet"       # monotone, last row invalid (unknown type)
    _write(bad_last, [_ok(60, 600), _ok(61, 610), {"seq": 62, "ts_ms": 620, "type": "Nope", "broker": None}])
    disorder = tmp_path / "c.parquet"       # not monotone: must fall back to the scan
    _write(disorder, [_ok(70, 700), _ok(65, 705), _ok(71, 690), _ok(72, 710)])
    jl = tmp_path / "d.jsonl"
    jl.write_text("\n".join(json.dumps(_ok(s, 800 + s)) for s in range(80, 85)) + "\n")
    files = [(i, str(f)) for i, f in enumerate([f1, bad_last, disorder, jl])]
    carry = (0, 0)
    for fi, path in files:
        _, want = run_scan([(fi, path)], carry, 4, route=False)
        got = _fast_file_carry(path, carry)
        assert got is None or got == want
        if path.endswith(("a.parquet", "b.parquet")):
            assert got == want          # the monotone Parquet files take the fast path
        carry = want
    assert _fast_file_carry(str(disorder), (61, 610)) is None
    assert carry_after(files, (0, 0), 4) == carry
    # a carry the file's first row does not follow: no fast answer
    assert _fast_file_carry(str(f1), (5, 0)) is None


def test_fast_carry_respects_the_time_jump_limit(tmp_path):
    """A monotone file with a leap beyond input.max.time.jump.ms: the scan rejects the leap row and
    every later one that is still far ahead, so the fast path must not answer (and agrees where it does)."""
    leap = tmp_path / "leap.parquet"
    _write(leap, [_ok(1, 0), _ok(2, 100), _ok(3, 10**9), _ok(4, 10**9 + 5)])
    calm = tmp_path / "calm.parquet"
    _write(calm, [_ok(10, 10**9 + 10), _ok(11, 10**9 + 20)])
    for jump in (0, 1000, 10**10):
        carry = (0, 0)
        for fi, f in enumerate((leap, calm)):
            _, want = run_scan([(fi, str(f))], carry, 4, route=False, max_jump=jump)
            got = _fast_file_carry(str(f), carry, jump)
            assert got is None or got == want, (jump, f.name, got, want)
            carry = want
        assert carry_after([(0, str(leap)), (1, str(calm))], (0, 0), 4, jump) == carry
        # with the limit, rows 3 and 4 leap from ts 100; the calm file leaps from 100 too
        assert carry == ((2, 100) if jump == 1000 else (11, 10**9 + 20))


def test_group_keys_balanced_and_invertible():
    for n, shuf in ((16, 2), (16, 4), (7, 3), (16, 0)):
        keys = group_keys(n, shuf)
        assert len(set(keys)) == n
        assert [k % n for k in keys] == list(range(n))
        if shuf:
            assert [_murmur3_int(k) % shuf for k in keys] == [b % shuf for b in range(n)]
        else:
            assert keys == list(range(n))


def test_pack_roundtrip():
    import pickle
    import zlib
    items = [(0, ("seq", "ts_ms", "type"), (i, 1000 + i, "Fetch"), i << 32) for i in range(200)] + [(1, {"a": 1})]
    data = pickle.dumps(items, protocol=5)
    payload = pack(items)
    assert payload[:1] == b"Z" and int.from_bytes(payload[1:9], "little") == len(data)
    assert len(payload) < len(data) / 3
    assert unpack(payload) == items
    assert unpack(bytearray(payload)) == items        # as Spark hands a binary column to Python
    assert unpack(data) == items                      # a plain pickle
    assert unpack(zlib.compress(data, 1)) == items    # payloads before zstd


def test_scan_routes_every_partition_number_to_its_bucket():
    """The scan keeps a topic's buckets in a list by partition number, up to _DENSE, and in a dict
    beyond: either way a row goes to bucket_of's bucket, the same on its first and later rows."""
    from jobs.buckets import bucket_of
    from jobs.buckets import _DENSE
    from jobs.spark_source import chunk_events, scan_rows
    parts = [0, 7, 3, 7, _DENSE - 1, _DENSE, _DENSE + 5, 2 ** 31 - 1, 3, _DENSE]
    raws = [{"seq": i + 1, "ts_ms": 0, "type": "Fetch", "topic": t, "partition": p, "broker": 1,
             "fetch_offset": 0} for i, (t, p) in enumerate([("a", p) for p in parts] + [("b", p) for p in parts])]
    for n_buckets in (3, 16):
        reached = {}
        for b, *_rest, payload in scan_rows(iter((i, r, None, None) for i, r in enumerate(raws)), (0, 0),
                                            n_buckets, keep_raw=True):
            for ev in chunk_events(unpack(payload)):
                assert ev is not None
                reached[ev["seq"]] = b
        assert reached == {r["seq"]: bucket_of(r["topic"], r["partition"], n_buckets) for r in raws}
    # each bucket's Cluster owns its partitions by the same lookup, any partition number included
    from jobs.buckets import owns_fn
    owns = [owns_fn(b, 5) for b in range(5)]
    for p in (-7, -1, 0, 5, 3, _DENSE - 1, _DENSE, 2 ** 40, 5):
        assert [o(("a", p)) for o in owns] == [b == bucket_of("a", p, 5) for b in range(5)]


def test_a_read_task_derives_its_carry_from_the_nearest_carry_recorded_before_its_file(tmp_path, monkeypatch):
    """A micro-batch's read tasks run a few at a time in file order; each records the carry at its
    file when it starts. A later task walks only the files after the nearest recorded carry (O(n)
    file carries per batch, not one per earlier file per task) and gets the sequential scan's carry."""
    import jobs.spark_source as ss
    from tests.spark_streams import make_stream
    stream, _n = make_stream(tmp_path / "s", 11, 360, n_files=6)
    files = [(i, str(f)) for i, f in enumerate(sorted(stream.iterdir()))]
    expect = [run_scan(files[:k], (0, 0), 4, route=False)[1] for k in range(7)]
    r = ss.IsrflowStreamReader({"path": str(stream), "carry_dir": str(tmp_path / "carry"), "n_buckets": "4"})
    parts = r.partitions({"files": 0, "last": ""}, {"files": 6, "last": files[5][1].rsplit("/", 1)[-1]})
    walked: list[int] = []
    real = ss.carry_after
    monkeypatch.setattr(ss, "carry_after", lambda fs, *a: (walked.extend(i for i, _ in fs), real(fs, *a))[1])
    assert r._carry_at(parts[3]) == expect[3] and walked == [0, 1, 2]      # nothing recorded yet
    walked.clear()
    assert r._carry_at(parts[5]) == expect[5] and walked == [3, 4]         # from the carry at 3
    walked.clear()
    assert r._carry_at(parts[4]) == expect[4] and walked == [3]            # from the carry at 3 again
    walked.clear()
    assert r._carry_at(parts[5]) == expect[5] and walked == []             # its own, recorded above
    assert [r._carry_at(p) for p in parts] == expect[:6]


def test_a_read_task_scans_without_automatic_collections_and_restores_them(tmp_path, monkeypatch):
    """The scan builds a tuple per row, which only reference counting needs to free: the read task
    (and run_scan) pauses Python's automatic collections while the scan works, and gives them back
    as they were between its rows, at its end, and on an error."""
    import gc

    import jobs.spark_source as ss
    from tests.spark_streams import make_stream
    stream, _n = make_stream(tmp_path / "s", 5, 200, n_files=2)
    seen: list[bool] = []
    real = ss.iter_file_rows

    def rows(*a, **k):
        for r in real(*a, **k):
            seen.append(gc.isenabled())
            yield r
    monkeypatch.setattr(ss, "iter_file_rows", rows)
    r = ss.IsrflowStreamReader({"path": str(stream), "carry_dir": str(tmp_path / "carry"), "n_buckets": "4",
                                "chunk_rows": "50"})
    files = sorted(stream.iterdir())
    [part] = r.partitions({"files": 0, "last": ""}, {"files": 1, "last": files[0].name})
    was = gc.isenabled()
    try:
        for state in (True, False):
            (gc.enable if state else gc.disable)()
            seen.clear()
            out = []
            for row in r.read(part):
                assert gc.isenabled() is state          # the worker's own code between rows
                out.append(row)
            assert gc.isenabled() is state and len(out) > 1 and seen and not any(seen)
            seen.clear()
            run_scan([(0, str(files[0]))], (0, 0), 4)
            assert gc.isenabled() is state and seen and not any(seen)
        gc.enable()

        def unreadable(*a, **k):
            raise OSError("the disk went away")
        monkeypatch.setattr(ss, "iter_file_rows", unreadable)
        with pytest.raises(OSError):
            list(r.read(part))
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
