"""protocol/cluster.py routing with hand-written expectations: PartitionRecord / ReplicaSnapshot
validation and epoch boundaries, the bucketed layout's ownership filter, the next-timer query of
the Spark engine, and the controller's broker-session expiry boundary (Kafka 4.4.0
BrokerHeartbeatTracker#isExpired: expired once now > last contact + broker.session.timeout.ms)."""
from protocol.cluster import Broker, Cluster
from protocol.config import EngineConfig
from schemas.events import validate
from tests.engine_util import rows, run_events
from tests.streams import S


def precord(s, **kw):
    row = dict(type="PartitionRecord", replicas=[1, 2, 3], isr=[1, 2], elr=[], last_known_elr=[], leader=1,
               leader_epoch=4, partition_epoch=9, leader_recovery_state="RECOVERED")
    row.update(kw)
    return s._p(**row)


# ---------------------------------------------------------------- PartitionRecord
def test_partition_record_refusals():
    s = S().up(1, 2, 3)
    isr_out = precord(s, isr=[1, 4])
    elr_out = precord(s, isr=[1], elr=[5])
    leader_out = precord(s, leader=6)
    ok = precord(s)
    same_pe = precord(s, partition_epoch=9, leader_epoch=5)       # partition epoch not after 9
    lower_le = precord(s, partition_epoch=10, leader_epoch=3)     # leader epoch going back
    next_ok = precord(s, partition_epoch=10, leader_epoch=4, isr=[1, 2, 3])   # same leader epoch is fine
    out = run_events(s.events)
    # (malformed rows may be refused by the row validator or by the core: either way, rejected)
    assert len(out["rejected"]) == 5
    text = " ".join(r["reason"] for r in out["rejected"])
    assert "epoch going backwards" in text
    assert {r["idx"] for r in out["rejected"]} == {0}              # a rejected row is its event's only row
    assert {isr_out, elr_out, leader_out, same_pe, lower_le}.isdisjoint(
        r["seq"] for r in out["metadata_log"])
    p = out["_cluster"].partitions[("t", 0)]
    assert (p.leader_epoch, p.partition_epoch, p.isr) == (4, 10, [1, 2, 3])
    assert [r["seq"] for r in rows(out, "metadata_log", cause="PartitionRecord")] == [ok, next_ok]


def test_leaderless_partition_record_is_accepted():
    s = S().up(1, 2, 3)
    seq = precord(s, leader=-1, isr=[1])
    out = run_events(s.events)
    assert not out.get("rejected")
    assert rows(out, "metadata_log", seq=seq)[0]["leader"] == -1


def test_partition_record_whose_elr_is_every_replica_is_accepted():
    """A leaderless partition whose every replica is in the ELR (the ISR emptied below min ISR, KIP-966):
    the ELR may equal the replica set, it need only be a subset of it."""
    s = S().up(1, 2, 3)
    seq = precord(s, leader=-1, isr=[], elr=[1, 2, 3], last_known_elr=[])
    out = run_events(s.events, {"eligible.leader.replicas.enable": "true"})
    assert not out.get("rejected")
    r = rows(out, "metadata_log", seq=seq)[0]
    assert (r["leader"], r["isr"], r["elr"]) == (-1, [], [1, 2, 3])


def test_a_broker_applying_a_registration_that_names_it_is_indexed_as_its_host():
    """Cluster.by_broker routes a broker's rows to the partitions it hosts (replicas and local
    replicas): a broker that gets a local replica by applying a registration naming it (here an older
    one than the partition's current, which no longer names it) is indexed at once."""
    from protocol.broker.metadata_cache import apply_metadata
    from protocol.messages import RegistrationSnapshot
    cl = Cluster(EngineConfig({}))
    s = S().up(1, 2, 3)
    s.create([1, 2])
    for raw in s.events:
        cl.apply(validate(raw)[0])
    p = cl.partitions[("t", 0)]
    assert 3 not in p.indexed and ("t", 0) not in cl.by_broker[3]
    apply_metadata(p, 3, RegistrationSnapshot(1, 0, 0, (1, 2, 3), (1, 2, 3), (), (), "RECOVERED"), 1)
    assert 3 in p.reps and 3 in p.indexed and ("t", 0) in cl.by_broker[3]


