"""The controller's decisions for one partition (ReplicationControlManager, Kafka 4.4.0): one
function per decision. Each sets the PartitionChangeBuilder's targets, and `commit` merges the
record into the registration (A3), logs it, and hands the new registration to the metadata
channel -- the controller never touches a broker's replica directly (that is broker/, reached only
through `p.channels`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..messages import (EMPTY, NO_BROKER_EPOCH, NO_CHANGE, RECOVERED, RECOVERING, AlterPartitionRequest,
                        AlterPartitionResponse, LeaderAndIsr, RegistrationSnapshot, listed)
from .change_builder import PartitionChangeBuilder

if TYPE_CHECKING:
    from ..partition import Partition

UNCLEAN_KINDS = frozenset({"UNCLEAN", "LAST_KNOWN_ELR", "DESIGNATED"})


def acceptable_fn(brokers, removed=(), unfenced=()):
    """A4 acceptable leader, with the broker being removed / unfenced overridden."""
    def acc(r: int) -> bool:
        if r in removed:
            return False
        b = brokers.get(r)
        if b is None or not b.registered:
            return False
        if r in unfenced:
            return not b.in_cs
        return not b.fenced and not b.in_cs
    return acc


def snapshot(p: Partition) -> RegistrationSnapshot:
    """The registration as the metadata record the brokers apply."""
    return RegistrationSnapshot(p.leader, p.leader_epoch, p.partition_epoch, tuple(p.replicas), tuple(p.isr),
                                tuple(p.adding), tuple(p.removing), p.lrs)


def build(p: Partition, **targets):
    """PartitionChangeBuilder.build() over p's registration -> (record, ElectionInfo) or (None, None)."""
    if targets.get("acc") is None:
        targets["acc"] = acceptable_fn(p.cl.brokers)
    return PartitionChangeBuilder(p, p.cl.config, longest_log=p.longest_log, **targets).build()


def change(p: Partition, cause: str, reason: str, **targets) -> bool:
    """Build a change with these targets and commit it if there is one."""
    rec, info = build(p, **targets)
    if rec is None:
        return False
    commit(p, rec, info, cause, reason)
    return True


_LIST_FIELDS = ("isr", "elr", "lke", "replicas", "adding", "removing")


def commit(p: Partition, rec: dict, info, cause: str, reason: str) -> None:
    """Merge a PartitionChangeRecord (A3, PartitionRegistration#merge), log it, publish it."""
    old_leader = p.leader
    p.partition_epoch += 1
    if "leader" in rec:
        p.leader = rec["leader"]
        p.leader_epoch += 1
    for f in _LIST_FIELDS:
        if f in rec:
            setattr(p, f, listed(rec[f]))
    if "lrs" in rec:
        p.lrs = rec["lrs"]
    registered(p, cause)
    if info is not None:
        p.emit("elections", {"leader_epoch": p.leader_epoch, "old_leader": old_leader, "new_leader": p.leader,
                             "election": info.kind, "reason": reason, "candidates": list(info.candidates)})
        if info.kind in UNCLEAN_KINDS:
            p.unclean.pop(p.leader, None)   # declared: the new leader's log is the truth now
    p.inv.on_registration(p, info)
    p.channels.publish(p)


def registered(p: Partition, cause: str) -> None:
    """A registration was written: reindex the hosts and log it (metadata_log)."""
    p.cl.reindex(p)
    p.emit("metadata_log", {
        "partition_epoch": p.partition_epoch, "leader_epoch": p.leader_epoch, "leader": p.leader,
        "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
        "last_known_elr": list(p.lke), "adding": list(p.adding), "removing": list(p.removing),
        "leader_recovery_state": p.lrs, "cause": cause})


def register_new(p: Partition, cause: str, *, replicas, isr, leader, leader_epoch=0, partition_epoch=0, elr=(), lke=(),
                 lrs=RECOVERED) -> None:
    """A registration written whole (CreatePartition A2, a recorded PartitionRecord): no builder."""
    p.replicas, p.isr, p.leader = list(replicas), list(isr), leader
    p.elr, p.lke = listed(elr), listed(lke)
    p.leader_epoch, p.partition_epoch, p.lrs = leader_epoch, partition_epoch, lrs
    p.adding, p.removing = EMPTY, EMPTY
    registered(p, cause)
    p.inv.on_registration(p, None)
    p.channels.publish(p)


def clear_elr(p: Partition, reason: str) -> bool:
    """ClearElrRecord replay (ReplicationControlManager#replay(ClearElrRecord) ->
    #replayClearTopicElrs -> #removeTopicElrs, Kafka 4.4.0): a partition whose ELR or
    lastKnownElr is non-empty is merged with PartitionChangeRecord{eligibleLeaderReplicas: [],
    lastKnownElr: []} - PartitionRegistration#merge bumps partitionEpoch by one, leader epoch
    unchanged (no leader field). A partition with both empty is not touched (no epoch bump,
    as seen on a real cluster). Logged as cause `ClearElr`."""
    if not p.elr and not p.lke:
        return False
    commit(p, {"elr": [], "lke": []}, None, "ClearElr", reason)
    return True


