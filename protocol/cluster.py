"""The router: the cluster as the engine sees it. It holds the controller's broker registry
(with the brokers' heartbeat sessions), topic configs and the partitions; it routes each event
through the EVENTS table (type -> scope -> handler) to the partitions it reaches, and collects
the output rows. What a partition does with an event lives in the rooms (controller/, broker/,
channels, timers); the router only finds the partitions and frames each event (begin/end).

A Cluster can hold all partitions (the in-process engine) or one bucket of them (the Spark
engine): broker- and topic-scoped events are applied to every bucket's own copy of the
registry, so each partition sees the same world either way. Rows that belong to no
partition (admin rows of broker registrations, rejections of broker-scoped rows) are
emitted only by the Cluster with `emit_global=True`.
"""
from __future__ import annotations
from typing import Any

from collections import defaultdict
from functools import partial

from . import channels, lifecycle
from .broker import fetch as _fetch
from .broker import leader, storage
from .cold import ColdPartitions
from .config import ConfigError, EngineConfig, checked_topic_config, merge_config, validate_topic_config
from .controller import admin, replication
from .invariants import Invariants
from .lifecycle import Reject
from .messages import EMPTY, EMPTY_SET, NO_LEADER, RECOVERED, RegLogEntry, Scope
from .partition import Partition
from .registry import Broker  # noqa: F401 (re-export: protocol.cluster.Broker)
from .state_table import partition_state_columns, partition_state_rows
from .timers import advance
from .timers import next_due as _next_due


def order_reject_reason(typ: str, seq: int, ts: int, last_seq: int, max_ts: int,
                        max_jump: int = 0) -> str | None:
    """SPEC §2: seq strictly increases, ts_ms never decreases, and (max_jump > 0, once the stream
    has a time) does not leap more than max_jump (input.max.time.jump.ms) ahead; the reason a row
    breaking that is dropped, or None. Its callers (Cluster.apply, jobs/spark_source.scan_rows) test
    the same conditions inline first, on the hot path, and ask for the reason only when one holds."""
    if seq <= last_seq:
        return (f"{typ} row seq {seq}: seq {seq} is not after the last applied seq "
                f"{last_seq} (duplicate or out of order); dropped")
    if ts < max_ts:
        return (f"{typ} row seq {seq}: ts_ms {ts} goes back before the stream's time "
                f"{max_ts} (ts_ms must not decrease with seq); dropped")
    if max_jump and last_seq > 0 and ts - max_ts > max_jump:
        return (f"{typ} row seq {seq}: ts_ms {ts} is {ts - max_ts} ms past the stream's time {max_ts}, "
                f"more than input.max.time.jump.ms={max_jump} (a corrupt timestamp? every periodic "
                f"timer would fire across the gap; --set input.max.time.jump.ms=0 lifts the limit); dropped")
    return None



class Out:
    """Output rows by table, drained by the driver."""
    __slots__ = ("tables",)

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = defaultdict(list)

    def add(self, table: str, row: dict) -> None:
        self.tables[table].append(row)

    def drain(self) -> dict[str, list[dict]]:
        t = self.tables
        self.tables = defaultdict(list)
        return dict(t)


class Foreign:
    """A row that another cluster applies (a partition this cluster does not own: another worker's
    of a parallel replay, or another Spark bucket's): only its place in the stream order matters
    here (Cluster.pass_foreign), so it carries its seq and ts_ms, not the event; a CreatePartition
    also its `creation` (topic, replicas, config), from which every cluster learns the topic's
    replication factor (Cluster.note_creation)."""

    __slots__ = ("seq", "ts_ms", "creation")

    def __init__(self, seq: int, ts_ms: int, creation: tuple | None = None):
        self.seq = seq
        self.ts_ms = ts_ms
        self.creation = creation


# the rows that can create a topic's first partition: every cluster of a replay learns of them
# (Foreign, note_creation), so each knows which topics exist and their replication factors
CREATING_TYPES = frozenset({"CreatePartition", "PartitionRecord"})
# Rows of these types read and write their own partition's state only; beyond it they read the
# broker registry, the brokers' metadata views and the configs, which only rows of other types
# change (a row's scope: EVENTS). Between two rows of other types, such rows of different
# partitions therefore commute, as produce and fetch requests to different partitions do in a
# broker: the in-process engine applies long runs of them grouped by partition, each partition's
# rows in stream order (Cluster.commutes says when; jobs.windows), so that a partition's
# objects are still in the processor's cache for its next row. The Spark engine's buckets rely on
# the same independence (a bucket sees only its partitions' rows).
COMMUTING_TYPES = frozenset({"Produce", "Fetch", "ListOffsets", "ConsumerFetch"})


def creation_of(typ: str, topic, replicas, config) -> tuple | None:
    """What another cluster needs of a row that may create its topic's first partition (Foreign):
    (topic, replicas, config, type); None for any other type. The one place the note is built (the
    Spark source pickles it, a parallel replay's reader and Cluster.apply pass it on)."""
    return (topic, replicas, config, typ) if typ in CREATING_TYPES else None