def test_partition_record_keeps_its_leader_recovery_state():
    """A recorded registration is taken as written: RECOVERING stays RECOVERING (an unclean election's
    leader not yet recovered), and a row without the column means RECOVERED (PartitionRecord's default)."""
    s = S().up(1, 2, 3)
    rec = precord(s, isr=[1], leader_recovery_state="RECOVERING")
    s2 = S().up(1, 2, 3)
    row = dict(type="PartitionRecord", replicas=[1, 2, 3], isr=[1, 2], leader=1, leader_epoch=4, partition_epoch=9)
    plain = s2._p(**row)
    out, out2 = run_events(s.events), run_events(s2.events)
    assert rows(out, "metadata_log", seq=rec)[0]["leader_recovery_state"] == "RECOVERING"
    assert out["_cluster"].partitions[("t", 0)].lrs == "RECOVERING"
    assert rows(out2, "metadata_log", seq=plain)[0]["leader_recovery_state"] == "RECOVERED"


def test_replica_snapshot_refusals():
    s = S().up(1, 2, 3, 4)
    precord(s)
    not_replica = s._p(type="ReplicaSnapshot", broker=4, epoch_start_offsets={0: 0}, log_end_offset=5, hwm=0)
    decreasing = s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={1: 5, 2: 3}, log_end_offset=9, hwm=0)
    beyond = s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={1: 0, 2: 10}, log_end_offset=9, hwm=0)
    hwm_beyond = s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={1: 0}, log_end_offset=9, hwm=10)
    at_leo = s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={1: 0, 2: 9}, log_end_offset=9, hwm=9)
    equal_starts = s._p(type="ReplicaSnapshot", broker=3, epoch_start_offsets={1: 4, 2: 4}, log_end_offset=9, hwm=0)
    out = run_events(s.events)
    assert len(out["rejected"]) == 4
    assert {not_replica, decreasing, beyond, hwm_beyond, at_leo, equal_starts}
    p = out["_cluster"].partitions[("t", 0)]
    assert 4 not in p.reps
    assert (p.reps[3].log.leo, p.reps[3].log.cache) == (9, [(1, 4), (2, 4)])
    assert (p.reps[2].log.leo, p.reps[2].log.hwm, p.reps[2].log.cache) == (9, 9, [(1, 0), (2, 9)])


def test_leader_snapshot_sets_leso_from_its_epoch():
    s = S().up(1, 2, 3)
    precord(s)
    s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={2: 0, 4: 6}, log_end_offset=8, hwm=0)
    s._p(type="ReplicaSnapshot", broker=1, epoch_start_offsets={2: 0, 4: 6}, log_end_offset=8, hwm=8)
    lo = s.list_offsets(1, "LATEST")
    out = run_events(s.events)
    rep = out["_cluster"].partitions[("t", 0)].reps[1]
    assert rep.leso == 6 and rep.log.cache == [(2, 0), (4, 6)]
    assert rows(out, "consumer", seq=lo)[0]["offset"] == 8


# ---------------------------------------------------------------- the bucketed layout
def test_partition_scoped_config_is_skipped_by_a_bucket_that_does_not_own_it():
    s = S().up(1, 2)
    s.create([1, 2])
    s.alter_config(partition=0, min_insync_replicas=2)
    s.alter_config(min_insync_replicas=2)                       # topic-wide: every bucket
    other = Cluster(EngineConfig({}), emit_global=False, owns=lambda key: False)
    owner = Cluster(EngineConfig({}), emit_global=False, owns=lambda key: True)
    for raw in s.events:
        ev, _ = validate(raw)
        other.apply(ev)
        owner.apply(ev)
    assert (other.applied, other.rejected) == (0, 0)            # nothing scoped to it, globals not counted
    assert not [r for r in other.drain().get("admin", []) if r["type"] == "AlterConfig"]
    assert (owner.applied, owner.rejected) == (2, 0)            # create + partition config (topic-wide: global)
    assert other.last_seq == owner.last_seq == len(s.events)
    assert owner.partitions[("t", 0)].conf.min_isr == 2


