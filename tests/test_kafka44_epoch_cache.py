"""protocol.log.ReplicaLog's leader-epoch cache against Kafka 4.4.0's LeaderEpochFileCache
(kafka-storage-4.4.0, run by java/lab/EpochCacheOracle.java): seeded random sequences of assigns
(C5), truncations from the end (a log truncation's) and endOffsetFor lookups (C4, the answer to a
follower's diverging-epoch check) leave the same entries and give the same answers after every step.
"""
from __future__ import annotations

import random

import pytest

from protocol.log import ReplicaLog
from tests.kafka_oracle import ask, needs_kafka_java

pytestmark = needs_kafka_java


def _ops(rng: random.Random) -> list[str]:
    out = []
    for _ in range(60):
        out.append("NEW")
        for _ in range(rng.randint(1, 25)):
            k = rng.random()
            if k < 0.55:
                out.append(f"ASSIGN {rng.randint(0, 8)} {rng.randint(0, 30)}")
            elif k < 0.7:
                out.append(f"TRUNCATE_END {rng.randint(0, 32)}")
            else:
                out.append(f"END_OFFSET_FOR {rng.randint(-1, 9)} {rng.randint(30, 40)}")
    return out


def _isrflow(ops: list[str]) -> list[str]:
    out = []
    log = ReplicaLog()
    for op in ops:
        f = op.split()
        extra = ""
        if f[0] == "NEW":
            log = ReplicaLog()
        elif f[0] == "ASSIGN":
            log.assign(int(f[1]), int(f[2]))
        elif f[0] == "TRUNCATE_END":
            log.leo = 1 << 40                 # below the log end: the cache loses what starts at or past it
            log.truncate_to(int(f[1]))
        else:
            log.leo = int(f[2])
            e, o = log.end_offset_for(int(f[1]))
            extra = f" = {e} {o}"
        out.append(" ".join(f"{e}:{o}" for e, o in log.cache) + extra)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_the_epoch_cache_is_kafkas(seed, tmp_path):
    ops = _ops(random.Random(seed))
    kafka = ask("EpochCacheOracle", ops, str(tmp_path))
    assert len(kafka) == len(ops)
    mine = _isrflow(ops)
    wrong = [f"{ops[max(0, i - 3):i + 1]}: isrflow {m!r}, Kafka {k!r}"
             for i, (m, k) in enumerate(zip(mine, kafka)) if m != k]
    assert not wrong, f"{len(wrong)} of {len(ops)} differ:\n" + "\n".join(wrong[:8])
    assert sum(" = " in k and not k.endswith("= -1 -1") for k in kafka) > 50    # lookups that find an epoch
