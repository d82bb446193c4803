"""The invariant checker (protocol/invariants.py, SPEC §3), invariant by invariant: each fires on
the exact input that breaks it and stays silent at the boundary. Most tests drive `Invariants`
directly on a hand-built partition (a few attributes the checker reads), so the boundaries are
exact; the last ones run hand-written event streams and check the violation's seq."""
from types import SimpleNamespace as NS

import pytest

from protocol.invariants import Invariants
from protocol.log import ReplicaLog
from protocol.replica import FOLLOWER, LEADER
from tests.engine_util import rows, run_events
from tests.streams import S


def mklog(runs, leo, hwm=0):
    lg = ReplicaLog()
    lg.runs = list(runs)
    lg.cache = [(e, s) for s, e, _ in runs]
    lg.leo = leo
    lg.hwm = hwm
    return lg


class P:
    """The parts of protocol.partition.Partition the checker reads."""

    def __init__(self, *, replicas=(1, 2, 3), isr=(1, 2, 3), elr=(), leader=1, le=0, pe=0, min_isr=2,
                 elr_on=True, logs=None, alive=(1, 2, 3), registered=None):
        self.replicas, self.isr, self.elr = list(replicas), list(isr), list(elr)
        self.leader, self.leader_epoch, self.partition_epoch = leader, le, pe
        self.conf = NS(min_isr=min_isr)
        registered = alive if registered is None else registered
        self.cl = NS(config=NS(elr=elr_on),
                     brokers={b: NS(alive=b in alive, registered=b in registered) for b in replicas})
        logs = logs or {}
        self.reps = {b: NS(broker=b, log=logs.get(b, ReplicaLog()), role=LEADER if b == leader else FOLLOWER,
                           leader_epoch=le, committed_isr=tuple(isr), maximal_isr=tuple(isr),
                           assignment=tuple(replicas)) for b in replicas}
        self.unclean = {}
        self.out = []

    def eff_min_isr(self):
        return min(self.conf.min_isr, len(self.replicas))

    def emit(self, table, row):
        assert table == "violations"
        self.out.append(row)

    def names(self):
        return [r["invariant"] for r in self.out]


def check(p, inv, changed=()):
    inv.dirty = True
    inv.changed = set(changed)
    inv.after_event(p)
    return p.names()


# ------------------------------------------------------------------ EpochMonotonic
def test_epoch_monotonic_boundaries():
    inv = Invariants()
    p = P(le=0, pe=0)
    inv.on_registration(p, None)
    assert p.names() == []                               # first record after -1/-1
    p.partition_epoch = 1
    inv.on_registration(p, None)                         # same leader epoch, next partition epoch: fine
    assert p.names() == []
    inv.on_registration(p, None)                         # partition epoch not increased
    assert p.names() == ["EpochMonotonic"]
    p.out.clear()
    p.leader_epoch, p.partition_epoch = 3, 5
    inv.on_registration(p, None)
    p.leader_epoch, p.partition_epoch = 2, 6             # leader epoch went back
    inv.on_registration(p, None)
    assert p.names() == ["EpochMonotonic"]
    assert "leader epoch 3 / partition epoch 5" in p.out[0]["detail"]


# ------------------------------------------------------------------ ElrInvariants
def elr_check(**kw):
    p = P(**kw)
    inv = Invariants()
    inv.on_registration(p, None)
    return p


def test_elr_silent_below_min_isr():
    assert elr_check(isr=[1], elr=[2, 3], min_isr=2).names() == []
    assert elr_check(isr=[1, 2], elr=[3], min_isr=3).names() == []          # one short of min ISR


def test_elr_fires_when_isr_meets_min_isr_exactly():
    p = elr_check(isr=[1, 2], elr=[3], min_isr=2)
    assert p.names() == ["ElrInvariants"] and "meets min ISR 2" in p.out[0]["detail"]
    # effective min ISR is capped by the replica count (A11)
    p = elr_check(replicas=[1, 2], isr=[1, 2], elr=[2], min_isr=5)
    assert p.names() == ["ElrInvariants"]


