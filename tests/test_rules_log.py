"""protocol/log.py against kafka_rules C4/C5 (LeaderEpochFileCache) and C6 (truncation), with
hand-written expectations -- every boundary checked from both sides."""
import pytest

from protocol.log import UNDEFINED, ReplicaLog, first_mismatch, runs_prefix
from protocol.replica import FollowerState


def log_with(cache, leo, runs=None, hwm=0):
    lg = ReplicaLog()
    lg.cache = list(cache)
    lg.runs = list(runs if runs is not None else [(s, e, 0) for e, s in cache if s < leo])
    lg.leo = leo
    lg.hwm = hwm
    return lg


# ---------------------------------------------------------------- C5 assign
def test_assign_same_epoch_at_or_after_latest_start_is_a_no_op():
    lg = log_with([(1, 0), (3, 10)], 20)
    lg.assign(3, 10)
    lg.assign(3, 15)
    assert lg.cache == [(1, 0), (3, 10)]


def test_assign_same_epoch_before_latest_start_replaces_it():
    lg = log_with([(1, 0), (3, 10)], 20)
    lg.assign(3, 9)                                   # start < latest start: not a no-op
    assert lg.cache == [(1, 0), (3, 9)]


def test_assign_removes_tail_entries_with_epoch_or_start_at_least_the_new_one():
    lg = log_with([(1, 0), (3, 10), (5, 20)], 30)
    lg.assign(4, 25)                                  # epoch 5 >= 4 goes; (3, 10) stays
    assert lg.cache == [(1, 0), (3, 10), (4, 25)]
    lg = log_with([(1, 0), (3, 10), (5, 20)], 30)
    lg.assign(6, 10)                                  # starts 10 and 20 >= 10 go
    assert lg.cache == [(1, 0), (6, 10)]
    lg = log_with([(1, 0), (3, 10)], 30)
    lg.assign(4, 11)                                  # neither condition: appended
    assert lg.cache == [(1, 0), (3, 10), (4, 11)]
    lg = log_with([(1, 0), (3, 10)], 30)
    lg.assign(2, 11)                                  # epoch 3 >= 2: removed, even though start 10 < 11
    assert lg.cache == [(1, 0), (2, 11)]


def test_assign_on_empty_cache():
    lg = ReplicaLog()
    lg.assign(0, 0)
    assert lg.cache == [(0, 0)] and lg.latest_epoch() == 0
    assert log_with([(1, 0), (3, 10)], 20).latest_epoch() == 3
    assert ReplicaLog().latest_epoch() == UNDEFINED == -1


# ---------------------------------------------------------------- C4 endOffsetFor
CACHE = [(2, 5), (4, 12), (7, 20)]


@pytest.mark.parametrize("req, want", [
    (-1, (-1, -1)),          # undefined epoch
    (7, (7, 30)),            # latest epoch -> (req, LEO)
    (8, (-1, -1)),           # no entry with epoch > req
    (0, (0, 5)),             # no entry <= req -> (req, start of first entry > req)
    (1, (1, 5)),
    (2, (2, 12)),            # exact entry -> its epoch, start of the next
    (3, (2, 12)),            # floor entry's epoch, start of first entry > req
    (4, (4, 20)),
    (5, (4, 20)),
    (6, (4, 20)),
])
def test_end_offset_for(req, want):
    assert log_with(CACHE, 30).end_offset_for(req) == want


def test_end_offset_for_empty_cache_is_undefined():
    assert ReplicaLog().end_offset_for(0) == (-1, -1)


# ---------------------------------------------------------------- truncation boundary (C6, UL#truncateTo)
def test_truncate_to_drops_entries_starting_at_or_after_the_offset():
    lg = log_with([(1, 0), (3, 10), (5, 20)], 30, hwm=25)
    lg.truncate_to(20)                                # entry (5, 20) starts exactly at 20: dropped
    assert lg.cache == [(1, 0), (3, 10)]
    assert lg.runs == [(0, 1, 0), (10, 3, 0)]
    assert (lg.leo, lg.hwm) == (20, 20)


