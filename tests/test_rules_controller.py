"""Controller rules with hand-written expectations (kafka_rules A19-A22, A6/A7 unclean paths,
KIP-966 unclean recovery, periodic elections). Expectations come from the rulebook, not from
running the engine."""
import pytest

from protocol.controller.replication import validate_alter_partition
from protocol.messages import AlterPartitionRequest, IsrMember
from tests.engine_util import rows, run_events
from tests.streams import S

EXPLICIT_AP = {"delivery.alter_partition": "explicit"}


def last(out, table, **m):
    r = rows(out, table, **m)
    assert r, f"no {table} row matching {m}"
    return r[-1]


def part(out, topic="t", p=0):
    return out["_cluster"].partitions[(topic, p)]


# ================================================================ A19 validation, branch by branch
# Partition t-0 replicas [1, 2, 3], leader 1, leader epoch 0, partition epoch 0, broker epoch 100 + id.
def base(*extra):
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    for f in extra:
        f(s)
    return run_events(s.events, finish=False)


OK_ISR = ((1, 101), (2, 102), (3, 103))


def validate_ap(p, b, bepoch, le, pe, lrs, isr):
    """A19 validation of an AlterPartition from leader b (broker epoch, leader/partition epoch, ISR)."""
    req = AlterPartitionRequest(0, b, bepoch, le, pe, lrs, tuple(IsrMember(*m) for m in isr), "SHRINK")
    return validate_alter_partition(p, req)


def test_a19_valid_request_passes():
    p = part(base())
    assert validate_ap(p, 1, 101, 0, 0, "RECOVERED", OK_ISR) is None
    assert validate_ap(p, 1, 101, 0, 0, "RECOVERED", ((1, 101),)) is None                 # shrink to the leader
    assert validate_ap(p, 1, 101, 0, 0, "RECOVERED", ((1, -1), (2, -1))) is None           # -1 skips the epoch check


def test_a19_step0_stale_broker_epoch_comes_first():
    p = part(base())
    assert validate_ap(p, 1, 100, 0, 0, "RECOVERED", OK_ISR) == "STALE_BROKER_EPOCH"
    assert validate_ap(p, 1, 102, 0, 0, "RECOVERED", OK_ISR) == "STALE_BROKER_EPOCH"
    assert validate_ap(p, 9, 109, 0, 0, "RECOVERED", OK_ISR) == "STALE_BROKER_EPOCH"     # unregistered
    # before every other check: epochs in the future, not the leader, bad ISR
    assert validate_ap(p, 2, 999, 5, 5, "RECOVERING", ((7, 1), (7, 1))) == "STALE_BROKER_EPOCH"


def test_a19_steps3_4_higher_epochs_not_controller():
    p = part(base())
    assert validate_ap(p, 1, 101, 1, 0, "RECOVERED", OK_ISR) == "NOT_CONTROLLER"
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", OK_ISR) == "NOT_CONTROLLER"
    assert validate_ap(p, 2, 102, 1, 0, "RECOVERED", OK_ISR) == "NOT_CONTROLLER"        # before the leader check
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ((5, 105),)) == "NOT_CONTROLLER"   # before the ISR checks


def test_a19_step5_lower_leader_epoch_fenced():
    out = base(lambda s: s.fence(1), lambda s: s.unfence(1))      # leader 2, leader epoch 1, partition epoch 1
    p = part(out)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (2, 1, 1)
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ((1, 101),)) == "FENCED_LEADER_EPOCH"
    assert validate_ap(p, 2, 102, 0, 0, "RECOVERED", ((2, 102),)) == "FENCED_LEADER_EPOCH"   # before INVALID_UPDATE_VERSION
    assert validate_ap(p, 1, 101, 0, 2, "RECOVERED", ((1, 101),)) == "NOT_CONTROLLER"        # step 4 before step 5


def test_a19_step6_not_the_leader_invalid_request():
    p = part(base(lambda s: s.fence(3), lambda s: s.unfence(3)))   # partition epoch 1, leader epoch 0
    assert (p.leader_epoch, p.partition_epoch) == (0, 1)
    assert validate_ap(p, 2, 102, 0, 1, "RECOVERED", ((1, 101), (2, 102))) == "INVALID_REQUEST"
    assert validate_ap(p, 2, 102, 0, 0, "RECOVERED", ((1, 101), (2, 102))) == "INVALID_REQUEST"  # before step 7


