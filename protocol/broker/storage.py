"""What a broker's process and disk do to its replica: a process that stops forgets everything but
the log; a disk can lose a log suffix; a recorded replica snapshot loads a log."""
from __future__ import annotations

from ..messages import LEADER
from ..replica import Replica
from .leader import resign


def process_stopped(p, rep: Replica) -> None:
    """The broker process stopped (crash) or was replaced (a new incarnation registered): a leader's
    parked produces never get an answer (NETWORK_EXCEPTION at the client)."""
    if rep.role == LEADER:
        resign(p, rep, "NETWORK_EXCEPTION")
    rep.reset_memory()


def lose_log_suffix(p, rep: Replica, leo: int) -> None:
    """ReplicaLogLoss: the log on disk ends at `leo` now (unflushed records lost in a crash)."""
    if leo < rep.log.leo:
        rep.log.truncate_to(leo)
        p.inv.on_log_change(p, rep)


def load_snapshot(p, b: int, starts: dict, leo: int, hwm: int) -> None:
    """ReplicaSnapshot: broker b's replica log is the recorded one (epoch cache, LEO, HWM)."""
    rep = p.reps.get(b)
    if rep is None:
        rep = p.reps[b] = Replica(b)
        p.cl.reindex(p)
    rep.log.load_snapshot(starts, leo, hwm)
    if rep.role == LEADER:
        # the leader was made before its log arrived: its epoch start is the loaded one (or LEO)
        le = rep.leader_epoch
        rep.leso = starts.get(le, leo)
        rep.log.assign(le, rep.leso)
    p.inv.on_snapshot(p, rep, hwm)
