"""Compact, versioned encoding of protocol state (it lives in Spark's state store).

Only builtins are pickled (ints, strings, tuples, lists, dicts, None, bools, bytes), so any
Python reads it and no class path is frozen into a checkpoint: the NamedTuples of
protocol/messages.py are stored as plain tuples in field order, and the leader's ISR state as
(committed ISR, maximal ISR, pending).

Layout of version 4 (written): b"IF" + version byte + pickle((cluster, columns)), where `cluster`
is pickle(the cluster tuple, its partition list empty) and `columns` are the partitions in key
order as protocol.cold.ColdPartitions stores them: (topics, codes, dues, host counts, hosts,
byte lengths, the pickle(partition tuple)s back to back), arrays and one bytes value, so they
pickle and unpickle as memory copies. Nothing is compressed here: the partitions' pickles are
alike, so a compressor over the whole blob does far better than one per partition (the Spark
engine's state store compresses it with zstd, 2.0 MB -> 0.12 MB for 6,250 partitions, against
1.2 MB zlib'd one by one; jobs.spark_engine.store_blob). Partitions are decoded one by one when
first used (`thaw`, see Cluster.part) and only the decoded ones are encoded again; the others'
columns are copied as runs. A micro-batch of a Spark bucket thus costs the partitions it
touches in Python work, not all the bucket's partitions (version 3 unpickled and re-pickled a
tuple per partition and rebuilt the broker index every batch: ~0.45 s of CPU a batch at
100,000 partitions).

Read only: version 3, the same with a dict {(topic, partition): (next timer due or None, hosts,
encoded partition)} in place of the columns; version 2, b"IF" + 2 + zlib(pickle(the cluster
tuple with every partition in it)), decoded whole. A future version adds a decoder for its own
version byte and keeps the old ones.
"""
from __future__ import annotations

import pickle
import zlib

from .cluster import Cluster
from .cold import ColdPartitions
from .config import EngineConfig
from .invariants import Invariants
from .log import ReplicaLog
from .messages import (EMPTY, AlterPartitionRequest, AlterPartitionResponse, BrokerReg, IsrMember, LeaderAndIsr,
                       RegistrationSnapshot, RegLogEntry, as_tuple, listed)
from .partition import Partition
from .registry import Broker
from .replica import CommittedIsr, FollowerState, Produce, Replica, pending_isr

MAGIC = b"IF"
# 2: broker session state (broker.session.timeout.ms); 3: partitions encoded one by one; 4: the
# partitions in columns (protocol.cold)
VERSION = 4
READS = (2, 3, 4)


class CodecError(ValueError):
    pass


# ---------------------------------------------------------------- replica / partition
def _rep_out(r: Replica) -> tuple:
    # the ISR state is stored as (committed ISR, maximal ISR, pending) - the maximal ISR is derived
    # on reading, so the layout of version 2 stays
    st = r.isr_state
    pend = (st.change, st.proposed, st.pid) if st.is_pending else None
    return (r.broker, r.log.to_tuple(), r.md_seq, r.role, r.leader, r.leader_epoch, r.partition_epoch,
            r.assignment, r.md_isr, r.md_lrs, r.leso, st.isr, st.maximal_isr, pend,
            {k: v.to_tuple() for k, v in r.followers.items()}, [p.to_tuple() for p in r.purgatory])


def _rep_in(t) -> Replica:
    r = Replica(t[0])
    r.log = ReplicaLog.from_tuple(t[1])
    (r.md_seq, r.role, r.leader, r.leader_epoch, r.partition_epoch, assignment, md_isr, r.md_lrs, r.leso,
     committed, _maximal, pend, fol, purg) = t[2:]
    r.assignment, r.md_isr = tuple(assignment), tuple(md_isr)
    committed = tuple(committed)
    r.isr_state = (pending_isr(pend[0], committed, tuple(pend[1]), pend[2]) if pend is not None
                   else CommittedIsr(committed))
    r.followers = {k: FollowerState(*v) for k, v in fol.items()}
    r.purgatory = [Produce(*x) for x in purg] if purg else EMPTY
    return r


def _ap_request_in(x) -> AlterPartitionRequest:
    x = list(x)
    x[6] = tuple(IsrMember(*m) for m in x[6])
    return AlterPartitionRequest(*x)


def _ap_response_in(x) -> AlterPartitionResponse:
    # four fields in a state written before the request's broker epoch was kept with its answer
    pid, leader, err, state, *epoch = x
    if state is not None:
        leader_, isr, lrs, le, pe = state
        state = LeaderAndIsr(leader_, tuple(isr), lrs, le, pe)
    return AlterPartitionResponse(pid, leader, err, state, *epoch)


