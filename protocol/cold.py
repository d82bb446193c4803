"""Cold partitions: the partitions of a decoded state blob that nothing has used since.

A Spark bucket holds thousands of partitions, and a small micro-batch reaches a few of them. The
bucket's state is decoded and encoded again every batch, so anything done per partition there
(a tuple unpickled, an index entry, a dict slot) makes a batch cost the bucket's size rather than
the batch's: at 100,000 partitions that was ~0.45 s of CPU a batch, most of a 1,000-row batch.
So the cold partitions stay as the blob had them, in columns (`array`s and one bytes buffer)
that pickle and unpickle as memory copies, and every question the router asks of them is
answered from the columns:

    key in cold / cold.pop(key)      bisect in the sorted key codes       O(log n)
    cold.due_by(ts), cold.min_due()  a scan of one int column, in C-level loops
    cold.on_broker(b)                an index built at its first use       O(n) once
    cold.of_topic(t)                 keys are sorted by topic: one range   O(log n + k)
    cold.merged(hot)                 the next blob's columns: runs of the  O(n) memcpy
                                     old ones copied around the hot ones   + O(hot log n)

A key (topic, partition) is coded as topic_id << 32 | partition, with topic ids in topic name
order, so codes sort as keys do and the blob lists partitions in key order. A partition's hosts
(what the router indexes it under: its brokers, and NO_LEADER while it is leaderless, see
Partition.index_keys) and its next timer due are kept beside its encoded bytes, so a broker
change, an unfencing's elections or a due timer find the partitions they reach without decoding
any.
Pure: no I/O; protocol.codec makes and reads the columns.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import accumulate

NO_DUE = 1 << 62          # the dues column's "no timer pending" (None outside this module)
_LOW = 0xFFFFFFFF


class ColdPartitions:
    """Columns, one entry per partition, sorted by code: codes ('q'), dues ('q', NO_DUE for none),
    nhosts ('H': how many hosts), hosts ('i': every entry's hosts in a row), lens ('I': bytes of
    its encoded partition) and data (the encoded partitions back to back). `gone`: positions
    popped (decoded) since; they are left out of every answer and of `merged`."""
    __slots__ = ("topics", "tid", "codes", "dues", "nhosts", "hosts", "lens", "data", "gone",
                 "_offs", "_hoffs", "_brokers", "_min")

    def __init__(self, topics=(), codes=None, dues=None, nhosts=None, hosts=None, lens=None, data=b""):
        self.topics = list(topics)
        self.tid = {t: i for i, t in enumerate(self.topics)}
        self.codes = codes if codes is not None else array("q")
        self.dues = dues if dues is not None else array("q")
        self.nhosts = nhosts if nhosts is not None else array("H")
        self.hosts = hosts if hosts is not None else array("i")
        self.lens = lens if lens is not None else array("I")
        self.data = data
        n = len(self.codes)
        if not (len(self.dues) == len(self.nhosts) == len(self.lens) == n
                and sum(self.nhosts) == len(self.hosts) and sum(self.lens) == len(self.data)):
            raise ValueError("cold partition columns of different lengths")
        self.gone = set()          # (set[int]; unannotated: mypyc refuses annotations in untyped defs)
        self._offs = self._hoffs = self._brokers = None
        self._min = None          # min_due's answer while no pop changes it (a bucket asks twice)

    @classmethod
    def from_entries(cls, entries) -> ColdPartitions:
        """Columns from (key, due or None, hosts, encoded bytes) in key order."""
        topics = sorted({k[0] for k, _, _, _ in entries})
        tid = {t: i for i, t in enumerate(topics)}
        codes, dues, nh, hosts, lens = array("q"), array("q"), array("H"), array("i"), array("I")
        datas = []
        for (topic, pid), due, hs, data in entries:
            codes.append(tid[topic] << 32 | pid)
            dues.append(NO_DUE if due is None else due)
            nh.append(len(hs))
            hosts.extend(hs)
            lens.append(len(data))
            datas.append(data)
        return cls(topics, codes, dues, nh, hosts, lens, b"".join(datas))

    def columns(self) -> tuple:
        """What the blob stores (with nothing gone: encode through `merged`)."""
        return (self.topics, self.codes, self.dues, self.nhosts, self.hosts, self.lens, self.data)

    # ---------------------------------------------------------------- the dict-like part
    def __len__(self) -> int:
        return len(self.codes) - len(self.gone)

    def __bool__(self) -> bool:
        return len(self.codes) > len(self.gone)

    def _key(self, i: int) -> tuple:
        c = self.codes[i]
        return (self.topics[c >> 32], c & _LOW)

    def _pos(self, key) -> int:
        t = self.tid.get(key[0])
        if t is None:
            return -1
        code = t << 32 | key[1]
        codes = self.codes
        i = bisect_left(codes, code)
        if i < len(codes) and codes[i] == code and i not in self.gone:
            return i
        return -1

    def __contains__(self, key) -> bool:
        return self._pos(key) >= 0

    def __iter__(self):
        gone = self.gone
        return (self._key(i) for i in range(len(self.codes)) if i not in gone)

    def _offsets(self):
        if self._offs is None:
            self._offs = list(accumulate(self.lens, initial=0))
            self._hoffs = list(accumulate(self.nhosts, initial=0))
        return self._offs, self._hoffs

    def entry(self, i: int) -> tuple:
        """(due or None, hosts, encoded bytes) of position i."""
        offs, hoffs = self._offsets()
        due = self.dues[i]
        return (None if due == NO_DUE else due, tuple(self.hosts[hoffs[i]:hoffs[i + 1]]),
                self.data[offs[i]:offs[i + 1]])

    def pop(self, key) -> tuple:
        """(due or None, hosts, encoded bytes) of `key`, which is cold no more."""
        i = self._pos(key)
        if i < 0:
            raise KeyError(key)
        self.gone.add(i)
        self._min = None
        return self.entry(i)

    def items(self):
        """(key, (due, hosts, bytes)) in key order: inspection and tests, not a hot path."""
        return [(self._key(i), self.entry(i)) for i in range(len(self.codes)) if i not in self.gone]

    # ---------------------------------------------------------------- the router's questions
    def _live_runs(self):
        """[a, b) position ranges without a gone one, in order."""
        a = 0
        for g in sorted(self.gone):
            if g > a:
                yield a, g
            a = g + 1
        if a < len(self.codes):
            yield a, len(self.codes)

    def min_due(self) -> int | None:
        """The earliest timer due of any cold partition (None: none pending)."""
        m = self._min
        if m is None:
            dues = self.dues
            if not self.gone:
                m = min(dues, default=NO_DUE)
            else:
                m = min((min(dues[a:b]) for a, b in self._live_runs()), default=NO_DUE)
            self._min = m
        return None if m == NO_DUE else m

    def due_by(self, ts: int) -> list[tuple]:
        """The keys of cold partitions with a timer due at or before ts."""
        m = self.min_due()
        if m is None or m > ts:
            return []
        gone = self.gone
        return [self._key(i) for i, d in enumerate(self.dues) if d <= ts and i not in gone]

    def on_broker(self, b: int) -> list[tuple]:
        """The keys of cold partitions indexed under b: broker b's, or (NO_LEADER) the leaderless ones."""
        return [self._key(i) for i in self._on_broker(b)]

    def on_broker_hosts(self, b: int) -> list[tuple]:
        """on_broker(b) with each key's hosts: (key, hosts) pairs, still without decoding any."""
        _, hoffs = self._offsets()
        hosts = self.hosts
        return [(self._key(i), tuple(hosts[hoffs[i]:hoffs[i + 1]])) for i in self._on_broker(b)]

    def _on_broker(self, b: int) -> list[int]:
        """The positions (not gone) indexed under b."""
        if self._brokers is None:
            # built once, at the first broker-scoped question of this decode: a batch of only
            # partition rows never pays for it
            _, hoffs = self._offsets()
            idx: dict[int, list[int]] = {}
            hosts = self.hosts
            for i in range(len(self.codes)):
                for h in hosts[hoffs[i]:hoffs[i + 1]]:
                    lst = idx.get(h)
                    if lst is None:
                        idx[h] = [i]
                    else:
                        lst.append(i)
            self._brokers = idx
        gone = self.gone
        return [i for i in self._brokers.get(b, ()) if i not in gone]

    def of_topic(self, topic: str) -> list[tuple]:
        """The keys of cold partitions of `topic` (codes of one topic are one sorted range)."""
        t = self.tid.get(topic)
        if t is None:
            return []
        codes, gone = self.codes, self.gone
        lo, hi = bisect_left(codes, t << 32), bisect_left(codes, (t + 1) << 32)
        return [(topic, codes[i] & _LOW) for i in range(lo, hi) if i not in gone]

    # ---------------------------------------------------------------- the next blob
    def merged(self, hot: list[tuple]) -> tuple:
        """The columns of the next blob: every cold partition not gone, as it came, and the `hot`
        ones, (key, due or None, hosts, encoded bytes) (no key of them is cold), in key order."""
        topics = self.topics
        codes = self.codes
        new_topics = {k[0] for k, _, _, _ in hot} - self.tid.keys()
        if new_topics:
            # a new topic shifts the ids after it; the mapping keeps the codes' order
            topics = sorted(set(topics) | new_topics)
            remap = [topics.index(t) for t in self.topics]
            codes = array("q", (remap[c >> 32] << 32 | (c & _LOW) for c in codes))
        tid = {t: i for i, t in enumerate(topics)}
        ins = sorted((bisect_left(codes, c), c, due, hs, data)
                     for c, due, hs, data in ((tid[k[0]] << 32 | k[1], d, h, x) for k, d, h, x in hot))
        offs, hoffs = self._offsets()
        o_codes, o_dues, o_nh, o_hosts, o_lens = array("q"), array("q"), array("H"), array("i"), array("I")
        chunks: list = []
        mv = memoryview(self.data)

        def copy(a: int, b: int) -> None:
            if b > a:
                o_codes.extend(codes[a:b])
                o_dues.extend(self.dues[a:b])
                o_nh.extend(self.nhosts[a:b])
                o_hosts.extend(self.hosts[hoffs[a]:hoffs[b]])
                o_lens.extend(self.lens[a:b])
                chunks.append(mv[offs[a]:offs[b]])

        # walk the old positions once: copy each run up to the next insertion or gone position
        events = sorted([(i, 0, k) for k, (i, *_) in enumerate(ins)] + [(g, 1, -1) for g in self.gone])
        cur = 0
        for pos, kind, k in events:
            copy(cur, pos)
            cur = max(cur, pos)
            if kind == 0:
                _, c, due, hs, data = ins[k]
                o_codes.append(c)
                o_dues.append(NO_DUE if due is None else due)
                o_nh.append(len(hs))
                o_hosts.extend(hs)
                o_lens.append(len(data))
                chunks.append(data)
            else:
                cur = pos + 1
        copy(cur, len(codes))
        return (topics, o_codes, o_dues, o_nh, o_hosts, o_lens, b"".join(chunks))