# ---------------------------------------------------------------- next_due (the Spark engine's timeout)
def test_next_due_is_the_earliest_partition_or_session_timer():
    cfg = EngineConfig({"broker.session.timeout.ms": "9000", "auto.leader.rebalance.enable": "false",
                        "isr.expiration.interval.ms": "0"})
    cl = Cluster(cfg)
    s = S().up(1, 2)
    s.create([1, 2])
    for raw in s.events:
        cl.apply(validate(raw)[0])
    assert cl.next_due() is None                                # in sync, nothing pending
    s.at(100).crash(2, clean=False)
    cl.apply(validate(s.events[-1])[0])
    assert cl.next_due() == 100 + 9000 + 1                      # the session expiry
    s.at(200).produce(1, 1, acks=-1)                            # request.timeout.ms 30000 -> 30200
    cl.apply(validate(s.events[-1])[0])
    assert cl.next_due() == 9101
    s.at(9101).tick()
    cl.apply(validate(s.events[-1])[0])                         # expired: 2 fenced, the produce completes
    assert cl.next_due() is None


def test_next_due_skips_a_periodic_timer_that_fired_at_the_time_reached():
    """A periodic task fires once per multiple of its interval: once timers have run through a
    multiple (a leaderless partition's unclean election at 3000 found no live replica), the next
    due is the next multiple, not the one just fired (a Spark bucket would otherwise be woken at
    once, forever)."""
    cfg = EngineConfig({"unclean.leader.election.enable": "true", "unclean.leader.election.interval.ms": "1000",
                        "eligible.leader.replicas.enable": "false", "auto.leader.rebalance.enable": "false",
                        "isr.expiration.interval.ms": "0"})
    s = S().up(1, 2)
    s.create([1, 2])
    s.at(100).fence(2)
    s.fence(1)                             # leader -1, no replica unfenced: the election finds none
    cl = Cluster(cfg)
    for raw in s.events:
        cl.apply(validate(raw)[0])
    p = cl.partitions[("t", 0)]
    assert p.leader == -1
    assert cl.next_due() == 1000
    cl.finish(3000)
    assert p.leader == -1 and p.tdone == 3000
    assert cl.next_due() == 4000


def test_the_periodic_fast_path_bound_is_the_first_multiple_after_the_time_reached():
    """timers.set_t_next: p.t_next, below which an event runs no periodic task, is the first multiple
    of any periodic interval after the time timers have run to (a bound below it only costs the slow
    path; one above it would skip a check)."""
    cfg = EngineConfig({"isr.expiration.interval.ms": "5000", "leader.imbalance.check.interval.seconds": "7",
                        "unclean.leader.election.interval.ms": "6000"})
    s = S().up(1, 2)
    s.create([1, 2])
    cl = Cluster(cfg)
    for ts, want in ((12_345, 14_000), (15_000, 18_000), (20_999, 21_000), (21_000, 24_000), (24_000, 25_000)):
        s.at(ts).tick()
        for raw in s.events[-1:] if ts > 12_345 else s.events:
            cl.apply(validate(raw)[0])
        p = cl.partitions[("t", 0)]
        assert (p.tdone, p.t_next) == (ts, want)


def test_isr_expiration_is_due_the_first_ms_past_the_lag():
    """B8: a follower is out of sync once now - lastCaughtUpTime > replica.lag.time.max.ms, so the
    ISR-expiration timer is due at lastCaughtUp + lag + 1 (interval 1 ms: no rounding) -- the time a
    Spark bucket's state timeout is set from (next_due) -- and the shrink happens then, not a ms before."""
    cfg = EngineConfig({"replica.lag.time.max.ms": "500", "isr.expiration.interval.ms": "1",
                        "broker.session.timeout.ms": "0", "auto.leader.rebalance.enable": "false"})
    s = S().up(1, 2)
    s.at(1000).create([1, 2])             # follower 2 caught up as of the leader's start: 1000
    s.at(1100).produce(1, 1, acks=1)      # the leader's LEO moves past the follower's
    cl = Cluster(cfg)
    for raw in s.events:
        cl.apply(validate(raw)[0])
    assert cl.next_due() == 1000 + 500 + 1
    cl.finish(1500)
    assert cl.partitions[("t", 0)].isr == [1, 2]
    cl.finish(1501)
    out = cl.drain()
    assert [r["proposed_isr"] for r in out["alter_partition"] if r["phase"] == "PROPOSED"] == [[1]]
    assert cl.partitions[("t", 0)].isr == [1]