def partition_out(p: Partition) -> tuple:
    return (p.topic, p.partition, p.replicas, p.isr, p.elr, p.lke, p.leader, p.leader_epoch, p.partition_epoch,
            p.lrs, p.adding, p.removing, p.config,
            [_rep_out(p.reps[b]) for b in sorted(p.reps)],
            [(s, as_tuple(snap)) for s, snap in p.md_history], [as_tuple(x) for x in p.ap_requests],
            [as_tuple(x) for x in p.ap_responses], p.next_pid, p.retry,
            p.tdone, p.last_seq, p.cur_seq, p.now, p.idx, p.inv.to_tuple(), p.unclean)


def partition_in(cl: Cluster, t) -> Partition:
    p = Partition(cl, t[0], t[1])
    (p.replicas, p.isr, p.elr, p.lke, p.leader, p.leader_epoch, p.partition_epoch, p.lrs, p.adding, p.removing,
     p.config) = (list(t[2]), list(t[3]), listed(t[4]), listed(t[5]), t[6], t[7], t[8], t[9], listed(t[10]),
                  listed(t[11]), dict(t[12]))
    for rt in t[13]:
        r = _rep_in(rt)
        p.reps[r.broker] = r
    if t[14]:
        p.md_history = [(s, _snapshot_in(snap)) for s, snap in t[14]]
    if t[15]:
        p.ap_requests = [_ap_request_in(x) for x in t[15]]
    if t[16]:
        p.ap_responses = [_ap_response_in(x) for x in t[16]]
    p.next_pid = t[17]
    p.retry = tuple(t[18]) if t[18] is not None else None
    p.tdone, p.last_seq, p.cur_seq, p.now, p.idx = t[19:24]
    p.set_t_next()
    p.inv = Invariants.from_tuple(t[24])
    p.unclean = dict(t[25])
    p.refresh_conf()
    return p


def _snapshot_in(snap) -> RegistrationSnapshot:
    leader, le, pe, replicas, isr, adding, removing, lrs = snap
    return RegistrationSnapshot(leader, le, pe, tuple(replicas), tuple(isr), tuple(adding), tuple(removing), lrs)


# ---------------------------------------------------------------- cluster
def cluster_out(cl: Cluster, with_partitions: bool = True) -> tuple:
    parts = [partition_out(cl.partitions[k]) for k in sorted(cl.partitions)] if with_partitions else []
    return ([b.to_tuple() for b in cl.brokers.values()], cl.topic_cfg, parts,
            [as_tuple(e) for e in cl.reg_log],
            {b: {r: as_tuple(reg) for r, reg in v.items()} for b, v in cl.views.items()},
            cl.view_seq, cl.last_seq, cl.max_ts, cl.applied, cl.rejected,
            {b: as_tuple(reg) for b, reg in cl.reg_base.items()}, cl.topic_rf)


def cluster_in(config: EngineConfig, t, emit_global: bool = True, owns=None) -> Cluster:
    cl = Cluster(config, emit_global=emit_global, owns=owns)
    for bt in t[0]:
        b = Broker(bt[0])
        b.from_tuple(bt)
        cl.brokers[b.id] = b
    cl.topic_cfg = {k: dict(v) for k, v in t[1].items()}
    for pt in t[2]:
        p = partition_in(cl, pt)
        cl.partitions[p.key] = p
        cl.by_topic[p.topic].add(p.key)
        cl.reindex(p)
    cl.reg_log = [RegLogEntry(s, b, BrokerReg(*reg)) for s, b, reg in t[3]]
    cl.views = {int(k): {int(b): BrokerReg(*r) for b, r in v.items()} for k, v in t[4].items()}
    cl.view_seq = dict(t[5])
    cl.last_seq, cl.max_ts, cl.applied, cl.rejected = t[6:10]
    cl.reg_base = {int(k): BrokerReg(*v) for k, v in t[10].items()}
    # state written before topics had a replication factor (2026-11-29) has none: the topics of the
    # partitions here get one (_know_own_topics); another topic's next creation that succeeds sets
    # its own, as the topic's first would
    cl.topic_rf = dict(t[11]) if len(t) > 11 else {}
    cl.set_sess_next()
    return cl


def _pack(obj) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=4), 1)


def _unpack(b: bytes, zipped: bool = True):
    """A pickled (zipped) value; a truncated or damaged one is a CodecError, not a crash deep in pickle."""
    try:
        return pickle.loads(zlib.decompress(b) if zipped else b)
    except (EOFError, pickle.UnpicklingError, zlib.error, ValueError, TypeError, IndexError) as e:
        raise CodecError(f"truncated or corrupt isrflow state blob ({type(e).__name__}: {e})") from None