def test_a19_step7_stale_partition_epoch_invalid_update_version():
    p = part(base(lambda s: s.fence(3), lambda s: s.unfence(3)))
    assert validate_ap(p, 1, 101, 0, 0, "RECOVERED", ((1, 101), (2, 102))) == "INVALID_UPDATE_VERSION"
    assert validate_ap(p, 1, 101, 0, 0, "RECOVERED", ((9, 1), (9, 1))) == "INVALID_UPDATE_VERSION"  # before step 8
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ((1, 101), (2, 102))) is None


@pytest.mark.parametrize("isr", [
    ((1, 101), (4, 104)),              # 4 is registered but not a replica
    ((1, 101), (2, 102), (2, 102)),    # duplicate
    ((1, 101), (-1, -1)),              # negative id
    ((2, 102), (3, 103)),              # step 9: lacks the leader
    (),                                # empty passes step 8, fails step 9
])
def test_a19_steps8_9_bad_isr_invalid_request(isr):
    assert validate_ap(part(base()), 1, 101, 0, 0, "RECOVERED", isr) == "INVALID_REQUEST"


def test_a19_broker_id_zero_is_a_valid_isr_member():
    s = S().up(0, 1, 2)
    s.create([0, 1, 2])
    p = part(run_events(s.events, finish=False))
    assert p.leader == 0
    assert validate_ap(p, 0, 100, 0, 0, "RECOVERED", ((0, 100), (1, 101))) is None
    assert validate_ap(p, 0, 100, 0, 0, "RECOVERED", ((1, 101),)) == "INVALID_REQUEST"


def recovering_partition():
    """t-0 after an unclean (designated) election of 3: RECOVERING, leader 3, ISR [3]."""
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    s.fence(3); s.fence(2); s.fence(1)
    s.unfence(3)
    s.unfence(2)
    s.elect("DESIGNATED", target=3)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"}, finish=False)
    p = part(out)
    assert (p.leader, p.isr, p.lrs) == (3, [3], "RECOVERING")
    return p


def test_a19_steps10_11_leader_recovery_state():
    p = recovering_partition()
    le, pe = p.leader_epoch, p.partition_epoch
    assert validate_ap(p, 3, 103, le, pe, "RECOVERING", ((3, 103),)) is None
    assert validate_ap(p, 3, 103, le, pe, "RECOVERING", ((3, 103), (2, 102))) == "INVALID_REQUEST"   # step 10
    assert validate_ap(p, 3, 103, le, pe, "RECOVERED", ((3, 103), (2, 102))) is None
    q = part(base())
    assert validate_ap(q, 1, 101, 0, 0, "RECOVERING", ((1, 101),)) == "INVALID_REQUEST"              # step 11
    assert validate_ap(q, 1, 101, 0, 0, "RECOVERING", ((1, 101), (2, 102))) == "INVALID_REQUEST"


def test_a19_step12_ineligible_replica():
    p = part(base(lambda s: s.fence(3)))                      # ISR [1, 2], partition epoch 1
    ok = ((1, 101), (2, 102))
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ok) is None
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ok + ((3, 103),)) == "INELIGIBLE_REPLICA"   # fenced
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ok + ((3, -1),)) == "INELIGIBLE_REPLICA"
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ((1, 101), (2, 999))) == "INELIGIBLE_REPLICA"  # epoch mismatch
    assert validate_ap(p, 1, 101, 0, 1, "RECOVERED", ((1, 999), (2, 102))) == "INELIGIBLE_REPLICA"  # the leader too
    q = part(base(lambda s: s.shutdown(2)))                   # 2 in controlled shutdown
    assert validate_ap(q, 1, 101, 0, q.partition_epoch, "RECOVERED", ((1, 101), (2, 102))) == "INELIGIBLE_REPLICA"


