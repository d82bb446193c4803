"""Controller rules (kafka_rules A1-A22): registration, elections, ELR, AlterPartition validation,
reassignment, admin elections."""
from tests.engine_util import rows, run_events
from tests.streams import S


def last(out, table, **m):
    r = rows(out, table, **m)
    assert r, f"no {table} row matching {m}"
    return r[-1]


def test_create_partition_isr_is_active_replicas_in_replica_order():
    s = S().up(1, 2)
    s.register(3)                         # registered but fenced
    s.create([3, 2, 1])
    out = run_events(s.events)
    r = last(out, "metadata_log", cause="CreatePartition")
    assert (r["isr"], r["leader"], r["leader_epoch"], r["partition_epoch"]) == ([2, 1], 2, 0, 0)   # A2
    assert r["elr"] == [] and r["last_known_elr"] == []


def test_create_partition_without_active_replica_fails():
    s = S()
    s.register(1)
    seq = s.create([1])
    out = run_events(s.events)
    assert last(out, "admin", seq=seq)["result"] == "INVALID_REPLICA_ASSIGNMENT"
    assert not out.get("metadata_log")


def test_fence_follower_no_leader_epoch_bump():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.fence(3)
    out = run_events(s.events)
    r = last(out, "metadata_log", seq=seq)
    assert (r["isr"], r["leader"], r["leader_epoch"], r["partition_epoch"]) == ([1, 2], 1, 0, 1)   # A3, A10
    assert not rows(out, "elections", seq=seq)


def test_fence_leader_elects_first_isr_member_in_replica_order():
    s = S().up(1, 2, 3)
    s.create([1, 3, 2])
    seq = s.fence(1)
    out = run_events(s.events)
    r = last(out, "metadata_log", seq=seq)
    assert (r["leader"], r["leader_epoch"], r["isr"]) == (3, 1, [3, 2])   # A6: replica order
    e = last(out, "elections", seq=seq)
    assert (e["old_leader"], e["new_leader"], e["election"]) == (1, 3, "ISR")


def test_elr_populated_below_min_isr_and_cleared_at_min_isr():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    seq = s.fence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    r = last(out, "metadata_log", seq=seq)
    assert r["isr"] == [1] and r["elr"] == [2]                                   # A11
    assert last(out, "metadata_log", seq=seq - 1)["elr"] == []


def test_elr_off_isr_never_empty_and_leader_goes_to_none():
    s = S().up(1, 2)
    s.create([1, 2])
    s.fence(2)
    seq = s.fence(1)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    r = last(out, "metadata_log", seq=seq)
    assert (r["isr"], r["leader"], r["elr"]) == ([1], -1, [])                   # A9


def test_elr_member_elected_when_unfenced_and_last_known_leader_recorded():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.fence(2)
    s.fence(1)
    seq_u = s.unfence(2)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    leaderless = last(out, "metadata_log", seq=seq_u - 1)
    assert leaderless["isr"] == [] and sorted(leaderless["elr"]) == [1, 2] and leaderless["leader"] == -1
    assert leaderless["last_known_elr"] == [1]                                    # A12: last known leader
    r = last(out, "metadata_log", seq=seq_u)
    assert (r["leader"], r["isr"], r["elr"], r["last_known_elr"]) == (2, [2], [1], [])   # A7
    assert last(out, "elections", seq=seq_u)["election"] == "ELR"


def test_unclean_registration_removes_from_isr_and_elr():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.fence(2)                           # ISR [1], ELR [2]
    s.crash(2)
    seq = s.restart(2, clean=False)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    r = last(out, "metadata_log", seq=seq)
    assert r["isr"] == [1] and r["elr"] == []                                     # A17


def test_clean_registration_keeps_elr_membership():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.shutdown(2)
    s.crash(2, clean=True)
    s.fence(2)
    s.at(9001)                           # after the old session (broker.session.timeout.ms) expired
    seq = s.restart(2, clean=True)       # previous_broker_epoch = registered epoch: clean (KIP-966)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    assert last(out, "admin", seq=seq)["detail"] == "clean restart"
    assert not rows(out, "metadata_log", seq=seq)
    assert out["partition_state"][0]["elr"] == [2]


