"""PartitionChangeBuilder (Kafka 4.4.0, metadata module): from a partition's registration and the
targets a controller decision sets, the PartitionChangeRecord to write, or none.

`build()` calls the named steps in Kafka's order (rules A5-A12, A22 completion):

    completeReassignmentIfNeeded
    maybePopulateTargetElr
    tryElection
    triggerLeaderEpochBumpForReplicaReassignmentIfNeeded
    maybeUpdateRecordElr
    (ISR write)
    maybeUpdateLastKnownLeader
    setAssignmentChanges

Pure: the registration is read, never written. What the builder needs of the rest of the world
comes in as arguments: `acc` (A4 acceptable leader) and, for KIP-966 unclean recovery, the
`longest_log` lookup (GetReplicaLogInfo, a broker-side answer).
"""
from __future__ import annotations

from ..messages import (NO_CHANGE, NO_LEADER, ONLINE, PREFERRED, RECOVERING, UNCLEAN, ElectionInfo)


class PartitionChangeBuilder:
    __slots__ = ("p", "elr_on", "use_lkl", "acc", "longest_log", "election", "designated", "unclean_shutdown",
                 "t_isr", "t_rep", "t_rem", "t_add", "t_elr", "t_lke", "t_lrs", "min_isr",
                 "rec", "rec_leader", "kind", "cands")

    def __init__(self, p, config, *, target_isr=None, target_replicas=None, target_adding=None,
                 target_removing=None, target_lrs=None, election=ONLINE, unclean_shutdown=(), acc=None,
                 designated=None, longest_log=None):
        """`p`: the registration (replicas, isr, elr, lke, leader, lrs, adding, removing, conf)."""
        self.p = p
        self.elr_on = config.elr
        self.use_lkl = not config.recovery_manager          # useLastKnownLeaderInBalancedRecovery
        self.acc = acc
        self.longest_log = longest_log
        self.election = election
        self.designated = designated
        self.unclean_shutdown = unclean_shutdown
        self.t_isr = list(p.isr if target_isr is None else target_isr)
        self.t_rep = list(p.replicas if target_replicas is None else target_replicas)
        self.t_rem = list(p.removing if target_removing is None else target_removing)
        self.t_add = list(p.adding if target_adding is None else target_adding)
        self.t_elr = list(p.elr)
        self.t_lke = list(p.lke)
        self.t_lrs = p.lrs if target_lrs is None else target_lrs
        self.min_isr = p.conf.effective_min_isr(len(p.replicas) or len(self.t_rep))
        self.rec = {}          # (unannotated, as cands: mypyc refuses annotations in untyped defs)
        self.rec_leader = NO_CHANGE
        self.kind = None
        self.cands = []

    def build(self):
        """-> (record dict, ElectionInfo | None), or (None, None) when nothing changes."""
        self.complete_reassignment_if_needed()
        self.maybe_populate_target_elr()
        self.try_election()
        self.trigger_leader_epoch_bump_for_reassignment_if_needed()
        self.maybe_update_record_elr()
        self.write_isr()
        self.maybe_update_last_known_leader()
        self.set_assignment_changes()
        rec, leader, rec_leader = self.rec, self.p.leader, self.rec_leader
        if not rec:
            return None, None
        info = None
        if rec_leader != NO_CHANGE and rec_leader != leader:
            info = ElectionInfo(self.kind if rec_leader != NO_LEADER else "NONE", self.cands)
        return rec, info

    # ------------------------------------------------------------------ the steps
    def complete_reassignment_if_needed(self) -> None:
        """A22 PartitionReassignmentReplicas#maybeCompleteReassignment (kafka-metadata-4.4.0's
        bytecode): with the removing replicas taken out of the target ISR and of the replicas
        (neither may end up empty), the reassignment completes once every adding replica is in that
        ISR, and, when it shrinks the replica count (fewer adding than removing), every replica left."""
        t_rem, t_add = self.t_rem, self.t_add
        if not (t_rem or t_add):
            return
        n_isr, n_rep = self.t_isr, self.t_rep
        if t_rem:
            n_isr = [r for r in n_isr if r not in t_rem]
            n_rep = [r for r in n_rep if r not in t_rem]
            if not n_isr or not n_rep:
                return
        s_isr = set(n_isr)
        if not s_isr.issuperset(t_add) or (len(t_add) < len(t_rem) and not s_isr.issuperset(n_rep)):
            return
        self.t_isr, self.t_rep, self.t_rem, self.t_add = n_isr, n_rep, [], []

    def maybe_populate_target_elr(self) -> None:
        """A11: below the effective min ISR, ISR leavers (but unclean shutdowns) become ELR members."""
        if not self.elr_on:
            return
        if len(self.t_isr) >= self.min_isr:
            self.t_elr, self.t_lke = [], []
            return
        s_isr = set(self.t_isr)
        cand = set(self.t_elr) | set(self.p.isr)
        unclean = self.unclean_shutdown
        self.t_elr = sorted(r for r in cand if r not in s_isr and r not in unclean)
        cand |= set(self.t_lke)
        self.t_lke = sorted(r for r in cand if r not in s_isr and r not in self.t_elr)

    def try_election(self) -> None:
        """A5-A7: elect a leader; an ELR member elected becomes the whole ISR."""
        p = self.p
        node, unclean, kind, self.cands = elect_leader(self)
        self.kind = kind
        if node == p.leader:
            return
        if node in self.t_elr:
            self.t_isr = [node]
            self.t_elr = [r for r in self.t_elr if r != node]
            self.kind = "ELR"
        self.rec_leader = node
        if unclean:
            self.rec["isr"] = [node]
            if p.lrs != RECOVERING:
                self.rec["lrs"] = RECOVERING

    def trigger_leader_epoch_bump_for_reassignment_if_needed(self) -> None:
        """A10a: a replica leaving the assignment bumps the leader epoch."""
        p = self.p
        if self.rec_leader == NO_CHANGE and not set(p.replicas) <= set(self.t_rep):
            self.rec_leader = p.leader

    def maybe_update_record_elr(self) -> None:
        """A11: the ELR and last known ELR the record carries."""
        p, rec = self.p, self.rec
        if "isr" in rec or not self.elr_on:
            self.t_elr, self.t_lke = [], []
        if self.t_elr != p.elr:
            rec["elr"] = self.t_elr
        # With useLastKnownLeaderInBalancedRecovery the last known ELR holds the last known leader and
        # only maybe_update_last_known_leader writes it. Kafka's maybeUpdateRecordElr also resets
        # targetLastKnownElr to the partition's single entry in that mode, then returns without
        # reading it: that assignment has no effect and is left out here.
        if not self.use_lkl and self.t_lke != p.lke:
            rec["lke"] = self.t_lke

    def write_isr(self) -> None:
        """A9: with ELR off the ISR never becomes empty."""
        rec, t_isr = self.rec, self.t_isr
        if "isr" not in rec and (t_isr or self.elr_on) and t_isr != self.p.isr:
            rec["isr"] = t_isr

    def maybe_update_last_known_leader(self) -> None:
        """A12 (kafka-metadata-4.4.0's bytecode): a record that takes the leader away (its leader
        NO_LEADER) remembers the partition's leader when nothing is remembered yet; a record that
        elects a leader clears what is remembered."""
        if not (self.use_lkl and self.elr_on):
            return
        p, rec, rl = self.p, self.rec, self.rec_leader
        if rl == NO_LEADER and not p.lke:
            rec["lke"] = [p.leader]
        elif rl >= 0 and p.lke:
            rec["lke"] = []

    def set_assignment_changes(self) -> None:
        p, rec = self.p, self.rec
        if self.t_rep and self.t_rep != p.replicas:
            rec["replicas"] = self.t_rep
        if self.t_rem != p.removing:
            rec["removing"] = self.t_rem
        if self.t_add != p.adding:
            rec["adding"] = self.t_add
        if self.t_lrs != p.lrs:
            rec["lrs"] = self.t_lrs
        if self.rec_leader != NO_CHANGE:
            rec["leader"] = self.rec_leader

    # ------------------------------------------------------------------ election helpers
    def valid(self, r: int) -> bool:
        """An election candidate: in the target ISR (or, with the ISR empty, the ELR) and acceptable."""
        return (r in self.t_isr or (not self.t_isr and r in self.t_elr)) and self.acc(r)


