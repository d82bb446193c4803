"""Leader replica rules (kafka_rules B1-B14) and fetch / divergence rules (C1-C8)."""
from tests.engine_util import rows, run_events
from tests.streams import S


def last(out, table, **m):
    r = rows(out, table, **m)
    assert r, f"no {table} row matching {m}"
    return r[-1]


def three(minisr=None):
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    return s


def test_hwm_waits_for_every_maximal_isr_member_and_lags_one_fetch():
    s = three()
    s.produce(1, 4, acks=1)
    s.fetch(2); s.fetch(3)        # records delivered, LEO reported on the next fetch
    seq2 = s.fetch(2)
    seq3 = s.fetch(3)
    out = run_events(s.events)
    assert not rows(out, "hwm", seq=seq2)
    r = last(out, "hwm", seq=seq3)
    assert (r["old_hwm"], r["new_hwm"], r["trigger"]) == (0, 4, "Fetch")   # B6
    st = out["partition_state"][0]
    reps = {x["broker"]: x for x in st["replica_states"]}
    assert reps[2]["hwm"] == 0 and reps[3]["hwm"] == 0                   # C3: response carries the old HWM


def test_hwm_advances_to_the_slowest_maximal_isr_member_before_all_catch_up():
    """B6: the new HWM is the minimum LEO over the leader and the maximal ISR's followers -- it
    advances as far as the slowest follower got, it does not wait for all to reach the leader's LEO."""
    s = three()
    s.produce(1, 4, acks=1)
    s.fetch(2); s.fetch(3)        # both hold 0..4; the leader learns it on their next fetch
    s.produce(1, 3, acks=1)       # leader LEO 7
    s.fetch(3)                    # 3 reports LEO 4 (2 has reported none yet: no advance), takes 4..7
    seq4 = s.fetch(2)             # 2 reports LEO 4, takes 4..7: min(7, 4, 4) = 4
    seq_none = s.fetch(3)         # 3 reports LEO 7: min(7, 4, 7) = 4, no change
    seq7 = s.fetch(2)             # 2 reports LEO 7: min(7, 7, 7) = 7
    out = run_events(s.events)
    r = last(out, "hwm", seq=seq4)
    assert (r["old_hwm"], r["new_hwm"]) == (0, 4)
    assert not rows(out, "hwm", seq=seq_none)
    r = last(out, "hwm", seq=seq7)
    assert (r["old_hwm"], r["new_hwm"]) == (4, 7)
    assert [(x["old_hwm"], x["new_hwm"]) for x in out["hwm"]] == [(0, 4), (4, 7)]


def test_hwm_frozen_under_min_isr_even_with_acks_1():
    s = three()
    s.fence(2); s.fence(3)
    seq = s.produce(1, 2, acks=1)
    seq_all = s.produce(1, 1, acks=-1)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert last(out, "produce", seq=seq)["result"] == "ACKED"
    assert last(out, "produce", seq=seq_all)["result"] == "NOT_ENOUGH_REPLICAS"   # B13
    assert not out.get("hwm")


def test_invalid_acks_and_not_leader():
    s = three()
    a = s.produce(1, 1, acks=2)
    b = s.produce(2, 1, acks=1)
    out = run_events(s.events)
    assert last(out, "produce", seq=a)["result"] == "INVALID_REQUIRED_ACKS"
    assert last(out, "produce", seq=b)["result"] == "NOT_LEADER_OR_FOLLOWER"


def test_produce_to_crashed_broker():
    s = three()
    s.crash(1)
    seq = s.produce(1, 1, acks=1)
    out = run_events(s.events)
    assert last(out, "produce", seq=seq)["result"] == "NETWORK_EXCEPTION"


def test_acks_all_waits_and_fails_on_leadership_loss():
    s = three()
    seq = s.produce(1, 2, acks=-1)
    s.fence(1)
    out = run_events(s.events)
    r = last(out, "produce", seq=seq)
    assert r["result"] == "NOT_LEADER_OR_FOLLOWER" and r["result_seq"] == seq + 1


