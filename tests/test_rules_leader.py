"""Leader-side rules with hand-written expectations at their boundaries (kafka_rules B2, B4, B6,
B8, B13, B14, C1, C8). `isr.expiration.interval.ms=0` where the ISR-expiration timing matters, so
only Tick rows run the check."""
from tests.engine_util import rows, run_events
from tests.streams import S

TICK_ONLY = {"isr.expiration.interval.ms": "0", "auto.leader.rebalance.enable": "false"}


def last(out, table, **m):
    r = rows(out, table, **m)
    assert r, f"no {table} row matching {m}"
    return r[-1]


def leader_rep(out, b=1):
    return out["_cluster"].partitions[("t", 0)].reps[b]


# ---------------------------------------------------------------- B2 / B13: min ISR gate on acks=all
def test_acks_all_accepted_at_exactly_min_isr_and_refused_one_below():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)                                   # ISR [1, 2] == min ISR 2
    ok = s.produce(1, 2, acks=-1)
    s.fence(2)                                   # ISR [1] < 2
    refused = s.produce(1, 2, acks=-1)
    one = s.produce(1, 3, acks=1)                # acks=1 is appended anyway (B13)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert not rows(out, "produce", seq=ok)      # appended at 0, parked: no answer yet
    assert [pr.base for pr in leader_rep(out).purgatory] == [0]
    r = last(out, "produce", seq=refused)
    assert (r["result"], r["base_offset"]) == ("NOT_ENOUGH_REPLICAS", None)
    r = last(out, "produce", seq=one)
    assert (r["result"], r["base_offset"]) == ("ACKED", 2)


def test_effective_min_isr_is_capped_by_the_assignment_size():
    s = S().up(1, 2)
    s.create([1, 2])
    s.fence(2)                                   # ISR [1]; min(3, 2 replicas) = 2 -> under min ISR
    refused = s.produce(1, 1, acks=-1)
    out = run_events(s.events, {"min.insync.replicas": "3"})
    assert last(out, "produce", seq=refused)["result"] == "NOT_ENOUGH_REPLICAS"
    s = S().up(1)
    s.create([1])
    ok = s.produce(1, 1, acks=-1)                # min(3, 1 replica) = 1: a single replica is enough
    out = run_events(s.events, {"min.insync.replicas": "3"})
    r = last(out, "produce", seq=ok)
    assert (r["result"], r["base_offset"]) == ("ACKED", 0)
    assert last(out, "hwm")["new_hwm"] == 1


# ---------------------------------------------------------------- B6 / B13: acks=all completes when HW >= required
def test_acks_all_completes_when_the_hwm_reaches_the_last_offset_plus_one():
    s = S().up(1, 2)
    s.create([1, 2])
    p = s.produce(1, 3, acks=-1)                 # required offset 3
    f1 = s.fetch(2)                              # follower fetches at 0: gets [0, 3); leader sees LEO 0
    f2 = s.fetch(2)                              # follower LEO 3 -> HW 3 -> acked
    out = run_events(s.events, {"min.insync.replicas": "2"})
    r = last(out, "produce", seq=p)
    assert (r["result"], r["result_seq"], r["base_offset"]) == ("ACKED", f2, 0)
    h = last(out, "hwm", seq=f2)
    assert (h["old_hwm"], h["new_hwm"], h["trigger"]) == (0, 3, "Fetch")
    assert not rows(out, "hwm", seq=f1)


# ---------------------------------------------------------------- B4 / B8: shrink exactly after the lag bound
def test_isr_shrink_boundary_is_strictly_after_the_lag():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])                          # makeLeader at 0: followers caught up at 0
    s.produce(1, 1, acks=1)                      # followers now behind
    quiet = s.at(10_000).tick(1)                 # now - lastCaughtUp == lag: still in sync
    shrink = s.at(10_001).tick(1)
    out = run_events(s.events, dict(TICK_ONLY, **{"replica.lag.time.max.ms": "10000"}))
    assert not rows(out, "alter_partition", seq=quiet)
    r = last(out, "alter_partition", seq=shrink, phase="PROPOSED")
    assert r["change"] == "SHRINK" and sorted(r["proposed_isr"]) == [1]
    assert last(out, "metadata_log", seq=shrink)["isr"] == [1]


