"""The controller's answers to admin requests for one partition (ReplicationControlManager,
ConfigurationControlManager, Kafka 4.4.0). A refusal is an answer -- an `admin` row with Kafka's
error code and message, state unchanged -- never a rejected input row.
"""
from __future__ import annotations

from ..messages import NO_LEADER, ONLINE, PREFERRED, UNCLEAN
from .replication import acceptable_fn, change

# org.apache.kafka.common.protocol.Errors default messages (kafka-clients 4.4.0), used where the
# controller answers `new ApiError(error)` without a message.
ERROR_MESSAGES = {
    "ELECTION_NOT_NEEDED": "Leader election not needed for topic partition.",
    "PREFERRED_LEADER_NOT_AVAILABLE": "The preferred leader was not available.",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE": "Eligible topic partition leaders are not available.",
    "NO_REASSIGNMENT_IN_PROGRESS": "No partition reassignment is in progress.",
}


# org.apache.kafka.common.internals.Topic: the characters and the length a new topic's name may have
_TOPIC_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_TOPIC_NAME_LENGTH = 249


def unified_topic_name(topic: str) -> str | None:
    """Topic.unifyCollisionChars for a name with a '.' or '_' (Topic.hasCollisionChars), else None:
    two topics whose names differ only there would share their metric names."""
    return topic.replace(".", "_") if "." in topic or "_" in topic else None


def topic_name_error(topic: str, colliding: str | None) -> str | None:
    """ReplicationControlManager#validateNewTopicNames for a topic's first partition
    (INVALID_TOPIC_EXCEPTION): Topic.validate's reason, in its order ('.' and '..', the length in
    UTF-16 units as Java counts it, the characters); then a collision with an existing topic
    (`colliding`, Cluster.colliding_topic), whose message replaces the first (Kafka puts it second). The
    empty name is refused by the schema: Kafka's client cannot send it."""
    if colliding is not None:
        return f"Topic '{topic}' collides with existing topic: {colliding}"
    if topic in (".", ".."):
        why = f"'{topic}' is not allowed"
    elif len(topic.encode("utf-16-le")) // 2 > MAX_TOPIC_NAME_LENGTH:
        why = f"the length of '{topic}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not _TOPIC_NAME_CHARS.issuperset(topic):
        why = f"'{topic}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return "Topic name is invalid: " + why


def assignment_error(brokers, replicas: list, replication_factor: int | None = None) -> str | None:
    """ReplicationControlManager#validateManualPartitionAssignment (INVALID_REPLICA_ASSIGNMENT):
    empty list; then, in ascending id order, an unregistered broker or a repeated one; then, for a
    new partition of a topic that has partitions (`replication_factor`, Cluster.topic_rf), a
    replica count other than the topic's. A reassignment passes no replication factor (Kafka:
    OptionalInt.empty())."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    prev = None
    for r in sorted(replicas):
        br = brokers.get(r)
        if br is None or not br.registered:
            return f"The manual partition assignment includes broker {r}, but no such broker is registered."
        if r == prev:
            return f"The manual partition assignment includes the broker {r} more than once."
        prev = r
    if replication_factor is not None and len(replicas) != replication_factor:
        return (f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but "
                f"this is not consistent with previous partitions, which have {replication_factor} replica(s).")
    return None


def initial_isr(brokers, replicas: list) -> list:
    """A2: a new partition's ISR = its active replicas (registered, unfenced, not shutting down)."""
    return [r for r in replicas if not brokers[r].fenced and not brokers[r].in_cs]


def min_isr_change_words(new: dict) -> str:
    """How a ClearElr row's detail names the change: "set to N", or "deleted" (back to the layer
    below: a DELETE, a ConfigRecord with a null value)."""
    v = new["min.insync.replicas"]
    return "deleted" if v is None else f"set to {v}"


def min_isr_changed(elr_on: bool, old: dict, new: dict) -> bool:
    """Does this config change write a CLEAR_ELR_RECORD? ConfigurationControlManager
    #incrementalAlterConfigResource writes a topic CONFIG_RECORD only when the value changes
    (`!Objects.equals(currentValue, newValue)`), and #createClearElrRecordsAsNeeded adds
    ClearElrRecord{topicName} for every min.insync.replicas CONFIG_RECORD while ELR is enabled."""
    return elr_on and "min.insync.replicas" in new and old.get("min.insync.replicas") != new["min.insync.replicas"]