def _recorded_config(config) -> tuple[str | None, dict]:
    """A PartitionRecord's config: (why it is refused, or None; the validated config). A recorded
    fact, not a request: an invalid one is a rejected row, not an answer."""
    if not config:
        return None, {}
    try:
        return None, validate_topic_config(config)
    except ConfigError as e:
        return str(e), {}


class Cluster:
    def __init__(self, config: EngineConfig, emit_global: bool = True, owns=None, sees_all: bool = False):
        self.config = config
        self.emit_global = emit_global
        self.owns = owns                  # predicate (topic, partition) -> bool; None: all
        # the time-jump limit is a check of the whole stream: a Spark bucket (owns set) sees only its
        # partitions' rows between the broadcast ones, and its source scan has checked the stream; a
        # worker of a parallel local replay (sees_all) is fed every row, so it checks it itself
        self.max_jump = config.max_time_jump_ms if owns is None or sees_all else 0
        self.brokers: dict[int, Broker] = {}
        self.topic_cfg: dict[str, dict[str, str]] = {}
        # each topic's replication factor, which a new partition of it must match
        # (RCM#createPartitions: "... not consistent with previous partitions"): the replica count
        # of its first partition created. Every cluster of a replay keeps the same, also for topics
        # whose partitions it does not own (note_creation). Kafka reads the count off whichever
        # partition its hash table iterates first; all of a topic's partitions have it unless a
        # reassignment changed some, and then isrflow keeps the first creation's (docs/kafka_rules.md A2).
        self.topic_rf: dict[str, int] = {}
        # the existing topics whose names have a '.' or '_', by their unified name: derived from
        # topic_rf when a new topic's name is first checked (colliding_topic), then kept up to date
        self._unified: dict[str, str] | None = None
        self.partitions: dict[tuple, Partition] = {}
        # partitions read from a state blob and not used since (protocol.cold; protocol.codec). A
        # partition is decoded the first time a row, a broker change or a due timer reaches it
        # (`part`), so a micro-batch costs what it touches, not the bucket's size. The in-process
        # engine never has any.
        self.cold = ColdPartitions()
        self.thaw_fn: Any = None
        # the decoded partitions by broker hosted and by topic (the cold ones: self.cold answers);
        # ask through hosted() and topic_keys(), which see both
        self.by_broker: dict[int, set] = defaultdict(set)
        self.by_topic: dict[str, set] = defaultdict(set)
        self.reg_log: list[RegLogEntry] = []        # broker registration changes (explicit metadata delivery)
        self.reg_base: dict[int, tuple] = {}        # registrations folded out of reg_log (seen by all)
        self.views: dict[int, dict[int, tuple]] = {}  # broker -> its metadata cache of registrations
        self.view_seq: dict[int, int] = {}
        self.last_seq = 0
        self.max_ts = 0
        # the keys of the partitions touched since the last take_touched (one partition_state row
        # each), and the generation they were added in: see touch
        self.touched: set = set()
        self.touch_gen = 1
        self.out = Out()
        self.applied = 0
        self.rejected = 0
        self.sess_next: Any = None       # earliest broker-session expiry (None: none pending)
        self._handlers = {typ: _bind(self, route) for typ, route in EVENTS.items()}

    # ------------------------------------------------------------------ indexes
    def reindex(self, p: Partition) -> None:
        """by_broker[b] holds p's key exactly for the b of p.index_keys() at p's last reindex
        (p.indexed: only this method writes either), so only those that left need a look. Every
        registration write reindexes (controller.replication.registered), so by_broker[NO_LEADER]
        is the leaderless partitions."""
        key = p.key
        now = p.index_keys()
        by_broker = self.by_broker
        for b in now:
            by_broker[b].add(key)
        for b in p.indexed:
            if b not in now:
                by_broker[b].discard(key)
        p.indexed = tuple(now)      # a tuple: 64 bytes, not a set's 216 (its one partition's keys)

    def catch_up(self, b: int, ts: int) -> None:
        """A broker-scoped row for b at ts (it may change b's registration or process, or, a
        MetadataSync, its replicas' roles, which timers read): every partition hosting b first fires
        its timers due before ts, so a timer acts on the cluster as it was at the timer's time (the
        controller's periodic tasks and the leaders' ISR checks run at their time, not when the next
        row reaches the partition). Without this, a rebalance due at 300000 saw a BrokerFence of
        303257 in the in-process engine, but not in the Spark engine's buckets, which fire every
        due timer at each micro-batch end. Timers due at ts itself still fire after the change, as
        for any row at ts. Only b's hosts: a partition's timers read only its replicas' brokers."""
        for p in self.hosted(b):
            if ts - 1 > p.tdone:
                advance(p, ts - 1)
                self.touch(p)

    def hosted(self, b: int) -> list[Partition]:
        """The partitions broker b hosts, in key order (cold ones decoded)."""
        keys: Any = self.by_broker.get(b, ())
        if self.cold:
            keys = [*keys, *self.cold.on_broker(b)]
        return [self.part(k) for k in sorted(keys)]  # type: ignore[misc]

    def leaderless_electable(self, acc) -> list[Partition]:
        """The leaderless partitions (hot and cold) with a replica acc accepts as leader, in key
        order: only they can get a leader now (every election kind picks an acceptable replica),
        so only they are decoded. Read from the index keys (a cold partition's hosts column)."""
        def electable(hosts) -> bool:
            return any(acc(h) for h in hosts)      # (the NO_LEADER key is no broker: never accepted)
        parts = self.partitions
        keys = [k for k in self.by_broker.get(NO_LEADER, ()) if electable(parts[k].indexed)]
        if self.cold:
            keys += [k for k, hosts in self.cold.on_broker_hosts(NO_LEADER) if electable(hosts)]
        return [self.part(k) for k in sorted(keys)]  # type: ignore[misc]

    def topic_keys(self, topic: str) -> list[tuple]:
        """The keys of `topic`'s partitions here, in key order (hot and cold)."""
        keys: Any = self.by_topic.get(topic, ())
        if self.cold:
            keys = [*keys, *self.cold.of_topic(topic)]
        return sorted(keys)

    # ------------------------------------------------------------------ cold partitions
    def part(self, key: tuple) -> Partition | None:
        """Partition `key`, decoded first if it is still cold; None if this cluster has no such one."""
        p = self.partitions.get(key)
        if p is None and key in self.cold:
            p = self._thaw(key)
        return p

    def has(self, key: tuple) -> bool:
        return key in self.partitions or key in self.cold

    def _thaw(self, key: tuple) -> Partition:
        # the decoder that made the cold entries (protocol.codec sits above the router and hands
        # its `thaw` in when it decodes a cluster; a cluster never decoded has no cold entries)
        return self.thaw_fn(self, key)

    def release(self) -> None:
        """The cluster is done with (a Spark bucket's, once encoded): drop its partitions. Nothing
        else holds them, and their objects form no cycles of their own, so reference counting frees
        them at once. Left alone, a cluster is garbage in cycles (each partition points back at it)
        that only a full collection frees, after walking every object of it. The cluster is empty
        afterwards."""
        self.partitions.clear()
        self.by_broker.clear()
        self.by_topic.clear()
        self.cold = ColdPartitions()

    def all_partitions(self) -> list[Partition]:
        """Every partition, in key order (the cold ones decoded)."""
        for key in sorted(self.cold):
            self._thaw(key)
        parts = self.partitions
        return [parts[k] for k in sorted(parts)]

    def view_of(self, b: int):
        """Broker b's metadata cache of registrations (broker -> a record with epoch, fenced, in_cs,
        registered): its own view under explicit delivery, else the controller's registry itself."""
        if self.config.md_immediate:
            return self.brokers
        return self.views.get(b, {})

    def log_broker_change(self, seq: int, br: Broker, timer: bool = False) -> None:
        if self.config.md_immediate:
            return
        entry = RegLogEntry(seq, br.id, br.reg())
        if not timer:
            self.reg_log.append(entry)
            return
        # a broker-session timer's change carries the seq of the row that set the timer: keep the
        # log in seq order, and brokers that already synced past that seq see it at once
        i = len(self.reg_log)
        while i > 0 and self.reg_log[i - 1].seq > seq:
            i -= 1
        self.reg_log.insert(i, entry)
        for b, view in self.views.items():
            if self.view_seq.get(b, -1) >= seq:
                view[br.id] = entry.reg

    # ------------------------------------------------------------------ rows
    def emit_at(self, table: str, row: dict, topic, partition, seq, ts, idx=0) -> None:
        row.update(topic=topic, partition=partition, seq=seq, idx=idx, ts_ms=ts)
        self.out.add(table, row)

    def reject(self, ev: dict, raw: str | None, reason: Any, scoped: bool) -> None:
        self.rejected += 1
        if scoped or self.emit_global:
            self.out.add("rejected", {"topic": ev.get("topic"), "partition": ev.get("partition"),
                                      "seq": ev.get("seq"), "idx": 0, "ts_ms": ev.get("ts_ms"),
                                      "raw": raw, "reason": reason})

    # ------------------------------------------------------------------ driving
    def begin(self, p: Partition, seq: int, ts: int) -> None:
        """An event reaches p: fire its due timers first, then set the row context."""
        if ts > p.tdone:
            advance(p, ts)
        p.cur_seq = seq
        p.now = ts
        p.idx = 0
        p.last_seq = seq
        if p.touched_in != self.touch_gen:     # self.touch(p), inlined: this runs once per row
            p.touched_in = self.touch_gen
            self.touched.add(p.key)
        if p.retry is not None:
            leader.resubmit(p)

    def end(self, p: Partition) -> None:
        p.inv.after_event(p)

    def apply(self, ev: dict, raw: str | None = None) -> None:
        """Apply one validated event (schemas.events normalized dict)."""
        seq = ev["seq"]
        ts = ev["ts_ms"]
        typ = ev["type"]
        if self.owns is not None and self.is_foreign(typ, ev.get("topic"), ev.get("partition")):
            self.pass_foreign(seq, ts, creation_of(typ, ev.get("topic"), ev.get("replicas"), ev.get("config")))
            return
        scoped = _SCOPED[typ]
        if scoped is None:
            scoped = partition_scoped(typ, ev.get("partition"))
        if self.out_of_order(seq, ts):
            self.reject(ev, raw, order_reject_reason(typ, seq, ts, self.last_seq, self.max_ts, self.max_jump),
                        scoped)
            return
        if self.sess_next is not None and ts >= self.sess_next:
            self.expire_sessions(ts)
        if typ in BROKER_TYPES and ev["broker"] in self.brokers:
            self.catch_up(ev["broker"], ts)
        self._handle(ev, raw, typ, seq, scoped)
        self.last_seq = seq
        self.max_ts = ts

    def _handle(self, ev: dict, raw: str | None, typ: str, seq: int, scoped: bool) -> None:
        """The row's handler, once the stream order allows it: a Reject is its rejected row."""
        try:
            self._handlers[typ](ev)
        except Reject as r:
            self.reject(ev, raw, f"{typ} row seq {seq}: {r}", scoped)
        else:
            if scoped or self.emit_global:
                self.applied += 1

    def apply_run(self, evs: list, i: int, stop: int, window: bool = False) -> tuple[int, int, int]:
        """Apply evs[i], evs[i + 1], ... in order (validated events, as apply, or Foreign rows, as
        pass_foreign), up to `stop`, the first None, or the first row the core rejects, included.
        evs[i] is not None. Returns the index after the last row applied and the lowest and
        highest seq among those rows. One call for a run of a reader's rows: the loop runs here
        rather than once per row in the engine (in the compiled core, native code), and a
        rejection stops it so that the reader can attach the row's own text
        (jobs.local_engine.LocalEngine.feed_rows). window: the rows are of a window that
        `commutes` allowed, in any order of its partitions: no stream order check per row
        (end_window moves the stream's order forward past the whole window)."""
        ev = evs[i]
        lo = hi = ev.seq if ev.__class__ is Foreign else ev["seq"]
        rejected = self.rejected
        while i < stop:
            ev = evs[i]
            if ev is None:
                break
            if ev.__class__ is Foreign:
                seq = ev.seq
                self.pass_foreign(seq, ev.ts_ms, ev.creation)
            elif window:
                seq = ev["seq"]
                self._handle(ev, None, ev["type"], seq, True)
            else:
                seq = ev["seq"]
                self.apply(ev)
            if seq < lo:
                lo = seq
            elif seq > hi:
                hi = seq
            i += 1
            if self.rejected != rejected:
                break
        return i, lo, hi

    def commutes(self, first_seq: int, first_ts: int, last_ts: int, max_step: int) -> bool:
        """Whether a window may be applied grouped by partition (apply_run(window=True)), its rows
        in any order that keeps each partition's own: a window is consecutive rows of the stream,
        all of COMMUTING_TYPES, whose seq strictly increases and ts_ms never decreases from row to
        row, by at most `max_step` ms (the caller checks that much). Applied in stream order, each
        of its rows would then pass the stream order check exactly when its first row passes now,
        and no broker session expires within it while none is due by its last ts_ms (a session
        expiry fences brokers of other partitions: it must come between the right two rows). A
        parallel replay's worker applies only its own rows of the window: the others' would only
        have moved its stream order (pass_foreign), which end_window does."""
        if self.out_of_order(first_seq, first_ts):
            return False
        if self.max_jump and max_step > self.max_jump:
            return False
        return self.sess_next is None or last_ts < self.sess_next

    def end_window(self, last_seq: int, last_ts: int) -> None:
        """After a window applied grouped (commutes): the stream order stands at its last row."""
        self.last_seq = last_seq
        self.max_ts = last_ts

    def out_of_order(self, seq: int, ts: int) -> bool:
        """The stream order check (seq strictly increasing, ts_ms never decreasing, at most
        max_jump ahead); order_reject_reason words a failure."""
        return seq <= self.last_seq or ts < self.max_ts or bool(
            self.max_jump and ts - self.max_ts > self.max_jump and self.last_seq > 0)

    def is_foreign(self, typ: str, topic, partition) -> bool:
        """A valid row that another worker of a parallel replay applies (or rejects): it belongs to
        a partition this cluster does not own (see pass_foreign)."""
        scoped = _SCOPED[typ]
        if scoped is None:
            scoped = partition_scoped(typ, partition)
        return scoped and self.owns is not None and not self.owns((topic, partition))

    def pass_foreign(self, seq: int, ts: int, creation: tuple | None = None) -> None:
        """A foreign row (is_foreign) only moves this cluster's stream order forward when it passes the
        order check; when it fails, its owner writes the rejected row, so nothing happens here. A
        foreign creation (`creation`: creation_of) may make its topic known, with its replication factor."""
        if not self.out_of_order(seq, ts):
            if creation is not None and creation[0] not in self.topic_rf:
                self.note_creation(creation, ts)
            self.last_seq = seq
            self.max_ts = ts

    def note_creation(self, creation: tuple, ts: int) -> None:
        """Another cluster's creation (creation_of) in a topic not known here yet: if it succeeds, the
        topic exists here too, with its replica count as replication factor and its config as the
        topic's. Its owner decides with the same broker registry and the same checks at the same place
        in the stream (sessions expired up to its time): a CreatePartition's _creation_refusal; a
        PartitionRecord's config (the rest of its checks are the row's own, made by validation, and
        its partition cannot exist where its topic does not)."""
        self.expire_due(ts)
        topic, replicas, config, typ = creation
        if typ == "PartitionRecord":
            why, recorded = _recorded_config(config)
            if why is None:
                self._first_creation(topic, len(replicas), recorded)
            return
        bad, cfg, _ = self._creation_refusal(topic, -1, replicas, config)
        if bad is None:
            self._first_creation(topic, len(replicas), cfg)

    def _first_creation(self, topic: str, replicas: int, cfg: dict | None) -> None:
        """The topic's first partition is created: its replica count is the topic's replication factor,
        and its config the topic's (CreateTopics writes the request's configs as the TOPIC's
        ConfigRecords: later partitions, CreatePartitions, take them; no partition of the topic has an
        ELR to clear yet). In every cluster of a replay alike (note_creation)."""
        self.topic_rf[topic] = replicas
        if self._unified is not None:
            self._index_name(self._unified, topic)
        if cfg:
            merge_config(self.topic_cfg.setdefault(topic, {}), cfg)

    def colliding_topic(self, topic: str) -> str | None:
        """The existing topic a new one's name collides with (admin.topic_name_error), if any. The
        index is built from topic_rf at the first question, so decoding state does not pay for it."""
        unified = admin.unified_topic_name(topic)
        if unified is None:
            return None
        if self._unified is None:
            self._unified = {}
            for t in sorted(self.topic_rf):
                self._index_name(self._unified, t)
        return self._unified.get(unified)

    @staticmethod
    def _index_name(index: dict[str, str], topic: str) -> None:
        unified = admin.unified_topic_name(topic)
        if unified is not None:
            index.setdefault(unified, topic)

    def finish(self, ts: int | None = None) -> None:
        """Fire every timer due by `ts` (default: the stream's latest time) on every partition."""
        ts = self.max_ts if ts is None else ts
        self.expire_due(ts)
        keys = list(self.partitions)
        if self.cold:
            # a cold partition is unchanged since it was encoded, so no timer of it is due before the
            # one stored with it: only those due by ts are decoded (the others would fire nothing)
            keys += self.cold.due_by(ts)
        for key in sorted(keys):
            p: Any = self.part(key)
            if p.tdone < ts:
                advance(p, ts)
                self.touch(p)
                p.inv.after_event(p)

    def drain(self) -> dict[str, list[dict]]:
        if EMPTY or EMPTY_SET:
            # a handler grew a shared empty container in place (messages.grown): every partition
            # starting from it now holds that item. A bug of the protocol, never of the input
            raise AssertionError(f"the shared empty containers were grown in place: {EMPTY!r} {EMPTY_SET!r}")
        return self.out.drain()

    @staticmethod
    def partition_due(p: Partition) -> int | None:
        """The earliest time a timer of p is due (None: none pending)."""
        return _next_due(p, 1 << 62)

    def next_due(self) -> int | None:
        """The earliest time a timer is due on any partition here (None: none pending)."""
        best = None
        for p in self.partitions.values():
            t = self.partition_due(p)
            if t is not None and (best is None or t < best):
                best = t
        t = self.cold.min_due() if self.cold else None
        if t is not None and (best is None or t < best):
            best = t
        if self.sess_next is not None and (best is None or self.sess_next < best):
            best = self.sess_next
        return best

    # ------------------------------------------------------------------ broker sessions
    def set_sess_next(self) -> None:
        lifecycle.set_sess_next(self)

    def expire_sessions(self, ts: int) -> None:
        lifecycle.expire_sessions(self, ts)

    def expire_due(self, ts: int) -> None:
        """The broker sessions that expire by ts, if any does (apply has the same test inline: every
        row passes there)."""
        if self.sess_next is not None and ts >= self.sess_next:
            self.expire_sessions(ts)

    def frame(self, p: Partition, seq: int, ts: int, timer: bool) -> None:
        """Row context for p: an event (begin), or a broker-session timer at ts, whose rows carry
        the timer's time and the seq of p's latest event (SPEC §3)."""
        if not timer:
            self.begin(p, seq, ts)
            return
        if ts > p.tdone:
            advance(p, ts)
        p.cur_seq = p.last_seq
        p.now = ts
        self.touch(p)

    def touch(self, p: Partition) -> None:
        """p gets a partition_state row at the next take_touched. A partition is added to the set
        once per generation, not once per row: at 100k partitions the set (~100k keys) is out of
        the processor's cache, and an add per row cost ~0.2 s of a 1M-row replay (perf), while
        p's own slot is in cache (its row is being applied)."""
        if p.touched_in != self.touch_gen:
            p.touched_in = self.touch_gen
            self.touched.add(p.key)

    def take_touched(self) -> set:
        """The keys touched since the last call (each once); a new generation starts."""
        keys = self.touched
        self.touched = set()
        self.touch_gen += 1
        return keys

    # ------------------------------------------------------------------ lookups
    def partition_of(self, ev: dict) -> Partition:
        p = self.part((ev["topic"], ev["partition"]))
        if p is None:
            raise Reject(f"unknown partition {ev['topic']}-{ev['partition']} (not created in this stream)")
        return p

    def broker_of(self, ev: dict, b=None) -> Broker:
        b = ev["broker"] if b is None else b
        br = self.brokers.get(b)
        if br is None:
            raise Reject(f"broker {b} has never registered (BrokerRegister must come first)")
        return br

    def _new_partition(self, topic: str, partition: int, ts: int, config: dict | None = None) -> Partition:
        """A partition this cluster creates, with its partition-level config overrides."""
        p = Partition(self, topic, partition)
        p.inv = Invariants()
        p.tdone = ts
        p.set_t_next()
        self.partitions[p.key] = p
        self.by_topic[topic].add(p.key)
        if config:
            p.config = config
        p.refresh_conf()
        return p

    # ================================================================== admin requests and records
    def _create_partition(self, ev):
        """ReplicationControlManager#createTopic / #createPartitions with a manual assignment (isrflow
        creates one partition per row). Refusals are answers (an `admin` row, state unchanged), in
        Kafka's order: the partition exists; then _creation_refusal."""
        topic, part, seq, ts = ev["topic"], ev["partition"], ev["seq"], ev["ts_ms"]
        replicas = list(ev["replicas"])
        if self.has((topic, part)):
            return self._create_refused(ev, "TOPIC_ALREADY_EXISTS", f"Partition {topic}-{part} already exists.")
        bad, cfg, isr = self._creation_refusal(topic, part, replicas, ev.get("config"))
        if bad is not None:
            return self._create_refused(ev, *bad)
        if topic not in self.topic_rf:
            self._first_creation(topic, len(replicas), cfg)
            cfg = None
        # a later partition's config is its own (isrflow's partition-level overrides: Kafka's
        # CreatePartitions carries none)
        p = self._new_partition(topic, part, ts, cfg)
        self.begin(p, seq, ts)
        p.emit("admin", {"type": "CreatePartition", "broker": None, "result": "NONE", "detail": None})
        replication.register_new(p, "CreatePartition", replicas=replicas, isr=isr, leader=isr[0],
                                 elr=p.elr, lke=p.lke, lrs=p.lrs)
        self.end(p)

    def _creation_refusal(self, topic: str, part: int, replicas: list, config) -> tuple:
        """The checks of a creation after the partition's existence, in Kafka's order: a new topic's
        name (#validateNewTopicNames); the config (checked before the assignment); the assignment
        (#validateManualPartitionAssignment, with the topic's replication factor if it has one); no
        active replica. Returns ((error, message) or None, the validated config, the initial ISR)."""
        if topic not in self.topic_rf:
            bad_name = admin.topic_name_error(topic, self.colliding_topic(topic))
            if bad_name is not None:
                return ("INVALID_TOPIC_EXCEPTION", bad_name), None, None
        cfg = None
        if config:
            bad, cfg = checked_topic_config(config, creation=True)
            if bad:
                return bad, None, None
        wrong = admin.assignment_error(self.brokers, replicas, self.topic_rf.get(topic))
        if wrong:
            return ("INVALID_REPLICA_ASSIGNMENT", wrong), None, None
        isr = admin.initial_isr(self.brokers, replicas)
        if not isr:
            return ("INVALID_REPLICA_ASSIGNMENT", f"All brokers specified in the manual partition assignment for "
                                                  f"partition {part} are fenced or in controlled shutdown."), None, None
        return None, cfg, isr

    def _create_refused(self, ev, err: str, detail: str) -> None:
        self.emit_at("admin", {"type": "CreatePartition", "broker": None, "result": err, "detail": detail},
                     ev["topic"], ev["partition"], ev["seq"], ev["ts_ms"])

    def _unknown_partition(self, ev, typ: str, msg: str, no_topic: str | None = None) -> None:
        """An admin request for a partition this stream never created: UNKNOWN_TOPIC_OR_PARTITION,
        with Kafka's message for a topic that does not exist (`no_topic`) when its topic has no
        partition either (every cluster of a replay knows the topics: note_creation), else `msg`."""
        topic, part = ev["topic"], ev["partition"]
        if no_topic is not None and topic not in self.topic_rf:
            msg = no_topic
        self.emit_at("admin", {"type": typ, "broker": ev.get("target") if typ == "ElectLeaders" else None,
                               "result": "UNKNOWN_TOPIC_OR_PARTITION", "detail": msg},
                     topic, part, ev["seq"], ev["ts_ms"])

    def _partition_record(self, ev):
        """A recorded PartitionRecord: the registration as given (checked, not built)."""
        topic, part, seq, ts = ev["topic"], ev["partition"], ev["seq"], ev["ts_ms"]
        replicas = list(ev["replicas"])
        isr = list(ev["isr"])
        elr = list(ev.get("elr") or [])
        lke = list(ev.get("last_known_elr") or [])
        lead = ev["leader"]
        if not set(isr) <= set(replicas) or not set(elr) <= set(replicas):
            raise Reject(f"isr {isr} / elr {elr} must be subsets of replicas {replicas}")
        if lead != NO_LEADER and lead not in replicas:
            raise Reject(f"leader {lead} is not one of replicas {replicas}")
        p = self.part((topic, part))
        if p is not None and (ev["partition_epoch"] <= p.partition_epoch or ev["leader_epoch"] < p.leader_epoch):
            raise Reject(f"partition epoch {ev['partition_epoch']} / leader epoch {ev['leader_epoch']} is not after "
                         f"the current {p.partition_epoch} / {p.leader_epoch} (epoch going backwards)")
        bad, cfg = _recorded_config(ev.get("config"))
        if bad is not None:
            raise Reject(bad)
        if p is None:
            if topic not in self.topic_rf:      # as a CreatePartition: the topic's first partition
                self._first_creation(topic, len(replicas), cfg)
                cfg = {}
            p = self._new_partition(topic, part, ts, cfg)
        elif cfg:
            p.config.update(cfg)
            p.refresh_conf()
        self.begin(p, seq, ts)
        replication.register_new(p, "PartitionRecord", replicas=replicas, isr=isr, leader=lead, elr=elr, lke=lke,
                                 leader_epoch=ev["leader_epoch"], partition_epoch=ev["partition_epoch"],
                                 lrs=ev.get("leader_recovery_state") or RECOVERED)
        self.end(p)

    def _replica_snapshot(self, ev):
        """A recorded replica log (epoch cache, LEO, HWM) loaded into a broker's replica."""
        p = self.partition_of(ev)
        b = ev["broker"]
        if b not in p.replicas:
            raise Reject(f"broker {b} is not a replica of {p.topic}-{p.partition} (replicas {p.replicas})")
        starts = {int(k): int(v) for k, v in ev["epoch_start_offsets"].items()}
        leo, hwm = ev["log_end_offset"], ev["hwm"]
        prev = -1
        for e in sorted(starts):
            if starts[e] < prev:
                raise Reject(f"epoch_start_offsets {starts}: start offsets must not decrease as epochs increase")
            prev = starts[e]
        if prev > leo:
            raise Reject(f"epoch start offset {prev} is beyond log_end_offset {leo}")
        if hwm > leo:
            raise Reject(f"hwm {hwm} is beyond log_end_offset {leo}")
        self.begin(p, ev["seq"], ev["ts_ms"])
        storage.load_snapshot(p, b, starts, leo, hwm)
        self.end(p)

    def _alter_config(self, ev):
        topic = ev["topic"]
        if not topic:
            raise Reject("AlterConfig needs a topic")
        change = ev.get("config") or {}
        if ev.get("partition") is not None:
            if not self.has((topic, ev["partition"])):
                return self._unknown_partition(ev, "AlterConfig", f"No such partition as {topic}-{ev['partition']}")
            p = self.partition_of(ev)
            self.begin(p, ev["seq"], ev["ts_ms"])
            # the configs this partition has: its topic's, its own overrides over them
            err, cfg = checked_topic_config(change, existing={**self.topic_cfg.get(topic, {}), **p.config})
            if cfg is None:
                p.emit("admin", {"type": "AlterConfig", "broker": None, "result": err[0], "detail": err[1]})
            else:
                changed = admin.min_isr_changed(self.config.elr, p.config, cfg)
                merge_config(p.config, cfg)
                p.refresh_conf()
                p.emit("admin", {"type": "AlterConfig", "broker": None, "result": "NONE", "detail": None})
                if changed:
                    replication.clear_elr(p, f"min.insync.replicas of {topic}-{p.partition} "
                                             f"{admin.min_isr_change_words(cfg)}")
            self.end(p)
            return
        err, cfg = checked_topic_config(change, existing=self.topic_cfg.get(topic))
        if cfg is not None and topic not in self.topic_rf:
            # ConfigurationControlManager#validateAlterConfig: the topic's existence is checked after
            # its configs. Every cluster of a replay knows the topics created so far (note_creation)
            err, cfg = ("UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{topic}' does not exist."), None
        if self.emit_global:
            self.emit_at("admin", {"type": "AlterConfig", "broker": None,
                                   "result": "NONE" if cfg is not None else err[0],
                                   "detail": None if cfg is not None else err[1]}, topic, None, ev["seq"], ev["ts_ms"])
        if cfg is None:
            return
        tcfg = self.topic_cfg.setdefault(topic, {})
        changed = admin.min_isr_changed(self.config.elr, tcfg, cfg)
        merge_config(tcfg, cfg)
        for key in self.topic_keys(topic):
            p = self.part(key)
            self.begin(p, ev["seq"], ev["ts_ms"])
            p.refresh_conf()
            if changed:
                replication.clear_elr(p, f"min.insync.replicas of topic {topic} {admin.min_isr_change_words(cfg)}")
            self.end(p)

    def _reassign(self, ev):
        if not self.has((ev["topic"], ev["partition"])):
            # ReplicationControlManager#alterPartitionReassignment
            return self._unknown_partition(ev, "Reassign", f"Unable to find partition {ev['topic']}:{ev['partition']}.",
                                           f"Unable to find a topic named {ev['topic']}.")
        p = self.partition_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        admin.reassign(p, ev.get("replicas"))
        self.end(p)

    def _elect_leaders(self, ev):
        if not self.has((ev["topic"], ev["partition"])):
            # ReplicationControlManager#electLeader
            return self._unknown_partition(ev, "ElectLeaders", f"No such partition as {ev['topic']}-{ev['partition']}",
                                           f"No such topic as {ev['topic']}")
        p = self.partition_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        admin.elect_leaders(p, ev["election_type"], ev.get("target"))
        self.end(p)

    # ================================================================== messages and data
    def _alter_partition_arrive(self, ev):
        p = self.partition_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        channels.deliver_alter_partition_request(p)
        self.end(p)

    def _alter_partition_response(self, ev):
        p = self.partition_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        channels.deliver_alter_partition_response(p)
        self.end(p)

    def _data(self, serve: Any, ev: dict) -> None:
        """A produce or a follower fetch: the invariants run only if something changed."""
        p = self.partitions.get((ev["topic"], ev["partition"])) or self.partition_of(ev)
        if ev["broker"] not in self.brokers:
            self.broker_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        serve(p, ev)
        if p.inv.dirty:
            p.inv.after_event(p)

    def _client(self, serve, ev) -> None:
        p = self.partition_of(ev)
        self.broker_of(ev)
        self.begin(p, ev["seq"], ev["ts_ms"])
        serve(p, ev)
        self.end(p)

    # ================================================================== state table
    def partition_state_rows(self, keys=None) -> list[dict]:
        return partition_state_rows(self, keys)

    def partition_state_columns(self, keys=None):
        return partition_state_columns(self, keys)


