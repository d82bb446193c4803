"""The one bucket function of the Spark engine: (topic, partition) -> bucket.

Every place that routes a partition to a bucket (the stream reader, the owning predicate
of each bucket's Cluster, tests) uses this, so the mapping is defined once. The bucket
count is frozen into a checkpoint (it keys the state store).
"""
from __future__ import annotations

import zlib

DEFAULT_BUCKETS = 16


def bucket_of(topic: str, partition: int, n_buckets: int) -> int:
    return zlib.crc32(f"{topic}|{partition}".encode()) % n_buckets


# partition numbers below this have their bucket kept in a list per topic (bucket_lookup)
_DENSE = 1 << 20


def bucket_lookup(n_buckets: int):
    """bucket(topic, partition) -> bucket_of(topic, partition, n_buckets), remembered: for a topic's
    partitions by partition number in a list (-1: not known yet) up to _DENSE, any other in a dict.
    A list index, not a dict of (topic, partition) keys: at 100k partitions those lookups missed the
    processor's cache (0.68 s of the Spark source's 1M-row scan's ~4 s, against ~0.1 s at 1k
    partitions). The scan routes rows with it, and each bucket's Cluster decides what it owns."""
    dense: dict[str, list[int]] = {}
    sparse: dict = {}

    def bucket(topic, partition):
        known = dense.get(topic)
        if known is None:
            known = dense[topic] = []
        if 0 <= partition < len(known):
            b = known[partition]
            if b >= 0:
                return b
        elif 0 <= partition < _DENSE:
            known.extend([-1] * (partition + 1 - len(known)))
        else:
            b = sparse.get((topic, partition))
            if b is None:
                b = sparse[(topic, partition)] = bucket_of(topic, partition, n_buckets)
            return b
        b = known[partition] = bucket_of(topic, partition, n_buckets)
        return b
    return bucket


def loose_bucket(lo: dict, n_buckets: int) -> int:
    """The bucket of a row that failed validation, from its loose key (jobs.streamio.loose): its
    partition's bucket when it names a topic and a partition, else bucket 0 (also for a key that is no
    key, like text that cannot be encoded). Its rejected row is written there, once."""
    if "topic" not in lo or "partition" not in lo:
        return 0
    try:
        return bucket_of(lo["topic"], lo["partition"], n_buckets)
    except Exception:                   # noqa: BLE001 - any value may stand in a loose key
        return 0


def owns_fn(bucket: int, n_buckets: int):
    """The `owns` predicate of bucket `bucket`'s Cluster."""
    lookup = bucket_lookup(n_buckets)

    def owns(key) -> bool:
        return lookup(key[0], key[1]) == bucket
    return owns


def _murmur3_int(v: int, seed: int = 42) -> int:
    """Spark's Murmur3_x86_32.hashInt (the hash of HashPartitioning on an int column)."""
    m = 0xFFFFFFFF

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & m
    k1 = (v & m) * 0xCC9E2D51 & m
    k1 = rotl(k1, 15) * 0x1B873593 & m
    h1 = seed ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & m
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & m
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & m
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def group_keys(n_buckets: int, n_shuffle: int) -> list[int]:
    """The grouping key of each bucket (key % n_buckets == bucket). n_shuffle <= 0: the
    bucket itself (checkpoints made before balancing). Else the smallest key whose Spark
    hash partition is bucket % n_shuffle, so the buckets spread evenly over the shuffle
    (= state store) partitions instead of Murmur3's uneven split of 0..n-1. Frozen in the
    checkpoint with n_shuffle (it keys the state store)."""
    if n_shuffle <= 0:
        return list(range(n_buckets))
    keys = []
    for b in range(n_buckets):
        k = b
        while _murmur3_int(k) % n_shuffle != b % n_shuffle and k < b + n_buckets * 10_000:
            k += n_buckets
        keys.append(k if _murmur3_int(k) % n_shuffle == b % n_shuffle else b)
    return keys