def test_a_follower_new_in_the_same_leader_epoch_has_never_caught_up():
    """B11 / B4: a registration that adds a replica to the ISR in the leader's own epoch (a recorded
    PartitionRecord) gives the leader a follower state with an unknown LEO (-1: Kafka's
    ReplicaState.EMPTY, UnknownOffsetMetadata) and no caught-up time. On an empty leader log it is
    not caught up (LEO -1 is not the leader's 0), so once the lag passes the ISR-expiration check
    shrinks it out; a follower state that started at LEO 0 would match the empty log and stay."""
    s = S().up(1, 2, 3)
    s.create([1, 2])                                           # leader 1, leader epoch 0, log empty
    s._p(type="PartitionRecord", replicas=[1, 2, 3], isr=[1, 2, 3], elr=[], last_known_elr=[], leader=1,
         leader_epoch=0, partition_epoch=1, leader_recovery_state="RECOVERED")
    s.at(1_000).fetch(2)                                       # 2 caught up at 1000; 3 never fetches
    t = s.at(12_000).tick(1)
    out = run_events(s.events, dict(TICK_ONLY, **{"replica.lag.time.max.ms": "10000"}))
    assert leader_rep(out).leader_epoch == 0                   # the same leadership throughout
    r = last(out, "alter_partition", seq=t, phase="PROPOSED")
    assert r["change"] == "SHRINK" and sorted(r["proposed_isr"]) == [1, 2]


def test_caught_up_follower_is_not_shrunk():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 2, acks=1)
    s.at(5_000).fetch(2)
    s.fetch(2)                                   # 2 reaches the leader's LEO at 5000
    t = s.at(14_000).tick(1)                     # 3 lags since 0 (> 10000); 2 caught up at 5000
    out = run_events(s.events, dict(TICK_ONLY, **{"replica.lag.time.max.ms": "10000"}))
    r = last(out, "alter_partition", seq=t, phase="PROPOSED")
    assert sorted(r["proposed_isr"]) == [1, 2]


def test_a_fetch_behind_the_leader_leo_a_previous_fetch_saw_is_not_caught_up():
    """B3: lastFetchLeaderLogEndOffset only grows (max of the leader LEOs fetches saw). A fetch at an
    offset below the LEO the previous fetch saw (here 5 < 10, a follower that re-fetches after losing
    its suffix) moves no caught-up time; had the 10 not been kept, 5 >= 0 would have counted the
    follower caught up at its previous fetch (1000) and kept it in the ISR past 10_000."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])                          # makeLeader at 0: caught up at 0, leader LEO 0
    s.produce(1, 10, acks=1)                     # leader LEO 10
    s.at(1_000).fetch(2, fetch_offset=0)         # saw leader LEO 10; 0 >= 0: caught up at 0
    s.at(2_000).produce(1, 10, acks=1)           # leader LEO 20
    s.at(3_000).fetch(2, fetch_offset=5)         # 5 < 10: still caught up at 0
    t = s.at(10_001).tick(1)
    out = run_events(s.events, dict(TICK_ONLY, **{"replica.lag.time.max.ms": "10000"}))
    fs = leader_rep(out).followers[2]
    assert (fs.last_fetch_leader_leo, fs.last_fetch_ms) == (20, 3_000)
    r = last(out, "alter_partition", seq=t, phase="PROPOSED")
    assert r["change"] == "SHRINK" and sorted(r["proposed_isr"]) == [1]


def test_a_parked_produce_times_out_at_its_deadline_not_at_an_earlier_periodic_check():
    """An acks=all produce parked at 100 times out at 100 + request.timeout.ms, not when the ISR
    expiration's periodic check runs before that (at 5000 and 10000 here, with nothing to shrink)."""
    s = S().up(1, 2)
    s.create([1, 2])
    prod = s.at(100).produce(1, 1, acks=-1)          # 2 never fetches: parked until its deadline
    s.at(10_000).tick(1)
    s.at(30_100).tick(1)
    cfg = {"isr.expiration.interval.ms": "5000", "replica.lag.time.max.ms": "60000",
           "request.timeout.ms": "30000", "auto.leader.rebalance.enable": "false"}
    assert rows(run_events(s.events[:-1], cfg), "produce", seq=prod) == []     # still parked after 10000
    got = [(r["result"], r["result_ts_ms"]) for r in rows(run_events(s.events, cfg), "produce", seq=prod)]
    assert got == [("REQUEST_TIMED_OUT", 30_100)]


