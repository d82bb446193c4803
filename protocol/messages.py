"""The protocol's shared vocabulary (a leaf: imports nothing of the protocol's own): sentinels,
election modes, the records and messages that cross between the controller and the brokers
(named, never read by position), and the timer kinds.

State encoding (codec.py) stores every NamedTuple here as the plain tuple of its fields, in field
order, so a checkpoint never freezes a class path; the field order below IS the stored layout.
"""
from __future__ import annotations

from enum import Enum, IntEnum
from typing import NamedTuple

NO_LEADER = -1
NO_CHANGE = -2
# a broker epoch a request does not carry (Kafka's default -1 in a fetch's ReplicaState and an
# AlterPartition's BrokerState): never checked against the cached epoch (B3, B5, A19)
NO_BROKER_EPOCH = -1
# The one empty list and empty set that every partition's almost-always-empty containers start as
# and fall back to (the ELR, the reassignment lists, the channels' queues, a replica's purgatory,
# the invariants' consumer record and report keys): at 100k partitions each was ~100k objects of
# 56-216 bytes that every young collection walked once and that spread the partitions' state over
# more cache lines (docs/core-speed.md). They are shared, so nothing grows them in place: a holder
# gives itself a container of its own when it adds the first item (`grown`, `grown_set`), and
# Cluster.drain checks after every batch that both are still empty.
EMPTY: list = []
EMPTY_SET: set = set()


def listed(xs) -> list:
    """xs as a list of its own, or the shared EMPTY when it has nothing (registrations, decoding)."""
    return list(xs) if xs else EMPTY


def grown(xs: list, item) -> list:
    """xs with item appended: in place, or a new list when xs is the shared EMPTY."""
    if xs:
        xs.append(item)
        return xs
    return [item]


def grown_set(xs: set, item) -> set:
    """xs with item added: in place, or a new set when xs is the shared EMPTY_SET."""
    if xs:
        xs.add(item)
        return xs
    return {item}


RECOVERED = "RECOVERED"
RECOVERING = "RECOVERING"

# a replica's role on its broker
LEADER = "LEADER"
FOLLOWER = "FOLLOWER"

# election modes (PartitionChangeBuilder.Election)
ONLINE, PREFERRED, UNCLEAN = "ONLINE", "PREFERRED", "UNCLEAN"


class Scope(Enum):
    """Which partitions an input event reaches (SPEC §2)."""
    PARTITION = "partition"
    BROKER = "broker"
    TOPIC = "topic"


class TimerKind(IntEnum):
    """Timers in tie order: at one time they fire in this order (SPEC §4)."""
    ISR_EXPIRATION = 0      # B8 isr-expiration, every replica.lag.time.max.ms / 2
    LEADER_REBALANCE = 1    # auto.leader.rebalance.enable: preferred election
    UNCLEAN_ELECTION = 2    # unclean.leader.election.interval.ms
    PRODUCE_TIMEOUT = 3     # an acks=all produce's request.timeout.ms

    @property
    def periodic(self) -> bool:
        return self is not TimerKind.PRODUCE_TIMEOUT


PERIODIC_KINDS = (TimerKind.ISR_EXPIRATION, TimerKind.LEADER_REBALANCE, TimerKind.UNCLEAN_ELECTION)


class Timer(NamedTuple):
    time: int
    kind: TimerKind
    broker: int | None      # the leader's broker (ISR expiration, produce timeouts); None: the controller's


class RegistrationSnapshot(NamedTuple):
    """A committed partition registration as the brokers receive it (the metadata record)."""
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple
    isr: tuple
    adding: tuple
    removing: tuple
    lrs: str


class BrokerReg(NamedTuple):
    """A broker registration as a metadata cache holds it."""
    epoch: int
    fenced: bool
    in_cs: bool
    registered: bool


class RegLogEntry(NamedTuple):
    """A broker registration change waiting in the metadata log (explicit delivery)."""
    seq: int
    broker: int
    reg: BrokerReg


class IsrMember(NamedTuple):
    """An AlterPartition ISR entry (BrokerState): id and the broker epoch the leader saw (-1: unknown)."""
    broker: int
    broker_epoch: int


class AlterPartitionRequest(NamedTuple):
    pid: int                # the leader's proposal id (matches the response to the pending state)
    leader: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    lrs: str
    new_isr: tuple          # of IsrMember
    change: str             # EXPAND | SHRINK


class LeaderAndIsr(NamedTuple):
    """The registration an accepted AlterPartition answers with."""
    leader: int
    isr: tuple
    lrs: str
    leader_epoch: int
    partition_epoch: int


class AlterPartitionResponse(NamedTuple):
    pid: int
    leader: int
    error: str | None
    state: LeaderAndIsr | None
    # the broker epoch of the request it answers: the process whose AlterPartitionManager waits for
    # it (-1: read from a state written before this field)
    broker_epoch: int = -1


class ElectionInfo(NamedTuple):
    kind: str               # ISR, ELR, PREFERRED, UNCLEAN, LAST_KNOWN_ELR, DESIGNATED, NONE
    candidates: list


class PendingRegistration(NamedTuple):
    """A BrokerRegister refused DUPLICATE_BROKER_REGISTRATION, retried once the old session ends."""
    seq: int
    broker_epoch: int
    previous_broker_epoch: int | None


def as_tuple(x):
    """A NamedTuple (possibly nested in tuples) as plain tuples, for the codec."""
    if isinstance(x, tuple):
        return tuple(as_tuple(v) for v in x)
    return x