def encode(obj, level: int = 1) -> bytes:
    """A version-2 frame of any builtin value: b"IF" + 2 + zlib(pickle(obj))."""
    return MAGIC + bytes([2]) + zlib.compress(pickle.dumps(obj, protocol=4), level)


def _frame(blob: bytes) -> tuple[int, bytes]:
    if len(blob) < 3 or blob[:2] != MAGIC:
        raise CodecError("not an isrflow state blob")
    v = blob[2]
    if v not in READS:
        raise CodecError(f"state blob version {v} is not supported by this isrflow (reads versions "
                         f"{', '.join(map(str, READS))})")
    return v, blob[3:]


def decode(blob: bytes):
    """The value in a blob of any version; versions 3 and 4 as (cluster, {key: (due, hosts,
    encoded partition)}), the layout of version 3, for inspection."""
    v, body = _frame(blob)
    if v == 2:
        return _unpack(body)
    head, parts = _unpack(body, zipped=False)
    if v == 4:
        parts = dict(_cold_of(parts).items())
    return head, parts


def _cold_of(columns) -> ColdPartitions:
    try:
        return ColdPartitions(*columns)
    except (TypeError, ValueError) as e:
        raise CodecError(f"truncated or corrupt isrflow state blob ({type(e).__name__}: {e})") from None


def encode_cluster(cl: Cluster) -> bytes:
    """Version 4: the decoded partitions encoded now, the cold ones' columns copied as they came."""
    dumps = pickle.dumps
    hot = [(key, cl.partition_due(p), tuple(sorted(p.indexed)), dumps(partition_out(p), protocol=4))
           for key, p in cl.partitions.items()]
    body = (dumps(cluster_out(cl, with_partitions=False), protocol=4), cl.cold.merged(hot))
    return MAGIC + bytes([VERSION]) + pickle.dumps(body, protocol=4)


def decode_cluster(blob: bytes, config: EngineConfig, emit_global: bool = True, owns=None) -> Cluster:
    """The cluster of a blob; under versions 3 and 4 with every partition cold (decoded when used)."""
    v, body = _frame(blob)
    if v == 2:
        cl = cluster_in(config, _unpack(body), emit_global=emit_global, owns=owns)
        _know_own_topics(cl)
        return cl
    head, parts = _unpack(body, zipped=False)
    cl = cluster_in(config, _unpack(head, zipped=v == 3), emit_global=emit_global, owns=owns)
    if v == 3:
        # once, at the first batch after an upgrade: the partitions were zlib'd one by one
        try:
            cl.cold = ColdPartitions.from_entries([(k, due, hosts, zlib.decompress(data))
                                                   for k, (due, hosts, data) in sorted(parts.items())])
        except (AttributeError, TypeError, ValueError, zlib.error) as e:
            raise CodecError(f"truncated or corrupt isrflow state blob ({type(e).__name__}: {e})") from None
    else:
        cl.cold = _cold_of(parts)
    cl.thaw_fn = thaw
    _know_own_topics(cl)
    return cl


def _know_own_topics(cl: Cluster) -> None:
    """A topic with partitions here is a topic that exists (Cluster.topic_rf), with the replica count
    of its first partition here as its replication factor. State written by an earlier isrflow may
    lack topics: all of them before topics had a factor, those loaded by PartitionRecord before such a
    record created its topic (2026-11-29). Comparing topic names costs nothing when none is missing,
    as in any state this version writes; a Spark bucket learns only the topics of its own partitions."""
    missing = {t for t in cl.cold.topics if t not in cl.topic_rf} if cl.cold else set()
    missing.update(k[0] for k in cl.partitions if k[0] not in cl.topic_rf)
    for topic in sorted(missing):
        keys = cl.topic_keys(topic)
        first = cl.part(keys[0]) if keys else None
        if first is not None:
            cl.topic_rf[topic] = len(first.replicas)


def thaw(cl: Cluster, key: tuple) -> Partition:
    """Decode cold partition `key` into cl (Cluster.part calls this on first use)."""
    _, hosts, data = cl.cold.pop(key)
    p = partition_in(cl, _unpack(data, zipped=False))
    cl.partitions[key] = p
    # the router's indexes hold decoded partitions only (the cold ones answer from their columns):
    # p joins them under the hosts it was indexed under when encoded
    cl.by_topic[key[0]].add(key)
    by_broker = cl.by_broker
    for b in hosts:
        by_broker[b].add(key)
    p.indexed = tuple(hosts)
    return p


def partition_bytes(p: Partition) -> int:
    """Encoded size of one partition's state (the benchmark's state bytes per partition)."""
    return len(_pack(partition_out(p)))