def test_timers_due_by_one_event_fire_in_time_order():
    """One event late in time fires every timer due by it in time order: the ISR shrink due at
    10001 (2 stopped fetching at 0, lag 10000) comes before the parked produce's deadline (30100),
    so the shrink to [1] commits the produce (min.insync.replicas 1): ACKED at 10001, not timed out."""
    s = S().up(1, 2)
    s.create([1, 2])
    prod = s.at(100).produce(1, 1, acks=-1)
    s.at(40_000).tick(1)
    cfg = {"isr.expiration.interval.ms": "1", "replica.lag.time.max.ms": "10000", "min.insync.replicas": "1",
           "request.timeout.ms": "30000", "auto.leader.rebalance.enable": "false"}
    got = [(r["result"], r["result_ts_ms"]) for r in rows(run_events(s.events, cfg), "produce", seq=prod)]
    assert got == [("ACKED", 10_001)]


def test_a_produce_to_a_follower_names_the_follower_s_leader_epoch():
    """A produce sent to a replica that is not the leader is NOT_LEADER_OR_FOLLOWER, and its row
    carries the leader epoch that replica knows (0 here), so a reader sees how stale the client was."""
    s = S().up(1, 2)
    s.create([1, 2])
    seq = s.produce(2, 1, acks=1)
    row = last(run_events(s.events), "produce", seq=seq)
    assert (row["result"], row["leader_epoch"]) == ("NOT_LEADER_OR_FOLLOWER", 0)


# ---------------------------------------------------------------- C2 the fetcher must be assigned
def test_fetch_from_an_unassigned_broker_at_leader_epoch_zero_is_unknown_leader_epoch():
    """C2: a fetch from a broker outside the assignment is UNKNOWN_LEADER_EPOCH when it carries a
    current leader epoch -- 0, the first leader's, included -- and NOT_LEADER_OR_FOLLOWER when it
    carries none (-1)."""
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    with_epoch = s.fetch(4, target=1, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1, broker_epoch=104)
    without = s.fetch(4, target=1, fetch_offset=0, current_leader_epoch=-1, last_fetched_epoch=-1, broker_epoch=104)
    out = run_events(s.events)
    assert last(out, "fetch", seq=with_epoch)["result"] == "UNKNOWN_LEADER_EPOCH"
    assert last(out, "fetch", seq=without)["result"] == "NOT_LEADER_OR_FOLLOWER"


# ---------------------------------------------------------------- C1 on follower fetches
def test_fetch_with_a_newer_leader_epoch_is_unknown_leader_epoch():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.fetch(2, target=1, fetch_offset=0, current_leader_epoch=1, last_fetched_epoch=-1, broker_epoch=102)
    seq0 = s.fetch(3, target=1, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1, broker_epoch=103)
    out = run_events(s.events)
    assert last(out, "fetch", seq=seq, result="UNKNOWN_LEADER_EPOCH")
    assert not rows(out, "fetch", seq=seq0, result="UNKNOWN_LEADER_EPOCH")
    assert not rows(out, "fetch", seq=seq0, result="FENCED_LEADER_EPOCH")


