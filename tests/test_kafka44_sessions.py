"""Issue 14.3: broker sessions outlive a controlled shutdown (broker.session.timeout.ms, Kafka 4.4.0).

Real cluster (research/real_kafka_facts.md, "Fencing, registration"): a restarted broker whose previous
incarnation's session has not expired is refused DUPLICATE_BROKER_REGISTRATION (it retries every second);
when the session expires the controller writes {fenced: 1} for the OLD epoch again, even if the
controlled shutdown already fenced it, and accepts the registration right after; the clean restart keeps
its ELR entry and is elected from the ELR on unfence without a leaderRecoveryState change.
Source: ClusterControlManager#registerBroker (BrokerHeartbeatManager#hasValidSession(id, epoch) ->
BrokerHeartbeatTracker: last contact per (id, epoch), expired when now > contact + timeout, fenced or
not), ReplicationControlManager#maybeFenceOneStaleBroker ("Fencing broker B at epoch E because its
session has timed out.": handleBrokerFenced for the registered epoch)."""
from tests.engine_util import rows, run_events
from tests.streams import S

MIN2 = {"min.insync.replicas": "2"}
DUP = "DUPLICATE_BROKER_REGISTRATION"


def _last_member_sigterm():
    """SIGKILL 3, SIGTERM 2, SIGTERM 1 (the last ISR member), restart 1 1.4 s after its exit."""
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(1000).crash(3)                            # SIGKILL
    s.at(6500).fence(3)                            # session timeout (recorded): ISR [1, 2]
    s.at(10_000).shutdown(2)                       # SIGTERM: ISR [1], ELR [2]
    s.at(10_100).fence(2)                          # shutdown granted
    s.at(10_150).crash(2, clean=True)              # process exit: heartbeats stop
    s.at(20_000).shutdown(1)                       # ISR [], leader -1, ELR [1, 2], lastKnownElr [1]
    s.at(21_100).fence(1)
    s.at(21_200).crash(1, clean=True)
    return s


def test_restart_refused_until_old_session_expires_then_second_fence_and_clean_restart():
    s = _last_member_sigterm()
    reg = s.at(22_600).restart(1, clean=True)      # epoch 201, previous 101
    unf = s.at(30_500).unfence(1)
    out = run_events(s.events, MIN2)
    admin = [(r["type"], r["broker"], r["result"], r["seq"], r["ts_ms"]) for r in out["admin"]
             if r["type"] != "CreatePartition" and r["seq"] > 7]
    assert admin == [
        ("BrokerFence", 2, "NONE", 12, 10_150 + 9000 + 1),   # broker 2's old session: fenced again
        ("BrokerRegister", 1, DUP, reg, 22_600),
        ("BrokerFence", 1, "NONE", 15, 21_200 + 9000 + 1),   # the OLD epoch 101 fenced again
        ("BrokerRegister", 1, "NONE", reg, 30_201),          # the retry is accepted right after
    ]
    fence1 = [r for r in out["admin"] if r["type"] == "BrokerFence" and r["broker"] == 1][0]
    assert fence1["detail"] == "Fencing broker 1 at epoch 101 because its session has timed out."
    assert rows(out, "admin", type="BrokerRegister", seq=reg)[-1]["detail"] == "clean restart"
    # the second fences change no partition; the clean restart keeps the ELR entry
    assert not [r for r in out["metadata_log"] if r["ts_ms"] in (19_151, 30_201)]
    r = rows(out, "metadata_log", seq=unf)[0]
    assert (r["leader"], r["isr"], r["elr"], r["last_known_elr"], r["leader_recovery_state"]) == \
        (1, [1], [2], [], "RECOVERED")
    assert rows(out, "elections", seq=unf)[0]["election"] == "ELR"
    assert not out.get("violations")


