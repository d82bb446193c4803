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
    cache: dict = {}

    def owns(key) -> bool:
        r = cache.get(key)
        if r is None:
            r = cache[key] = bucket_of(key[0], key[1], n_buckets) == bucket
        return r
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