def test_expansion_needs_hwm_and_leso_and_eligibility():
    s = S().up(1, 2)
    s.register(3)
    s.create([1, 2, 3])                      # ISR [1, 2]; 3 fenced
    s.produce(1, 2, acks=1)
    s.fetch(2); s.fetch(2)                   # HWM 2
    s.fetch(3); s.fetch(3)                   # 3 caught up but fenced: not eligible (B5)
    s.unfence(3)
    seq = s.fetch(3)
    out = run_events(s.events)
    assert not [r for r in out.get("alter_partition", []) if r["seq"] < seq]
    r = last(out, "alter_partition", seq=seq, phase="PROPOSED")
    assert (r["change"], r["proposed_isr"]) == ("EXPAND", [1, 2, 3])


def test_shrink_after_lag_time_on_tick():
    s = three()
    s.at(100).fetch(2); s.fetch(3)
    s.at(200).produce(1, 1, acks=1)
    s.at(300).fetch(2); s.fetch(2)
    s.at(30_300).tick(1)                     # 3's last caught-up 100: lag 30200 > 30000
    out = run_events(s.events, {"isr.expiration.interval.ms": "0"})
    r = last(out, "alter_partition", phase="PROPOSED")
    assert (r["change"], r["proposed_isr"], r["ts_ms"]) == ("SHRINK", [1, 2], 30_300)
    assert last(out, "metadata_log", cause="AlterPartition")["isr"] == [1, 2]


def test_isr_expiration_runs_on_interval_multiples():
    s = three()
    s.at(100).fetch(2); s.fetch(3)
    s.at(200).produce(1, 1, acks=1)
    s.at(300).fetch(2); s.fetch(2)
    s.at(50_000).fetch(2)
    out = run_events(s.events)               # isr.expiration.interval.ms = 15000
    r = last(out, "alter_partition", phase="PROPOSED")
    assert r["ts_ms"] == 45_000 and r["seq"] == 12     # first multiple after 100 + 30000, seq of the latest event


def test_produce_timeout_fires_at_deadline():
    s = three()
    s.at(10).fetch(2); s.fetch(3)
    seq = s.at(20).produce(1, 1, acks=-1)
    s.at(40_000).tick(1)
    out = run_events(s.events, {"isr.expiration.interval.ms": "0", "replica.lag.time.max.ms": "100000"})
    r = last(out, "produce", seq=seq)
    assert (r["result"], r["result_ts_ms"]) == ("REQUEST_TIMED_OUT", 30_020)


def test_list_offsets_offset_not_available_until_hwm_reaches_leso():
    s = three()
    s.produce(1, 2, acks=1)
    s.fetch(2); s.fetch(3); s.fetch(2); s.fetch(3)     # HWM 2 on 1; 2 and 3 know 0
    s.fence(1)                                           # 2 leads with HWM 0 < LESO 2
    a = s.list_offsets(2)
    e = s.list_offsets(2, "EARLIEST")
    s.fetch(3)
    b = s.list_offsets(2)
    f = s.list_offsets(3)
    out = run_events(s.events)
    assert last(out, "consumer", seq=a)["result"] == "OFFSET_NOT_AVAILABLE"        # B14
    assert last(out, "consumer", seq=e)["offset"] == 0
    assert last(out, "consumer", seq=b)["offset"] == 2
    assert last(out, "consumer", seq=f)["result"] == "NOT_LEADER_OR_FOLLOWER"


def test_consumer_fetch_sees_only_below_hwm_and_epoch_checks():
    s = three()
    s.produce(1, 5, acks=1)
    s.fetch(2); s.fetch(3); s.fetch(2); s.fetch(3)
    s.produce(1, 5, acks=1)
    a = s.consume(1, 2)
    b = s.consume(1, 11)
    c = s.consume(1, 0, current_leader_epoch=3)
    d = s.consume(1, 0, current_leader_epoch=0)
    out = run_events(s.events)
    assert last(out, "consumer", seq=a)["records"] == 3
    assert last(out, "consumer", seq=b)["result"] == "OFFSET_OUT_OF_RANGE"
    assert last(out, "consumer", seq=c)["result"] == "UNKNOWN_LEADER_EPOCH"          # C1
    assert last(out, "consumer", seq=d)["result"] == "NONE"