def test_elr_overlap_outside_replicas_and_disabled():
    p = elr_check(isr=[1], elr=[1], min_isr=3)
    assert p.names() == ["ElrInvariants"] and "overlap" in p.out[0]["detail"]
    p = elr_check(isr=[1], elr=[4], min_isr=3)
    assert p.names() == ["ElrInvariants"] and "not within replicas" in p.out[0]["detail"]
    p = elr_check(isr=[1], elr=[2], min_isr=3, elr_on=False)
    assert p.names() == ["ElrInvariants"] and "enable=false" in p.out[0]["detail"]
    assert elr_check(isr=[1, 2, 3], elr=[], min_isr=2).names() == []       # empty ELR: nothing to check


# ------------------------------------------------------------------ ReplicationQuorumSuperset
def rqs(committed, maximal, *, isr=(1, 2, 3), elr=(), replicas=(1, 2, 3), min_isr=2, role=LEADER, le_shift=0):
    p = P(replicas=replicas, isr=isr, elr=elr, min_isr=min_isr)
    lrep = p.reps[1]
    lrep.committed_isr, lrep.maximal_isr, lrep.role = tuple(committed), tuple(maximal), role
    lrep.leader_epoch += le_shift
    return check(p, Invariants())


def test_rqs_fires_when_the_controller_isr_is_not_within_the_maximal_isr():
    assert rqs((1, 2), (1, 2)) == ["ReplicationQuorumSuperset"]                 # committed ISR == min ISR
    assert rqs((1, 2), (1, 2), isr=(1, 2), elr=(3,)) == ["ReplicationQuorumSuperset"]   # ELR counts too


def test_rqs_silent_under_min_isr_and_when_covered():
    assert rqs((1,), (1,)) == []                                               # leader under min ISR
    assert rqs((1, 2), (1, 2, 3)) == []
    assert rqs((1, 2), (1, 2), min_isr=3, replicas=(1, 2, 3)) == []           # 2 < 3
    assert rqs((1, 2), (1, 2), min_isr=3, replicas=(1, 2), isr=(1, 2, 3)) == ["ReplicationQuorumSuperset"]
    assert rqs((1, 2), (1, 2), role=FOLLOWER) == []                            # not leading
    assert rqs((1, 2), (1, 2), le_shift=-1) == []                              # a stale leader


# ------------------------------------------------------------------ LeaderCandidateCompleteness
def lcc(leo2, *, alive=(1, 2, 3), where="isr"):
    logs = {b: mklog([(0, 0, 1)], 10 if b != 2 else leo2, 10) for b in (1, 2, 3)}
    kw = {"isr": (1, 2, 3)} if where == "isr" else {"isr": (1, 3), "elr": (2,)}
    p = P(logs=logs, alive=alive, min_isr=3, **kw)
    inv = Invariants()
    inv.on_leader_hwm(p, p.reps[1], 10)
    return check(p, inv), p


def test_lcc_fires_for_an_isr_member_shorter_than_the_true_hwm():
    names, p = lcc(9)
    assert names == ["LeaderCandidateCompleteness"]
    assert "replica 2 is in the ISR with LEO 9 below the true HWM 10" in p.out[0]["detail"]
    names, p = lcc(9, where="elr")
    assert names == ["LeaderCandidateCompleteness"] and "in the ELR" in p.out[0]["detail"]


def test_lcc_silent_at_the_boundary_and_for_dead_replicas():
    assert lcc(10)[0] == []
    assert lcc(9, alive=(1, 3))[0] == []


def test_lcc_reported_once_per_state():
    names, p = lcc(9)
    inv = Invariants()
    inv.on_leader_hwm(p, p.reps[1], 10)
    p.out.clear()
    check(p, inv)
    check(p, inv)
    assert p.names() == ["LeaderCandidateCompleteness"]