# ---------------------------------------------------------------- broker sessions (Kafka's expiry boundary)
def test_session_valid_until_exactly_the_timeout_after_the_last_contact():
    b = Broker(1)
    b.epoch = b.sess_epoch = 7
    b.registered, b.fenced = True, False
    b.sess_last = None
    assert b.session_valid(9000, 10**9)                         # still heartbeating
    b.sess_last = 100
    assert b.sess_expiry(9000) == 9101
    assert b.session_valid(9000, 9100)
    assert not b.session_valid(9000, 9101)
    b.sess_epoch = 6
    assert not b.session_valid(9000, 0)                         # the tracked session is another epoch
    assert b.sess_expiry(0) is None


def test_crashed_broker_is_fenced_at_the_session_expiry_not_before():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(100).crash(3, clean=False)
    before = s.at(9100).tick()
    at = s.at(9101).tick()
    out = run_events(s.events)
    assert [r["ts_ms"] for r in out["metadata_log"]] == [0, 9101]     # create, then the fence's ISR change
    fence = [r for r in out.get("admin", []) if r["type"] == "BrokerFence" and r["broker"] == 3]
    assert [r["ts_ms"] for r in fence] == [9101]
    m = [r for r in out["metadata_log"] if r["ts_ms"] == 9101]
    assert m and sorted(m[-1]["isr"]) == [1, 2]
    assert at > before
    # a timer's rows carry the seq of the partition's latest event before it (SPEC §3)
    assert out["metadata_log"][-1]["seq"] == before


def test_invalid_config_changes_are_answered_and_change_nothing():
    s = S().up(1, 2)
    s.create([1, 2])
    p_bad = s.alter_config(partition=0, min_insync_replicas=0)
    t_bad = s.alter_config(min_insync_replicas=0)
    p_ok = s.alter_config(partition=0, min_insync_replicas=2)
    out = run_events(s.events)
    got = {r["seq"]: r["result"] for r in out["admin"] if r["type"] == "AlterConfig"}
    assert got == {p_bad: "INVALID_CONFIG", t_bad: "INVALID_CONFIG", p_ok: "NONE"}
    assert out["_cluster"].partitions[("t", 0)].conf.min_isr == 2


def test_conflicting_snapshots_report_log_matching_not_leader_completeness():
    """The true HWM comes from the first snapshot that reaches it; a second replica with the same
    HWM but other records is a LogMatching violation, the leader (who has the first) is complete."""
    s = S().up(1, 2, 3)
    precord(s)
    s._p(type="ReplicaSnapshot", broker=1, epoch_start_offsets={2: 0}, log_end_offset=10, hwm=10)
    second = s._p(type="ReplicaSnapshot", broker=2, epoch_start_offsets={3: 0}, log_end_offset=10, hwm=10)
    out = run_events(s.events)
    v = [(r["seq"], r["invariant"]) for r in out["violations"]]
    assert (second, "LogMatching") in v
    assert not [x for x in v if x[1] in ("LeaderCompleteness", "HighWatermarkMonotonic")]


def test_finish_up_to_a_time_expires_sessions_due_by_then():
    """The Spark engine ends each batch with finish(watermark): a session expiring exactly at the
    watermark is expired then, one ms later it is not."""
    def cluster_after_crash():
        cl = Cluster(EngineConfig({}))
        s = S().up(1, 2, 3)
        s.create([1, 2, 3])
        s.at(100).crash(3, clean=False)
        for raw in s.events:
            cl.apply(validate(raw)[0])
        cl.drain()
        return cl
    cl = cluster_after_crash()
    cl.finish(9100)
    assert not cl.drain().get("metadata_log") and not cl.brokers[3].fenced
    cl.finish(9101)
    m = cl.drain()["metadata_log"]
    assert cl.brokers[3].fenced and [(r["ts_ms"], r["isr"]) for r in m] == [(9101, [1, 2])]