def reassign(p, target) -> None:
    """ReplicationControlManager#alterPartitionReassignment (A21, A22); None cancels."""
    def admin(result, detail=None):
        p.emit("admin", {"type": "Reassign", "broker": None, "result": result, "detail": detail})
    if target is None:
        _cancel_reassignment(p, admin)
        return
    target = list(target)
    bad = assignment_error(p.cl.brokers, target)     # #changePartitionReassignment validates like creation
    if bad:
        admin("INVALID_REPLICA_ASSIGNMENT", bad)
        return
    cur = list(p.replicas)
    removing = sorted(set(cur) - set(target))
    adding = sorted(set(target) - set(cur))
    replicas = target + removing
    admin("NONE")
    # #changePartitionReassignment sets a target only where it says something: the replicas when
    # they differ, removing and adding when non-empty; the builder keeps the partition's own
    # otherwise. So a reassignment made while another runs keeps the replicas still being added
    # (and a cancel later removes them), and one to the current replicas writes no record.
    change(p, "Reassign", f"reassignment to {target}", target_replicas=replicas if replicas != cur else None,
           target_adding=adding or None, target_removing=removing or None, election=p.conf.election)


def _cancel_reassignment(p, admin) -> None:
    """A22 cancel (PartitionReassignmentRevert): back to the original replicas."""
    if not p.adding and not p.removing:
        admin("NO_REASSIGNMENT_IN_PROGRESS", "No partition reassignment is in progress.")
        return
    reps = [r for r in p.replicas if r not in p.adding]
    isr = [r for r in p.isr if r not in p.adding]
    unclean = not isr
    if unclean:
        isr = [reps[0]]
    if unclean and not p.conf.unclean:
        admin("INVALID_REPLICA_ASSIGNMENT", f"Unable to revert partition assignment for {p.topic}:"
                                            f"{p.partition} because it would require an unclean leader "
                                            "election.")
        return
    admin("NONE")
    # the revert itself decides uncleanness (an emptied ISR), not the topic's setting
    change(p, "Reassign", "reassignment cancelled", target_replicas=reps, target_isr=isr,
           target_adding=[], target_removing=[], election=UNCLEAN if unclean else ONLINE)


def elect_leaders(p, kind: str, target) -> None:
    """ReplicationControlManager#electLeader: refusals are answers with the Errors' default messages."""
    def admin(result, detail=None):
        p.emit("admin", {"type": "ElectLeaders", "broker": target, "result": result,
                         "detail": detail if detail is not None else ERROR_MESSAGES.get(result)})
    reason = f"ElectLeaders {kind}" + (f" target {target}" if target is not None else "")
    if kind == "PREFERRED":
        if p.replicas and p.leader == p.replicas[0]:
            admin("ELECTION_NOT_NEEDED")
        elif change(p, "ElectLeaders", reason, election=PREFERRED):
            admin("NONE")
        else:
            admin("PREFERRED_LEADER_NOT_AVAILABLE")
    elif kind == "UNCLEAN":
        if p.leader != NO_LEADER:
            admin("ELECTION_NOT_NEEDED")
        elif change(p, "ElectLeaders", reason, election=UNCLEAN):
            admin("NONE")
        else:
            admin("ELIGIBLE_LEADERS_NOT_AVAILABLE")
    else:  # DESIGNATED (KIP-966): only for a leaderless partition
        if p.leader != NO_LEADER:
            admin("ELECTION_NOT_NEEDED")
        elif target not in p.replicas:
            admin("INVALID_REQUEST", f"target {target} is not a replica of {p.replicas}")
        elif not acceptable_fn(p.cl.brokers)(target):
            admin("ELIGIBLE_LEADERS_NOT_AVAILABLE", f"target {target} is fenced, shutting down or unregistered")
        elif change(p, "ElectLeaders", reason, designated=target):
            admin("NONE")
        else:
            admin("ELIGIBLE_LEADERS_NOT_AVAILABLE")


def preferred_possible(p) -> bool:
    """Would a preferred election succeed now (the rebalance timer's guard)?"""
    pref = p.replicas[0]
    return pref in p.isr and acceptable_fn(p.cl.brokers)(pref)


def auto_leader_rebalance(p) -> bool:
    return change(p, "AutoLeaderRebalance", "leader.imbalance.check.interval: preferred leader election",
                  election=PREFERRED)


def periodic_unclean_election(p) -> bool:
    return change(p, "UncleanLeaderElection", "unclean.leader.election.interval: periodic unclean election",
                  election=UNCLEAN)