def test_truncate_to_keeps_an_entry_starting_just_below_the_offset():
    lg = log_with([(1, 0), (3, 10), (5, 20)], 30, hwm=5)
    lg.truncate_to(21)
    assert lg.cache == [(1, 0), (3, 10), (5, 20)]
    assert lg.runs == [(0, 1, 0), (10, 3, 0), (20, 5, 0)]
    assert (lg.leo, lg.hwm) == (21, 5)               # HWM below the new LEO is kept


def test_truncate_to_hwm_equal_to_offset_is_kept():
    lg = log_with([(1, 0)], 30, hwm=21)
    lg.truncate_to(21)
    assert (lg.leo, lg.hwm) == (21, 21)
    lg.truncate_to(20)
    assert (lg.leo, lg.hwm) == (20, 20)


def test_truncate_to_at_or_beyond_leo_changes_nothing():
    lg = log_with([(1, 0), (3, 10)], 20, hwm=20)
    lg.truncate_to(20)
    lg.truncate_to(25)
    assert (lg.cache, lg.leo, lg.hwm) == ([(1, 0), (3, 10)], 20, 20)


def test_truncate_to_at_or_beyond_leo_still_cuts_the_epoch_cache_at_the_leo():
    # UnifiedLog.truncateTo: "Always truncate epoch cache since we may have a conflicting epoch
    # entry at the end of the log from the leader" -- truncateFromEnd(logEndOffset). Seen in a real
    # 4.4.0 recording (tests/data/kafka/elections): a broker elected for epoch 5 that appended
    # nothing holds (5, 20) at its LEO; without the cut it diverges on every fetch.
    lg = log_with([(1, 0), (3, 10), (5, 20)], 20, runs=[(0, 1, 0), (10, 3, 0)], hwm=20)
    lg.truncate_to(25)
    assert (lg.cache, lg.leo, lg.hwm) == ([(1, 0), (3, 10)], 20, 20)
    lg = log_with([(1, 0), (3, 10), (5, 20)], 20, runs=[(0, 1, 0), (10, 3, 0)], hwm=20)
    lg.truncate_to(20)
    assert lg.cache == [(1, 0), (3, 10)]
    lg = log_with([(1, 0), (3, 10), (5, 19)], 20, runs=[(0, 1, 0), (10, 3, 0), (19, 5, 0)], hwm=20)
    lg.truncate_to(20)  # an entry starting below the LEO has records: kept
    assert lg.cache == [(1, 0), (3, 10), (5, 19)]


def test_truncate_to_zero_empties_the_log():
    lg = log_with([(1, 0), (3, 10)], 20, hwm=20)
    lg.truncate_to(0)
    assert (lg.cache, lg.runs, lg.leo, lg.hwm) == ([], [], 0, 0)


# ---------------------------------------------------------------- appends and identities
def test_append_assigns_epoch_at_base_and_merges_runs_of_one_writer():
    lg = ReplicaLog()
    assert lg.append(0, 101, 3) == 0
    assert lg.append(0, 101, 2) == 3                  # same epoch and writer: one run
    assert lg.append(2, 101, 1) == 5
    assert lg.append(2, 201, 1) == 6                  # same epoch, another writer: a new run
    assert lg.cache == [(0, 0), (2, 5)]
    assert lg.runs == [(0, 0, 101), (5, 2, 101), (6, 2, 201)]
    assert lg.leo == 7
    assert [lg.identity_at(o) for o in (-1, 0, 4, 5, 6, 7)] == [None, (0, 101), (0, 101), (2, 101), (2, 201), None]
    assert lg.epoch_at(5) == 2 and lg.epoch_at(7) == UNDEFINED


def test_copy_from_copies_a_range_with_epochs_and_writers():
    src = ReplicaLog()
    src.append(0, 1, 4)
    src.append(1, 2, 4)
    src.append(3, 3, 2)
    dst = ReplicaLog()
    dst.copy_from(src, 0, 6)
    assert (dst.cache, dst.runs, dst.leo) == ([(0, 0), (1, 4)], [(0, 0, 1), (4, 1, 2)], 6)
    dst.copy_from(src, 6, 6)                          # empty range: nothing
    assert dst.leo == 6
    dst.copy_from(src, 6, 10)
    assert (dst.cache, dst.runs, dst.leo) == ([(0, 0), (1, 4), (3, 8)], [(0, 0, 1), (4, 1, 2), (8, 3, 3)], 10)
    assert first_mismatch(dst.runs, dst.leo, src.runs, src.leo, 10) is None


