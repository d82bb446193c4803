"""A broker applying a partition's registration from its metadata (KRaft MetadataCache +
ReplicaManager#applyDelta, Kafka 4.4.0): the replica becomes leader or follower, or -- removed
from the assignment -- stops and deletes its log.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..messages import RegistrationSnapshot
from ..replica import Replica
from .follower import make_follower
from .leader import make_leader, resign

if TYPE_CHECKING:
    from ..partition import Partition


def apply_metadata(p: Partition, b: int, snap: RegistrationSnapshot, md_seq: int) -> None:
    leader, le, pe, replicas, isr, adding, removing, lrs = snap
    rep = p.reps.get(b)
    if b not in replicas:
        if rep is not None and pe > rep.partition_epoch:
            # removed replica: stop, delete the log (reassignment)
            resign(p, rep)
            del p.reps[b]
            p.cl.reindex(p)
            p.inv.dirty = True
        return
    if rep is None:
        rep = p.reps[b] = Replica(b)
        if b not in p.indexed:      # else p.hosts() is unchanged: b is an assigned replica already
            p.cl.reindex(p)
    if pe < rep.partition_epoch:
        return
    rep.md_seq = md_seq
    if leader == b:
        make_leader(p, rep, le, pe, replicas, isr)
    else:
        make_follower(p, rep, leader, le, pe, replicas, isr, lrs)
    rep.md_isr = isr
    p.inv.dirty = True
