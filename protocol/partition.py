"""One partition's world, as state: the controller's registration (A1), every replica's
broker-side state (`reps`), the channels' queues, the timers' progress, the row context and the
invariant checker. The behaviour lives in the rooms:

    controller/   change_builder (PartitionChangeBuilder), replication (decisions, commit,
                  AlterPartition), admin (admin requests)
    broker/       leader, follower, fetch (both ends of a fetch), metadata_cache
    channels.py   metadata and AlterPartition delivery: the one bridge between the two
    timers.py     periodic tasks and produce timeouts

Rule ids in comments refer to docs/kafka_rules.md (A = controller, B = leader replica,
C = fetch and divergence). Everything is pure: events in, output rows out. No clock, no I/O.
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any, ClassVar


from . import channels as _channels
from .broker.leader import ROLLBACK_ERRORS, STAY_PENDING_ERRORS, leader_isr_order  # noqa: F401 (re-export)
from .config import TopicConf
from .messages import (EMPTY, NO_CHANGE, NO_LEADER, ONLINE, PREFERRED, RECOVERED, RECOVERING,  # noqa: F401
                       UNCLEAN, RegistrationSnapshot)
from .replica import Replica
from .timers import set_t_next as _set_t_next

if TYPE_CHECKING:
    from .cluster import Cluster


class Partition:
    channels: ClassVar[Any] = _channels        # the bridge the controller and the brokers talk through

    __slots__ = ("cl", "topic", "partition", "key",
                 # controller registration (A1)
                 "replicas", "isr", "elr", "lke", "leader", "leader_epoch", "partition_epoch", "lrs",
                 "adding", "removing", "config", "conf",
                 # broker side: broker -> its replica
                 "reps",
                 # channels (explicit delivery) and the deferred AlterPartition retry
                 "md_history", "ap_requests", "ap_responses", "next_pid", "retry",
                 # timers: every timer due at or before tdone has fired; t_next: next periodic multiple;
                 # t_wake: at most every parked produce's deadline (derived, not encoded; 0: unknown)
                 "tdone", "t_next", "t_wake",
                 # row context
                 "last_seq", "cur_seq", "now", "idx",
                 # invariant checker and its unclean-crash record (replica -> seq of its unclean crash)
                 "inv", "unclean",
                 # the keys the router's by_broker index holds p under: index_keys() at the last
                 # reindex (derived, not encoded)
                 "indexed",
                 # the cluster's touch generation in which p joined cl.touched (Cluster.touch; derived,
                 # not encoded: 0, never, for a partition made or decoded since)
                 "touched_in")

    def __init__(self, cluster: Cluster, topic: str, partition: int):
        self.cl = cluster
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.replicas: list[int] = []
        self.isr: list[int] = []
        # the lists below that are almost always empty start as the shared EMPTY (messages.py):
        # registrations replace them whole (controller.replication), the channels grow theirs
        # with messages.grown
        self.elr: list[int] = EMPTY
        self.lke: list[int] = EMPTY            # last known ELR
        self.leader = NO_LEADER
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.lrs = RECOVERED                # leader recovery state
        self.adding: list[int] = EMPTY
        self.removing: list[int] = EMPTY
        self.config: dict[str, str] = {}       # partition-level overrides
        self.conf: TopicConf = cluster.config.topic_conf()
        self.reps: dict[int, Replica] = {}
        self.md_history: list[tuple[int, RegistrationSnapshot]] = EMPTY   # committed registrations (seq, snapshot)
        # in-flight AlterPartition requests / answers (explicit delivery), oldest first. Lists, not
        # deques: almost always empty, and an empty deque takes 760 bytes (with ~70 objects of ~7 KB
        # a partition, the deques were a fifth of it); the shared EMPTY until the first
        self.ap_requests: list = EMPTY
        self.ap_responses: list = EMPTY
        self.next_pid = 1
        self.retry: Any = None            # (leader, pid) to resubmit at the next event (immediate mode)
        self.tdone = 0
        self.t_next = 0
        self.t_wake = 0
        self.last_seq = 0
        self.cur_seq = 0
        self.now = 0
        self.idx = 0
        self.inv: Any = None
        self.unclean: dict[int, int] = {}
        self.indexed: tuple[int, ...] = ()
        self.touched_in = 0

    def emit(self, table: str, row: dict) -> None:
        row["topic"] = self.topic
        row["partition"] = self.partition
        row["seq"] = self.cur_seq
        row["idx"] = self.idx
        row["ts_ms"] = self.now
        self.idx += 1
        self.cl.out.add(table, row)

    def refresh_conf(self) -> None:
        self.conf = self.cl.config.topic_conf(self.cl.topic_cfg.get(self.topic), self.config)

    def eff_min_isr(self) -> int:
        """A11 effective min ISR of this partition's registration (config.effective_min_isr)."""
        return self.conf.effective_min_isr(len(self.replicas))

    def hosts(self) -> set[int]:
        return set(self.replicas) | set(self.reps)

    def index_keys(self) -> set[int]:
        """What the router indexes p under (Cluster.reindex): its hosts, and NO_LEADER while it
        has none, as Kafka's BrokersToIsrs keeps leaderless partitions under NO_LEADER
        (#partitionsWithNoLeader: an unfenced broker's elections reach all of them, A15). A Spark
        bucket's cold partitions keep these keys in their hosts column, so it finds its leaderless
        ones without decoding any."""
        keys = self.hosts()
        if self.leader == NO_LEADER and self.replicas:
            keys.add(NO_LEADER)
        return keys

    def set_t_next(self) -> None:
        _set_t_next(self)

    def longest_log(self, t_rep, acc):
        """KIP-966 GetReplicaLogInfo (the builder's unclean-recovery lookup): the live acceptable
        replica with the highest (last epoch, LEO)."""
        best, best_key = None, None
        brokers = self.cl.brokers
        for i, r in enumerate(t_rep):
            rep = self.reps.get(r)
            b = brokers.get(r)
            if rep is None or b is None or not b.alive or not acc(r):
                continue
            key = (rep.log.latest_epoch(), rep.log.leo, -i)
            if best_key is None or key > best_key:
                best, best_key = r, key
        return best