def test_fetch_from_non_leader_and_fenced_epoch():
    s = three()
    a = s.fetch(3, target=2)
    s.fence(1)
    b = s.fetch(3, target=2, current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=-1)
    out = run_events(s.events)
    assert last(out, "fetch", seq=a)["result"] == "NOT_LEADER_OR_FOLLOWER"
    assert last(out, "fetch", seq=b, result="FENCED_LEADER_EPOCH")


def test_recorded_fetch_drift_is_reported_and_trusted():
    s = three()
    s.produce(1, 3, acks=1)
    s.fetch(2)
    seq = s.fetch(2, fetch_offset=1)                    # the model says 3
    out = run_events(s.events)
    d = last(out, "fetch", seq=seq, result="DRIFT")
    assert d["replica_leo"] == 3
    reps = {x["broker"]: x for x in out["partition_state"][0]["replica_states"]}
    assert reps[2]["leo"] == 3                          # truncated to 1, then refetched 1..3


def test_drift_row_shows_the_follower_as_the_model_had_it():
    """The DRIFT row's replica columns are the model's follower before the row is trusted: its LEO
    and its HWM from the last response (here 3), then the log is cut to the recorded offset."""
    s = three()
    s.produce(1, 3, acks=1)
    s.fetch_round(2, 3)                                 # both report LEO 3: leader HWM 3
    s.produce(1, 2, acks=1)
    s.fetch(2)                                          # 2 takes 3..5, learns HWM 3
    seq = s.fetch(2, fetch_offset=1)                    # the model says 5
    out = run_events(s.events)
    d = last(out, "fetch", seq=seq, result="DRIFT")
    assert (d["replica_leo"], d["replica_hwm"], d["fetch_offset"]) == (5, 3, 1)
    assert d["detail"] == "fetch_offset 1 vs model LEO 5"


def test_drift_names_only_the_recorded_columns_that_differ():
    # the model: LEO 3, last fetched epoch 0, current leader epoch 0. A row recording only the
    # offset reports only the offset; a row whose recorded columns agree with the model (here the
    # epoch) is no drift at all; a row recording only the epoch reports only the epoch.
    s = three()
    s.produce(1, 3, acks=1)
    s.fetch(2)
    off = s.fetch(2, fetch_offset=1)
    same = s.fetch(2, last_fetched_epoch=0)
    lfe = s.fetch(2, last_fetched_epoch=7)
    out = run_events(s.events)
    assert last(out, "fetch", seq=off, result="DRIFT")["detail"] == "fetch_offset 1 vs model LEO 3"
    assert not [r for r in out["fetch"] if r["seq"] == same and r["result"] == "DRIFT"]
    assert last(out, "fetch", seq=lfe, result="DRIFT")["detail"] == "last_fetched_epoch 7 vs model 0"


def test_divergence_truncates_to_leader_epoch_end():
    s = three()
    s.produce(1, 2, acks=1)
    s.fetch(2); s.fetch(2); s.fetch(3); s.fetch(3)
    s.produce(1, 3, acks=1)                              # only on 1
    s.fence(1)                                           # 2 leads epoch 1 with LEO 2
    s.produce(2, 1, acks=1)
    seq = s.fetch(1)
    s.fetch(1)
    out = run_events(s.events)
    r = last(out, "fetch", seq=seq)
    assert (r["result"], r["diverging_epoch"], r["diverging_end_offset"], r["truncated_to"]) == \
        ("DIVERGING_EPOCH", 0, 2, 2)
    reps = {x["broker"]: x for x in out["partition_state"][0]["replica_states"]}
    assert reps[1]["leo"] == 3                            # refetched the epoch-1 record
    assert not out.get("violations")


def test_explicit_metadata_follower_learns_new_leader_on_sync():
    s = three()
    s.sync(1); s.sync(2); s.sync(3)
    s.fence(1)
    a = s.fetch(3)                                       # 3 still fetches from 1 (stale view)
    s.sync(3)
    b = s.fetch(3)                                       # 2 has not applied it: not leader yet
    s.sync(2)
    c = s.fetch(3)
    out = run_events(s.events, {"delivery.metadata": "explicit"})
    assert rows(out, "fetch", seq=a) == [] or last(out, "fetch", seq=a)["target"] == 1
    assert last(out, "fetch", seq=b)["result"] in ("NOT_LEADER_OR_FOLLOWER", "UNKNOWN_LEADER_EPOCH")
    assert not rows(out, "fetch", seq=c)