def test_fetch_from_a_stale_broker_epoch_is_refused():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.fetch(2, target=1, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1, broker_epoch=101)
    out = run_events(s.events)
    assert last(out, "fetch", seq=seq, result="NOT_LEADER_OR_FOLLOWER")   # B3: cached epoch 102 > 101


def test_fetch_without_a_broker_epoch_is_served_and_keeps_the_follower_eligible():
    """A recorded fetch with broker_epoch -1 (ReplicaState.ReplicaEpoch's default: the request
    carries none) is a well-formed request: B3 does not check it against the leader's cache, it is
    no drift from the model, and B5 leaves the follower ISR-eligible by its epoch."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 3, acks=1)
    seq = s.fetch(2, target=1, fetch_offset=0, current_leader_epoch=0, last_fetched_epoch=-1, broker_epoch=-1)
    out = run_events(s.events, {"output.fetch": "all"})
    assert not rows(out, "rejected")
    assert last(out, "fetch", seq=seq, result="OK")["replica_leo"] == 3
    assert not rows(out, "fetch", seq=seq, result="DRIFT")
    lrep = leader_rep(out)
    fs = lrep.followers[2]
    assert (fs.broker_epoch, fs.leo) == (-1, 0)            # B3: the leader learns LEO 3 at the next fetch
    from protocol.broker.leader import eligible
    assert eligible(out["_cluster"].partitions[("t", 0)], lrep, 2, fs)


# ---------------------------------------------------------------- C8 follower HWM
def test_follower_hwm_is_the_response_hwm_clamped_to_its_leo():
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 4, acks=1)
    s.fetch(2)                                   # gets [0, 4); response HWM 0 (captured before)
    s.fetch(2)                                   # leader HW -> 4 after this fetch; response still says 0
    s.fetch(2)                                   # now the follower learns 4
    out = run_events(s.events)
    p = out["_cluster"].partitions[("t", 0)]
    assert (p.reps[1].log.hwm, p.reps[2].log.hwm, p.reps[2].log.leo) == (4, 4, 4)
    s2 = S().up(1, 2)
    s2.create([1, 2])
    s2.produce(1, 4, acks=1)
    s2.fetch(2)
    s2.fetch(2)
    out = run_events(s2.events)
    assert out["_cluster"].partitions[("t", 0)].reps[2].log.hwm == 0


# ---------------------------------------------------------------- B14 / consumer reads
def test_consumer_fetch_boundaries():
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 5, acks=1)
    s.fetch_round(2, times=2)                    # HW 5
    s.produce(1, 2, acks=1)                      # LEO 7, HW 5
    below = s.consume(1, 4)
    at_hw = s.consume(1, 5)
    at_leo = s.consume(1, 7)
    past = s.consume(1, 8)
    out = run_events(s.events)
    got = {r["seq"]: (r["result"], r["records"], r["hwm"]) for r in out["consumer"]}
    assert got[below] == ("NONE", 1, 5)
    assert got[at_hw] == ("NONE", 0, 5)
    assert got[at_leo] == ("NONE", 0, 5)
    assert got[past] == ("OFFSET_OUT_OF_RANGE", None, 5)


def test_list_offsets_earliest_and_latest():
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 3, acks=1)
    s.fetch_round(2, times=2)
    e = s.list_offsets(1, "EARLIEST")
    l_ = s.list_offsets(1, "LATEST")
    f = s.list_offsets(2, "LATEST")
    out = run_events(s.events)
    got = {r["seq"]: (r["result"], r["offset"]) for r in out["consumer"]}
    assert got[e] == ("NONE", 0) and got[l_] == ("NONE", 3)
    assert got[f] == ("NOT_LEADER_OR_FOLLOWER", None)


# ---------------------------------------------------------------- B7 expansion at the HWM boundary
def test_expansion_needs_follower_leo_at_least_the_hwm():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 5, acks=1)
    s.fetch_round(2, 3)                          # HW 5
    s.fence(3)                                   # ISR [1, 2]
    s.unfence(3)
    # past the lag bound 3 is no longer caught up, so it stops holding the HWM back (B6)
    s.at(40_000).produce(1, 3, acks=1)           # LEO 8
    s.fetch_round(2)                             # HW 8
    behind = s.fetch(3)                          # 3 fetches at 5 < HW 8: receives [5, 8), no expansion
    at_hw = s.fetch(3)                           # 3 fetches at 8 == HW: expansion
    out = run_events(s.events, TICK_ONLY)
    assert last(out, "hwm", new_hwm=8)["seq"] < behind
    assert not rows(out, "alter_partition", seq=behind)
    r = last(out, "alter_partition", seq=at_hw, phase="PROPOSED")
    assert r["change"] == "EXPAND" and sorted(r["proposed_isr"]) == [1, 2, 3]
    assert sorted(last(out, "metadata_log", seq=at_hw)["isr"]) == [1, 2, 3]


def test_caught_up_non_isr_follower_holds_the_hwm_back():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 5, acks=1)
    s.fetch_round(2, 3)                          # HW 5
    s.fence(3)
    s.unfence(3)
    s.at(30_000).produce(1, 3, acks=1)           # 3 caught up at 0: now - 0 == lag, still caught up
    s.fetch_round(2)
    out = run_events(s.events, TICK_ONLY)
    assert max(r["new_hwm"] for r in out["hwm"]) == 5


def test_expansion_needs_a_matching_broker_epoch():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    stale = s.fetch(3, target=1, fetch_offset=0, last_fetched_epoch=-1, current_leader_epoch=0, broker_epoch=99)
    ok = s.fetch(3, target=1, fetch_offset=0, last_fetched_epoch=-1, current_leader_epoch=0, broker_epoch=103)
    out = run_events(s.events)
    assert last(out, "fetch", seq=stale, result="NOT_LEADER_OR_FOLLOWER")   # B3: registered 103 > 99
    assert not rows(out, "alter_partition", seq=stale)
    assert last(out, "alter_partition", seq=ok, phase="PROPOSED")["change"] == "EXPAND"


# ---------------------------------------------------------------- SPEC §3 idx of a parked produce's answer
def test_acks_all_answer_keeps_the_requests_place_in_the_event():
    s = S().up(1)
    s.create([1])
    p = s.produce(1, 2, acks=-1)                 # single replica: acked within the event
    out = run_events(s.events)
    got = sorted((r["idx"], t) for t in ("produce", "hwm") for r in out[t] if r["seq"] == p)
    assert got == [(0, "produce"), (1, "hwm")]


# ---------------------------------------------------------------- C7 out of range
def test_fetch_beyond_the_leader_leo_is_out_of_range_without_truncation_when_logs_match():
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 3, acks=1)
    s.fetch_round(2)                             # follower LEO 3 == leader LEO 3
    seq = s.fetch(2, target=1, fetch_offset=8, last_fetched_epoch=-1, current_leader_epoch=0, broker_epoch=102)
    out = run_events(s.events)
    r = [x for x in out["fetch"] if x["seq"] == seq and x["result"] == "OFFSET_OUT_OF_RANGE"]
    assert len(r) == 1 and r[0]["truncated_to"] is None and r[0]["replica_leo"] == 3
    assert [x["result"] for x in out["fetch"] if x["seq"] == seq] == ["DRIFT", "OFFSET_OUT_OF_RANGE"]


# ---------------------------------------------------------------- recorded fetches (SPEC §2)
def test_recorded_fetch_from_itself_is_a_no_op():
    s = S().up(1, 2)
    s.create([1, 2])
    seq = s.fetch(2, target=2, fetch_offset=0, last_fetched_epoch=-1, current_leader_epoch=0, broker_epoch=102)
    out = run_events(s.events)
    assert [r["result"] for r in out["fetch"] if r["seq"] == seq] == ["DRIFT", "NOOP"]   # target 2 vs model 1


def test_recorded_fetch_with_only_a_leader_epoch_drifts_without_truncating():
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 2, acks=1)
    s.fetch_round(2)
    seq = s.fetch(2, current_leader_epoch=3)         # other columns null: taken from the model
    out = run_events(s.events)
    got = [(r["result"], r["truncated_to"]) for r in out["fetch"] if r["seq"] == seq]
    assert got == [("DRIFT", None), ("UNKNOWN_LEADER_EPOCH", None)]
    assert out["_cluster"].partitions[("t", 0)].reps[2].log.leo == 2


def test_client_requests_to_a_crashed_broker_fail_with_network_exception():
    s = S().up(1, 2)
    s.create([1, 2])
    s.crash(1)
    lo = s.list_offsets(1, "LATEST")
    cf = s.consume(1, 0)
    out = run_events(s.events)
    got = {r["seq"]: (r["result"], r["offset"], r["records"]) for r in out["consumer"]}
    assert got == {lo: ("NETWORK_EXCEPTION", None, None), cf: ("NETWORK_EXCEPTION", None, None)}


def test_isr_expiration_timer_fires_at_the_first_multiple_after_the_lag():
    """B8 on event time: follower 2 last caught up at 1000, lag 10000 -> out of sync from 11001; the
    check runs at multiples of 5000, so the shrink happens at 15000 (not at the next event)."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 1, acks=1)
    s.at(1000).fetch_round(2, 3)
    s.at(2000).produce(1, 1, acks=1)
    s.at(9000).fetch_round(3)                    # 3 keeps up (caught up at 9000); 2 does not
    s.at(20_000).produce(1, 1, acks=1)
    out = run_events(s.events, {"replica.lag.time.max.ms": "10000", "isr.expiration.interval.ms": "5000",
                                "auto.leader.rebalance.enable": "false"})
    m = [r for r in out["metadata_log"] if r["cause"] == "AlterPartition"]
    assert [(r["ts_ms"], sorted(r["isr"])) for r in m][:1] == [(15_000, [1, 3])]