def test_recorded_retry_row_is_the_same_registration():
    s = _last_member_sigterm()
    reg = s.at(22_600).restart(1, clean=True)
    retry = s.at(30_300).add(type="BrokerRegister", broker=1, broker_epoch=201, previous_broker_epoch=101)
    s.at(30_500).unfence(1)
    out = run_events(s.events, MIN2)
    assert rows(out, "admin", seq=retry)[0]["result"] == "NONE"
    # first registration, the retry accepted at the expiry, the recorded retry row
    assert [r["seq"] for r in rows(out, "admin", type="BrokerRegister", broker=1, result="NONE")] == [1, reg, retry]
    assert not rows(out, "rejected")
    assert out["partition_state"][0]["leader"] == 1


def test_unfence_while_registration_is_retried_applies_once_accepted():
    s = _last_member_sigterm()
    s.at(22_600).restart(1, clean=True)
    s.at(23_000).unfence(1)                        # the new incarnation cannot be unfenced yet
    s.at(31_000).fetch(2)
    out = run_events(s.events, MIN2)
    r = [r for r in out["metadata_log"] if r["cause"] == "BrokerUnfence"][0]
    assert (r["ts_ms"], r["leader"], r["elr"]) == (30_201, 1, [2])


def test_imported_metadata_log_has_the_second_fence_itself():
    # __cluster_metadata: {inControlledShutdown}, {fenced: 1}, {fenced: 1} (session expiry), REGISTER_BROKER
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(10_000).shutdown(2)
    s.at(11_100).fence(2)
    s.at(19_300).fence(2)                          # the old epoch fenced again (in the log)
    reg = s.at(19_400).restart(2, clean=True)
    out = run_events(s.events, MIN2)
    assert rows(out, "admin", seq=reg)[0]["result"] == "NONE"
    assert not rows(out, "admin", type="BrokerFence")    # no engine-made fence: the log had it


def test_sigkill_session_timeout_fence_ends_the_session():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(1000).crash(2)
    s.at(6400).fence(2)                            # "Fencing broker 2 at epoch 102 because its session has timed out."
    reg = s.at(7500).restart(2, clean=False)
    s.at(60_000).fetch(1)
    out = run_events(s.events, MIN2)
    assert rows(out, "admin", seq=reg)[0]["result"] == "NONE"
    assert not rows(out, "admin", type="BrokerFence")


def test_sigstop_sigcont_same_epoch_unfenced_again():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(5400).fence(3)                            # paused: session expired
    seq = s.at(8000).unfence(3)                    # resumed: same epoch, no registration
    s.at(30_000).fetch(1)
    out = run_events(s.events)
    assert not rows(out, "admin", type="BrokerFence")
    assert not rows(out, "admin", type="BrokerRegister", seq=seq)


def test_restart_without_recorded_exit_uses_the_registration_as_the_old_process_end():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    reg = s.at(1000).restart(3, clean=False)       # running and unfenced: no BrokerCrash in the stream
    s.at(20_000).fetch(1)
    out = run_events(s.events)
    assert rows(out, "admin", seq=reg)[0]["result"] == DUP
    fence = rows(out, "admin", type="BrokerFence")[0]
    assert (fence["broker"], fence["seq"], fence["ts_ms"]) == (3, reg, 10_001)
    r = rows(out, "metadata_log", cause="BrokerFence")[0]      # the session-expiry fence takes 3 out of the ISR
    assert (r["isr"], r["seq"], r["ts_ms"]) == ([1, 2], 7, 10_001)   # seq of the partition's latest event
    assert rows(out, "admin", type="BrokerRegister", broker=3)[-1]["ts_ms"] == 10_001


def test_sessions_not_modelled_with_timeout_zero():
    s = S().up(1, 2, 3)
    s.create([1, 2, 3])
    s.at(10).shutdown(2)
    s.fence(2)
    s.crash(2, clean=True)
    reg = s.at(20).restart(2, clean=True)
    s.at(60_000).fetch(1)
    out = run_events(s.events, {"broker.session.timeout.ms": "0"})
    assert rows(out, "admin", seq=reg)[0]["result"] == "NONE"
    assert not rows(out, "admin", type="BrokerFence")