# ================================================================ A19/A20/B10 through events
def test_ineligible_replica_rolls_back_the_expansion():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    s.fetch(3)                               # leader 1 proposes to add 3 (explicit delivery: queued)
    s.fence(3)                               # 3 is not in the ISR: no partition change
    arrive = s.ap_arrive()
    resp = s.ap_response()
    out = run_events(s.events, EXPLICIT_AP)
    r = last(out, "alter_partition", seq=arrive)
    assert (r["phase"], r["error"], sorted(r["proposed_isr"])) == ("REJECTED", "INELIGIBLE_REPLICA", [1, 2, 3])
    b = last(out, "alter_partition", seq=resp)
    assert (b["phase"], b["error"], sorted(b["maximal_isr"])) == ("ROLLED_BACK", "INELIGIBLE_REPLICA", [1, 2])  # B10
    rep = part(out).reps[1]
    assert rep.pending is None and sorted(rep.maximal_isr) == [1, 2]


def test_invalid_update_version_keeps_the_leader_pending():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    s.sync(1)                                # the leader applies partition epoch 1 and sees 3 unfenced
    s.sync(3)
    s.fetch(3)                               # proposal with partition epoch 1
    s.fence(2)                               # partition epoch 2, leader epoch unchanged (not yet applied)
    arrive = s.ap_arrive()
    resp = s.ap_response()
    s.fetch(3)                               # still pending: no new proposal
    out = run_events(s.events, dict(EXPLICIT_AP, **{"delivery.metadata": "explicit"}))
    r = last(out, "alter_partition", seq=arrive)
    assert (r["phase"], r["error"]) == ("REJECTED", "INVALID_UPDATE_VERSION")
    b = last(out, "alter_partition", seq=resp)
    assert (b["phase"], b["error"]) == ("IGNORED", "INVALID_UPDATE_VERSION")
    assert part(out).reps[1].pending is not None
    assert not rows(out, "alter_partition", seq=resp + 1, phase="PROPOSED")


def test_new_leader_elected_when_the_isr_completes_a_reassignment_away_from_the_leader():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    s.reassign([4, 2, 3])                    # adding [4], removing [1]
    s.fetch(4)                               # leader 1 adds 4 -> completes, 1 removed, leader re-elected
    out = run_events(s.events)
    r = last(out, "alter_partition", phase="ACCEPTED")
    assert r["error"] == "NEW_LEADER_ELECTED"                                     # A20
    m = last(out, "metadata_log", cause="AlterPartition")
    assert (m["replicas"], m["leader"], m["adding"], m["removing"]) == ([4, 2, 3], 4, [], [])
    assert sorted(m["isr"]) == [2, 3, 4] and m["leader_epoch"] == 1


# ================================================================ A22 reassignment completion
def test_reassignment_not_complete_while_an_adding_replica_is_outside_the_isr():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    seq = s.reassign([1, 2, 4])
    out = run_events(s.events)
    m = last(out, "metadata_log", seq=seq)
    assert (m["replicas"], m["isr"], m["adding"], m["removing"]) == ([1, 2, 4, 3], [1, 2, 3], [4], [3])
    assert m["leader_epoch"] == 0                                   # nothing removed yet: no bump
    assert out["partition_state"][0]["replicas"] == [1, 2, 4, 3]


def test_reassignment_that_only_removes_completes_at_once():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.reassign([1, 2])
    out = run_events(s.events)
    m = last(out, "metadata_log", seq=seq)
    assert (m["replicas"], m["isr"], m["adding"], m["removing"]) == ([1, 2], [1, 2], [], [])
    assert (m["leader"], m["leader_epoch"], m["partition_epoch"]) == (1, 1, 1)      # A10a bump, leader kept
    # the removed broker applies the registration: it stops its replica and deletes the log
    assert sorted(part(out).reps) == [1, 2]
    assert sorted(x["broker"] for x in out["partition_state"][0]["replica_states"]) == [1, 2]


def test_reassignment_to_replicas_outside_the_isr_waits():
    s = S().up(1, 2, 3, 4, 5)
    s.create([1, 2, 3])
    s.fence(2); s.fence(3)
    seq = s.reassign([4, 5])                # removing [1, 2, 3]: new ISR would be empty
    out = run_events(s.events)
    m = last(out, "metadata_log", seq=seq)
    assert (m["replicas"], m["adding"], m["removing"]) == ([4, 5, 1, 2, 3], [4, 5], [1, 2, 3])
    assert m["leader"] == 1


