"""One partition's whole world: the controller's registration, every replica's broker-side
state, the AlterPartition and metadata channels between them, timers, and the invariant
checker. Rule ids in comments refer to research/kafka_rules.md (A = controller,
B = leader replica, C = fetch and divergence).

Everything here is pure: events in, output rows out (`Out`). No clock, no I/O.
"""
from __future__ import annotations

from collections import deque

from .config import TopicConf
from .replica import LEADER, FOLLOWER, FollowerState, Pending, Produce, Replica

NO_LEADER = -1
NO_CHANGE = -2
RECOVERED = "RECOVERED"
RECOVERING = "RECOVERING"

ONLINE, PREFERRED, UNCLEAN = "ONLINE", "PREFERRED", "UNCLEAN"

# B10: which AlterPartition errors roll back, which keep the pending state, the rest retry.
ROLLBACK_ERRORS = frozenset({"OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA"})
STAY_PENDING_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "FENCED_LEADER_EPOCH",
                                 "INVALID_UPDATE_VERSION", "INVALID_REQUEST", "NEW_LEADER_ELECTED"})


def leader_isr_order(ids) -> tuple:
    """The order of the ISR a leader sends in AlterPartition (rule B9).

    Partition#prepareIsrExpand / #prepareIsrShrink (kafka_2.13 4.4.0) turn the committed ISR, a
    java.util.Set, into a scala.collection.mutable.HashSet (`asScala.map(...)`, then `+ r` or
    `diff(out)`) and send its `toList`. That set iterates bucket by bucket (index = improved hash
    & (table size - 1), table size 16 until it holds 12 elements, doubling after), each bucket
    in ascending hash order; an Int's improved hash is `h ^ (h >>> 16)`. For ids below the table
    size this is ascending order: replicas [3,1,2], shrink -> [2,3], expand -> [1,2,3] (seen on
    a real 4.4.0 cluster). ISRs the controller writes itself keep their list order (A9)."""
    ids = list(ids)
    cap = 16
    while len(ids) >= cap * 3 // 4:
        cap *= 2

    def key(r: int):
        h = (r ^ (r >> 16)) & 0xFFFFFFFF
        return (h & (cap - 1), h)
    return tuple(sorted(ids, key=key))