def elect_leader(b: PartitionChangeBuilder):
    """A6 PartitionChangeBuilder#electLeader -> (node, unclean, election kind, candidates)."""
    p, election, t_isr, t_rep = b.p, b.election, b.t_isr, b.t_rep
    valid = b.valid
    cands = [r for r in t_rep if valid(r)]
    if b.designated is not None:
        return b.designated, not valid(b.designated), "DESIGNATED", cands
    clean_kind = "ISR" if t_isr else "ELR"
    if election == PREFERRED:
        if t_rep and valid(t_rep[0]):
            return t_rep[0], False, "PREFERRED", cands
        if valid(p.leader):
            return p.leader, False, None, cands
        rest = t_rep[1:]
    else:
        if valid(p.leader):
            return p.leader, False, None, cands
        rest = t_rep
    for r in rest:
        if valid(r):
            return r, False, clean_kind, cands
    node, unclean, kind = _elect_unclean(b)
    return node, unclean, kind, cands


def _elect_unclean(b: PartitionChangeBuilder):
    """No clean candidate: the last known leader (KIP-966 balanced), unclean recovery, or unclean."""
    p, election, t_isr, t_rep, acc = b.p, b.election, b.t_isr, b.t_rep, b.acc
    if b.elr_on and b.use_lkl:
        # canElectLastKnownLeader; SPEC §4: the last known leader is elected only once acceptable
        if not b.t_elr and not t_isr and len(p.lke) == 1 and acc(p.lke[0]):
            return p.lke[0], True, "LAST_KNOWN_ELR"
    elif b.elr_on and not t_isr and election != PREFERRED:
        # KIP-966 unclean recovery (unclean.recovery.manager.enabled=true)
        strategy = "Aggressive" if (election == UNCLEAN or p.conf.unclean) else p.conf.strategy
        go = None
        if strategy == "Aggressive":
            go = "UNCLEAN"
        elif strategy == "Balanced" and not b.t_elr and p.lke and all(acc(r) for r in p.lke):
            go = "LAST_KNOWN_ELR"
        if go:
            node = b.longest_log(t_rep, acc)
            if node is not None:
                return node, True, go
        return NO_LEADER, False, None
    if election == UNCLEAN:
        for r in t_rep:
            if acc(r):
                return r, True, "UNCLEAN"
    return NO_LEADER, False, None
