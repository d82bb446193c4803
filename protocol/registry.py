"""The controller's broker registry entries (ClusterControlManager + BrokerHeartbeatTracker,
Kafka 4.4.0). A broker's metadata cache holds BrokerReg records with the same field names, so
readers take either (immediate delivery reads the registry itself)."""
from __future__ import annotations
from typing import Any

from .messages import BrokerReg, PendingRegistration


class Broker:
    """Controller registration (epoch, fenced, in controlled shutdown), the controller's heartbeat
    session of the broker, and the process's truth.

    Session (BrokerHeartbeatTracker, Kafka 4.4.0): the controller tracks the last contact of
    (broker id, broker epoch); a registration starts it, every heartbeat renews it, and it expires
    once more than `broker.session.timeout.ms` passed since the last contact (#isExpired:
    now > contact + timeout). A running broker process heartbeats continuously, so the engine
    models the session as renewed while the process runs; the heartbeats stop at its BrokerCrash
    (or, for a restart the stream gives without a BrokerCrash, at the new process's BrokerRegister)."""
    __slots__ = ("id", "epoch", "fenced", "in_cs", "registered", "alive", "proc_epoch",
                 "sess_epoch", "sess_last", "sess_seq", "pend", "pend_unfence", "retry_epoch")

    def __init__(self, bid: int):
        self.id = bid
        self.epoch = -1
        self.fenced = True
        self.in_cs = False
        self.registered = False
        self.alive = False
        self.proc_epoch = -1
        self.sess_epoch = -1        # epoch whose session the controller tracks (-1: none)
        self.sess_last: Any = None       # last contact once heartbeats stopped; None: still heartbeating
        self.sess_seq = 0           # seq of the row that last changed the session (rows it causes)
        self.pend: PendingRegistration | None = None   # a refused registration, retried later
        self.pend_unfence = False   # the refused incarnation asked to be unfenced meanwhile
        self.retry_epoch = -1       # epoch accepted by the broker's retry (a recorded retry row is a no-op)

    def reg(self) -> BrokerReg:
        return BrokerReg(self.epoch, self.fenced, self.in_cs, self.registered)

    def sess_expiry(self, timeout: int) -> int | None:
        """The first time the session counts as expired (None: none, or still heartbeating)."""
        if timeout <= 0 or self.sess_epoch < 0 or self.sess_last is None:
            return None
        return self.sess_last + timeout + 1

    def session_valid(self, timeout: int, ts: int) -> bool:
        """BrokerHeartbeatTracker#hasValidSession for the registered epoch at `ts`."""
        if timeout <= 0:
            return self.registered and not self.fenced
        if self.sess_epoch < 0 or self.sess_epoch != self.epoch:
            return False
        exp = self.sess_expiry(timeout)
        return exp is None or ts < exp

    def to_tuple(self):
        pend = tuple(self.pend) if self.pend is not None else None
        return (self.id, self.epoch, self.fenced, self.in_cs, self.registered, self.alive, self.proc_epoch,
                self.sess_epoch, self.sess_last, self.sess_seq, pend, self.pend_unfence, self.retry_epoch)

    def from_tuple(self, t) -> None:
        (_, self.epoch, self.fenced, self.in_cs, self.registered, self.alive, self.proc_epoch,
         self.sess_epoch, self.sess_last, self.sess_seq, pend, self.pend_unfence, self.retry_epoch) = t
        self.pend = PendingRegistration(*pend) if pend is not None else None
