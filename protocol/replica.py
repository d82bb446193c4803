"""Broker-side state of one partition on one broker: its log, its materialized metadata,
and -- while it leads -- Kafka's leader state (Partition.scala / Replica.scala)."""
from __future__ import annotations
from typing import Any

from .log import ReplicaLog
from .messages import EMPTY, FOLLOWER, LEADER

__all__ = ["LEADER", "FOLLOWER", "FollowerState", "CommittedIsr", "PendingExpandIsr", "PendingShrinkIsr",
           "Pending", "Produce", "Replica"]


class FollowerState:
    """The leader's view of one follower (Replica.scala ReplicaState)."""
    __slots__ = ("leo", "last_fetch_ms", "last_caught_up_ms", "last_fetch_leader_leo", "broker_epoch")

    def __init__(self, leo=-1, last_fetch_ms=None, last_caught_up_ms=None, last_fetch_leader_leo=-1,
                 broker_epoch=None):
        self.leo = leo
        self.last_fetch_ms = last_fetch_ms          # None: no fetch in this leadership
        self.last_caught_up_ms = last_caught_up_ms  # None: never caught up (B4: not 0)
        self.last_fetch_leader_leo = last_fetch_leader_leo
        self.broker_epoch = broker_epoch            # None: no fetch-carried epoch (B5)

    def is_caught_up(self, leader_leo: int, now: int, lag_ms: int) -> bool:
        """B4 ReplicaState.isCaughtUp."""
        if self.leo == leader_leo:
            return True
        return self.last_caught_up_ms is not None and now - self.last_caught_up_ms <= lag_ms

    def to_tuple(self):
        return (self.leo, self.last_fetch_ms, self.last_caught_up_ms, self.last_fetch_leader_leo, self.broker_epoch)


class CommittedIsr:
    """B1 CommittedPartitionState: no AlterPartition in flight; the maximal ISR is the ISR."""
    __slots__ = ("isr", "maximal_isr")
    is_pending = False
    change = None

    def __init__(self, isr: tuple):
        self.isr = isr
        self.maximal_isr = isr


class _PendingIsr:
    """B1 PendingPartitionChange: an AlterPartition proposal (`pid`) in flight over `committed`."""
    __slots__ = ("isr", "proposed", "pid", "maximal_isr")
    is_pending = True
    change = ""

    def __init__(self, committed: tuple, proposed: tuple, pid: int):
        self.isr = committed
        self.proposed = proposed
        self.pid = pid
        self.maximal_isr = self._maximal()

    def _maximal(self) -> tuple:
        raise NotImplementedError

    def committed(self) -> CommittedIsr:
        """The rollback target (handleAlterPartitionError: back to the last committed state)."""
        return CommittedIsr(self.isr)


class PendingExpandIsr(_PendingIsr):
    """Partition.scala PendingExpandIsr: maximalIsr = isr + newInSyncReplicaId (the proposal)."""
    __slots__ = ()
    change = "EXPAND"

    def _maximal(self) -> tuple:
        return self.proposed


class PendingShrinkIsr(_PendingIsr):
    """Partition.scala PendingShrinkIsr: maximalIsr = isr (a shrink counts only once committed)."""
    __slots__ = ()
    change = "SHRINK"

    def _maximal(self) -> tuple:
        return self.isr


PENDING_BY_CHANGE = {"EXPAND": PendingExpandIsr, "SHRINK": PendingShrinkIsr}


def pending_isr(change: str, committed: tuple, proposed: tuple, pid: int) -> _PendingIsr:
    return PENDING_BY_CHANGE[change](committed, proposed, pid)


Pending = _PendingIsr   # the type of `Replica.pending` (name kept for readers of older code)


class Produce:
    """An acks=all produce parked in purgatory (DelayedProduce)."""
    __slots__ = ("seq", "ts", "required", "base", "records", "deadline", "epoch", "inc", "idx")

    def __init__(self, seq, ts, required, base, records, deadline, epoch, inc, idx):
        self.idx = idx
        self.seq = seq
        self.ts = ts
        self.required = required
        self.base = base
        self.records = records
        self.deadline = deadline
        self.epoch = epoch
        self.inc = inc

    def to_tuple(self):
        return (self.seq, self.ts, self.required, self.base, self.records, self.deadline, self.epoch, self.inc,
                self.idx)


class Replica:
    __slots__ = (
        "broker", "log",
        # materialized metadata (what this broker applied last)
        "md_seq", "role", "leader", "leader_epoch", "partition_epoch", "assignment", "md_isr", "md_lrs",
        # leader state: `isr_state` is CommittedIsr | PendingExpandIsr | PendingShrinkIsr (B1)
        "leso", "isr_state", "followers", "purgatory",
    )

    def __init__(self, broker: int):
        self.broker = broker
        self.log = ReplicaLog()
        self.reset_memory()

    def reset_memory(self) -> None:
        """What a process restart forgets: everything but the log."""
        self.md_seq = -1
        self.role: Any = None
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.assignment: tuple = ()
        self.md_isr: tuple = ()
        self.md_lrs = "RECOVERED"
        self.clear_leader_state()

    def clear_leader_state(self) -> None:
        self.leso: Any = None
        self.isr_state: Any = _NO_ISR
        self.followers: dict[int, FollowerState] = {}
        self.purgatory: list[Produce] = EMPTY     # parked acks=all produces (messages.grown)

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER

    # read views of the ISR state (the state itself is written only as a whole)
    @property
    def committed_isr(self) -> tuple:
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> tuple:
        return self.isr_state.maximal_isr

    @property
    def pending(self) -> _PendingIsr | None:
        st = self.isr_state
        return st if st.is_pending else None


_NO_ISR = CommittedIsr(())