# ------------------------------------------------------------------ UncleanExclusion
@pytest.mark.parametrize("isr, elr, leader, alive, registered, fires", [
    ((1, 2), (), 1, (1, 2, 3), None, True),        # in the ISR
    ((1,), (2,), 1, (1, 2, 3), None, True),        # in the ELR
    ((2,), (), 2, (1, 2, 3), None, True),          # the leader
    ((1, 3), (), 1, (1, 2, 3), None, False),       # out of ISR/ELR
    ((1, 2), (), 1, (1, 3), None, False),          # not running
    ((1, 2), (), 1, (1, 2, 3), (1, 3), False),     # not registered yet
])
def test_unclean_exclusion(isr, elr, leader, alive, registered, fires):
    p = P(isr=isr, elr=elr, leader=leader, alive=alive, registered=registered, min_isr=1)
    p.unclean = {2: 7}
    names = check(p, Invariants())
    assert ("UncleanExclusion" in names) == fires


# ------------------------------------------------------------------ LogMatching
def test_log_matching_fires_below_both_hwms_only():
    a = mklog([(0, 0, 1), (3, 1, 1)], 6, 5)
    b = mklog([(0, 0, 1), (3, 2, 1)], 6, 5)
    p = P(logs={1: a, 2: b}, min_isr=1)
    assert check(p, Invariants(), changed={2}) == ["LogMatching"]
    assert "replicas 2 and 1 differ at offset 3" in p.out[0]["detail"]
    a.hwm = 3                                                    # mismatch exactly at the lower HWM: fine
    p = P(logs={1: a, 2: b}, min_isr=1)
    assert check(p, Invariants(), changed={2}) == []
    p = P(logs={1: a, 2: b}, min_isr=1)
    assert check(p, Invariants(), changed=()) == []              # only changed logs are compared


# ------------------------------------------------------------------ HWM, completeness, acked, reads
def test_hwm_monotonic_on_leader_hwm_over_a_changed_committed_offset():
    old = mklog([(0, 0, 1)], 10, 10)
    p = P(logs={1: old}, min_isr=1)
    inv = Invariants()
    inv.on_leader_hwm(p, p.reps[1], 10)
    assert inv.committed_end == 10 and p.names() == []
    new = mklog([(0, 0, 1), (6, 1, 2)], 12, 12)
    p.reps[1].log = new
    inv.on_leader_hwm(p, p.reps[1], 12)
    assert p.names() == ["HighWatermarkMonotonic"]
    assert "fell from 10 to 6" in p.out[0]["detail"]
    assert inv.committed_end == 12


def test_hwm_monotonic_makes_the_event_s_end_compare_the_leader_s_log():
    """The HWM that fell is a log that changed under the committed records: the same event's end
    checks (after_event, run only when something set them due) compare the leader's log with the
    others', and a follower still holding the old committed records below both HWMs is a
    LogMatching violation of that event, not of some later one (as is the follower now shorter
    than the new true HWM: LeaderCandidateCompleteness)."""
    old = mklog([(0, 0, 1)], 10, 10)
    p = P(replicas=(1, 2), isr=(1, 2), alive=(1, 2), logs={1: old, 2: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    inv = Invariants()
    inv.on_leader_hwm(p, p.reps[1], 10)
    inv.after_event(p)
    assert p.names() == []
    p.reps[1].log = mklog([(0, 0, 1), (6, 1, 2)], 12, 12)
    inv.on_leader_hwm(p, p.reps[1], 12)
    inv.after_event(p)
    assert p.names() == ["HighWatermarkMonotonic", "LeaderCandidateCompleteness", "LogMatching"]
    assert "differ at offset 6" in p.out[2]["detail"]


def test_hwm_monotonic_silent_when_the_change_is_above_the_true_hwm():
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    inv = Invariants()
    inv.on_leader_hwm(p, p.reps[1], 10)
    p.reps[1].log = mklog([(0, 0, 1), (10, 1, 2)], 12, 12)
    inv.on_leader_hwm(p, p.reps[1], 12)
    assert p.names() == [] and inv.committed_end == 12
    inv.on_leader_hwm(p, p.reps[1], 11)                          # a lower leader HWM never lowers the true one
    assert inv.committed_end == 12


def test_leader_completeness_boundary():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1, isr=(1,))
    inv.on_leader_hwm(p, p.reps[1], 10)
    assert check(p, inv) == []                                   # LEO == true HWM
    p.reps[1].log = mklog([(0, 0, 1)], 9, 9)
    assert check(p, inv) == ["LeaderCompleteness", "HighWatermarkMonotonic"]
    assert inv.committed_end == 9                                # rebased: reported once
    p.out.clear()
    assert check(p, inv) == []


def test_leader_completeness_ignores_a_dead_leader():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1, alive=(2, 3), isr=(1,))
    inv.on_leader_hwm(p, p.reps[1], 10)
    p.reps[1].log = mklog([(0, 0, 1)], 5, 5)
    assert check(p, inv) == []


