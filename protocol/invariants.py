"""Safety invariants, checked on every event (SPEC §3; formal_spec_notes §3).

The engine models every replica's log exactly, so these are exact, not sampled. A broken
invariant becomes one `violations` row at the event where it breaks -- never an exception --
and the ghost state is then rebased on the new reality so one loss is reported once.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

from .config import effective_min_isr
from .log import first_mismatch, runs_prefix
from .messages import EMPTY, EMPTY_SET, LEADER, grown_set
from .replica import Produce, Replica

if TYPE_CHECKING:
    from .partition import Partition


MAX_RANGES = 8


class Invariants:
    __slots__ = ("committed", "committed_end", "consumed", "consumed_end", "acked", "dirty", "changed",
                 "reported", "last_le", "last_pe", "lost_acked")

    def __init__(self) -> None:
        self.committed: list = []      # record identities below the true HWM
        self.committed_end = 0         # the true HWM
        self.consumed: list = EMPTY    # what consumers have read (replaced whole, never grown)
        self.consumed_end = 0
        self.acked: dict = {}          # (epoch, incarnation) -> [[start, end), ...] acknowledged acks=all
        self.dirty = False
        # brokers whose log shrank or was replaced in this event, and the violations reported so
        # far (once each): the shared EMPTY_SET until the first (messages.grown_set)
        self.changed: set = EMPTY_SET
        self.reported: set = EMPTY_SET
        self.last_le = -1
        self.last_pe = -1
        self.lost_acked = 0

    # -------------------------------------------------------------- hooks
    def violation(self, p: Partition, name: str, detail: str) -> None:
        p.emit("violations", {"invariant": name, "detail": detail})

    def on_leader_hwm(self, p: Partition, rep: Replica, hw: int) -> None:
        """A leader's HWM advanced: those records are committed (the true HWM)."""
        log = rep.log
        end = self.committed_end
        if end:
            m = first_mismatch(log.runs, log.leo, self.committed, end, min(hw, end))
            if m is not None:
                was = _ident(self.committed, m)
                now = log.identity_at(m)
                self.violation(p, "HighWatermarkMonotonic",
                               f"leader {rep.broker} (epoch {rep.leader_epoch}) advanced its HWM to {hw} over offset "
                               f"{m}, which was committed as {_fmt(was)} and is now {_fmt(now)}: the true HWM fell "
                               f"from {end} to {m}")
                self.committed = runs_prefix(log.runs, hw)
                self.committed_end = hw
                self.changed = grown_set(self.changed, rep.broker)   # LogMatching against the others at the event's end
                self.dirty = True
                return
        if hw > end:
            self.committed = runs_prefix(log.runs, hw)
            self.committed_end = hw

    def on_log_change(self, p: Partition, rep) -> None:
        self.changed = grown_set(self.changed, rep.broker)
        self.dirty = True

    def on_snapshot(self, p: Partition, rep, hwm: int) -> None:
        """A recorded replica log was loaded: a HWM beyond the true one commits its records."""
        if hwm > self.committed_end:
            self.committed = runs_prefix(rep.log.runs, hwm)
            self.committed_end = hwm
        self.on_log_change(p, rep)

    def new_leadership(self, p: Partition, rep) -> None:
        self.dirty = True

    def on_acked(self, p: Partition, pr: Produce) -> None:
        """Acked ranges per record identity as [start, end, acked count]; at most MAX_RANGES per
        identity (the closest ones merge, keeping their exact count) so state stays bounded."""
        ranges = self.acked.setdefault((pr.epoch, pr.inc), [])
        if ranges and ranges[-1][1] >= pr.base:
            last = ranges[-1]
            if pr.required > last[1]:
                last[2] += pr.required - max(pr.base, last[1])
                last[1] = pr.required
        else:
            ranges.append([pr.base, pr.required, pr.required - pr.base])
            if len(ranges) > MAX_RANGES:
                _merge_closest(ranges)

    def on_consumed(self, p: Partition, rep: Replica, start: int, end: int) -> None:
        log = rep.log
        m = None
        if self.consumed_end:
            m = first_mismatch(log.runs, log.leo, self.consumed, self.consumed_end,
                               min(end, self.consumed_end))
            if m is not None and m >= start:
                self.violation(p, "ConsistentRead",
                               f"a consumer read offset {m} from leader {rep.broker} as {_fmt(log.identity_at(m))}, "
                               f"but it was read before as {_fmt(_ident(self.consumed, m))}")
        if end > self.consumed_end or (self.consumed_end and m is not None):
            self.consumed = runs_prefix(log.runs, end)
            self.consumed_end = end

    def on_registration(self, p: Partition, info) -> None:
        """A committed PartitionChangeRecord: ElrInvariants and EpochMonotonic."""
        if p.leader_epoch < self.last_le or p.partition_epoch <= self.last_pe:
            self.violation(p, "EpochMonotonic",
                           f"registration went from leader epoch {self.last_le} / partition epoch {self.last_pe} "
                           f"to {p.leader_epoch} / {p.partition_epoch}")
        self.last_le = p.leader_epoch
        self.last_pe = p.partition_epoch
        if p.elr:
            bad = []
            if set(p.elr) & set(p.isr):
                bad.append(f"ISR {p.isr} and ELR {p.elr} overlap")
            if not set(p.elr) <= set(p.replicas):
                bad.append(f"ELR {p.elr} is not within replicas {p.replicas}")
            if not p.cl.config.elr:
                bad.append("ELR is non-empty with eligible.leader.replicas.enable=false")
            if len(p.isr) >= p.eff_min_isr():
                bad.append(f"ELR {p.elr} is non-empty while ISR {p.isr} meets min ISR {p.eff_min_isr()}")
            if bad:
                self.violation(p, "ElrInvariants", "; ".join(bad))
        self.dirty = True

    def _first_report(self, key: tuple) -> bool:
        """True the first time a violation `key` is reported (each is reported once)."""
        if key in self.reported:
            return False
        self.reported = grown_set(self.reported, key)
        return True

    # -------------------------------------------------------------- end of event
    def after_event(self, p: Partition) -> None:
        if not self.dirty:
            return
        self.dirty = False
        changed = self.changed
        if changed:
            self.changed = EMPTY_SET
        brokers = p.cl.brokers
        leader = p.leader
        lrep = p.reps.get(leader) if leader >= 0 else None
        lbr = brokers.get(leader) if leader >= 0 else None
        if lrep is not None and lbr is not None and lbr.alive:
            self._leader_complete(p, lrep)
        self._candidates_complete(p, brokers)
        if lrep is not None and lrep.role == LEADER and lrep.leader_epoch == p.leader_epoch:
            self._quorum_superset(p, lrep)
        self._unclean_excluded(p, brokers)
        if changed:
            self._logs_match(p, changed)
        if len(self.reported) > 4096:
            self.reported = EMPTY_SET

    def _candidates_complete(self, p: Partition, brokers) -> None:
        """LeaderCandidateCompleteness: no running ISR/ELR member is shorter than the true HWM."""
        end = self.committed_end
        if not end:
            return
        for r in p.isr + p.elr:
            rep = p.reps.get(r)
            br = brokers.get(r)
            if rep is None or br is None or not br.alive:
                continue
            if rep.log.leo < end:
                key = ("LCC", r, p.partition_epoch, rep.log.leo)
                if self._first_report(key):
                    where = "ISR" if r in p.isr else "ELR"
                    self.violation(p, "LeaderCandidateCompleteness",
                                   f"replica {r} is in the {where} with LEO {rep.log.leo} below the true HWM {end}")

    def _quorum_superset(self, p: Partition, lrep: Replica) -> None:
        """ReplicationQuorumSuperset, for the current (non-stale) leader."""
        if len(lrep.committed_isr) < effective_min_isr(p.conf.min_isr, len(lrep.assignment)):
            return
        need = set(p.isr) | set(p.elr)
        if not need <= set(lrep.maximal_isr):
            key = ("RQS", p.partition_epoch, tuple(lrep.maximal_isr))
            if self._first_report(key):
                self.violation(p, "ReplicationQuorumSuperset",
                               f"controller ISR {p.isr} + ELR {p.elr} is not within leader {p.leader}'s maximal "
                               f"ISR {list(lrep.maximal_isr)}")

    def _unclean_excluded(self, p: Partition, brokers) -> None:
        """UncleanExclusion: a replica restarted after an unclean crash stays out until it caught up."""
        leader = p.leader
        for r, since in p.unclean.items():
            br = brokers.get(r)
            if br is None or not br.alive or not br.registered:
                continue
            where = "leader" if r == leader else "ISR" if r in p.isr else "ELR" if r in p.elr else None
            if where:
                key = ("UE", r, since)
                if self._first_report(key):
                    self.violation(p, "UncleanExclusion",
                                   f"replica {r} restarted after an unclean shutdown and is {where} "
                                   f"(partition epoch {p.partition_epoch}) without having caught up")

    def _logs_match(self, p: Partition, changed) -> None:
        """LogMatching: below both HWMs, two replicas hold the same records."""
        reps = p.reps
        for b in changed:
            a = reps.get(b)
            if a is None:
                continue
            for c, o in reps.items():
                if c == b:
                    continue
                upto = min(a.log.hwm, o.log.hwm)
                if upto <= 0:
                    continue
                m = first_mismatch(a.log.runs, a.log.leo, o.log.runs, o.log.leo, upto)
                if m is not None:
                    key = ("LM", min(b, c), max(b, c), m)
                    if self._first_report(key):
                        self.violation(p, "LogMatching",
                                       f"replicas {b} and {c} differ at offset {m} below both HWMs "
                                       f"({a.log.hwm}, {o.log.hwm}): {_fmt(a.log.identity_at(m))} vs "
                                       f"{_fmt(o.log.identity_at(m))}")

    def _leader_complete(self, p: Partition, lrep: Replica) -> None:
        """LeaderCompleteness, AckedRecordsDurable and ConsistentRead against the controller's leader."""
        log = lrep.log
        end = self.committed_end
        if end:
            m = first_mismatch(log.runs, log.leo, self.committed, end, end)
            if m is not None:
                self.violation(p, "LeaderCompleteness",
                               f"leader {lrep.broker} (epoch {p.leader_epoch}) lacks committed offset {m} "
                               f"(true HWM {end}, leader LEO {log.leo})")
                self.violation(p, "HighWatermarkMonotonic",
                               f"the true HWM fell from {end} to {m}: leader {lrep.broker} does not have the "
                               f"records committed above {m}")
                self.committed = runs_prefix(self.committed, m)
                self.committed_end = m
        if self.acked:
            lost_total = 0
            lost_ranges = []
            for ident, ranges in list(self.acked.items()):
                keep = []
                for s, e, n in ranges:
                    k = _first_not(log, s, e, ident)
                    if k is None:
                        keep.append([s, e, n])
                        continue
                    lost = n if k <= s else (e - k if n == e - s else max(1, n * (e - k) // (e - s)))
                    lost_total += lost
                    lost_ranges.append((k, e))
                    if k > s:
                        keep.append([s, k, n - lost])
                if keep:
                    self.acked[ident] = keep
                else:
                    del self.acked[ident]
            if lost_total:
                lost_ranges.sort()
                shown = ", ".join(f"[{a}, {b})" for a, b in lost_ranges[:5])
                more = f" and {len(lost_ranges) - 5} more ranges" if len(lost_ranges) > 5 else ""
                self.violation(p, "AckedRecordsDurable",
                               f"{lost_total} acknowledged acks=all record(s) at offsets {shown}{more} are not in "
                               f"leader {lrep.broker}'s log (LEO {log.leo}, epoch {p.leader_epoch}): lost")
                self.lost_acked += lost_total
        if self.consumed_end:
            m = first_mismatch(log.runs, log.leo, self.consumed, self.consumed_end, self.consumed_end)
            if m is not None:
                self.violation(p, "ConsistentRead",
                               f"offset {m} was read by a consumer as {_fmt(_ident(self.consumed, m))}; leader "
                               f"{lrep.broker} now has {_fmt(log.identity_at(m))}")
                self.consumed = runs_prefix(self.consumed, m)
                self.consumed_end = m

    def to_tuple(self):
        return (self.committed, self.committed_end, self.consumed, self.consumed_end,
                {k: v for k, v in self.acked.items()}, self.last_le, self.last_pe, self.lost_acked,
                sorted(self.reported, key=repr))

    @classmethod
    def from_tuple(cls, t) -> "Invariants":
        inv = cls()
        inv.committed = [tuple(x) for x in t[0]]
        inv.committed_end = t[1]
        if t[2]:
            inv.consumed = [tuple(x) for x in t[2]]
        inv.consumed_end = t[3]
        inv.acked = {tuple(k): [list(r) for r in v] for k, v in t[4].items()}
        inv.last_le, inv.last_pe, inv.lost_acked = t[5], t[6], t[7]
        if t[8]:
            inv.reported = {tuple(x) for x in t[8]}
        return inv


def _ident(runs, offset):
    ident = None
    for s, e, inc in runs:
        if s > offset:
            break
        ident = (e, inc)
    return ident


def _first_not(log, s: int, e: int, ident) -> int | None:
    """First offset in [s, e) where `log` does not hold a record of identity `ident`."""
    runs = log.runs
    n = len(runs)
    i = bisect_right(runs, (s, 1 << 62, 0)) - 1
    if i < 0:
        return s
    off = s
    while off < e:
        if off >= log.leo or i >= n:
            return off
        _, ep, inc = runs[i]
        if (ep, inc) != ident:
            return off
        off = runs[i + 1][0] if i + 1 < n else log.leo
        i += 1
    return None


def _fmt(ident) -> str:
    if ident is None:
        return "missing"
    e, inc = ident
    return f"epoch {e}" + (f" (writer broker epoch {inc})" if inc else "")


def _merge_closest(ranges: list) -> None:
    """Merge the two neighbouring acked ranges with the smallest gap (the first such pair), keeping
    their exact acked count. A loop, not min(key=lambda): a closure in on_acked costs its compiled
    form an environment object on every call, merge or not."""
    best = 0
    gap = ranges[1][0] - ranges[0][1]
    for j in range(1, len(ranges) - 1):
        g = ranges[j + 1][0] - ranges[j][1]
        if g < gap:
            best, gap = j, g
    a, b = ranges[best], ranges.pop(best + 1)
    a[1], a[2] = b[1], a[2] + b[2]
