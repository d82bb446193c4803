"""`compare` verdicts besides "A is safer": B safer, equally safe, safe but unequal availability,
equally unsafe, and mixed outcomes -- on hand-built summaries (jobs.compare.compare_summaries is a
pure function of two summaries), with the expected sentences written by hand."""
import copy

from jobs.compare import compare_summaries, format_compare


def summary(*, lost=0, lost_parts=0, vio=None, hwm=0, leaderless_ms=0, leaderless_parts=0, at_end=0,
            under_ms=0, under_parts=0, produce=None, config=None, stream="/s"):
    vio = vio or {}
    return {
        "events": 100, "rejected": 0, "partitions": 4, "duration_ms": 90_000,
        "elections": {"total": 3, "leader_changes": 2, "by_type": {"ISR": 2}},
        "leaderless": {"total_ms": leaderless_ms, "max_ms": leaderless_ms, "partitions": leaderless_parts,
                       "at_end": at_end, "worst": []},
        "under_min_isr": {"total_ms": under_ms, "max_ms": under_ms, "partitions": under_parts},
        "acked_lost": {"records": lost, "partitions": lost_parts,
                       "worst": [{"topic": "t0", "partition": 1, "records": lost}] if lost else []},
        "hwm_regressions": {"total": hwm},
        "violations": {"total": sum(vio.values()), "partitions": 1 if vio else 0, "by_invariant": dict(vio)},
        "produce": {"total": 10, "acks_all_acked_records": 20, "by_result": produce or {"ACKED": 10}},
        "config": config or {"min.insync.replicas": "2"},
        "stream": stream,
        "tables": "/t", "min_isr_source": "the stream's AlterConfig",
    }


def v(a, b):
    return compare_summaries(a, b)["verdict"]


def test_b_is_safer():
    a = summary(lost=7, lost_parts=2, vio={"AckedRecordsDurable": 2, "LeaderCompleteness": 2}, hwm=2,
                config={"eligible.leader.replicas.enable": "false"})
    b = summary(config={"eligible.leader.replicas.enable": "true"})
    text = v(a, b)
    assert text.startswith("The runs differ in eligible.leader.replicas.enable=false in A vs true in B.")
    assert "A lost 7 acknowledged acks=all records in 2 partitions; B lost none." in text
    assert ("A had 4 invariant violations (AckedRecordsDurable 2, LeaderCompleteness 2); B had none." in text)
    assert "The high watermark went backwards 2 times in A and 0 times in B." in text
    assert text.endswith("B is the safer configuration on this schedule.")


def test_b_safer_at_the_cost_of_availability():
    a = summary(lost=1, lost_parts=1, vio={"AckedRecordsDurable": 1})
    b = summary(leaderless_ms=65_000, leaderless_parts=1, at_end=1)
    text = v(a, b)
    assert "A lost 1 acknowledged acks=all record in 1 partition; B lost none." in text
    assert ("Availability: A always had a leader; B had 1 partition without a leader for 1 min 05 s in total "
            "(worst 1 min 05 s, 1 still leaderless at the end).") in text
    assert text.endswith("B is the safer configuration on this schedule, at the cost of more time without a "
                         "leader than A.")


def test_equal_and_safe():
    text = v(summary(), summary())
    assert text == ("Neither run lost acknowledged acks=all records. Neither run broke a safety invariant. "
                    "Every partition had a leader throughout in both runs. Both are safe on this schedule.")


def test_both_safe_one_more_available():
    text = v(summary(leaderless_ms=1500, leaderless_parts=1), summary(leaderless_ms=500, leaderless_parts=1))
    assert "Availability: A had 1 partition without a leader for 1.5 s in total (worst 1.5 s); B had 1 partition" in text
    assert text.endswith("Both are safe on this schedule; B is more available.")
    assert v(summary(leaderless_ms=500, leaderless_parts=1), summary(leaderless_ms=1500, leaderless_parts=1)
             ).endswith("Both are safe on this schedule; A is more available.")


def test_equally_unsafe_names_no_safer_side():
    bad = dict(lost=3, lost_parts=1, vio={"LeaderCompleteness": 1}, hwm=1)
    text = v(summary(**bad), summary(**bad))
    assert "B lost 3 acknowledged acks=all records in 1 partition; A lost 3" in text
    assert "safer" not in text and "Both are safe" not in text


def test_mixed_outcome_lost_records_weigh_first():
    # A loses acknowledged records, B loses none but breaks more invariants: the verdict ranks
    # (acked records lost, violations, HWM regressions) in that order, so B is safer
    a = summary(lost=2, lost_parts=1, vio={"AckedRecordsDurable": 1})
    b = summary(vio={"UncleanExclusion": 3, "LeaderCandidateCompleteness": 2})
    text = v(a, b)
    assert "A lost 2 acknowledged acks=all records in 1 partition; B lost none." in text
    assert "B had 5 invariant violations (UncleanExclusion 3, LeaderCandidateCompleteness 2); A had 1" in text
    assert text.endswith("B is the safer configuration on this schedule.")
    # same losses: fewer violations is safer, then fewer HWM regressions
    assert v(summary(vio={"X": 2}), summary(vio={"X": 1})).endswith("B is the safer configuration on this schedule.")
    assert v(summary(vio={"X": 1}, hwm=1), summary(vio={"X": 1}, hwm=2)).endswith(
        "A is the safer configuration on this schedule.")


def test_different_streams_are_flagged_and_failed_produces_counted():
    a = summary(stream="/s1", produce={"ACKED": 5, "NOT_ENOUGH_REPLICAS": 2})
    b = summary(stream="/s2", produce={"ACKED": 7, "REQUEST_TIMED_OUT": 1, "NOT_LEADER_OR_FOLLOWER": 3})
    r = compare_summaries(a, b)
    assert r["same_stream"] is False
    assert "Warning: the two runs replayed different streams, so the comparison is not a what-if." in r["verdict"]
    assert "Failed produce requests: 2 in A, 4 in B." in r["verdict"]
    assert r["config_diff"] == {}


def test_metric_deltas_and_text_table():
    a = summary(lost=1, lost_parts=1, vio={"AckedRecordsDurable": 1}, under_ms=2000, under_parts=1)
    b = summary(under_ms=500, under_parts=1)
    r = compare_summaries(a, copy.deepcopy(b))
    m = {x["key"]: x for x in r["metrics"]}
    assert (m["acked_lost.records"]["a"], m["acked_lost.records"]["b"], m["acked_lost.records"]["delta"]) == (1, 0, -1)
    assert m["under_min_isr.total_ms"]["delta"] == -1500
    assert m["violations.by_invariant.AckedRecordsDurable"]["delta"] == -1
    assert "Time under min ISR: 2 s in A (1 partition), 500 ms in B (1 partition)." in r["verdict"]
    text = format_compare(r)
    assert "Verdict:" in text and "B is the safer" in text.replace("\n  ", " ")
    assert "A: partitions that lost the most acknowledged records: t0-1 (1)" in text
    line = [x for x in text.splitlines() if x.startswith("acks=all records acked then lost")][0]
    assert line.split()[-3:] == ["1", "0", "-1"]