def test_last_known_leader_elected_only_once_unfenced_as_unclean():
    s = S().up(1, 2)
    s.create([1, 2])
    s.fence(2)
    s.crash(2)
    s.fence(1)                          # leaderless: ISR [], ELR [1, 2], LKE [1]
    s.crash(1)
    s.restart(2, clean=False)           # ELR [1]
    seq = s.restart(1, clean=False)     # ELR []
    seq_u = s.unfence(1)
    out = run_events(s.events, {"min.insync.replicas": "2"})
    r = last(out, "metadata_log", seq=seq)
    assert (r["isr"], r["elr"], r["leader"], r["last_known_elr"]) == ([], [], -1, [1])
    r = last(out, "metadata_log", seq=seq_u)
    assert (r["leader"], r["isr"], r["leader_recovery_state"], r["last_known_elr"]) == (1, [1], "RECOVERING", [])
    assert last(out, "elections", seq=seq_u)["election"] == "LAST_KNOWN_ELR"


def test_unclean_leader_election_enable_elects_first_acceptable_replica():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.fence(2)
    s.fence(1)
    seq = s.unfence(3)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false", "unclean.leader.election.enable": "true"})
    r = last(out, "metadata_log", seq=seq)
    assert (r["leader"], r["isr"], r["leader_recovery_state"]) == (3, [3], "RECOVERING")
    assert last(out, "elections", seq=seq)["election"] == "UNCLEAN"


def test_unclean_recovery_manager_balanced_picks_longest_log():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.produce(1, 3, acks=1)
    s.fetch(2); s.fetch(2)              # 2 has 3 records, 3 none
    s.fence(3); s.fence(2); s.fence(1)
    for b in (1, 2, 3):
        s.crash(b)
    s.loss(1, 1)                        # the old leader lost two records
    for b in (3, 2, 1):
        s.restart(b, clean=False)       # all unclean: ELR empties, LKE collects them
    s.unfence(3)
    s.unfence(1)
    seq = s.unfence(2)
    out = run_events(s.events, {"min.insync.replicas": "2", "unclean.recovery.manager.enabled": "true"})
    assert not rows(out, "elections", seq=seq - 1, new_leader=1)
    e = last(out, "elections", seq=seq)
    assert e["new_leader"] == 2 and e["election"] == "LAST_KNOWN_ELR"   # balanced: all LKE unfenced, longest log


def test_alter_partition_validation_order():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    s.fetch(3)
    seq = s.ap_arrive()
    out = run_events(s.events, {"delivery.alter_partition": "explicit"})
    assert last(out, "alter_partition", seq=seq)["phase"] == "ACCEPTED"


def test_alter_partition_fenced_leader_epoch_after_election():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3)
    s.unfence(3)
    s.fetch(3)                           # leader 1 proposes [1, 2, 3]
    s.fence(1)                           # leader moves to 2, epoch 1
    seq = s.ap_arrive()
    s.ap_response()
    out = run_events(s.events, {"delivery.alter_partition": "explicit"})
    r = last(out, "alter_partition", seq=seq)
    assert (r["phase"], r["error"]) == ("REJECTED", "FENCED_LEADER_EPOCH")     # A19 step 5


def test_reassignment_grow_then_complete_bumps_leader_epoch_when_removing():
    s = S().up(1, 2, 3, 4)
    s.create([1, 2, 3])
    seq = s.reassign([1, 2, 4])
    s.fetch(4)
    out = run_events(s.events)
    r = last(out, "metadata_log", seq=seq)
    assert (r["replicas"], r["adding"], r["removing"]) == ([1, 2, 4, 3], [4], [3])   # A22
    assert r["leader_epoch"] == 0
    done = last(out, "metadata_log", cause="AlterPartition")
    assert (done["replicas"], sorted(done["isr"]), done["adding"], done["removing"]) == ([1, 2, 4], [1, 2, 4], [], [])
    assert done["leader_epoch"] == 1                                            # A10a removal bump