def test_without_sessions_a_refused_registration_is_not_retried():
    """broker.session.timeout.ms=0 (sessions not modelled): a registration while the old incarnation
    is registered and unfenced is refused (DUPLICATE_BROKER_REGISTRATION: hasValidSession is "still
    registered and unfenced" without a tracker), and with no session to expire it is not kept for a
    retry: a later fence ends the old epoch without registering the refused one, and the broker's
    next BrokerUnfence is the old incarnation's, not held for a registration in flight."""
    s = S().up(1, 2)
    s.create([1, 2])
    dup = s.at(10).add(type="BrokerRegister", broker=1, broker_epoch=500, previous_broker_epoch=101)
    s.at(20).fence(1)
    s.at(30).unfence(1)
    out = run_events(s.events, {"broker.session.timeout.ms": "0"})
    assert rows(out, "admin", seq=dup)[0]["result"] == "DUPLICATE_BROKER_REGISTRATION"
    br = out["_cluster"].brokers[1]
    assert (br.epoch, br.fenced, br.pend) == (101, False, None)
    assert not [r for r in out["admin"] if r["type"] == "BrokerRegister" and r["seq"] > dup]


def test_pending_registration_survives_state_encoding():
    s = _last_member_sigterm()
    s.at(22_600).restart(1, clean=True)
    s.at(23_000).unfence(1)
    s.at(40_000).fetch(2)
    a = run_events(s.events, MIN2)
    b = run_events(s.events, MIN2, roundtrip_every=1)
    for t in ("admin", "metadata_log", "elections"):
        assert a[t] == b[t]


def _routed(events, cfg, n_buckets, batch):
    """The Spark engine's routing, in-process: partition rows reach only their bucket (a CreatePartition
    the others as a foreign row), broker-scoped rows every bucket; each micro-batch ends with
    finish(stream time seen so far)."""
    import zlib

    from protocol.cluster import PARTITION_TYPES, Cluster, creation_of
    from protocol.codec import decode_cluster, encode_cluster
    from protocol.config import EngineConfig
    from schemas.events import validate

    conf = EngineConfig(cfg)

    def owns(i):
        return lambda key: zlib.crc32(f"{key[0]}|{key[1]}".encode()) % n_buckets == i
    blobs, out, seen = [None] * n_buckets, {}, 0
    for start in range(0, len(events), batch):
        chunk = [validate(r)[0] for r in events[start:start + batch]]
        seen = max([seen] + [e["ts_ms"] for e in chunk])
        for i in range(n_buckets):
            cl = (decode_cluster(blobs[i], conf, emit_global=i == 0, owns=owns(i)) if blobs[i]
                  else Cluster(conf, emit_global=i == 0, owns=owns(i)))
            for ev in chunk:
                if ev["type"] in PARTITION_TYPES and not cl.owns((ev["topic"], ev["partition"])):
                    made = creation_of(ev["type"], ev["topic"], ev.get("replicas"), ev.get("config"))
                    if made is not None:      # every bucket learns of a creation (its topic, its factor)
                        cl.pass_foreign(ev["seq"], ev["ts_ms"], made)
                    continue
                cl.apply(ev)
            cl.finish(seen)
            for k, v in cl.drain().items():
                out.setdefault(k, []).extend(v)
            blobs[i] = encode_cluster(cl)
    return out