EXPLICIT_MD = {"delivery.metadata": "explicit"}


def test_explicit_metadata_views_survive_pruning_of_the_registration_log():
    s = S().up(1, 2, 3)
    s.sync(1); s.sync(2); s.sync(3)                # everyone saw every registration: the log is pruned
    s.create([1, 2, 3])
    s.sync(1); s.sync(2); s.sync(3)                # again, on an empty log
    s.fence(3)
    s.unfence(3)
    s.sync(1)                                      # the leader sees 3 unfenced again ...
    s.sync(3)
    exp = s.fetch(3)                               # ... so 3 rejoins the ISR
    out = run_events(s.events, EXPLICIT_MD)
    assert not out.get("rejected")
    assert sorted(rows(out, "alter_partition", seq=exp, phase="PROPOSED")[0]["proposed_isr"]) == [1, 2, 3]
    cl = out["_cluster"]
    assert cl.reg_log == [] or all(r[0] > 0 for r in cl.reg_log)


def test_leader_restarting_without_a_crash_row_answers_its_parked_produce():
    """Explicit metadata: broker 1 still believes it leads when its new process registers (no
    BrokerCrash row, sessions not modelled); its parked acks=all request is answered
    NETWORK_EXCEPTION at the registration (README: the client's view of a restarted broker)."""
    s = S().up(1, 2)
    s.sync(1); s.sync(2)
    s.create([1, 2])
    s.sync(1); s.sync(2)
    p = s.produce(1, 2, acks=-1)                   # waits for 2
    s.fence(1)                                     # the controller moves leadership; 1 does not know yet
    reg = s.restart(1, clean=False)
    out = run_events(s.events, dict(EXPLICIT_MD, **{"broker.session.timeout.ms": "0"}))
    r = rows(out, "produce", seq=p)
    assert [(x["result"], x["result_seq"]) for x in r] == [("NETWORK_EXCEPTION", reg)]


def test_pruning_keeps_registration_changes_a_broker_has_not_seen():
    s = S().up(1, 2, 3)
    s.sync(1); s.sync(2); s.sync(3)
    s.fence(3)                                     # seen by 2 and 3 below, not yet by 1
    s.sync(2); s.sync(3)
    s.unfence(3)                                   # seen by nobody yet
    s.sync(1)                                      # 1 catches up: the fence is now seen by all -> pruned
    s.sync(2)                                      # 2 must still get the unfence
    out = run_events(s.events, EXPLICIT_MD)
    cl = out["_cluster"]
    epoch, fenced, in_cs, registered = cl.views[2][3]
    assert (epoch, fenced, registered) == (103, False, True)
    assert cl.views[1][3][1] is False
    assert [r[1] for r in cl.reg_log] == [3]       # only the unfence is still needed (by 3)


def test_a_session_expiry_older_than_every_logged_change_goes_first_in_the_registration_log():
    """A session-timeout fence is logged with the seq of the row that last touched the session
    (broker 3's crash), which can be older than every change still in the registration log. The
    log stays in seq order - pruning takes entries from its front while they are <= the lowest
    seq every broker has seen - so the expiry goes in at index 0, and syncs up to a seq between
    the two apply exactly the older one."""
    s = S().up(1, 2, 3)
    s.sync(1); s.sync(2); s.sync(3)                # every registration seen: the log is pruned empty
    s.create([1, 2, 3])
    crash = s.at(100).crash(3, clean=False)         # 3's session runs out 9,000 ms later, seq `crash`
    s.fence(2)                                      # a newer change, logged before the expiry fires
    s.at(9200).sync(1, up_to=crash)                 # the expiry is due at this row: 3 fenced at seq `crash`
    s.sync(2, up_to=crash)
    out = run_events(s.events, EXPLICIT_MD)
    cl = out["_cluster"]
    assert cl.brokers[3].fenced and cl.brokers[2].fenced
    assert [(e.seq, e.broker) for e in cl.reg_log] == [(crash, 3), (crash + 1, 2)]
    # 1 and 2 synced up to the crash: they see 3 fenced, 2 still unfenced
    for b in (1, 2):
        assert cl.views[b][3][1] is True and cl.views[b][2][1] is False