def test_pure_reorder_is_not_a_reassignment():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.reassign([3, 2, 1])
    out = run_events(s.events)
    m = last(out, "metadata_log", seq=seq)
    assert (m["replicas"], m["adding"], m["removing"], m["leader"], m["leader_epoch"]) == ([3, 2, 1], [], [], 1, 0)


# ================================================================ periodic unclean election (A21)
def leaderless(extra_cfg=None):
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(1000).fence(2)
    s.fence(3)
    s.fence(1)                               # ELR off: ISR stays [1], leader -1
    s.at(2000).unfence(3)                    # 3 is not in the ISR: no clean candidate
    return s


def test_periodic_unclean_election_fires_at_the_interval():
    s = leaderless()
    s.at(299_999).tick()
    s.at(300_500).tick()
    cfg = {"eligible.leader.replicas.enable": "false", "unclean.leader.election.enable": "true"}
    out = run_events(s.events, cfg)
    e = [r for r in out["elections"] if r["new_leader"] == 3]
    assert len(e) == 1 and e[0]["election"] == "UNCLEAN"
    # with unclean election enabled the unfence itself elects (A15 uses the topic's election type)
    assert e[0]["ts_ms"] == 2000


def test_periodic_unclean_election_after_enabling_it_by_config():
    s = leaderless()
    s.at(10_000).alter_config(unclean_leader_election_enable="true")
    s.at(400_000).tick()
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    e = [r for r in out["elections"] if r["new_leader"] == 3]
    assert len(e) == 1 and e[0]["election"] == "UNCLEAN"
    assert e[0]["ts_ms"] == 300_000                         # the periodic task's time, not the next event's
    m = last(out, "metadata_log", leader=3)
    assert (m["isr"], m["leader_recovery_state"]) == ([3], "RECOVERING")


