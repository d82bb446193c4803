"""protocol.cold: a state blob's undecoded partitions in columns, against a plain dict model, and
the Spark engine's compressed state values."""
import pickle
import random
import zlib

import pytest

from protocol.cold import NO_DUE, ColdPartitions
from protocol.config import EngineConfig


def _entries(rng: random.Random, topics, n: int) -> dict:
    out = {}
    while len(out) < n:
        key = (rng.choice(topics), rng.randrange(0, 1 << 31))
        due = None if rng.random() < 0.3 else rng.randrange(0, 10_000)
        hosts = tuple(sorted(rng.sample(range(1, 9), rng.randint(0, 4))))
        out[key] = (due, hosts, bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))))
    return out


def _cold(model: dict) -> ColdPartitions:
    return ColdPartitions.from_entries([(k, *model[k]) for k in sorted(model)])


def _check(cold: ColdPartitions, model: dict) -> None:
    assert len(cold) == len(model) and bool(cold) == bool(model)
    assert list(cold) == sorted(model)
    assert dict(cold.items()) == model
    dues = [d for d, _, _ in model.values() if d is not None]
    assert cold.min_due() == (min(dues) if dues else None)
    for ts in (-1, 0, 2_500, 5_000, 10_000):
        assert cold.due_by(ts) == sorted(k for k, (d, _, _) in model.items() if d is not None and d <= ts)
    for b in range(0, 10):
        assert sorted(cold.on_broker(b)) == sorted(k for k, (_, hs, _) in model.items() if b in hs)
        assert sorted(cold.on_broker_hosts(b)) == sorted((k, hs) for k, (_, hs, _) in model.items() if b in hs)
    for t in ("a", "b", "m", "zz", "nope"):
        assert cold.of_topic(t) == sorted(k for k in model if k[0] == t)
    # absent keys: before the first code, between codes, past the last one, of an unknown topic
    for k in (("b", -1 + 1), ("zz", (1 << 31) + 5), ("m", (1 << 31) + 1), ("nope", 0)):
        assert (k in cold) == (k in model)


@pytest.mark.parametrize("seed", range(12))
def test_columns_answer_as_the_dict_they_replace_through_pops_and_merges(seed):
    rng = random.Random(seed)
    model = _entries(rng, ["b", "m", "zz"], rng.randint(0, 60))
    cold = _cold(model)
    _check(cold, model)
    for _ in range(4):
        # a batch: some partitions decoded (popped), some new ones (new topics too), all encoded again
        popped = rng.sample(sorted(model), min(len(model), rng.randint(0, 8)))
        for k in popped:
            assert k in cold
            assert cold.pop(k) == model.pop(k)
            assert k not in cold
            with pytest.raises(KeyError):
                cold.pop(k)
        _check(cold, model)
        changed = {k: (rng.randrange(0, 10_000), (1, 2), b"hot" + bytes([i])) for i, k in enumerate(popped)}
        changed.update(_entries(rng, ["a", "b", "zz", "q"], rng.randint(0, 5)))
        for k in list(changed):
            if k in model:
                del changed[k]
        hot = [(k, *v) for k, v in changed.items()]
        rng.shuffle(hot)
        columns = cold.merged(hot)
        model.update(changed)
        cold = ColdPartitions(*columns)
        assert columns == _cold(model).columns()          # the same bytes as built from scratch
        _check(cold, model)


def test_no_due_is_none_outside_and_an_empty_store_answers_nothing():
    cold = ColdPartitions()
    assert not cold and len(cold) == 0 and list(cold) == []
    assert cold.min_due() is None and cold.due_by(1 << 40) == [] and cold.on_broker(1) == []
    assert ("t", 0) not in cold and cold.of_topic("t") == []
    one = ColdPartitions.from_entries([(("t", 3), None, (1,), b"x")])
    assert one.dues[0] == NO_DUE and one.min_due() is None and one.due_by(NO_DUE - 1) == []
    assert ColdPartitions(*cold.merged([(("t", 1), 5, (2,), b"y")])).items() == [(("t", 1), (5, (2,), b"y"))]


def test_columns_of_different_lengths_are_refused():
    cols = list(ColdPartitions.from_entries([(("t", 0), 1, (1, 2), b"ab"), (("t", 1), 2, (3,), b"c")]).columns())
    for i, cut in ((1, lambda a: a[:1]), (4, lambda a: a[:2]), (6, lambda b: b[:-1])):
        bad = list(cols)
        bad[i] = cut(bad[i])
        with pytest.raises(ValueError):
            ColdPartitions(*bad)


def test_version_3_blobs_are_read_and_written_again_as_version_4():
    # version 3 (the checkpoints of the previous isrflow): a dict of (due, hosts, zlib(pickle(partition)))
    from protocol.codec import MAGIC, cluster_out, decode_cluster, encode_cluster, partition_out
    from tests.gen import random_schedule
    from tests.engine_util import run_events
    events = random_schedule(3, 300, partitions=6, max_unclean=1)
    conf = {"min.insync.replicas": "2"}
    cl = run_events(events, conf, finish=False)["_cluster"]
    parts = {k: (cl.partition_due(p), tuple(sorted(p.indexed)), zlib.compress(pickle.dumps(partition_out(p)), 1))
             for k, p in sorted(cl.partitions.items())}
    head = zlib.compress(pickle.dumps(cluster_out(cl, with_partitions=False)), 1)
    v3 = MAGIC + bytes([3]) + pickle.dumps((head, parts), protocol=4)
    cfg = EngineConfig(conf)
    old = decode_cluster(v3, cfg)
    assert old.partitions == {} and len(old.cold) == 6
    assert old.next_due() == cl.next_due()
    v4 = encode_cluster(old)
    assert v4[2] == 4 and v4 == encode_cluster(decode_cluster(encode_cluster(cl), cfg))
    assert decode_cluster(v4, cfg).partition_state_rows() == cl.partition_state_rows()


def test_the_spark_state_value_is_the_blob_compressed_and_old_values_still_read():
    from protocol.codec import CodecError, encode_cluster
    from jobs.spark_engine import load_blob, store_blob
    from tests.gen import random_schedule
    from tests.engine_util import run_events
    cl = run_events(random_schedule(4, 400, partitions=20), {}, finish=False)["_cluster"]
    blob = encode_cluster(cl)
    value = store_blob(blob)
    assert value[:2] == b"IZ" and len(value) < len(blob) / 3      # the partitions' pickles are alike
    assert load_blob(value) == blob
    assert load_blob(blob) == blob                                  # a value stored before: the blob itself
    for bad in (value[:12], value[:-5], value[:10] + bytes(reversed(value[10:]))):
        with pytest.raises(CodecError, match="truncated or corrupt"):
            load_blob(bad)