def acked(p, inv, base, required, epoch=0, inc=1):
    inv.on_acked(p, NS(epoch=epoch, inc=inc, base=base, required=required))


def test_acked_records_durable_counts_exactly_the_lost_records():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    acked(p, inv, 0, 4)
    acked(p, inv, 4, 10)                     # merges with [0, 4)
    assert inv.acked == {(0, 1): [[0, 10, 10]]}
    assert check(p, inv) == []
    p.reps[1].log = mklog([(0, 0, 1)], 6, 6)
    names = check(p, inv)
    assert "AckedRecordsDurable" in names
    row = [r for r in p.out if r["invariant"] == "AckedRecordsDurable"][0]
    assert row["detail"].startswith("4 acknowledged") and "[6, 10)" in row["detail"]
    assert inv.lost_acked == 4 and inv.acked == {(0, 1): [[0, 6, 6]]}


@pytest.mark.parametrize("n_ranges,more", [(5, ""), (6, " and 1 more ranges")])
def test_acked_records_durable_names_five_lost_ranges_and_counts_the_rest(n_ranges, more):
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 100, 100)}, min_isr=1)
    for i in range(n_ranges):
        acked(p, inv, 10 * i, 10 * i + 1)                     # disjoint single records
    p.reps[1].log = mklog([], 0, 0)                           # the leader lost them all
    assert check(p, inv) == ["AckedRecordsDurable"]
    detail = p.out[0]["detail"]
    assert detail.startswith(f"{n_ranges} acknowledged acks=all record(s) at offsets [0, 1), [10, 11), [20, 21), "
                             f"[30, 31), [40, 41){more} are not in leader 1's log"), detail


def test_acked_records_of_another_writer_are_lost():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 2)], 10, 0)}, min_isr=1)     # same epoch, another incarnation
    acked(p, inv, 0, 3)
    assert check(p, inv) == ["AckedRecordsDurable"]
    assert inv.lost_acked == 3 and inv.acked == {}


def test_acked_ranges_stay_bounded():
    inv = Invariants()
    p = P(min_isr=1)
    for i in range(12):
        acked(p, inv, 10 * i, 10 * i + 1)                     # 12 disjoint single records
    r = inv.acked[(0, 1)]
    assert len(r) == 8 and sum(n for _, _, n in r) == 12


def test_acked_ranges_merge_the_closest_neighbours_first():
    """The ninth range merges the pair with the smallest gap (the first of equal ones), keeping
    the exact count."""
    inv = Invariants()
    p = P(min_isr=1)
    starts = [0, 100, 200, 300, 350, 352, 400, 500, 502]     # gaps 99, 99, 99, 49, 1, 47, 99, 1
    for s0 in starts:
        acked(p, inv, s0, s0 + 1)
    assert inv.acked[(0, 1)] == [[0, 1, 1], [100, 101, 1], [200, 201, 1], [300, 301, 1],
                                 [350, 353, 2], [400, 401, 1], [500, 501, 1], [502, 503, 1]]


def test_consistent_read():
    inv = Invariants()
    lg = mklog([(0, 0, 1)], 10, 10)
    p = P(logs={1: lg}, min_isr=1)
    inv.on_consumed(p, p.reps[1], 0, 8)
    assert inv.consumed_end == 8 and p.names() == []
    p.reps[1].log = mklog([(0, 0, 1), (8, 1, 2)], 12, 12)      # change at 8: not read yet
    inv.on_consumed(p, p.reps[1], 8, 12)
    assert p.names() == []
    p.reps[1].log = mklog([(0, 0, 1), (5, 3, 3)], 12, 12)      # offset 5 was read as epoch 0
    inv.on_consumed(p, p.reps[1], 5, 12)
    assert p.names() == ["ConsistentRead"]
    assert "read offset 5" in p.out[0]["detail"]