def test_alter_partition_response_ignored_after_metadata_commit():
    s = S().up(1, 2)
    s.register(3)
    s.create([1, 2, 3])
    s.unfence(3)
    s.fetch(3)
    a = s.ap_arrive()
    b = s.ap_response()
    out = run_events(s.events, {"delivery.alter_partition": "explicit"})
    assert last(out, "alter_partition", seq=a)["phase"] == "ACCEPTED"
    assert last(out, "alter_partition", seq=b)["phase"] == "IGNORED"


def test_alter_partition_applied_when_response_beats_metadata():
    s = S().up(1, 2)
    s.register(3)
    s.create([1, 2, 3])
    s.sync(1); s.sync(2); s.sync(3)
    s.unfence(3)
    s.sync(1)
    s.fetch(3)
    s.ap_arrive()
    b = s.ap_response()
    out = run_events(s.events, {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"})
    assert last(out, "alter_partition", seq=b)["phase"] == "APPLIED"
    assert out["partition_state"][0]["maximal_isr"] == [1, 2, 3]


def test_stale_partition_epoch_keeps_the_leader_pending_until_metadata():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3, 4])
    s.sync(1); s.sync(2); s.sync(3); s.sync(4)
    s.at(1000).fetch(2); s.fetch(3)
    s.at(50_000).tick(1)                         # 4 never fetched: propose [1, 2, 3] with partition epoch 0
    s.fence(2)                                   # meanwhile the controller moves to partition epoch 1
    a = s.ap_arrive()
    b = s.ap_response()
    t = s.tick(1)                                # still pending: no new proposal
    s.sync(1)                                    # metadata arrives: the pending state is dropped
    c = s.tick(1)
    out = run_events(s.events, {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit",
                                "isr.expiration.interval.ms": "0"})
    r = last(out, "alter_partition", seq=a)
    assert (r["phase"], r["error"]) == ("REJECTED", "INVALID_UPDATE_VERSION")       # A19 step 7
    r = last(out, "alter_partition", seq=b)
    assert (r["phase"], r["error"]) == ("IGNORED", "INVALID_UPDATE_VERSION")        # B10: stays pending
    assert not rows(out, "alter_partition", seq=t)
    r = last(out, "alter_partition", seq=c, phase="PROPOSED")
    assert (r["proposed_isr"], r["partition_epoch"]) == ([1, 3], 1)


def test_controlled_shutdown_moves_leadership_and_elr_like_fence():
    s = three()
    seq = s.shutdown(1)
    out = run_events(s.events, {"min.insync.replicas": "3"})
    r = last(out, "metadata_log", seq=seq)
    assert (r["leader"], r["isr"], r["elr"]) == (2, [2, 3], [1])
    assert last(out, "elections", seq=seq)["election"] == "ISR"


def test_crashed_leader_parked_produce_never_answered():
    s = three()
    seq = s.produce(1, 1, acks=-1)
    s.crash(1)
    out = run_events(s.events)
    assert last(out, "produce", seq=seq)["result"] == "NETWORK_EXCEPTION"


def test_fetch_of_a_crashed_broker_is_a_noop_that_reports_no_replica():
    """A Fetch row naming a broker whose process has crashed: no request leaves it (NOOP), and the
    row reports no offset or replica state, since the crashed process has none (its log is on disk
    but no fetcher runs); the leader's view of it is unchanged."""
    s = three()
    s.at(10).produce(1, 3)
    s.fetch(2)
    s.at(20).crash(3)
    seq = s.at(30).fetch(3)
    out = run_events(s.events, {"output.fetch": "all"})
    r = last(out, "fetch", seq=seq)
    assert (r["result"], r["target"], r["fetch_offset"], r["replica_leo"], r["replica_hwm"]) == \
        ("NOOP", None, None, None, None)
    reps = {x["broker"]: x for x in out["partition_state"][0]["replica_states"]}
    assert reps[3]["alive"] is False and reps[3]["leo"] == 0