# ====================================================================== the event table
# h11 style: every input event type, the partitions it reaches (its scope), and its handler (for
# requests served by the broker room: the router's framing and the room's action).
# SPEC §2 lists the types; a type missing here is refused by schema validation before it arrives.
EVENTS: dict[str, tuple] = {
    # partition-scoped: one partition (created by the row, or named by it)
    "CreatePartition":          (Scope.PARTITION, Cluster._create_partition),
    "PartitionRecord":          (Scope.PARTITION, Cluster._partition_record),
    "ReplicaSnapshot":          (Scope.PARTITION, Cluster._replica_snapshot),
    "ReplicaLogLoss":           (Scope.PARTITION, lifecycle.replica_log_loss),
    "Reassign":                 (Scope.PARTITION, Cluster._reassign),
    "ElectLeaders":             (Scope.PARTITION, Cluster._elect_leaders),
    "AlterPartitionArrive":     (Scope.PARTITION, Cluster._alter_partition_arrive),
    "AlterPartitionResponse":   (Scope.PARTITION, Cluster._alter_partition_response),
    # ... framed by the router, served by the broker room: (scope, framing, action)
    "Produce":                  (Scope.PARTITION, Cluster._data, leader.produce),
    "Fetch":                    (Scope.PARTITION, Cluster._data, _fetch.fetch),
    "ListOffsets":              (Scope.PARTITION, Cluster._client, leader.list_offsets),
    "ConsumerFetch":            (Scope.PARTITION, Cluster._client, leader.consumer_fetch),
    # broker-scoped: every partition hosting the broker (Tick without a broker: every partition;
    # a Tick naming a partition is that partition's alone: NARROWABLE_TYPES)
    "BrokerRegister":           (Scope.BROKER, lifecycle.broker_register),
    "BrokerUnfence":            (Scope.BROKER, lifecycle.broker_unfence),
    "BrokerFence":              (Scope.BROKER, lifecycle.broker_fence),
    "BrokerControlledShutdown": (Scope.BROKER, lifecycle.broker_controlled_shutdown),
    "BrokerCrash":              (Scope.BROKER, lifecycle.broker_crash),
    "MetadataSync":             (Scope.BROKER, lifecycle.metadata_sync),
    "Tick":                     (Scope.BROKER, lifecycle.tick),
    # topic-scoped: every partition of the topic, or the one partition the row names
    "AlterConfig":              (Scope.TOPIC, Cluster._alter_config),
}

