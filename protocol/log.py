"""One replica's log, as far as replication cares: a leader-epoch cache, the records'
identities, the log end offset and the local high watermark.

A record's identity is (leader epoch, writer incarnation). Kafka identifies records by
(epoch, offset) -- log matching -- and that holds as long as one leader incarnation
writes each epoch. The incarnation (the writer's broker epoch) makes the model exact
even when the stream breaks that assumption (a leader that lost its log and came back
in the same epoch), so the invariants can say so instead of trusting it.
"""
from __future__ import annotations

from bisect import bisect_right

UNDEFINED = -1


class ReplicaLog:
    __slots__ = ("cache", "runs", "leo", "hwm")

    def __init__(self) -> None:
        # [(epoch, start_offset)], strictly increasing in both (LeaderEpochFileCache).
        self.cache: list[tuple[int, int]] = []
        # [(start_offset, epoch, incarnation)]: each run ends where the next starts (or at leo).
        self.runs: list[tuple[int, int, int]] = []
        self.leo = 0
        self.hwm = 0

    # -- epoch cache (C4, C5) ------------------------------------------------------
    def latest_epoch(self) -> int:
        return self.cache[-1][0] if self.cache else UNDEFINED

    def assign(self, epoch: int, start: int) -> None:
        """C5 LeaderEpochFileCache.assign."""
        cache = self.cache
        if cache:
            le, ls = cache[-1]
            if le == epoch and start >= ls:
                return
            while cache and (cache[-1][0] >= epoch or cache[-1][1] >= start):
                cache.pop()
        cache.append((epoch, start))

    def end_offset_for(self, req: int) -> tuple[int, int]:
        """C4 endOffsetFor(requestedEpoch) -> (epoch, end offset)."""
        cache = self.cache
        if req == UNDEFINED or not cache:
            return UNDEFINED, UNDEFINED
        if req == cache[-1][0]:
            return req, self.leo
        # first entry with epoch > req
        i = 0
        n = len(cache)
        while i < n and cache[i][0] <= req:
            i += 1
        if i == n:
            return UNDEFINED, UNDEFINED
        if i == 0:
            return req, cache[0][1]
        return cache[i - 1][0], cache[i][1]

    # -- records -----------------------------------------------------------------
    def append(self, epoch: int, inc: int, count: int) -> int:
        """Leader append of `count` records in `epoch`; returns the base offset."""
        base = self.leo
        self.assign(epoch, base)
        runs = self.runs
        if not runs or runs[-1][1] != epoch or runs[-1][2] != inc:
            runs.append((base, epoch, inc))
        self.leo = base + count
        return base

    def copy_from(self, src: "ReplicaLog", start: int, end: int) -> None:
        """Follower append of src's records [start, end) at our LEO (== start)."""
        if end <= start:
            return
        runs = src.runs
        i = bisect_right(runs, (start, 1 << 62, 0)) - 1
        mine = self.runs
        while i < len(runs):
            s, e, inc = runs[i]
            if s >= end:
                break
            s = max(s, start)
            self.assign(e, s)
            if not mine or mine[-1][1] != e or mine[-1][2] != inc:
                mine.append((s, e, inc))
            i += 1
        self.leo = end

    def truncate_to(self, offset: int) -> None:
        """UnifiedLog.truncateTo: drop [offset, leo); cache entries starting at or after it.

        At or past the log end nothing is dropped from the log, but the epoch cache is still cut
        at the log end (truncateFromEndAsyncFlush(logEndOffset)): a replica that led an epoch
        without appending to it holds an entry starting at its LEO that conflicts with the new
        leader's; kept, it would make the follower diverge on every fetch and never rejoin."""
        if offset >= self.leo:
            cache, leo = self.cache, self.leo
            while cache and cache[-1][1] >= leo:
                cache.pop()
            return
        self.leo = offset
        runs = self.runs
        while runs and runs[-1][0] >= offset:
            runs.pop()
        cache = self.cache
        while cache and cache[-1][1] >= offset:
            cache.pop()
        if self.hwm > offset:
            self.hwm = offset

    def identity_at(self, offset: int) -> tuple[int, int] | None:
        if offset < 0 or offset >= self.leo or not self.runs:
            return None
        i = bisect_right(self.runs, (offset, 1 << 62, 0)) - 1
        if i < 0:
            return None
        r = self.runs[i]
        return r[1], r[2]

    def epoch_at(self, offset: int) -> int:
        ident = self.identity_at(offset)
        return ident[0] if ident else UNDEFINED

    def load_snapshot(self, epoch_starts: dict[int, int], leo: int, hwm: int) -> None:
        """ReplicaSnapshot: records of a loaded log are identified by epoch alone (incarnation 0)."""
        self.cache = []
        self.runs = []
        starts = sorted(epoch_starts.items())
        if leo > 0 and (not starts or starts[0][1] > 0):
            # records below the first cached epoch: unknown epoch, assumed to match everywhere
            self.runs.append((0, UNDEFINED, 0))
        for e in sorted(epoch_starts):
            s = epoch_starts[e]
            self.cache.append((e, s))
            if s < leo:
                if self.runs and self.runs[-1][0] == s:
                    self.runs.pop()
                self.runs.append((s, e, 0))
        self.leo = leo
        self.hwm = min(hwm, leo)

    def to_tuple(self) -> tuple:
        return (self.cache, self.runs, self.leo, self.hwm)

    @classmethod
    def from_tuple(cls, t) -> "ReplicaLog":
        log = cls()
        log.cache = [tuple(x) for x in t[0]]
        log.runs = [tuple(x) for x in t[1]]
        log.leo = t[2]
        log.hwm = t[3]
        return log


def runs_prefix(runs: list[tuple[int, int, int]], end: int) -> list[tuple[int, int, int]]:
    """The runs that cover [0, end)."""
    out = []
    for r in runs:
        if r[0] >= end:
            break
        out.append(r)
    return out


def first_mismatch(a: list, a_end: int, b: list, b_end: int, upto: int) -> int | None:
    """First offset < upto where run lists a and b disagree (a missing record counts)."""
    limit = min(upto, a_end, b_end)
    if a is b:
        return None if limit >= upto else limit
    # walk both run lists over boundaries
    i = j = 0
    na, nb = len(a), len(b)
    off = 0
    while off < limit:
        while i + 1 < na and a[i + 1][0] <= off:
            i += 1
        while j + 1 < nb and b[j + 1][0] <= off:
            j += 1
        if i >= na or j >= nb or a[i][0] > off or b[j][0] > off:
            return off
        if a[i][1] != b[j][1] or a[i][2] != b[j][2]:
            return off
        nxt = limit
        if i + 1 < na and a[i + 1][0] < nxt:
            nxt = a[i + 1][0]
        if j + 1 < nb and b[j + 1][0] < nxt:
            nxt = b[j + 1][0]
        off = nxt
    return None if limit >= upto else limit