def test_load_snapshot():
    lg = ReplicaLog()
    lg.load_snapshot({2: 5, 4: 12}, 20, 30)
    assert lg.cache == [(2, 5), (4, 12)]
    assert lg.runs == [(0, -1, 0), (5, 2, 0), (12, 4, 0)]      # unknown-epoch prefix below 5
    assert (lg.leo, lg.hwm) == (20, 20)                         # hwm clamped to LEO
    lg.load_snapshot({0: 0, 4: 12}, 12, 3)
    assert lg.runs == [(0, 0, 0)] and lg.cache == [(0, 0), (4, 12)] and lg.hwm == 3


# ---------------------------------------------------------------- run-list comparisons
def test_first_mismatch_and_runs_prefix():
    a = [(0, 0, 1), (5, 1, 1)]
    b = [(0, 0, 1), (5, 1, 2)]
    assert first_mismatch(a, 10, b, 10, 10) == 5
    assert first_mismatch(a, 10, b, 10, 5) is None              # the mismatch is at the bound: not below it
    assert first_mismatch(a, 10, a[:1], 3, 5) == 3              # b is shorter than upto: its end is the mismatch
    assert first_mismatch(a, 10, a[:1], 5, 5) is None
    assert first_mismatch(a, 10, a, 10, 10) is None
    assert first_mismatch(a, 4, a, 10, 6) == 4                  # same list object, shorter end
    assert first_mismatch([(2, 0, 1)], 10, [(0, 0, 1)], 10, 10) == 0   # a has nothing at 0
    # epochs above the offsets (epoch 50 from offset 5): run boundaries are offsets, never epochs
    assert first_mismatch([(0, 0, 1), (5, 50, 1)], 10, [(0, 0, 1)], 10, 10) == 5
    assert first_mismatch([(0, 0, 1)], 10, [(0, 0, 1), (5, 50, 1)], 10, 10) == 5
    # a later run starting past the bound does not hide the boundary before it
    three = [(0, 0, 1), (3, 1, 1), (8, 2, 1)]
    assert first_mismatch(three, 10, [(0, 0, 1)], 10, 6) == 3
    assert first_mismatch([(0, 0, 1)], 10, three, 10, 6) == 3
    assert runs_prefix(a, 5) == [(0, 0, 1)]
    assert runs_prefix(a, 6) == a
    assert runs_prefix(a, 0) == []


# ---------------------------------------------------------------- B4 caught up
def test_is_caught_up_boundaries():
    fs = FollowerState(leo=10, last_caught_up_ms=1000)
    assert fs.is_caught_up(10, 10**9, 30000)                    # LEO == leader LEO
    assert fs.is_caught_up(11, 31000, 30000)                    # exactly the lag bound: still caught up
    assert not fs.is_caught_up(11, 31001, 30000)
    assert not FollowerState(leo=10).is_caught_up(11, 0, 30000)  # never caught up (not 0)


def test_fresh_log_and_assign_compares_with_the_latest_entry_only():
    lg = ReplicaLog()
    assert (lg.cache, lg.runs, lg.leo, lg.hwm) == ([], [], 0, 0)
    lg = log_with([(1, 0), (3, 10)], 20)
    lg.assign(1, 5)                          # epoch 1 is the first entry, not the latest: not a no-op
    assert lg.cache == [(1, 5)]


def test_copy_from_at_a_run_boundary_adds_no_duplicate_run():
    src = ReplicaLog()
    src.append(0, 1, 4)
    src.append(1, 2, 4)
    dst = ReplicaLog()
    dst.copy_from(src, 0, 4)
    dst.copy_from(src, 4, 8)
    assert dst.runs == [(0, 0, 1), (4, 1, 2)] and dst.cache == [(0, 0), (1, 4)]


def test_load_empty_snapshot():
    lg = ReplicaLog()
    lg.load_snapshot({}, 0, 0)
    assert (lg.cache, lg.runs, lg.leo, lg.hwm) == ([], [], 0, 0)
    lg.load_snapshot({}, 3, 1)               # records of unknown epoch
    assert (lg.runs, lg.leo, lg.hwm) == ([(0, -1, 0)], 3, 1)


