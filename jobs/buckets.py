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


def owns_fn(bucket: int, n_buckets: int):
    """The `owns` predicate of bucket `bucket`'s Cluster."""
    cache: dict = {}

    def owns(key) -> bool:
        r = cache.get(key)
        if r is None:
            r = cache[key] = bucket_of(key[0], key[1], n_buckets) == bucket
        return r
    return owns