def test_any_brokers_unfence_elects_every_leaderless_partition_it_can():
    """A15, RCM#handleBrokerUnfenced: generateLeaderAndIsrUpdates over
    brokersToIsrs.partitionsWithNoLeader(), every leaderless partition, with the topic's election
    type. t-0 [1,2,3] is leaderless (ISR [1]) while its replica 3 is up again; its topic then
    allows unclean election. Broker 4, a replica of no partition, is unfenced: t-0 elects 3 right
    then (not at the periodic task, 300 s later). u-0 [1,2], leaderless with both replicas down,
    cannot elect anyone: it is not visited (no row; its state row keeps its last event's seq). The
    same through the Spark bucket's path: every partition cold (decoded from its blob) at each row."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    u = S("u", 0)
    u.events = s.events
    u.create([1, 2])
    v = S("v", 0)                            # as t-0, but its topic never allows unclean election
    v.events = s.events
    v.create([1, 2, 3])
    s.at(1000).fence(2)
    s.fence(3)
    last_u = s.fence(1)                      # ELR off: all leaderless, ISR [1]
    last_v = s.at(2000).unfence(3)           # 3 is not in t-0's (or v-0's) ISR: no clean candidate
    s.register(4)
    s.at(10_000).alter_config(unclean_leader_election_enable="true")
    unfence4 = s.at(20_000).unfence(4)
    cfg = {"eligible.leader.replicas.enable": "false"}
    for roundtrip in (0, 1):
        out = run_events(s.events, cfg, roundtrip_every=roundtrip)
        m = last(out, "metadata_log", topic="t", seq=unfence4)
        assert (m["leader"], m["isr"], m["leader_recovery_state"]) == (3, [3], "RECOVERING")
        e = last(out, "elections", topic="t", seq=unfence4)
        assert (e["election"], e["new_leader"], e["ts_ms"]) == ("UNCLEAN", 3, 20_000)
        # u-0 has no live replica; v-0 has one (3) that no election of its topic may take: neither
        # is visited (no row; each state row keeps the seq of the last row that reached it)
        for topic, seq in (("u", last_u), ("v", last_v)):
            assert not rows(out, "metadata_log", topic=topic, seq=unfence4)
            (st,) = [r for r in out["partition_state"] if r["topic"] == topic]
            assert (st["leader"], st["seq"]) == (-1, seq), topic
    # in a bucket, only the leaderless partitions with an acceptable replica are decoded for it:
    # u-0 stays in its columns (its hosts, read there, are all fenced); v-0 is decoded (3 is up)
    # and left as it was
    from protocol.codec import decode_cluster, encode_cluster
    from protocol.config import EngineConfig
    from schemas.events import validate
    before = run_events(s.events[:-1], cfg, finish=False)["_cluster"]
    bucket = decode_cluster(encode_cluster(before), EngineConfig(cfg))
    bucket.apply(validate(s.events[-1])[0])
    assert set(bucket.partitions) == {("t", 0), ("v", 0)} and bucket.partitions[("t", 0)].leader == 3
    assert bucket.partitions[("v", 0)].leader == -1 and ("v", 0) not in bucket.touched


def test_periodic_unclean_election_fires_on_an_event_exactly_at_its_time():
    """An event at exactly the periodic task's time runs it (a timer due at or before the event's
    time fires before it): the task is not skipped to the next multiple, and not lost when no
    event comes after."""
    s = leaderless()
    s.at(10_000).alter_config(unclean_leader_election_enable="true")
    s.at(300_000).tick()
    s.at(400_000).tick()
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    e = [r for r in out["elections"] if r["new_leader"] == 3]
    assert [(r["election"], r["ts_ms"]) for r in e] == [("UNCLEAN", 300_000)]


def test_no_unclean_election_when_disabled():
    s = leaderless()
    s.at(700_000).tick()
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    assert not [r for r in out["elections"] if r["new_leader"] == 3]
    assert part(out).leader == -1


# ================================================================ end-of-replay timers on idle partitions
def test_idle_partition_timers_fire_at_the_end_of_the_replay():
    """t-0 goes leaderless, then only t-1 has events; the periodic unclean election of t-0 still
    fires at 300000 because the stream's time passes it (SPEC §4: replay ends with every timer <= last ts_ms)."""
    s = leaderless()
    s.at(10_000).alter_config(unclean_leader_election_enable="true")
    other = S("t", 1)
    other.events = s.events
    other.at(20_000).create([1, 3])
    other.at(650_000).produce(1, 1, acks=1)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    e = [r for r in out["elections"] if r["partition"] == 0 and r["new_leader"] == 3]
    assert [r["ts_ms"] for r in e] == [300_000]
    out2 = run_events(s.events, {"eligible.leader.replicas.enable": "false"}, finish=False)
    assert not [r for r in out2["elections"] if r["partition"] == 0 and r["new_leader"] == 3]


def test_timer_after_the_last_event_time_does_not_fire():
    s = leaderless()
    s.at(10_000).alter_config(unclean_leader_election_enable="true")
    s.at(299_999).tick()
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    assert not [r for r in out["elections"] if r["new_leader"] == 3]