def test_consistent_read_names_what_was_read_at_a_run_s_first_offset():
    """The violation names the record as it was read: at the first offset of a run, that run's
    epoch, not the run before it (the run boundary is inclusive)."""
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1), (5, 2, 4)], 10, 10)}, min_isr=1)
    inv.on_consumed(p, p.reps[1], 0, 10)
    p.reps[1].log = mklog([(0, 0, 1), (5, 3, 5)], 12, 12)      # offset 5 on: another epoch
    inv.on_consumed(p, p.reps[1], 5, 12)
    assert p.names() == ["ConsistentRead"]
    assert "read offset 5 from leader 1 as epoch 3 (writer broker epoch 5), but it was read before as " \
           "epoch 2 (writer broker epoch 4)" in p.out[0]["detail"], p.out[0]["detail"]


def test_consistent_read_against_a_new_leader():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    inv.on_consumed(p, p.reps[1], 0, 10)
    p.reps[1].log = mklog([(0, 0, 1)], 7, 7)
    assert "ConsistentRead" in check(p, inv)
    assert inv.consumed_end == 7


def test_state_roundtrip():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    inv.on_leader_hwm(p, p.reps[1], 10)
    acked(p, inv, 0, 5)
    inv.on_consumed(p, p.reps[1], 0, 3)
    inv.on_registration(p, None)
    again = Invariants.from_tuple(inv.to_tuple())
    assert again.to_tuple() == inv.to_tuple()


# ------------------------------------------------------------------ event streams: the exact event
def test_unclean_election_violations_at_the_election_event():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 5, acks=-1)
    s.fetch_round(2, 3)                       # committed 5, acked
    s.fence(2); s.fence(3)
    s.crash(1)
    s.fence(1)
    s.crash(2)
    s.loss(2, 2)
    s.restart(2, clean=False)
    elect = s.unfence(2)                      # unclean election of 2 with 2 records
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false", "unclean.leader.election.enable": "true"})
    v = [(r["invariant"], r["seq"]) for r in out["violations"]]
    assert ("LeaderCompleteness", elect) in v
    assert ("HighWatermarkMonotonic", elect) in v
    assert ("AckedRecordsDurable", elect) in v
    assert min(seq for _, seq in v) == elect
    d = [r for r in out["violations"] if r["invariant"] == "AckedRecordsDurable"][0]["detail"]
    assert d.startswith("3 acknowledged")


def test_min_isr_two_same_schedule_has_no_leader_without_data():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 5, acks=-1)
    s.fetch_round(2, 3)
    s.fence(2); s.fence(3)
    s.crash(1)
    s.fence(1)
    s.crash(2)
    s.loss(2, 2)
    s.restart(2, clean=False)
    s.unfence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert not out.get("violations")


