"""A synthetic metadata log written with our own encoder (tests and the import benchmark).

The history is plausible KRaft: bootstrap features, three brokers register and unfence, one topic is
created, then leaders shrink and re-expand ISRs (AlterPartition, the ISR in the order a real leader sends it),
so that `isrflow audit` agrees with every decision of it.
"""
from __future__ import annotations

import random
from pathlib import Path

from .codec import encode_batch, encode_control, encode_metadata, uuid_str

PCR, PR, TOPIC, REG, BRC, FEAT, CONFIG, NOOP, CLEAR = 5, 3, 2, 0, 17, 12, 4, 20, 28


class SegmentWriter:
    def __init__(self, epoch: int = 1, ts0: int = 1_700_000_000_000, codec: int = 0):
        self.out = bytearray()
        self.offset = 0
        self.epoch = epoch
        self.ts = ts0
        self.codec = codec

    def batch(self, records: list[tuple[int, int, dict]], dt: int = 1, control: bool = False) -> int:
        """Append one batch of (apiKey, version, data) metadata records (or (ctype, 0, data) control ones)."""
        self.ts += dt
        if control:
            recs = [encode_control(k, d) for k, _v, d in records]
        else:
            recs = [(None, encode_metadata(k, v, d)) for k, v, d in records]
        base = self.offset
        self.out += encode_batch(base, self.epoch, self.ts, recs, control=control, codec=self.codec)
        self.offset += len(records)
        return base

    def write(self, path: Path) -> Path:
        Path(path).write_bytes(bytes(self.out))
        return Path(path)


def topic_uuid(name: str) -> str:
    import hashlib
    return uuid_str(hashlib.md5(name.encode()).digest())


def register_broker(w: SegmentWriter, b: int, epoch: int) -> None:
    """A batch of broker b's RegisterBrokerRecord (v4, fenced, one PLAINTEXT listener)."""
    w.batch([(REG, 4, {"brokerId": b, "incarnationId": uuid_str(bytes([b] * 16)), "brokerEpoch": epoch,
                       "endPoints": [{"name": "PLAINTEXT", "host": "localhost", "port": 9090 + b,
                                      "securityProtocol": 0}], "features": [], "rack": None,
                       "fenced": True, "inControlledShutdown": False})])


def synthetic_log(n_records: int, partitions: int = 1000, batch_size: int = 500, seed: int = 1,
                  codec: int = 0) -> SegmentWriter:
    """About `n_records` records, most of them PartitionChangeRecords from ISR shrink/expand cycles."""
    rnd = random.Random(seed)
    w = SegmentWriter(codec=codec)
    w.batch([(2, 0, {"version": 0, "leaderId": 100, "voters": [{"voterId": 100}], "grantingVoters": []})],
            control=True)
    w.batch([(FEAT, 0, {"name": "metadata.version", "featureLevel": 33}),
             (FEAT, 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1}),
             (CONFIG, 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": "1"})])
    for b in (1, 2, 3):
        register_broker(w, b, w.offset)
    for b in (1, 2, 3):
        w.batch([(BRC, 0, {"brokerId": b, "brokerEpoch": 3 + b, "fenced": -1})])
    tid = topic_uuid("t")
    recs = [(TOPIC, 0, {"name": "t", "topicId": tid}),
            (CONFIG, 0, {"resourceType": 2, "resourceName": "t", "name": "min.insync.replicas", "value": "2"}),
            (CLEAR, 0, {"topicName": "t"})]
    assign = {}
    for p in range(partitions):
        reps = [(p + i) % 3 + 1 for i in range(3)]
        assign[p] = reps
        recs.append((PR, 2, {"partitionId": p, "topicId": tid, "replicas": reps, "isr": list(reps),
                             "removingReplicas": [], "addingReplicas": [], "leader": reps[0], "leaderEpoch": 0,
                             "partitionEpoch": 0, "directories": [uuid_str(bytes(16))] * 3}))
    for i in range(0, len(recs), batch_size):
        w.batch(recs[i:i + batch_size])
    isr = {p: list(r) for p, r in assign.items()}
    pending = []
    touched = set()
    while w.offset < n_records:
        p = rnd.randrange(partitions)
        if p in touched:           # one change per partition per batch (appended in the same millisecond)
            if len(touched) >= partitions:
                w.batch(pending)
                pending, touched = [], set()
            continue
        touched.add(p)
        reps = assign[p]
        cur = isr[p]
        # the ISR as a real 4.4.0 leader sends it in AlterPartition: ascending ids (protocol/broker/leader.py
        # leader_isr_order); replica order would make every audited decision differ in ISR order only
        if len(cur) == 3:
            drop = rnd.choice(reps[1:])
            cur = sorted(r for r in cur if r != drop)
        else:
            missing = [r for r in reps if r not in cur]
            cur = sorted(cur + missing[:1])
        isr[p] = cur
        pending.append((PCR, 2, {"partitionId": p, "topicId": tid, "isr": cur}))
        if len(pending) >= batch_size:
            w.batch(pending)
            pending, touched = [], set()
            if rnd.random() < 0.05:
                w.batch([(NOOP, 0, {})], dt=500)
    if pending:
        w.batch(pending)
    return w