PARTITION_TYPES = frozenset(t for t, (s, *_) in EVENTS.items() if s is Scope.PARTITION)
BROKER_TYPES = frozenset(t for t, (s, *_) in EVENTS.items() if s is Scope.BROKER)
TOPIC_TYPES = frozenset(t for t, (s, *_) in EVENTS.items() if s is Scope.TOPIC)
EVENT_TYPES = frozenset(EVENTS)
# types whose row belongs to one partition when it names one (a topic-scoped AlterConfig, a Tick)
NARROWABLE_TYPES = TOPIC_TYPES | {"Tick"}


def partition_scoped(typ: str, partition) -> bool:
    """Does this row belong to one partition (its bucket, its rejected row's key)? Partition-scoped
    types, and a narrowable row that names a partition. The one place the scope rule is written
    (jobs/spark_source.scan_rows inlines it for speed; tests/test_event_table checks they agree)."""
    return typ in PARTITION_TYPES or (typ in NARROWABLE_TYPES and partition is not None)


def _bind(cl: Cluster, route: tuple):
    """A table row's handler bound to one cluster: handler(ev), or framing(action, ev)."""
    return partial(route[1], cl, route[2]) if len(route) > 2 else partial(route[1], cl)


# the rule evaluated once per type for Cluster.apply: True / False, or None where the row decides
_SCOPED = {t: (partition_scoped(t, 0) if partition_scoped(t, 0) == partition_scoped(t, None) else None)
           for t in EVENTS}