def test_session_timers_are_the_same_in_the_bucketed_layout():
    from tests.engine_util import canonical
    s = S().up(1, 2, 3)
    for p in range(4):
        s.add(type="CreatePartition", topic="t", partition=p, replicas=[1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3])
    for p in range(4):
        s.at(100 + p).add(type="Produce", topic="t", partition=p, broker=1 + p % 3, records=2, acks=1)
    s.at(1000).shutdown(2)
    s.at(1100).fence(2)
    s.at(1150).crash(2, clean=True)
    s.at(2000).restart(2, clean=True)
    s.at(2500).unfence(2)
    s.at(4000).restart(3, clean=False)              # no recorded exit
    for p in range(4):
        s.at(9000 + 3000 * p).add(type="Fetch", topic="t", partition=p, broker=1 + (p + 1) % 3)
    s.at(30_000).tick()
    for md in ("immediate", "explicit"):
        cfg = {"min.insync.replicas": "2", "delivery.metadata": md}
        ref = run_events(s.events, cfg)
        ref.pop("partition_state")
        assert rows(ref, "admin", type="BrokerFence") and rows(ref, "admin", result=DUP)
        for n, batch in ((1, 3), (2, 1), (3, 5), (4, 7)):
            assert canonical(_routed(s.events, cfg, n, batch)) == canonical(ref)


def test_a_one_ms_session_is_a_session():
    """broker.session.timeout.ms=1 models sessions like any positive value (0 alone turns them off): a new
    incarnation registering while the old process still heartbeats ends that process's session at the
    registration (the old process has stopped by then), is refused DUPLICATE_BROKER_REGISTRATION within
    the 1 ms, and is accepted when the session expires (registration + 1 + 1)."""
    s = S().up(1)
    reg = s.at(500).restart(1, clean=True)        # no recorded exit: the old process ends at 500
    s.at(600).tick()
    out = run_events(s.events, {"broker.session.timeout.ms": "1"})
    got = [(r["type"], r["result"], r["ts_ms"]) for r in out["admin"] if r["broker"] == 1]
    assert got == [("BrokerRegister", "NONE", 0), ("BrokerRegister", DUP, 500), ("BrokerFence", "NONE", 502),
                   ("BrokerRegister", "NONE", 502)]
    assert out["_cluster"].brokers[1].epoch == 201


def test_clean_restart_from_broker_epoch_zero():
    """Clean iff the clean-shutdown file's epoch is the registered one -- epoch 0 included (a broker epoch
    is the offset of its registration record: the first record of a log has offset 0)."""
    s = S()
    s.add(type="BrokerRegister", broker=1, broker_epoch=0, previous_broker_epoch=-1)
    s.unfence(1)
    s.at(100).crash(1, clean=True)
    s.at(150).fence(1)
    clean = s.at(200).add(type="BrokerRegister", broker=1, broker_epoch=7, previous_broker_epoch=0)
    s.at(300).crash(1, clean=False)
    s.at(350).fence(1)
    unclean = s.at(400).add(type="BrokerRegister", broker=1, broker_epoch=9, previous_broker_epoch=-1)
    out = run_events(s.events, {"broker.session.timeout.ms": "0"})
    assert rows(out, "admin", seq=clean)[0]["detail"] == "clean restart"
    assert rows(out, "admin", seq=unclean)[0]["detail"] != "clean restart"


def test_a_controlled_shutdown_fence_keeps_an_epoch_zero_session_and_its_refused_registration_waits():
    """Broker epoch 0 is a tracked session like any other (a broker epoch is the offset of its
    registration record). A fence that ends a controlled shutdown keeps the tracker entry, so a
    registration refused meanwhile is accepted only when that session expires (9000 ms after the
    old process stopped heartbeating), not at the fence."""
    s = S()
    s.add(type="BrokerRegister", broker=1, broker_epoch=0, previous_broker_epoch=-1)
    s.unfence(1)
    s.create([1])
    s.at(1_000).shutdown(1)                        # SIGTERM: in controlled shutdown
    reg = s.at(2_000).add(type="BrokerRegister", broker=1, broker_epoch=7, previous_broker_epoch=0)
    s.at(2_100).fence(1)                           # the controlled shutdown's fence (SHUTDOWN_NOW)
    s.at(12_000).tick()
    out = run_events(s.events, MIN2)
    regs = [(r["result"], r["ts_ms"]) for r in rows(out, "admin", type="BrokerRegister", seq=reg)]
    assert regs == [(DUP, 2_000), ("NONE", 2_000 + 9000 + 1)]
    assert out["_cluster"].brokers[1].epoch == 7