def test_clean_shutdown_and_clean_restart_is_not_an_unclean_exclusion():
    """Only an unclean crash marks a replica as needing to catch up (UncleanExclusion); a controlled
    shutdown, a clean crash and a clean restart (previous_broker_epoch = registered epoch) keep its
    ELR membership without any violation."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.shutdown(2)
    s.crash(2, clean=True)
    s.fence(2)
    s.at(20_000).restart(2, clean=True)
    s.unfence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert out["partition_state"][0]["elr"] == [2]
    assert not out.get("violations")
    assert out["_cluster"].partitions[("t", 0)].unclean == {}


def test_acked_ranges_merge_the_closest_pair():
    inv = Invariants()
    p = P(min_isr=1)
    for base in (0, 100, 200, 300, 400, 500, 502, 600, 700):     # 9 single records: one merge
        acked(p, inv, base, base + 1)
    assert inv.acked[(0, 1)] == [[0, 1, 1], [100, 101, 1], [200, 201, 1], [300, 301, 1], [400, 401, 1],
                                 [500, 503, 2], [600, 601, 1], [700, 701, 1]]
    acked(p, inv, 800, 801)                     # gaps 99 everywhere but [500, 503) -> 600: 97
    assert inv.acked[(0, 1)][4:] == [[400, 401, 1], [500, 601, 3], [700, 701, 1], [800, 801, 1]]


def test_a_shorter_read_keeps_what_was_read_before():
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 10, 10)}, min_isr=1)
    inv.on_consumed(p, p.reps[1], 0, 10)
    inv.on_consumed(p, p.reps[1], 0, 5)                             # reads less: the earlier read still counts
    assert inv.consumed_end == 10
    p.reps[1].log = mklog([(0, 0, 1), (7, 2, 2)], 10, 10)          # offset 7 changed after it was read
    inv.on_consumed(p, p.reps[1], 6, 10)
    assert p.names() == ["ConsistentRead"] and "offset 7" in p.out[0]["detail"]


def unclean_stream(ids=(1, 2, 3), sync=False):
    a, b, c = ids
    s = S().up(*ids)
    s.create([a, b, c])
    if sync:
        s.sync(a); s.sync(b); s.sync(c)
    s.produce(a, 5, acks=-1)
    s.fetch_round(b, c)
    s.fence(b); s.fence(c)
    s.crash(a)
    s.fence(a)
    s.crash(b)
    s.loss(b, 2)
    s.restart(b, clean=False)
    return s, s.unfence(b)


UNSAFE = {"eligible.leader.replicas.enable": "false", "unclean.leader.election.enable": "true"}


def test_violation_at_the_election_even_before_any_broker_applies_it():
    """Explicit metadata: the controller's unclean election is the event that loses data, not the
    later MetadataSync at which the new leader learns it leads."""
    s, elect = unclean_stream(sync=True)
    s.sync(2)
    out = run_events(s.events, dict(UNSAFE, **{"delivery.metadata": "explicit"}))
    assert rows(out, "elections", seq=elect)[0]["election"] == "UNCLEAN"
    lc = [r["seq"] for r in out["violations"] if r["invariant"] == "LeaderCompleteness"]
    assert lc and lc[0] == elect


def test_broker_zero_as_the_unclean_leader():
    s, elect = unclean_stream(ids=(1, 0, 2))
    out = run_events(s.events, UNSAFE)
    assert ("LeaderCompleteness", elect) in [(r["invariant"], r["seq"]) for r in out["violations"]]


def test_lost_count_of_merged_ranges_is_proportional():
    """A merged acked range keeps its exact count n over a longer span; a partial loss counts
    max(1, n * lost_span // span) of it."""
    inv = Invariants()
    p = P(logs={1: mklog([(0, 0, 1)], 1000, 0)}, min_isr=1, isr=(1,))
    for base in (0, 100, 200, 300, 400, 500, 502, 600, 700):
        acked(p, inv, base, base + 1)                              # [500, 503) holds 2 records
    p.reps[1].log = mklog([(0, 0, 1)], 501, 0)
    check(p, inv)
    # [500, 503) from 501: max(1, 2 * 2 // 3) = 1; [600, 601) and [700, 701): 1 each
    assert inv.lost_acked == 3
    assert inv.acked[(0, 1)][-1] == [500, 501, 1]


def test_acked_ranges_merge_the_closest_pair_keeping_the_exact_count():
    """AckedRecordsDurable's bookkeeping (Invariants.on_acked): past MAX_RANGES ranges per record
    identity, the two neighbouring ranges with the smallest gap merge (the first such pair), their
    acked counts added; the others stay as they were."""
    from protocol.invariants import _merge_closest
    for ranges, want in [
        ([[0, 10, 10], [12, 20, 8], [30, 40, 10], [45, 50, 5]], [[0, 20, 18], [30, 40, 10], [45, 50, 5]]),
        ([[0, 10, 10], [20, 25, 5], [27, 30, 3], [40, 50, 10]], [[0, 10, 10], [20, 30, 8], [40, 50, 10]]),
        ([[0, 10, 10], [20, 25, 5], [35, 40, 5], [42, 50, 8]], [[0, 10, 10], [20, 25, 5], [35, 50, 13]]),
        ([[0, 10, 10], [13, 20, 7], [23, 30, 7]], [[0, 20, 17], [23, 30, 7]]),     # a tie: the first pair
    ]:
        _merge_closest(ranges)
        assert ranges == want
