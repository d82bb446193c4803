"""A small builder for hand-written event streams in tests."""
from __future__ import annotations


class S:
    """Events for one partition `t-0` by default; every call appends rows in seq order."""

    def __init__(self, topic: str = "t", partition: int = 0):
        self.topic = topic
        self.partition = partition
        self.events: list[dict] = []
        self.ts = 0
        self.epochs: dict[int, int] = {}

    def at(self, ts: int) -> "S":
        self.ts = ts
        return self

    def add(self, **kw) -> int:
        row = {"seq": len(self.events) + 1, "ts_ms": self.ts}
        row.update({k: v for k, v in kw.items() if v is not None})
        self.events.append(row)
        return row["seq"]

    def _p(self, **kw) -> int:
        kw.setdefault("topic", self.topic)
        kw.setdefault("partition", self.partition)
        return self.add(**kw)

    # brokers
    def register(self, *brokers: int, previous: int | None = None, epoch: int | None = None) -> int:
        s = 0
        for b in brokers:
            e = epoch if epoch is not None else self.epochs.get(b, 100 + b - 100) + 100
            self.epochs[b] = e
            s = self.add(type="BrokerRegister", broker=b, broker_epoch=e,
                         previous_broker_epoch=-1 if previous is None else previous)
        return s

    def up(self, *brokers: int) -> "S":
        """Register and unfence brokers (epoch = 100 + id for the first registration)."""
        for b in brokers:
            self.epochs[b] = 100 + b
            self.add(type="BrokerRegister", broker=b, broker_epoch=100 + b, previous_broker_epoch=-1)
        for b in brokers:
            self.add(type="BrokerUnfence", broker=b)
        return self

    def unfence(self, b): return self.add(type="BrokerUnfence", broker=b)
    def fence(self, b): return self.add(type="BrokerFence", broker=b)
    def shutdown(self, b): return self.add(type="BrokerControlledShutdown", broker=b)
    def crash(self, b, clean=False): return self.add(type="BrokerCrash", broker=b, clean=clean)
    def sync(self, b, up_to=None): return self.add(type="MetadataSync", broker=b, up_to_seq=up_to)
    def tick(self, b=None): return self.add(type="Tick", broker=b)

    def restart(self, b, clean: bool) -> int:
        prev = self.epochs[b] if clean else -1
        self.epochs[b] = self.epochs[b] + 100
        return self.add(type="BrokerRegister", broker=b, broker_epoch=self.epochs[b], previous_broker_epoch=prev)

    # partition
    def create(self, replicas, **kw): return self._p(type="CreatePartition", replicas=list(replicas), **kw)
    def produce(self, b, n=1, acks=-1, **kw): return self._p(type="Produce", broker=b, records=n, acks=acks, **kw)
    def fetch(self, b, **kw): return self._p(type="Fetch", broker=b, **kw)
    def loss(self, b, leo): return self._p(type="ReplicaLogLoss", broker=b, log_end_offset=leo)
    def ap_arrive(self, **kw): return self._p(type="AlterPartitionArrive", **kw)
    def ap_response(self, **kw): return self._p(type="AlterPartitionResponse", **kw)
    def reassign(self, replicas): return self._p(type="Reassign", replicas=None if replicas is None else list(replicas))
    def elect(self, kind, target=None): return self._p(type="ElectLeaders", election_type=kind, target=target)
    def list_offsets(self, b, spec="LATEST", **kw): return self._p(type="ListOffsets", broker=b, offset_spec=spec, **kw)
    def consume(self, b, offset, **kw): return self._p(type="ConsumerFetch", broker=b, fetch_offset=offset, **kw)
    def alter_config(self, partition=-1, **cfg):
        row = {"type": "AlterConfig", "topic": self.topic, "config": {k.replace("_", "."): str(v) for k, v in cfg.items()}}
        if partition != -1:
            row["partition"] = partition
        return self.add(**row)

    def fetch_round(self, *brokers, times: int = 2) -> None:
        for _ in range(times):
            for b in brokers:
                self.fetch(b)