def test_a_leader_kept_at_a_new_leader_epoch_starts_it():
    """B11: the same broker made leader again at a higher leader epoch (A10a: a reassignment removing a
    replica bumps the epoch, the leader stays) starts the new epoch -- its epoch cache gets (1, LEO) and
    its next append is written in epoch 1."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(10).produce(1, 2, acks=1)
    s.fetch_round(2, 3)
    r = s.at(20).reassign([1, 2])
    p = s.at(30).produce(1, 1, acks=1)
    out = run_events(s.events)
    assert [(x["leader"], x["leader_epoch"]) for x in rows(out, "metadata_log", seq=r)] == [(1, 1)]
    assert [(x["leader_epoch"], x["base_offset"]) for x in rows(out, "produce", seq=p)] == [(1, 2)]
    rep = out["_cluster"].partitions[("t", 0)].reps[1]
    assert (rep.leader_epoch, rep.log.cache) == (1, [(0, 0), (1, 2)])


def _shrink_proposed():
    """Partition t-0 [1, 2, 3] led by 1; at t=30,031 broker 2 lags (3 fetched, 2 never): the next
    check of broker 1 proposes a shrink to [1, 3]."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 1)
    s.fetch(3)
    s.fetch(3)
    s.at(30_031)
    return s


def test_b9_a_proposal_while_the_brokers_request_is_unanswered_is_not_attempted():
    """B9/B10 PartitionTest#testAlterIsrLeaderAndIsrRace: the AlterPartitionManager holds one item
    per partition until the broker handles its answer. A metadata update resets the leader's pending
    shrink while its request waits; the next check's shrink fails at once with
    OPERATION_NOT_ATTEMPTED and rolls back (no second request); once the old answer is handled, the
    shrink goes out."""
    s = _shrink_proposed()
    s.tick(1)                                    # 2 lags: shrink to [1, 3] proposed, request waits
    s.fence(3)                                   # ISR [1, 2] (partition epoch 1): the pending shrink is reset
    again = s.tick(1)                            # shrink to [1] while the first request is unanswered
    arrive = s.ap_arrive()                       # the first request: INVALID_UPDATE_VERSION
    waiting = s.tick(1)                          # its answer not handled yet: still not attempted
    answer = s.ap_response()                     # the broker handles it: the item leaves the manager
    retry = s.tick(1)
    s.ap_arrive()
    out = run_events(s.events, {"delivery.alter_partition": "explicit", "isr.expiration.interval.ms": 0})
    got = [(r["seq"], r["phase"], r["error"], r["proposed_isr"]) for r in rows(out, "alter_partition")
           if r["seq"] >= again]
    assert got[0] == (again, "ROLLED_BACK", "OPERATION_NOT_ATTEMPTED", [1])
    assert (waiting, "ROLLED_BACK", "OPERATION_NOT_ATTEMPTED", [1]) in got
    assert (arrive, "REJECTED", "INVALID_UPDATE_VERSION", [1, 3]) in got
    assert [g for g in got if g[0] == answer][0][1] == "IGNORED"
    assert (retry, "PROPOSED", None, [1]) in got
    assert out["_cluster"].partitions[("t", 0)].isr == [1]
    # the rolled-back check sent nothing: one request for the first shrink, one for the retry
    assert len([r for r in rows(out, "alter_partition") if r["phase"] == "PROPOSED"]) == 2