# ---------------------------------------------------------------- broker life cycle (A14-A17)
def leave_isr(p: Partition, b: int, cause: str, reason: str, unclean_shutdown: bool = False) -> bool:
    """Broker b leaves the ISR and the partition re-elects without it: A14 fenced, A16 controlled
    shutdown, A17 restarted after an unclean shutdown (which also keeps b out of the ELR)."""
    return change(p, cause, reason, target_isr=[r for r in p.isr if r != b],
                  unclean_shutdown=(b,) if unclean_shutdown else (), election=p.conf.election,
                  acc=acceptable_fn(p.cl.brokers, removed={b}))


def on_broker_unfenced(p: Partition, b: int) -> bool:
    """A15: a leaderless partition tries an election with b acceptable."""
    return change(p, "BrokerUnfence", f"broker {b} unfenced", **_unfence_targets(p, b))


def elects_on_unfence(p: Partition, b: int) -> bool:
    """Whether on_broker_unfenced(p, b) would write a record: the builder's dry run (it writes
    nothing), so a leaderless partition that b's unfencing cannot change is not visited."""
    return build(p, **_unfence_targets(p, b))[0] is not None


def _unfence_targets(p: Partition, b: int) -> dict:
    """RCM#generateLeaderAndIsrUpdates for an unfencing: the topic's election type, b acceptable."""
    return {"election": p.conf.election, "acc": acceptable_fn(p.cl.brokers, unfenced={b})}


# ---------------------------------------------------------------- AlterPartition (A19, A20)
def handle_alter_partition(p: Partition, req: AlterPartitionRequest) -> AlterPartitionResponse:
    """ReplicationControlManager#alterPartition for one partition: validate, then build and commit."""
    err = validate_alter_partition(p, req)
    ids = [m.broker for m in req.new_isr]
    row = {"leader": req.leader, "leader_epoch": req.leader_epoch, "partition_epoch": req.partition_epoch,
           "change": req.change, "proposed_isr": ids, "maximal_isr": None}
    if err is not None:
        p.emit("alter_partition", dict(row, phase="REJECTED", error=err))
        return AlterPartitionResponse(req.pid, req.leader, err, None, req.broker_epoch)
    rec, info = build(p, target_isr=ids, target_lrs=req.lrs, election=p.conf.election)
    if rec is not None:
        if rec.get("leader", NO_CHANGE) not in (NO_CHANGE, req.leader):
            err = "NEW_LEADER_ELECTED"
        p.emit("alter_partition", dict(row, phase="ACCEPTED", error=err))
        if req.change == "EXPAND":
            for r in ids:
                p.unclean.pop(r, None)   # caught up through the leader: proven
        commit(p, rec, info, "AlterPartition", f"AlterPartition from leader {req.leader}")
    else:
        p.emit("alter_partition", dict(row, phase="ACCEPTED", error=None))
    return AlterPartitionResponse(req.pid, req.leader, err, LeaderAndIsr(p.leader, tuple(p.isr), p.lrs,
                                                                          p.leader_epoch, p.partition_epoch),
                                  req.broker_epoch)


def validate_alter_partition(p: Partition, req: AlterPartitionRequest) -> str | None:
    """A19: the checks in Kafka's order; the first failing one is the answer."""
    brokers = p.cl.brokers
    b, le, pe, lrs = req.leader, req.leader_epoch, req.partition_epoch, req.lrs
    reg = brokers.get(b)
    if reg is None or not reg.registered or reg.epoch != req.broker_epoch:
        return "STALE_BROKER_EPOCH"
    if le > p.leader_epoch or pe > p.partition_epoch:
        return "NOT_CONTROLLER"
    if le < p.leader_epoch:
        return "FENCED_LEADER_EPOCH"
    if b != p.leader:
        return "INVALID_REQUEST"
    if pe < p.partition_epoch:
        return "INVALID_UPDATE_VERSION"
    ids = [m.broker for m in req.new_isr]
    if len(set(ids)) != len(ids) or any(r < 0 or r not in p.replicas for r in ids):
        return "INVALID_REQUEST"
    if p.leader not in ids:
        return "INVALID_REQUEST"
    if lrs == RECOVERING and len(ids) > 1:
        return "INVALID_REQUEST"
    if p.lrs == RECOVERED and lrs == RECOVERING:
        return "INVALID_REQUEST"
    for r, e in req.new_isr:
        g = brokers.get(r)
        if g is None or not g.registered or g.in_cs or g.fenced or (e != NO_BROKER_EPOCH and e != g.epoch):
            return "INELIGIBLE_REPLICA"
    return None