def test_partition_state_rows_by_hand():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 4, acks=1)
    s.fetch_round(2, times=2)                       # HW stays 0: 3 is in the maximal ISR with LEO 0
    s.crash(3, clean=False)
    out = run_events(s.events, {"delivery.alter_partition": "explicit"})
    (row,) = out["partition_state"]
    assert (row["leader"], row["leader_leo"], row["leader_hwm"], row["leader_leso"]) == (1, 4, 0, 0)
    assert row["maximal_isr"] == [1, 2, 3] and row["pending_alter_partition"] is None
    st = {r["broker"]: (r["alive"], r["fenced"], r["broker_epoch"], r["role"], r["leo"]) for r in row["replica_states"]}
    assert st == {1: (True, False, 101, "LEADER", 4), 2: (True, False, 102, "FOLLOWER", 4),
                  3: (False, False, 103, None, 0)}


def test_partition_state_of_a_partition_led_by_broker_0():
    """Broker id 0 is a valid leader (Kafka's ids start at 0): its leader view is projected; and a
    partition_state row is one row per partition, idx 0 (protocol.state_table)."""
    s = S().up(0, 1, 2)
    s.create([0, 1, 2])
    s.produce(0, 3, acks=1)
    out = run_events(s.events, {})
    (row,) = out["partition_state"]
    assert (row["leader"], row["leader_leo"], row["leader_leso"], row["idx"]) == (0, 3, 0, 0)
    assert row["maximal_isr"] == [0, 1, 2]
    assert [r["role"] for r in row["replica_states"]] == ["LEADER", "FOLLOWER", "FOLLOWER"]


def test_partition_state_shows_the_pending_alter_partition():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    s.fetch(3)                                      # expansion proposed, not yet delivered
    out = run_events(s.events, {"delivery.alter_partition": "explicit"})
    (row,) = out["partition_state"]
    assert row["pending_alter_partition"] == "EXPAND [1, 2, 3]"
    assert row["maximal_isr"] == [1, 2, 3] and row["isr"] == [1, 2]