def test_b9_a_restarted_brokers_manager_starts_empty():
    """B9: the requests of a broker's earlier process do not hold its restarted process back."""
    from protocol.broker.leader import _submit_in_flight
    s = _shrink_proposed()
    s.tick(1)                                    # 2 lags: a shrink's request waits
    out = run_events(s.events, {"delivery.alter_partition": "explicit", "isr.expiration.interval.ms": 0},
                     finish=False)
    p = out["_cluster"].partitions[("t", 0)]
    assert p.ap_requests and _submit_in_flight(p, 1) and not _submit_in_flight(p, 2)
    p.cl.brokers[1].proc_epoch += 100            # a new process of broker 1
    assert not _submit_in_flight(p, 1)
    # the controller answered, the broker has not handled the answer: the same, for the answer
    s.ap_arrive()
    out = run_events(s.events, {"delivery.alter_partition": "explicit", "isr.expiration.interval.ms": 0},
                     finish=False)
    p = out["_cluster"].partitions[("t", 0)]
    assert not p.ap_requests and p.ap_responses
    assert _submit_in_flight(p, 1) and not _submit_in_flight(p, 2)
    p.cl.brokers[1].proc_epoch += 100
    assert not _submit_in_flight(p, 1)


def test_b3_a_fenced_followers_fetch_is_not_checked_for_a_stale_broker_epoch():
    """B3: the leader's cache gives a broker epoch for an alive (unfenced) broker only
    (KRaftMetadataCache#getAliveBrokerEpoch), so a fenced follower's fetch with its old epoch is
    served; once it is unfenced under the new epoch, the old epoch is refused."""
    s = S().up(1, 2)
    s.create([1, 2])
    s.produce(1, 10)
    s.fetch(2)
    s.crash(2)
    s.fence(2)
    s.register(2)                                # epoch 202, fenced
    served = s.fetch(2, broker_epoch=102)
    s.unfence(2)
    refused = s.fetch(2, broker_epoch=102)
    out = run_events(s.events)
    # served (its epoch differs from the model's: a drift row, no error)
    assert [r["result"] for r in rows(out, "fetch", seq=served)] == ["DRIFT"]
    assert out["_cluster"].partitions[("t", 0)].reps[2].log.hwm == 10
    assert last(out, "fetch", seq=refused)["result"] == "NOT_LEADER_OR_FOLLOWER"