class Partition:
    def __init__(self, cluster, topic: str, partition: int):
        self.cl = cluster
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        # controller registration (A1)
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.elr: list[int] = []
        self.lke: list[int] = []
        self.leader = NO_LEADER
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.lrs = RECOVERED
        self.adding: list[int] = []
        self.removing: list[int] = []
        self.config: dict[str, str] = {}       # partition-level overrides
        self.conf: TopicConf = cluster.config.topic_conf()
        # broker side
        self.reps: dict[int, Replica] = {}
        # channels (explicit delivery)
        self.md_history: list[tuple[int, tuple]] = []   # committed registrations (seq, snapshot)
        self.ap_requests: deque = deque()
        self.ap_responses: deque = deque()
        self.next_pid = 1
        self.retry = None            # (leader, pid) to resubmit at the next event (immediate mode)
        # timers: every periodic multiple <= tdone has fired (SPEC §4)
        self.tdone = 0
        self.t_next = 0                # first periodic multiple after tdone
        # output context
        self.last_seq = 0
        self.cur_seq = 0
        self.now = 0
        self.idx = 0
        # invariant checker state
        self.inv = None
        self.unclean: dict[int, int] = {}   # replica -> seq of its unclean crash, until it caught up

    # ------------------------------------------------------------------ helpers
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
        """A11 RCM#getTopicEffectiveMinIsr (this partition's replica count stands for partition 0's)."""
        return min(self.conf.min_isr, len(self.replicas)) if self.replicas else self.conf.min_isr

    def hosts(self) -> set[int]:
        return set(self.replicas) | set(self.reps)

    def snapshot(self) -> tuple:
        return (self.leader, self.leader_epoch, self.partition_epoch, tuple(self.replicas), tuple(self.isr),
                tuple(self.adding), tuple(self.removing), self.lrs)

    # ================================================================ controller
    def acceptable_fn(self, removed=(), unfenced=()):
        """A4 acceptable leader, with the broker being removed / unfenced overridden."""
        brokers = self.cl.brokers

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

    def build(self, *, target_isr=None, target_replicas=None, target_adding=None, target_removing=None,
              target_lrs=None, election=ONLINE, unclean_shutdown=(), acc=None, designated=None):
        """PartitionChangeBuilder.build() (A5-A12, A22 completion). Returns (record, election info)."""
        cfg = self.cl.config
        elr_on = cfg.elr
        use_lkl = not cfg.recovery_manager          # useLastKnownLeaderInBalancedRecovery
        acc = acc or self.acceptable_fn()
        t_isr = list(self.isr if target_isr is None else target_isr)
        t_rep = list(self.replicas if target_replicas is None else target_replicas)
        t_rem = list(self.removing if target_removing is None else target_removing)
        t_add = list(self.adding if target_adding is None else target_adding)
        t_elr = list(self.elr)
        t_lke = list(self.lke)
        t_lrs = self.lrs if target_lrs is None else target_lrs
        min_isr = min(self.conf.min_isr, len(self.replicas) or len(t_rep))

        # completeReassignmentIfNeeded (A22, PartitionReassignmentReplicas#maybeCompleteReassignment)
        if t_rem or t_add:
            n_isr, n_rep = t_isr, t_rep
            if t_rem:
                n_isr = [r for r in t_isr if r not in t_rem]
                n_rep = [r for r in t_rep if r not in t_rem]
            if n_isr and set(n_rep) <= set(n_isr):
                t_isr, t_rep, t_rem, t_add = n_isr, n_rep, [], []

        # maybePopulateTargetElr (A11)
        if elr_on:
            if len(t_isr) >= min_isr:
                t_elr, t_lke = [], []
            else:
                s_isr = set(t_isr)
                cand = set(t_elr) | set(self.isr)
                t_elr = sorted(r for r in cand if r not in s_isr and r not in unclean_shutdown)
                cand |= set(t_lke)
                t_lke = sorted(r for r in cand if r not in s_isr and r not in t_elr)

        # tryElection (A5-A7)
        def valid(r: int) -> bool:
            return (r in t_isr or (not t_isr and r in t_elr)) and acc(r)

        node, unclean, kind, cands = self._elect(election, designated, t_isr, t_elr, t_rep, valid, acc, elr_on,
                                                 use_lkl)
        rec: dict = {}
        rec_leader = NO_CHANGE
        if node != self.leader:
            if node in t_elr:
                t_isr = [node]
                t_elr = [r for r in t_elr if r != node]
                kind = "ELR"
            rec_leader = node
            if unclean:
                rec["isr"] = [node]
                if self.lrs != RECOVERING:
                    rec["lrs"] = RECOVERING

        # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded (A10a)
        if rec_leader == NO_CHANGE and not set(self.replicas) <= set(t_rep):
            rec_leader = self.leader

        # maybeUpdateRecordElr (A11)
        if "isr" in rec or not elr_on:
            t_elr, t_lke = [], []
        if t_elr != self.elr:
            rec["elr"] = t_elr
        if use_lkl and len(self.lke) == 1 and (rec_leader == NO_LEADER or
                                                (rec_leader == NO_CHANGE and self.leader == NO_LEADER)):
            t_lke = list(self.lke)
        if not use_lkl and t_lke != self.lke:
            rec["lke"] = t_lke

        # ISR write (A9): with ELR off the ISR never becomes empty
        if "isr" not in rec and (t_isr or elr_on) and t_isr != self.isr:
            rec["isr"] = t_isr

        # maybeUpdateLastKnownLeader (A12)
        if use_lkl and elr_on:
            if "isr" in rec and not rec["isr"] and (len(self.lke) != 1 or self.lke[0] != self.leader):
                rec["lke"] = [self.leader]
            elif (rec_leader >= 0 or (self.leader != NO_LEADER and rec_leader != NO_LEADER)) and self.lke:
                rec["lke"] = []

        # setAssignmentChanges
        if t_rep and t_rep != self.replicas:
            rec["replicas"] = t_rep
        if t_rem != self.removing:
            rec["removing"] = t_rem
        if t_add != self.adding:
            rec["adding"] = t_add
        if t_lrs != self.lrs:
            rec["lrs"] = t_lrs
        if rec_leader != NO_CHANGE:
            rec["leader"] = rec_leader
        if not rec:
            return None, None
        info = None
        if rec_leader != NO_CHANGE and rec_leader != self.leader:
            info = (kind if rec_leader != NO_LEADER else "NONE", cands)
        return rec, info

    def _elect(self, election, designated, t_isr, t_elr, t_rep, valid, acc, elr_on, use_lkl):
        """A6 electLeader -> (node, unclean, election kind, candidates)."""
        cands = [r for r in t_rep if valid(r)]
        if designated is not None:
            return designated, not valid(designated), "DESIGNATED", cands
        clean_kind = "ISR" if t_isr else "ELR"
        if election == PREFERRED:
            if t_rep and valid(t_rep[0]):
                return t_rep[0], False, "PREFERRED", cands
            if valid(self.leader):
                return self.leader, False, None, cands
            for r in t_rep[1:]:
                if valid(r):
                    return r, False, clean_kind, cands
        else:
            if valid(self.leader):
                return self.leader, False, None, cands
            for r in t_rep:
                if valid(r):
                    return r, False, clean_kind, cands
        if elr_on and use_lkl:
            # canElectLastKnownLeader; SPEC §4: the last known leader is elected only once acceptable
            if not t_elr and not t_isr and len(self.lke) == 1 and acc(self.lke[0]):
                return self.lke[0], True, "LAST_KNOWN_ELR", cands
        elif elr_on and not t_isr and election != PREFERRED:
            # KIP-966 unclean recovery (unclean.recovery.manager.enabled=true)
            strategy = "Aggressive" if (election == UNCLEAN or self.conf.unclean) else self.conf.strategy
            go = None
            if strategy == "Aggressive":
                go = "UNCLEAN"
            elif strategy == "Balanced" and not t_elr and self.lke and all(acc(r) for r in self.lke):
                go = "LAST_KNOWN_ELR"
            if go:
                node = self._longest_log(t_rep, acc)
                if node is not None:
                    return node, True, go, cands
            return NO_LEADER, False, None, cands
        if election == UNCLEAN:
            for r in t_rep:
                if acc(r):
                    return r, True, "UNCLEAN", cands
        return NO_LEADER, False, None, cands

    def _longest_log(self, t_rep, acc):
        """KIP-966 GetReplicaLogInfo: the live acceptable replica with the highest (last epoch, LEO)."""
        best, best_key = None, None
        for i, r in enumerate(t_rep):
            rep = self.reps.get(r)
            b = self.cl.brokers.get(r)
            if rep is None or b is None or not b.alive or not acc(r):
                continue
            key = (rep.log.latest_epoch(), rep.log.leo, -i)
            if best_key is None or key > best_key:
                best, best_key = r, key
        return best

    def commit(self, rec: dict, info, cause: str, reason: str) -> None:
        """Merge a PartitionChangeRecord (A3), log it, and deliver it to the brokers."""
        old_leader = self.leader
        self.partition_epoch += 1
        if "leader" in rec:
            self.leader = rec["leader"]
            self.leader_epoch += 1
        if "isr" in rec:
            self.isr = list(rec["isr"])
        if "elr" in rec:
            self.elr = list(rec["elr"])
        if "lke" in rec:
            self.lke = list(rec["lke"])
        if "replicas" in rec:
            self.replicas = list(rec["replicas"])
        if "adding" in rec:
            self.adding = list(rec["adding"])
        if "removing" in rec:
            self.removing = list(rec["removing"])
        if "lrs" in rec:
            self.lrs = rec["lrs"]
        self.cl.reindex(self)
        self.log_registration(cause)
        if info is not None:
            kind, cands = info
            self.emit("elections", {"leader_epoch": self.leader_epoch, "old_leader": old_leader,
                                    "new_leader": self.leader, "election": kind, "reason": reason,
                                    "candidates": list(cands)})
            if kind in ("UNCLEAN", "LAST_KNOWN_ELR", "DESIGNATED"):
                self.unclean.pop(self.leader, None)   # declared: the new leader's log is the truth now
        self.inv.on_registration(self, info)
        self.publish()

    def clear_elr(self, reason: str) -> bool:
        """ClearElrRecord replay (ReplicationControlManager#replay(ClearElrRecord) ->
        #replayClearTopicElrs -> #removeTopicElrs, Kafka 4.4.0): a partition whose ELR or
        lastKnownElr is non-empty is merged with PartitionChangeRecord{eligibleLeaderReplicas: [],
        lastKnownElr: []} - PartitionRegistration#merge bumps partitionEpoch by one, leader epoch
        unchanged (no leader field). A partition with both empty is not touched (no epoch bump,
        as seen on a real cluster). Logged as cause `ClearElr`."""
        if not self.elr and not self.lke:
            return False
        self.commit({"elr": [], "lke": []}, None, "ClearElr", reason)
        return True

    def log_registration(self, cause: str) -> None:
        self.emit("metadata_log", {
            "partition_epoch": self.partition_epoch, "leader_epoch": self.leader_epoch, "leader": self.leader,
            "replicas": list(self.replicas), "isr": list(self.isr), "elr": list(self.elr),
            "last_known_elr": list(self.lke), "adding": list(self.adding), "removing": list(self.removing),
            "leader_recovery_state": self.lrs, "cause": cause})

    def change(self, cause: str, reason: str, **kw) -> bool:
        rec, info = self.build(**kw)
        if rec is None:
            return False
        self.commit(rec, info, cause, reason)
        return True

    # ---------------------------------------------------------------- metadata channel
    def publish(self) -> None:
        """A committed registration reaches the brokers: at once, or on MetadataSync."""
        snap = self.snapshot()
        if self.cl.config.md_immediate:
            brokers = self.cl.brokers
            for b in sorted(self.hosts()):
                br = brokers.get(b)
                if br is not None and br.alive:
                    self.apply_metadata(b, snap, self.cur_seq)
        else:
            self.md_history.append((self.cur_seq, snap))

    def sync_broker(self, b: int, up_to: int | None) -> None:
        """MetadataSync: apply the newest registration committed at or before `up_to`."""
        hist = self.md_history
        if not hist:
            return
        pick = None
        for s, snap in reversed(hist):
            if up_to is None or s <= up_to:
                pick = (s, snap)
                break
        if pick is None:
            return
        rep = self.reps.get(b)
        if rep is not None and rep.md_seq >= pick[0] and rep.partition_epoch >= pick[1][2]:
            return
        self.apply_metadata(b, pick[1], pick[0])
        self._prune_history()

    def _prune_history(self) -> None:
        hist = self.md_history
        if len(hist) < 2:
            return
        low = min((rep.md_seq for rep in self.reps.values()), default=-1)
        keep = [h for h in hist if h[0] > low]
        if not keep or keep[0] is not hist[-1] and len(keep) < len(hist):
            # always keep at least the newest entry (brokers added later need it)
            keep = keep or [hist[-1]]
        self.md_history = keep

    def apply_metadata(self, b: int, snap: tuple, md_seq: int) -> None:
        leader, le, pe, replicas, isr, adding, removing, lrs = snap
        rep = self.reps.get(b)
        if b not in replicas:
            if rep is not None and pe > rep.partition_epoch:
                # removed replica: stop, delete the log (reassignment)
                self.resign(rep)
                del self.reps[b]
                self.cl.reindex(self)
                self.inv.dirty = True
            return
        if rep is None:
            rep = self.reps[b] = Replica(b)
            self.cl.reindex(self)
        if pe < rep.partition_epoch:
            return
        rep.md_seq = md_seq
        if leader == b:
            self.make_leader(rep, le, pe, replicas, isr)
        else:
            self.make_follower(rep, leader, le, pe, replicas, isr, lrs)
        rep.md_isr = isr
        self.inv.dirty = True

    def make_leader(self, rep: Replica, le: int, pe: int, replicas, isr) -> None:
        """B11 Partition.makeLeader."""
        was_leader = rep.role == LEADER
        # a new leader epoch resets the leader state; so does leading with no leader state at all
        new_epoch = le > rep.leader_epoch or rep.leso is None
        rep.role = LEADER
        rep.leader = rep.broker
        rep.assignment = replicas
        rep.md_lrs = RECOVERED
        rep.committed_isr = isr
        rep.maximal_isr = isr
        rep.pending = None
        now = self.now
        old = rep.followers
        fol: dict[int, FollowerState] = {}
        if new_epoch:
            rep.leso = rep.log.leo
            rep.log.assign(le, rep.log.leo)
            for r in replicas:
                if r == rep.broker:
                    continue
                in_isr = r in isr
                prev = old.get(r) if was_leader else None
                if prev is None:
                    fs = FollowerState(-1, None, now if in_isr else None, -1, None)
                else:
                    fs = FollowerState(prev.leo, now if in_isr else None, now if in_isr else None, rep.leso,
                                       prev.broker_epoch)
                fol[r] = fs
            rep.leader_epoch = le
            self.inv.new_leadership(self, rep)
        else:
            for r in replicas:
                if r != rep.broker:
                    fol[r] = old.get(r) or FollowerState()
        rep.followers = fol
        rep.partition_epoch = pe
        self.maybe_increment_hw(rep, "BecomeLeader")

    def make_follower(self, rep: Replica, leader, le, pe, replicas, isr, lrs) -> None:
        """B12 Partition.makeFollower."""
        if rep.role == LEADER:
            self.resign(rep)
        rep.role = FOLLOWER
        rep.leader = leader
        if le > rep.leader_epoch:
            rep.leader_epoch = le
        rep.partition_epoch = pe
        rep.assignment = replicas
        rep.md_lrs = lrs
        rep.leso = None

    def resign(self, rep: Replica, result: str = "NOT_LEADER_OR_FOLLOWER") -> None:
        """Leadership lost: parked acks=all produces fail (DelayedProduce: NOT_LEADER_OR_FOLLOWER;
        a crashed leader never answers: NETWORK_EXCEPTION at the client)."""
        for pr in rep.purgatory:
            self.produce_outcome(pr, result, rep)
        rep.clear_leader_state()
        rep.role = None

    # ================================================================ leader replica
    def broker_view(self, b: int):
        """The registrations as broker b's metadata cache has them."""
        return self.cl.view_of(b)

    def eligible(self, rep: Replica, r: int, fs: FollowerState) -> bool:
        """B5 Partition#isReplicaIsrEligible (KRaft)."""
        reg = self.broker_view(rep.broker).get(r)
        if reg is None or not reg[3] or reg[1] or reg[2]:
            return False
        if fs.broker_epoch is None:
            return False
        return fs.broker_epoch == -1 or fs.broker_epoch == reg[0]

    def under_min_isr(self, rep: Replica) -> bool:
        """B2: committed ISR against min(min.insync.replicas, assignment size)."""
        return len(rep.committed_isr) < min(self.conf.min_isr, len(rep.assignment))

    def maybe_increment_hw(self, rep: Replica, trigger: str) -> bool:
        """B6 Partition#maybeIncrementLeaderHW."""
        if self.under_min_isr(rep):
            return False
        log = rep.log
        leo = log.leo
        hw = leo
        now = self.now
        lag = self.cl.config.lag_ms
        maximal = rep.maximal_isr
        for r, fs in rep.followers.items():
            if fs.leo < hw and (r in maximal or (fs.is_caught_up(leo, now, lag) and self.eligible(rep, r, fs))):
                hw = fs.leo
        old = log.hwm
        if hw > old:
            log.hwm = hw
            self.emit("hwm", {"broker": rep.broker, "leader_epoch": rep.leader_epoch, "old_hwm": old,
                              "new_hwm": hw, "trigger": trigger})
            self.inv.on_leader_hwm(self, rep, hw)
            self.complete_delayed(rep)
            return True
        return False

    def complete_delayed(self, rep: Replica) -> None:
        """DelayedProduce.tryComplete for every parked produce the HWM has passed (B13)."""
        if not rep.purgatory:
            return
        hw = rep.log.hwm
        keep = []
        ok = len(rep.maximal_isr) >= min(self.conf.min_isr, len(rep.assignment))
        for pr in rep.purgatory:
            if hw >= pr.required:
                self.produce_outcome(pr, "ACKED" if ok else "NOT_ENOUGH_REPLICAS_AFTER_APPEND", rep)
            else:
                keep.append(pr)
        rep.purgatory = keep

    def produce_outcome(self, pr: Produce, result: str, rep: Replica) -> None:
        """The row of an acks=all produce carries its request's seq/idx/ts and the outcome's seq/ts."""
        self.cl.out.add("produce", {
            "topic": self.topic, "partition": self.partition, "seq": pr.seq, "idx": pr.idx, "ts_ms": pr.ts,
            "broker": rep.broker, "acks": -1, "records": pr.records, "base_offset": pr.base,
            "leader_epoch": pr.epoch, "result": result, "result_seq": self.cur_seq, "result_ts_ms": self.now})
        if result == "ACKED":
            self.inv.on_acked(self, pr)

    def propose(self, rep: Replica, change: str, proposed: tuple) -> None:
        """B9: submit AlterPartition; maximal ISR grows at once on expansion (B1)."""
        pid = self.next_pid
        self.next_pid += 1
        rep.pending = Pending(change, proposed, pid)
        rep.maximal_isr = tuple(proposed) if change == "EXPAND" else rep.committed_isr
        self._send_ap(rep, pid, change, proposed)

    def _send_ap(self, rep: Replica, pid: int, change: str, proposed: tuple) -> None:
        brokers = self.cl.brokers
        own = brokers[rep.broker].proc_epoch if rep.broker in brokers else -1
        new_isr = []
        for r in proposed:
            if r == rep.broker:
                new_isr.append((r, own))
            else:
                fs = rep.followers.get(r)
                new_isr.append((r, fs.broker_epoch if fs is not None and fs.broker_epoch is not None else -1))
        req = (pid, rep.broker, own, rep.leader_epoch, rep.partition_epoch, RECOVERED, tuple(new_isr), change)
        self.emit("alter_partition", {"leader": rep.broker, "leader_epoch": rep.leader_epoch,
                                      "partition_epoch": rep.partition_epoch, "change": change,
                                      "proposed_isr": list(proposed), "maximal_isr": list(rep.maximal_isr),
                                      "phase": "PROPOSED", "error": None})
        self.ap_requests.append(req)
        if self.cl.config.ap_immediate:
            self.deliver_ap_request()
            self.deliver_ap_response()

    def maybe_expand(self, rep: Replica, r: int, fs: FollowerState) -> None:
        """B7 Partition#maybeExpandIsr."""
        if rep.pending is not None or r in rep.committed_isr:
            return
        if not self.eligible(rep, r, fs):
            return
        if fs.leo >= rep.log.hwm and fs.leo >= rep.leso:
            self.propose(rep, "EXPAND", leader_isr_order(tuple(rep.committed_isr) + (r,)))

    def maybe_shrink(self, rep: Replica) -> None:
        """B8 Partition#maybeShrinkIsr at `now`."""
        if rep.pending is not None:
            return
        leo = rep.log.leo
        now = self.now
        lag = self.cl.config.lag_ms
        out = []
        for r in rep.committed_isr:
            if r == rep.broker:
                continue
            fs = rep.followers.get(r)
            if fs is None or not fs.is_caught_up(leo, now, lag):
                out.append(r)
        if out:
            self.propose(rep, "SHRINK", leader_isr_order(r for r in rep.committed_isr if r not in out))

    def shrink_due(self, rep: Replica, lo: int) -> int | None:
        """Earliest time >= lo at which maybe_shrink would act (state unchanged meanwhile)."""
        if rep.pending is not None:
            return None
        leo = rep.log.leo
        lag = self.cl.config.lag_ms
        best = None
        for r in rep.committed_isr:
            if r == rep.broker:
                continue
            fs = rep.followers.get(r)
            if fs is None or (fs.leo != leo and fs.last_caught_up_ms is None):
                return lo
            if fs.leo == leo:
                continue
            t = max(lo, fs.last_caught_up_ms + lag + 1)
            if best is None or t < best:
                best = t
        return best

    # ---------------------------------------------------------------- AlterPartition at the controller
    def deliver_ap_request(self) -> bool:
        """A19/A20: the controller handles the oldest undelivered AlterPartition."""
        if not self.ap_requests:
            return False
        pid, b, bepoch, le, pe, lrs, new_isr, change = self.ap_requests.popleft()
        err = self.validate_ap(b, bepoch, le, pe, lrs, new_isr)
        ids = [r for r, _ in new_isr]
        row = {"leader": b, "leader_epoch": le, "partition_epoch": pe, "change": change, "proposed_isr": ids,
               "maximal_isr": None}
        if err is not None:
            self.emit("alter_partition", dict(row, phase="REJECTED", error=err))
            self.ap_responses.append((pid, b, err, None))
            return True
        acc = self.acceptable_fn()
        election = UNCLEAN if self.conf.unclean else ONLINE
        rec, info = self.build(target_isr=ids, target_lrs=lrs, election=election, acc=acc)
        err = None
        if rec is not None:
            if rec.get("leader", NO_CHANGE) not in (NO_CHANGE, b):
                err = "NEW_LEADER_ELECTED"
            self.emit("alter_partition", dict(row, phase="ACCEPTED", error=err))
            if change == "EXPAND":
                for r in ids:
                    self.unclean.pop(r, None)   # caught up through the leader: proven
            self.commit(rec, info, "AlterPartition", f"AlterPartition from leader {b}")
        else:
            self.emit("alter_partition", dict(row, phase="ACCEPTED", error=None))
        self.ap_responses.append((pid, b, err, (self.leader, tuple(self.isr), self.lrs, self.leader_epoch,
                                                self.partition_epoch)))
        return True

    def validate_ap(self, b, bepoch, le, pe, lrs, new_isr):
        brokers = self.cl.brokers
        reg = brokers.get(b)
        if reg is None or not reg.registered or reg.epoch != bepoch:
            return "STALE_BROKER_EPOCH"
        if le > self.leader_epoch or pe > self.partition_epoch:
            return "NOT_CONTROLLER"
        if le < self.leader_epoch:
            return "FENCED_LEADER_EPOCH"
        if b != self.leader:
            return "INVALID_REQUEST"
        if pe < self.partition_epoch:
            return "INVALID_UPDATE_VERSION"
        ids = [r for r, _ in new_isr]
        if len(set(ids)) != len(ids) or any(r < 0 or r not in self.replicas for r in ids):
            return "INVALID_REQUEST"
        if self.leader not in ids:
            return "INVALID_REQUEST"
        if lrs == RECOVERING and len(ids) > 1:
            return "INVALID_REQUEST"
        if self.lrs == RECOVERED and lrs == RECOVERING:
            return "INVALID_REQUEST"
        for r, e in new_isr:
            g = brokers.get(r)
            if g is None or not g.registered or g.in_cs or g.fenced or (e != -1 and e != g.epoch):
                return "INELIGIBLE_REPLICA"
        return None

    def deliver_ap_response(self) -> bool:
        """B10 Partition#handleAlterPartitionUpdate / handleAlterPartitionError."""
        if not self.ap_responses:
            return False
        pid, b, err, state = self.ap_responses.popleft()
        rep = self.reps.get(b)
        br = self.cl.brokers.get(b)
        base = {"leader": b, "change": None, "proposed_isr": None, "maximal_isr": None, "error": err}
        if (rep is None or br is None or not br.alive or rep.role != LEADER or rep.pending is None
                or rep.pending.pid != pid):
            self.emit("alter_partition", dict(base, leader_epoch=rep.leader_epoch if rep else None,
                                              partition_epoch=rep.partition_epoch if rep else None,
                                              phase="IGNORED"))
            return True
        pend = rep.pending
        base.update(change=pend.change, proposed_isr=list(pend.proposed), leader_epoch=rep.leader_epoch,
                    partition_epoch=rep.partition_epoch)
        if err is None:
            leader, isr, lrs, le, pe = state
            if le != rep.leader_epoch or pe < rep.partition_epoch:
                self.emit("alter_partition", dict(base, maximal_isr=list(rep.maximal_isr), phase="IGNORED"))
                return True
            rep.committed_isr = isr
            rep.maximal_isr = isr
            rep.pending = None
            rep.partition_epoch = pe
            self.emit("alter_partition", dict(base, maximal_isr=list(isr), phase="APPLIED"))
            self.inv.dirty = True
            self.maybe_increment_hw(rep, "AlterPartition")
        elif err in ROLLBACK_ERRORS:
            rep.maximal_isr = rep.committed_isr
            rep.pending = None
            self.emit("alter_partition", dict(base, maximal_isr=list(rep.maximal_isr), phase="ROLLED_BACK"))
        elif err in STAY_PENDING_ERRORS:
            self.emit("alter_partition", dict(base, maximal_isr=list(rep.maximal_isr), phase="IGNORED"))
        else:
            # NOT_CONTROLLER, STALE_BROKER_EPOCH, ...: the manager resubmits the same proposal
            if self.cl.config.ap_immediate:
                # immediate delivery would loop; the retry waits for the next event on this partition
                self.retry = (b, pid)
                self.emit("alter_partition", dict(base, maximal_isr=list(rep.maximal_isr), phase="IGNORED"))
            else:
                self._send_ap(rep, pid, pend.change, pend.proposed)
        return True

    # ================================================================ data plane
    def produce(self, ev: dict) -> None:
        """B13 Partition#appendRecordsToLeader."""
        b = ev["broker"]
        acks = ev["acks"]
        n = ev["records"]
        rep = self.reps.get(b)
        br = self.cl.brokers.get(b)
        row = {"broker": b, "acks": acks, "records": n, "base_offset": None, "leader_epoch": None,
               "result_seq": self.cur_seq, "result_ts_ms": self.now}
        if acks not in (-1, 0, 1):
            row["result"] = "INVALID_REQUIRED_ACKS"
            self.emit("produce", row)
            return
        if br is None or not br.alive:
            row["result"] = "NETWORK_EXCEPTION"
            self.emit("produce", row)
            return
        if rep is None or rep.role != LEADER:
            row["result"] = "NOT_LEADER_OR_FOLLOWER"
            row["leader_epoch"] = rep.leader_epoch if rep is not None and rep.leader_epoch >= 0 else None
            self.emit("produce", row)
            return
        row["leader_epoch"] = rep.leader_epoch
        if acks == -1 and self.under_min_isr(rep):
            row["result"] = "NOT_ENOUGH_REPLICAS"
            self.emit("produce", row)
            return
        inc = br.proc_epoch
        base = rep.log.append(rep.leader_epoch, inc, n)
        row["base_offset"] = base
        if acks == -1:
            pr = Produce(self.cur_seq, self.now, base + n, base, n, self.now + self.cl.config.request_timeout_ms,
                         rep.leader_epoch, inc, self.idx)
            self.idx += 1     # the outcome row takes this place in the request's order
            rep.purgatory.append(pr)
            self.maybe_increment_hw(rep, "Produce")
        else:
            row["result"] = "ACKED"
            self.emit("produce", row)
            self.maybe_increment_hw(rep, "Produce")

    def fetch(self, ev: dict) -> None:
        """A follower fetch: the leader serves it (C1-C3, B3, B7, B6) and the follower applies
        the response (C6-C8), both at once."""
        b = ev["broker"]
        cl = self.cl
        br = cl.brokers.get(b)
        frep = self.reps.get(b)
        if br is None or not br.alive:
            self._fetch_row(self._row(ev, ev.get("target"), ev.get("fetch_offset")), "NOOP", None)
            return
        # a modeled fetch takes null columns from the replica's model; a recorded one may drift
        if frep is not None:
            flog = frep.log
            m_target = frep.leader if frep.role == FOLLOWER else None
            m_off = flog.leo
            m_lfe = flog.cache[-1][0] if flog.cache else -1
            m_cle = frep.leader_epoch if frep.leader_epoch >= 0 else None
        else:
            flog = None
            m_target, m_off, m_lfe, m_cle = None, 0, -1, None
        m_be = br.proc_epoch
        target = ev["target"]
        off, lfe, cle, bepoch = ev["fetch_offset"], ev["last_fetched_epoch"], ev["current_leader_epoch"], ev["broker_epoch"]
        if off is None and lfe is None and cle is None and bepoch is None:
            off, lfe, cle, bepoch = m_off, m_lfe, m_cle, m_be
        else:
            self._drift(ev, frep, m_target, m_off, m_lfe, m_cle, m_be)
            off = m_off if off is None else off
            lfe = m_lfe if lfe is None else lfe
            cle = m_cle if cle is None else cle
            bepoch = m_be if bepoch is None else bepoch
        if target is None:
            target = m_target
        if target is None or target == b:
            self._fetch_row(self._row(ev, target, off), "NOOP", frep)
            return
        tbr = cl.brokers.get(target)
        lrep = self.reps.get(target)
        if tbr is None or not tbr.alive:
            self._fetch_row(self._row(ev, target, off), "NOOP", frep)   # nobody answers: the fetcher backs off
            return
        # C1 current-leader-epoch check, then leadership; C2 the fetcher must be assigned
        err = None
        if lrep is None:
            err = "NOT_LEADER_OR_FOLLOWER"
        else:
            if cle is not None and cle >= 0:
                if lrep.leader_epoch > cle:
                    err = "FENCED_LEADER_EPOCH"
                elif lrep.leader_epoch < cle:
                    err = "UNKNOWN_LEADER_EPOCH"
            if err is None:
                if lrep.role != LEADER:
                    err = "NOT_LEADER_OR_FOLLOWER"
                elif b not in lrep.followers:
                    err = "UNKNOWN_LEADER_EPOCH" if cle is not None and cle >= 0 else "NOT_LEADER_OR_FOLLOWER"
        if err is not None:
            self._fetch_row(self._row(ev, target, off), err, frep)
            return
        llog = lrep.log
        resp_hw = llog.hwm
        leader_leo = llog.leo
        # C3 divergence
        if lfe is not None and lfe >= 0:
            if llog.cache and llog.cache[-1][0] == lfe:
                e, o = lfe, leader_leo
            else:
                e, o = llog.end_offset_for(lfe)
            if e == -1 or o == -1:
                self._out_of_range(self._row(ev, target, off), frep, llog)
                return
            if e < lfe or o < off:
                row = self._row(ev, target, off)
                row["diverging_epoch"] = e
                row["diverging_end_offset"] = o
                if frep is not None:
                    self.truncate_on_divergence(frep, e, o, row)
                self._fetch_row(row, "DIVERGING_EPOCH", frep)
                return
        if off > leader_leo or off < 0:
            self._out_of_range(self._row(ev, target, off), frep, llog)
            return
        # B3 follower state update at the leader
        fs = lrep.followers[b]
        if bepoch is not None and bepoch != -1:
            reg = self.broker_view(target).get(b)
            if reg is not None and reg[0] > bepoch:
                self._fetch_row(self._row(ev, target, off), "NOT_LEADER_OR_FOLLOWER", frep)
                return
        now = self.now
        lcu = fs.last_caught_up_ms
        if off >= leader_leo:
            fs.last_caught_up_ms = now if lcu is None or now > lcu else lcu
        elif off >= fs.last_fetch_leader_leo and fs.last_fetch_ms is not None:
            lf = fs.last_fetch_ms
            fs.last_caught_up_ms = lf if lcu is None or lf > lcu else lcu
        if leader_leo > fs.last_fetch_leader_leo:
            fs.last_fetch_leader_leo = leader_leo
        fs.last_fetch_ms = now
        leo_changed = fs.leo != off
        fs.leo = off
        fs.broker_epoch = bepoch
        # the follower receives records [off, leader LEO) and the HWM captured before this update (C8)
        if flog is not None:
            if flog.leo == off and leader_leo > off:
                flog.copy_from(llog, off, leader_leo)
            flog.hwm = resp_hw if resp_hw < flog.leo else flog.leo
        # B7 then B6 at the leader
        if lrep.pending is None and b not in lrep.committed_isr:
            self.maybe_expand(lrep, b, fs)
        if leo_changed:
            self.maybe_increment_hw(lrep, "Fetch")
        if cl.config.fetch_all:
            self._fetch_row(self._row(ev, target, off), "OK", frep)

    def _row(self, ev, target, off) -> dict:
        return {"broker": ev["broker"], "target": target, "fetch_offset": off, "result": None,
                "diverging_epoch": None, "diverging_end_offset": None, "truncated_to": None,
                "replica_leo": None, "replica_hwm": None}

    def _drift(self, ev, frep, m_target, m_off, m_lfe, m_cle, m_be) -> None:
        """A recorded fetch whose columns differ from the model: report, and trust the row."""
        drift = []
        if ev["fetch_offset"] is not None and ev["fetch_offset"] != m_off:
            drift.append(f"fetch_offset {ev['fetch_offset']} vs model LEO {m_off}")
        if ev["last_fetched_epoch"] is not None and ev["last_fetched_epoch"] != m_lfe:
            drift.append(f"last_fetched_epoch {ev['last_fetched_epoch']} vs model {m_lfe}")
        if ev["current_leader_epoch"] is not None and ev["current_leader_epoch"] != m_cle:
            drift.append(f"current_leader_epoch {ev['current_leader_epoch']} vs model {m_cle}")
        if ev["broker_epoch"] is not None and ev["broker_epoch"] != m_be:
            drift.append(f"broker_epoch {ev['broker_epoch']} vs model {m_be}")
        if ev["target"] is not None and m_target is not None and ev["target"] != m_target:
            drift.append(f"target {ev['target']} vs model leader {m_target}")
        if not drift:
            return
        row = self._row(ev, ev["target"] if ev["target"] is not None else m_target, ev["fetch_offset"])
        row["replica_leo"] = m_off
        row["replica_hwm"] = frep.log.hwm if frep is not None else None
        row["result"] = "DRIFT"
        row["detail"] = "; ".join(drift)
        self.emit("fetch", row)
        off = ev["fetch_offset"]
        if frep is not None and off is not None and off < frep.log.leo:
            frep.log.truncate_to(off)   # the follower's log is shorter than the model thought
            self.inv.on_log_change(self, frep)

    def _fetch_row(self, row, result, frep):
        row["result"] = result
        if frep is not None:
            row["replica_leo"] = frep.log.leo
            row["replica_hwm"] = frep.log.hwm
        self.emit("fetch", row)

    def _out_of_range(self, row, frep, llog) -> None:
        """C7: the follower truncates to the leader's LEO when it is ahead."""
        if frep is not None and llog.leo < frep.log.leo:
            frep.log.truncate_to(llog.leo)
            row["truncated_to"] = llog.leo
            self.inv.on_log_change(self, frep)
        self._fetch_row(row, "OFFSET_OUT_OF_RANGE", frep)

    def truncate_on_divergence(self, frep: Replica, e: int, o: int, row: dict) -> None:
        """C6 AbstractFetcherThread#getOffsetTruncationState."""
        log = frep.log
        fe, fo = log.end_offset_for(e)
        if fe == -1:
            to = min(o, log.leo)
        elif fe != e:
            to = min(fo, log.leo)
        else:
            to = min(fo, o, log.leo)
        log.truncate_to(to)
        row["truncated_to"] = to
        self.inv.on_log_change(self, frep)

    def list_offsets(self, ev: dict) -> None:
        """B14 Partition#fetchOffsetForTimestamp (client request: leader required)."""
        b = ev["broker"]
        spec = ev["offset_spec"]
        row = {"broker": b, "type": "ListOffsets", "fetch_offset": None, "result": "NONE", "offset": None,
               "records": None, "hwm": None}
        rep, err = self._client_leader(b, ev.get("current_leader_epoch"))
        if err:
            row["result"] = err
            if rep is not None:
                row["hwm"] = rep.log.hwm
            self.emit("consumer", row)
            return
        log = rep.log
        row["hwm"] = log.hwm
        if spec == "EARLIEST":
            row["offset"] = 0
        elif rep.leso is not None and rep.leso > log.hwm:
            row["result"] = "OFFSET_NOT_AVAILABLE"
        else:
            # READ_UNCOMMITTED answers the HWM; READ_COMMITTED the LSO, which is the HWM without transactions
            row["offset"] = log.hwm
        self.emit("consumer", row)

    def consumer_fetch(self, ev: dict) -> None:
        b = ev["broker"]
        off = ev["fetch_offset"]
        row = {"broker": b, "type": "ConsumerFetch", "fetch_offset": off, "result": "NONE", "offset": None,
               "records": 0, "hwm": None}
        rep, err = self._client_leader(b, ev.get("current_leader_epoch"))
        if err:
            row["result"] = err
            row["records"] = None
            self.emit("consumer", row)
            return
        log = rep.log
        row["hwm"] = log.hwm
        if off > log.leo or off < 0:
            row["result"] = "OFFSET_OUT_OF_RANGE"
            row["records"] = None
        else:
            n = max(0, log.hwm - off)
            row["records"] = n
            if n:
                self.inv.on_consumed(self, rep, off, log.hwm)
        self.emit("consumer", row)

    def _client_leader(self, b, cle):
        br = self.cl.brokers.get(b)
        if br is None or not br.alive:
            return None, "NETWORK_EXCEPTION"
        rep = self.reps.get(b)
        if rep is None:
            return None, "NOT_LEADER_OR_FOLLOWER"
        if cle is not None and cle >= 0:
            if rep.leader_epoch > cle:
                return rep, "FENCED_LEADER_EPOCH"
            if rep.leader_epoch < cle:
                return rep, "UNKNOWN_LEADER_EPOCH"
        if rep.role != LEADER:
            return rep, "NOT_LEADER_OR_FOLLOWER"
        return rep, None

    # ================================================================ timers
    def next_timer(self, los: list, hi: int):
        """The earliest due timer -> (time, kind, broker) or None. Periodic tasks (kinds 0-2) fire at
        multiples of their interval in [lo, hi]; produce deadlines (kind 3) at any time <= hi.
        Ties go in kind order: ISR expiration, leader rebalance, unclean election, produce timeouts."""
        cfg = self.cl.config
        best = None
        brokers = self.cl.brokers
        for rep in self.reps.values():
            if rep.role != LEADER:
                continue
            br = brokers.get(rep.broker)
            if br is None or not br.alive:
                continue
            if cfg.isr_interval_ms > 0:
                t = self.shrink_due(rep, los[0])
                if t is not None:
                    iv = cfg.isr_interval_ms
                    t = -(-t // iv) * iv
                    if t <= hi and (best is None or (t, 0) < best[:2]):
                        best = (t, 0, rep.broker)
            for pr in rep.purgatory:
                if pr.deadline <= hi and (best is None or (pr.deadline, 3) < best[:2]):
                    best = (pr.deadline, 3, rep.broker)
        if cfg.auto_rebalance and self.replicas and self.leader != self.replicas[0]:
            iv = cfg.rebalance_interval_ms
            t = -(-los[1] // iv) * iv
            if t <= hi and (best is None or (t, 1) < best[:2]) and self._preferred_possible():
                best = (t, 1, None)
        if self.conf.unclean and self.leader == NO_LEADER and self.replicas:
            iv = cfg.unclean_interval_ms
            t = -(-los[2] // iv) * iv
            if t <= hi and (best is None or (t, 2) < best[:2]):
                best = (t, 2, None)
        return best

    def _preferred_possible(self) -> bool:
        pref = self.replicas[0]
        return pref in self.isr and self.acceptable_fn()(pref)

    def advance(self, ts: int) -> None:
        """Fire every timer due at or before `ts` (SPEC §4), in time order."""
        td = self.tdone
        if ts <= td:
            return
        # fast path: no periodic multiple crossed and no parked produce due
        if ts < self.t_next:
            for rep in self.reps.values():
                if rep.purgatory and rep.purgatory[0].deadline <= ts:
                    break
            else:
                self.tdone = ts
                return
        los = [td + 1] * 3
        while True:
            nt = self.next_timer(los, ts)
            if nt is None:
                break
            t, kind, b = nt
            self.now = t
            self.cur_seq = self.last_seq
            if kind == 0:
                self.maybe_shrink(self.reps[b])
            elif kind == 1:
                self.change("AutoLeaderRebalance", "leader.imbalance.check.interval: preferred leader election",
                            election=PREFERRED)
            elif kind == 2:
                self.change("UncleanLeaderElection", "unclean.leader.election.interval: periodic unclean election",
                            election=UNCLEAN)
            else:
                rep = self.reps[b]
                keep = []
                for pr in rep.purgatory:
                    if pr.deadline <= t:
                        self.produce_outcome(pr, "REQUEST_TIMED_OUT", rep)
                    else:
                        keep.append(pr)
                rep.purgatory = keep
            self.inv.after_event(self)
            if kind != 3:
                los[kind] = t + 1     # a periodic task fires once per multiple
        self.tdone = ts
        self.set_t_next()

    def set_t_next(self) -> None:
        """The first periodic multiple after tdone (the fast path of advance)."""
        cfg = self.cl.config
        td = self.tdone
        t = (td // cfg.rebalance_interval_ms + 1) * cfg.rebalance_interval_ms
        u = (td // cfg.unclean_interval_ms + 1) * cfg.unclean_interval_ms
        if u < t:
            t = u
        iv = cfg.isr_interval_ms
        if iv:
            i = (td // iv + 1) * iv
            if i < t:
                t = i
        self.t_next = t