# ================================================================ KIP-966 unclean recovery strategies
def lost_all(strategy, **extra):
    """ISR [1,2,3] -> everyone fenced, 1 and 2 restart uncleanly, 2 has the longer log."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 4, acks=1)
    s.fetch(2)
    s.fetch(3)
    s.fence(3); s.fence(2); s.fence(1)
    s.crash(1); s.crash(2)
    s.loss(1, 1)
    s.restart(1, clean=False)
    s.restart(2, clean=False)
    u1 = s.unfence(1)
    u2 = s.unfence(2)
    cfg = {"min.insync.replicas": "2", "unclean.recovery.manager.enabled": "true",
           "unclean.recovery.strategy": strategy}
    cfg.update(extra)
    return run_events(s.events, cfg), u1, u2


def test_recovery_strategy_aggressive_elects_the_longest_live_log_at_once():
    out, u1, u2 = lost_all("Aggressive")
    e = last(out, "elections", seq=u1)
    assert (e["new_leader"], e["election"]) == (1, "UNCLEAN")          # only 1 is acceptable at u1


def test_recovery_strategy_none_never_elects_uncleanly():
    out, u1, u2 = lost_all("None")
    assert not [r for r in out.get("elections", []) if r["seq"] in (u1, u2) and r["new_leader"] != -1]
    assert part(out).leader == -1


def test_recovery_strategy_aliases():
    a, *_ = lost_all("proactive")
    b, *_ = lost_all("Aggressive")
    assert [r["new_leader"] for r in a["elections"]] == [r["new_leader"] for r in b["elections"]]
    c, *_ = lost_all("manual")
    assert part(c).leader == -1


# ================================================================ admin requests (A2, A21, A22)
def admin_results(out):
    return {r["seq"]: r["result"] for r in out.get("admin", []) if r["type"] != "BrokerRegister"}


def test_create_partition_refusals():
    s = S().up(1, 2)
    s.register(3)
    ok = s.create([1, 2])
    again = s.create([2, 1])
    unreg = s._p(type="CreatePartition", partition=2, replicas=[1, 9])
    fenced_only = s._p(type="CreatePartition", partition=3, replicas=[3])
    badcfg = s._p(type="CreatePartition", partition=4, replicas=[1], config={"min.insync.replicas": "0"})
    out = run_events(s.events)
    got = admin_results(out)
    assert got[ok] == "NONE" and got[again] == "TOPIC_ALREADY_EXISTS"
    assert got[unreg] == got[fenced_only] == "INVALID_REPLICA_ASSIGNMENT"
    assert got[badcfg] == "INVALID_CONFIG"
    assert sorted(out["_cluster"].partitions) == [("t", 0)]


def test_reassign_refusals_and_cancel():
    s = S().up(1, 2, 3, 4)
    s.register(5)                                # registered (fenced) brokers are valid targets
    s.create([1, 2, 3])
    unreg = s.reassign([1, 2, 9])                # (empty or duplicate lists are refused as malformed rows)
    go = s.reassign([1, 2, 5])                   # 5 fenced: cannot catch up, stays in progress
    cancel = s.reassign(None)
    cancel2 = s.reassign(None)
    out = run_events(s.events)
    got = admin_results(out)
    assert got[unreg] == "INVALID_REPLICA_ASSIGNMENT"
    assert (got[go], got[cancel], got[cancel2]) == ("NONE", "NONE", "NO_REASSIGNMENT_IN_PROGRESS")
    m = last(out, "metadata_log", seq=go)
    assert (m["replicas"], m["adding"], m["removing"]) == ([1, 2, 5, 3], [5], [3])
    m = last(out, "metadata_log", seq=cancel)
    assert (m["replicas"], m["isr"], m["adding"], m["removing"], m["leader"]) == ([1, 2, 3], [1, 2, 3], [], [], 1)


def test_cancel_that_would_need_an_unclean_election():
    def sched():
        s = S().up(1, 2, 3, 4)
        s.create([1, 2, 3])
        s.reassign([4, 1, 2, 3])                 # adding [4]
        s.fetch(4)
        s.fetch(4)                               # 4 joins the ISR; completes: replicas [4, 1, 2, 3]
        return s
    s = sched()
    out = run_events(s.events)
    assert out["partition_state"][0]["adding"] == []   # completed, nothing to cancel
    # a reassignment where only the adding replica is left in the ISR
    s = S().up(1, 2, 3)
    s.create([1])
    s.reassign([2])                              # adding [2], removing [1]; 2 not in the ISR yet
    s.fence(1)                                   # ELR off: ISR stays [1], leader -1
    c = s.reassign(None)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    assert admin_results(out)[c] == "NONE"       # reverting keeps 1 in the ISR: clean
    assert last(out, "metadata_log", seq=c)["replicas"] == [1]


def test_elect_leaders_results():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(1)                                   # leader 2; 1 out of the ISR
    pref_na = s.elect("PREFERRED")               # 1 is fenced and not in the ISR
    uncl_nn = s.elect("UNCLEAN")                 # there is a leader
    des_nn = s.elect("DESIGNATED", target=3)     # there is a leader
    s.fence(2); s.fence(3)                       # leaderless
    des_bad = s.elect("DESIGNATED", target=7)
    des_fenced = s.elect("DESIGNATED", target=1)
    uncl_none = s.elect("UNCLEAN")               # nobody acceptable
    s.unfence(1)
    uncl = s.elect("UNCLEAN")                    # honoured although the topic disables unclean election
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    got = admin_results(out)
    assert got[pref_na] == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert got[uncl_nn] == got[des_nn] == "ELECTION_NOT_NEEDED"
    assert got[des_bad] == "INVALID_REQUEST"
    assert got[des_fenced] == got[uncl_none] == "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    assert got[uncl] == "NONE"
    e = last(out, "elections", seq=uncl)
    assert (e["new_leader"], e["election"]) == (1, "UNCLEAN")
    m = last(out, "metadata_log", seq=uncl)
    assert (m["isr"], m["leader_recovery_state"]) == ([1], "RECOVERING")


def test_partition_record_and_replica_snapshot_start_a_replay_mid_life():
    s = S().up(1, 2, 3)
    s._p(type="PartitionRecord", replicas=[1, 2, 3], isr=[1, 2], elr=[], last_known_elr=[], leader=1,
         leader_epoch=4, partition_epoch=9, leader_recovery_state="RECOVERED")
    # the follower first (its local HWM may lag), then the leader: checks run after every event
    s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={2: 0, 4: 10}, log_end_offset=12, hwm=0)
    s._p(type="ReplicaSnapshot", broker=1, epoch_start_offsets={2: 0, 4: 10}, log_end_offset=15, hwm=12)
    fence = s.fence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    p = part(out)
    assert (p.leader_epoch, p.partition_epoch) == (4, 10)
    m = last(out, "metadata_log", seq=fence)
    assert (m["isr"], m["elr"], m["leader"], m["leader_epoch"]) == ([1], [2], 1, 4)
    assert p.reps[1].log.cache == [(2, 0), (4, 10)] and p.reps[1].log.leo == 15
    assert p.inv.committed_end == 12
    assert not out.get("violations")


def test_partition_record_carries_the_last_known_elr_into_the_next_election():
    """A recorded leaderless registration with last_known_elr [2] (KIP-966): the replay takes it as
    given, so when broker 2 is back the controller elects it as the last known leader (A7), and the
    new leader clears it (A12)."""
    s = S().up(1, 2, 3)
    s.fence(2)
    s._p(type="PartitionRecord", replicas=[1, 2, 3], isr=[], elr=[], last_known_elr=[2], leader=-1,
         leader_epoch=4, partition_epoch=9, leader_recovery_state="RECOVERED")
    unfence = s.unfence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    p = part(out)
    e = last(out, "elections", seq=unfence)
    assert (e["new_leader"], e["election"]) == (2, "LAST_KNOWN_ELR")
    m = last(out, "metadata_log", seq=unfence)
    assert (m["leader"], m["isr"], m["last_known_elr"], m["leader_epoch"]) == (2, [2], [], 5)
    assert (p.leader, p.lke) == (2, [])


# ================================================================ A13 recovery state, SPEC §3 idx
def test_recovering_returns_to_recovered_through_the_leaders_alter_partition():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3); s.fence(2); s.fence(1)
    s.unfence(2)
    s.elect("DESIGNATED", target=2)                   # unclean: RECOVERING, ISR [2]
    s.unfence(3)
    exp = s.fetch(3)                                  # leader 2 adds 3 and sends RECOVERED (B11)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    m = last(out, "metadata_log", seq=exp)
    assert (sorted(m["isr"]), m["leader_recovery_state"]) == ([2, 3], "RECOVERED")
    assert m["leader_epoch"] == last(out, "metadata_log", cause="ElectLeaders")["leader_epoch"]


def test_rows_of_one_event_are_numbered_in_order():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    exp = s.fetch(3)                                  # PROPOSED, ACCEPTED, metadata_log, APPLIED
    out = run_events(s.events)
    mine = sorted((r["idx"], t) for t, rs in out.items() if not t.startswith("_") and t != "partition_state"
                  for r in rs if r.get("seq") == exp and r.get("partition") == 0)
    assert [i for i, _ in mine] == list(range(len(mine))) and len(mine) == 4
    assert [t for _, t in mine] == ["alter_partition", "alter_partition", "metadata_log", "alter_partition"]


# ================================================================ A12 lastKnownElr with broker 0
def test_last_known_leader_recorded_and_cleared_when_broker_zero_is_elected():
    s = S().up(0, 1, 2)
    s.create([1, 0, 2])                               # leader 1
    s.fence(2)
    s.fence(0)                                        # ISR [1] < 2: ELR [0]
    empty = s.fence(1)                                # ISR [] : ELR [0, 1], LKE [1] (the leader before)
    elect = s.unfence(0)                              # ELR member 0 elected: LKE cleared
    again = s.fence(0)                                # ISR [] again: LKE [0]
    out = run_events(s.events, {"min.insync.replicas": "2"})
    m = last(out, "metadata_log", seq=empty)
    assert (m["isr"], m["elr"], m["leader"], m["last_known_elr"]) == ([], [0, 1], -1, [1])
    m = last(out, "metadata_log", seq=elect)
    assert (m["isr"], m["elr"], m["leader"], m["last_known_elr"]) == ([0], [1], 0, [])
    assert last(out, "elections", seq=elect)["election"] == "ELR"
    m = last(out, "metadata_log", seq=again)
    assert (m["isr"], sorted(m["elr"]), m["leader"], m["last_known_elr"]) == ([], [0, 1], -1, [0])


def test_unclean_elect_leaders_uses_the_aggressive_strategy_whatever_the_configured_one():
    """KIP-966 recovery: an ElectLeaders UNCLEAN request (or the topic's unclean.leader.election.enable)
    means Aggressive; the configured strategy (here None) applies to the controller's own elections."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 4, acks=1)
    s.fetch(2)
    s.fetch(3)
    s.fence(3); s.fence(2); s.fence(1)
    s.crash(1); s.crash(2)
    s.loss(1, 1)
    s.restart(1, clean=False)
    s.restart(2, clean=False)                         # both left the ELR
    s.unfence(1)
    s.unfence(2)
    e = s.elect("UNCLEAN")
    out = run_events(s.events, {"min.insync.replicas": "2", "unclean.recovery.manager.enabled": "true",
                                "unclean.recovery.strategy": "None"})
    assert not [r for r in out["elections"] if r["seq"] < e and r["new_leader"] != -1 and r["seq"] > 8]
    r = last(out, "elections", seq=e)
    assert (r["new_leader"], r["election"]) == (2, "UNCLEAN")          # 2 has the longest log (4 vs 1)
    m = last(out, "metadata_log", seq=e)
    assert (m["isr"], m["leader_recovery_state"]) == ([2], "RECOVERING")


def test_a22_a_reassignment_during_another_keeps_the_replicas_being_added():
    """A22 #changePartitionReassignment sets the builder's removing and adding only when non-empty
    (and the replicas only when they change): the current replicas of a running reassignment include
    its adding ones, so a second reassignment that drops one of them marks it removing and keeps it
    adding, and the cancel afterwards takes it out of the replicas."""
    s = S().up(1, 3)
    s.register(2)
    s.create([1, 2])                             # ISR [1]: 2 is fenced
    s.unfence(2)                                 # 2 unfenced, not yet in the ISR
    first = s.reassign([1, 2, 3])                # adding [3]
    second = s.reassign([1, 2])                  # removing [3], adding still [3]
    cancel = s.reassign(None)
    out = run_events(s.events)
    assert admin_results(out)[second] == "NONE"
    m = last(out, "metadata_log", seq=first)
    assert (m["replicas"], m["adding"], m["removing"]) == ([1, 2, 3], [3], [])
    m = last(out, "metadata_log", seq=second)
    assert (m["replicas"], m["adding"], m["removing"]) == ([1, 2, 3], [3], [3])
    m = last(out, "metadata_log", seq=cancel)
    assert (m["replicas"], m["isr"], m["adding"], m["removing"]) == ([1, 2], [1], [], [])


def test_a22_a_reassignment_to_the_current_replicas_changes_nothing():
    """A22: reassigning to the replicas a running reassignment already lists sets no target: no
    record, the reassignment goes on (the replica being added is not dropped before it caught up)."""
    s = S().up(1, 3)
    s.register(2)
    s.create([1, 2])
    s.unfence(2)
    s.reassign([1, 2, 3])
    again = s.reassign([1, 2, 3])
    out = run_events(s.events)
    assert admin_results(out)[again] == "NONE"
    assert not rows(out, "metadata_log", seq=again)
    p = part(out)
    assert (p.replicas, p.adding, p.removing) == ([1, 2, 3], [3], [])