def test_session_expiry_under_explicit_metadata_reaches_brokers_that_synced_past_the_crash():
    """A session-expiry fence carries the seq of the crash row; brokers whose metadata already went
    past that seq see it at once, and it lands in seq order even when the log was pruned empty."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.sync(1); s.sync(2); s.sync(3)
    s.at(100).crash(3, clean=False)
    s.sync(1); s.sync(2)                            # everyone alive has seen everything: log pruned
    s.at(9200).tick()
    out = run_events(s.events, EXPLICIT_MD)
    cl = out["_cluster"]
    assert cl.brokers[3].fenced
    assert cl.views[1][3][1] is True and cl.views[2][3][1] is True
    assert [r["ts_ms"] for r in out["admin"] if r["type"] == "BrokerFence"] == [9101]


def test_data_rows_from_a_broker_that_never_registered_are_rejected():
    """A Fetch or Produce naming a broker the stream never registered is bad input (a rejected row with the
    reason), not a request the cluster answers: no fetch or produce row, nothing changes."""
    s = S().up(1, 2)
    s.create([1, 2])
    f = s.at(10).fetch(9)
    pr = s.at(11).produce(9, 1, acks=1)
    out = run_events(s.events)
    assert [(r["seq"], r["reason"]) for r in out["rejected"]] == [
        (f, f"Fetch row seq {f}: broker 9 has never registered (BrokerRegister must come first)"),
        (pr, f"Produce row seq {pr}: broker 9 has never registered (BrokerRegister must come first)")]
    assert not out.get("fetch") and not out.get("produce") and not out.get("hwm")


def test_the_time_jump_limit_is_checked_where_the_cluster_sees_the_whole_stream():
    """input.max.time.jump.ms is a check of the whole stream: a replay's cluster and a parallel
    replay's worker (fed every row) check it; a Spark bucket (only its partitions' rows, the source
    having checked the stream) does not."""
    cfg = EngineConfig({"input.max.time.jump.ms": "1000"})
    owns = lambda key: True                      # noqa: E731 - a bucket or worker that owns t-0
    assert Cluster(cfg).max_jump == 1000
    assert Cluster(cfg, owns=owns, sees_all=True).max_jump == 1000
    assert Cluster(cfg, emit_global=False, owns=owns).max_jump == 0
    s = S().up(1)
    s.at(5000)
    late = s.create([1])
    out = run_events(s.events, {"input.max.time.jump.ms": "1000"})
    assert [r["seq"] for r in rows(out, "rejected")] == [late]


def test_metadata_history_keeps_only_what_a_replica_may_still_sync():
    """Explicit metadata delivery keeps each committed registration until every replica's broker
    has applied one at least as new (channels._prune_history): once all three have synced, only the
    newest stays, whatever number of changes came before."""
    cl = Cluster(EngineConfig({"delivery.metadata": "explicit"}))
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    for b in (1, 2, 3):
        s.sync(b)
    s.fence(3)                      # leaves the ISR: a new registration
    s.shutdown(2)                   # and another
    for raw in s.events:
        cl.apply(validate(raw)[0])
    p = cl.partitions[("t", 0)]
    assert len(p.md_history) == 3
    for b in (1, 2):
        cl.apply(validate({"seq": len(s.events) + b, "ts_ms": s.ts, "type": "MetadataSync", "broker": b})[0])
    # broker 3 has applied only the first: the two after it stay, the first goes
    assert [snap.partition_epoch for _, snap in p.md_history] == [1, 2]
    cl.apply(validate({"seq": len(s.events) + 3, "ts_ms": s.ts, "type": "MetadataSync", "broker": 3})[0])
    assert [snap.partition_epoch for _, snap in p.md_history] == [2]     # the newest, for a broker added later


def test_next_due_is_the_earliest_over_every_partition():
    """next_due (a Spark bucket's event-time timeout) is the earliest due time of any partition,
    not of the first or the last one it looks at: here acks=all produces parked on two partitions,
    the later-created one's due first."""
    cfg = EngineConfig({"broker.session.timeout.ms": "0", "auto.leader.rebalance.enable": "false",
                        "isr.expiration.interval.ms": "0"})
    cl = Cluster(cfg)
    s = S().up(1, 2)
    s.create([1, 2])
    s.partition = 1
    s.create([1, 2])
    s.at(200).produce(1, 1, acks=-1)            # t-1: request.timeout.ms 30000 -> due at 30200
    s.partition = 0
    s.at(300).produce(1, 1, acks=-1)            # t-0: due at 30300
    for raw in s.events:
        cl.apply(validate(raw)[0])
    assert [cl.partition_due(cl.partitions[("t", k)]) for k in (0, 1)] == [30300, 30200]
    assert cl.next_due() == 30200


# ---------------------------------------------------------------- touched partitions
def test_a_partition_is_touched_once_a_generation_however_many_rows_reach_it():
    """Cluster.touch / take_touched: the keys of every partition a row reached since the last take,
    each once; a partition added in an earlier generation (its touched_in mark is old) is added
    again when a row reaches it after the take; timers fired by finish() touch too."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.add(type="CreatePartition", topic="u", partition=0, replicas=[2, 3, 1])
    for _ in range(5):
        s.fetch(2, fetch_offset=0)
    cl = Cluster(EngineConfig({}))

    def apply(ev):
        ev, err = validate(ev)
        assert err is None, err
        cl.apply(ev)

    for ev in s.events[:-5]:
        apply(ev)
    assert cl.take_touched() == {("t", 0), ("u", 0)}
    assert cl.take_touched() == set() and cl.touched == set()
    for ev in s.events[-5:]:
        apply(ev)
    assert cl.touched == {("t", 0)} and cl.partitions[("t", 0)].touched_in == cl.touch_gen
    assert cl.take_touched() == {("t", 0)}
    cl.finish(s.ts + 10**7)             # every partition's timers fire: both get a row again
    assert cl.take_touched() == {("t", 0), ("u", 0)}