def test_first_mismatch_ignores_how_runs_are_split():
    a = [(0, 0, 1)]
    b = [(0, 0, 1), (5, 0, 1)]               # the same records, split in two runs
    assert first_mismatch(a, 10, b, 10, 10) is None
    assert first_mismatch(b, 10, a, 10, 10) is None
    c = [(0, 0, 1), (5, 0, 2)]               # same epoch, another writer from 5
    assert first_mismatch(a, 10, c, 10, 10) == 5
    assert first_mismatch(c, 10, a, 10, 10) == 5


# ---------------------------------------------------------------- record runs (who wrote which offsets)
def test_appends_in_one_epoch_and_incarnation_extend_one_run():
    """A run is (start offset, epoch, incarnation): appends extend the newest run while both match, and
    a new epoch or a new incarnation of the leader (same epoch, restarted) starts a run."""
    lg = ReplicaLog()
    assert lg.append(0, 0, 2) == 0 and lg.append(0, 0, 3) == 2
    assert lg.append(1, 0, 1) == 5 and lg.append(1, 0, 4) == 6
    assert lg.append(1, 1, 2) == 10 and lg.append(1, 1, 1) == 12
    assert lg.runs == [(0, 0, 0), (5, 1, 0), (10, 1, 1)]
    assert lg.leo == 13 and lg.cache == [(0, 0), (1, 5)]


# ---------------------------------------------------------------- C6 getOffsetTruncationState
@pytest.mark.parametrize("cache, leo, e, o, want", [
    # the follower has no epoch <= the leader's diverging epoch e (all its epochs are older):
    # endOffsetFor is UNDEFINED, so it truncates to the leader's end offset, capped at its LEO
    ([(1, 0)], 10, 3, 7, 7),
    ([(1, 0)], 10, 3, 15, 10),
    # its floor epoch for e is another epoch (here 0, the lowest there is): its own end offset
    # of that epoch, not the leader's -- whatever the leader's end offset is
    ([(0, 0), (3, 6)], 9, 2, 8, 6),
    ([(0, 0), (3, 6)], 9, 2, 4, 6),
    ([(1, 0), (3, 6)], 9, 2, 8, 6),
    # the same epoch on both sides: the smaller of the two end offsets
    ([(2, 0), (3, 5)], 9, 2, 7, 5),
    ([(2, 0), (3, 5)], 9, 2, 3, 3),
    ([(0, 0), (2, 4)], 9, 2, 7, 7),
])
def test_truncate_on_divergence_picks_kafkas_truncation_offset(cache, leo, e, o, want):
    from types import SimpleNamespace

    from protocol.broker.follower import truncate_on_divergence
    from protocol.replica import Replica
    changed = []
    p = SimpleNamespace(inv=SimpleNamespace(on_log_change=lambda part, rep: changed.append(rep.broker)))
    frep = Replica(2)
    frep.log = log_with(cache, leo)
    row = {}
    truncate_on_divergence(p, frep, e, o, row)
    assert row == {"truncated_to": want}
    assert frep.log.leo == want and changed == [2]


def test_a_loaded_snapshot_marks_the_records_below_its_first_epoch_unknown():
    """ReplicaSnapshot (load_snapshot): records below the first cached epoch's start offset have an
    unknown epoch (UNDEFINED, incarnation 0: matching everywhere), down to a single record; a cache
    starting at offset 0 leaves none, and an empty log has no records at all."""
    lg = ReplicaLog()
    lg.load_snapshot({5: 1}, 3, 3)
    assert [lg.identity_at(o) for o in range(3)] == [(UNDEFINED, 0), (5, 0), (5, 0)]
    lg.load_snapshot({}, 1, 1)
    assert lg.identity_at(0) == (UNDEFINED, 0) and lg.runs == [(0, UNDEFINED, 0)]
    lg.load_snapshot({5: 0}, 3, 3)
    assert lg.runs == [(0, 5, 0)]
    lg.load_snapshot({0: 2}, 4, 4)                 # epoch 0 itself may start past offset 0
    assert lg.runs == [(0, UNDEFINED, 0), (2, 0, 0)]
    lg.load_snapshot({}, 0, 0)
    assert lg.runs == [] and lg.identity_at(0) is None