def test_reassignment_cancel_without_reassignment():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    seq = s.reassign(None)
    out = run_events(s.events)
    assert last(out, "admin", seq=seq)["result"] == "NO_REASSIGNMENT_IN_PROGRESS"


def test_elect_leaders_preferred_and_not_needed():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(1)
    s.unfence(1)
    s.fetch(1)                           # 1 rejoins the ISR
    seq = s.elect("PREFERRED")
    seq2 = s.elect("PREFERRED")
    seq3 = s.elect("UNCLEAN")
    out = run_events(s.events)
    assert last(out, "admin", seq=seq)["result"] == "NONE"
    assert last(out, "elections", seq=seq)["election"] == "PREFERRED"
    assert last(out, "admin", seq=seq2)["result"] == "ELECTION_NOT_NEEDED"
    assert last(out, "admin", seq=seq3)["result"] == "ELECTION_NOT_NEEDED"


def test_auto_leader_rebalance_on_event_time():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(1)
    s.unfence(1)
    s.fetch(1)
    s.at(301_000).fetch(2)
    out = run_events(s.events)
    r = last(out, "metadata_log", cause="AutoLeaderRebalance")
    assert r["leader"] == 1 and r["ts_ms"] == 300_000


def test_designated_election_for_leaderless_partition():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.fence(3); s.fence(2); s.fence(1)
    s.unfence(3)
    seq = s.elect("DESIGNATED", target=3)
    out = run_events(s.events, {"eligible.leader.replicas.enable": "false"})
    assert last(out, "admin", seq=seq)["result"] == "NONE"
    r = last(out, "metadata_log", seq=seq)
    assert (r["leader"], r["isr"], r["leader_recovery_state"]) == (3, [3], "RECOVERING")


def test_duplicate_registration_while_unfenced():
    s = S().up(1)
    seq = s.add(type="BrokerRegister", broker=1, broker_epoch=500, previous_broker_epoch=101)
    out = run_events(s.events)
    assert last(out, "admin", seq=seq)["result"] == "DUPLICATE_BROKER_REGISTRATION"
    assert out["_cluster"].brokers[1].epoch == 101          # retried once the old session expires


def test_duplicate_registration_after_controlled_shutdown_until_session_expires():
    # Kafka 4.4.0 (real cluster): the controlled-shutdown fence does not end the session
    s = S().up(1, 2)
    s.at(10).shutdown(2)
    s.fence(2)
    s.crash(2, clean=True)
    seq = s.at(5000).restart(2, clean=True)
    s.at(9011).fetch(1, topic="t", partition=0)
    out = run_events(s.events)
    assert rows(out, "admin", seq=seq)[0]["result"] == "DUPLICATE_BROKER_REGISTRATION"
    r = [r for r in out["admin"] if r["broker"] == 2]
    assert [(x["type"], x["result"], x["ts_ms"]) for x in r[1:]] == [
        ("BrokerRegister", "DUPLICATE_BROKER_REGISTRATION", 5000), ("BrokerFence", "NONE", 9011),
        ("BrokerRegister", "NONE", 9011)]


def test_broker_epoch_going_backwards_is_rejected():
    s = S().up(1)
    s.fence(1)
    seq = s.add(type="BrokerRegister", broker=1, broker_epoch=50, previous_broker_epoch=-1)
    out = run_events(s.events)
    assert "epoch going backwards" in last(out, "rejected", seq=seq)["reason"]


def test_a_registration_at_the_same_epoch_is_rejected_even_at_epoch_zero():
    """"Not above" includes equal, and epoch 0 is a broker epoch like any other (the schema allows
    it): a second BrokerRegister of broker 1 at epoch 0 is the same incarnation registering again,
    a row out of its place, not a new process (no admin answer, no session change)."""
    s = S()
    s.register(1, epoch=0)
    s.unfence(1)
    s.fence(1)
    seq = s.register(1, epoch=0)
    out = run_events(s.events)
    assert last(out, "rejected", seq=seq)["reason"].endswith(
        "broker_epoch 0 is not above broker 1's current epoch 0 (epoch going backwards)")
    assert not rows(out, "admin", seq=seq)
