"""Compact, versioned encoding of protocol state (it lives in Spark's state store).

Only builtins are pickled (ints, strings, tuples, lists, dicts, None, bools, bytes), so any
Python reads it and no class path is frozen into a checkpoint: the NamedTuples of
protocol/messages.py are stored as plain tuples in field order, and the leader's ISR state as
(committed ISR, maximal ISR, pending).

Layout of version 3 (written): b"IF" + version byte + pickle((cluster, partitions)), where
`cluster` is zlib(pickle(the cluster tuple, its partition list empty)) and `partitions` maps
each (topic, partition), in key order, to (next timer due or None, hosts, zlib(pickle(the
partition tuple))). Partitions are decoded one by one when first used (`thaw`, see
Cluster.cold) and only the decoded ones are encoded again, so a micro-batch of a Spark bucket
costs the partitions it touches, not all the bucket's partitions. Version 2 (read only): b"IF" +
2 + zlib(pickle(the cluster tuple with every partition in it)), decoded whole. A future version
adds a decoder for its own version byte and keeps the old ones.
"""
from __future__ import annotations

import pickle
import zlib

from .cluster import Cluster
from .config import EngineConfig
from .invariants import Invariants
from .log import ReplicaLog
from .messages import (AlterPartitionRequest, AlterPartitionResponse, BrokerReg, IsrMember, LeaderAndIsr,
                       RegistrationSnapshot, RegLogEntry, as_tuple)
from .partition import Partition
from .registry import Broker
from .replica import CommittedIsr, FollowerState, Produce, Replica, pending_isr

MAGIC = b"IF"
VERSION = 3   # 2: broker session state (broker.session.timeout.ms); 3: partitions encoded one by one
READS = (2, 3)


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
    r.purgatory = [Produce(*x) for x in purg]
    return r


def _ap_request_in(x) -> AlterPartitionRequest:
    x = list(x)
    x[6] = tuple(IsrMember(*m) for m in x[6])
    return AlterPartitionRequest(*x)


def _ap_response_in(x) -> AlterPartitionResponse:
    pid, leader, err, state = x
    if state is not None:
        leader_, isr, lrs, le, pe = state
        state = LeaderAndIsr(leader_, tuple(isr), lrs, le, pe)
    return AlterPartitionResponse(pid, leader, err, state)


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
     p.config) = (list(t[2]), list(t[3]), list(t[4]), list(t[5]), t[6], t[7], t[8], t[9], list(t[10]),
                  list(t[11]), dict(t[12]))
    for rt in t[13]:
        r = _rep_in(rt)
        p.reps[r.broker] = r
    p.md_history = [(s, _snapshot_in(snap)) for s, snap in t[14]]
    p.ap_requests = [_ap_request_in(x) for x in t[15]]
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
            {b: as_tuple(reg) for b, reg in cl.reg_base.items()})


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
    """The value in a blob of either version (version 3: (cluster, partitions) as stored)."""
    v, body = _frame(blob)
    return _unpack(body, zipped=v == 2)


def encode_cluster(cl: Cluster) -> bytes:
    """Version 3: the decoded partitions encoded now, the cold ones as they came."""
    parts = dict(cl.cold)
    for key, p in cl.partitions.items():
        parts[key] = (cl.partition_due(p), tuple(sorted(p.indexed)), _pack(partition_out(p)))
    body = (_pack(cluster_out(cl, with_partitions=False)), {k: parts[k] for k in sorted(parts)})
    return MAGIC + bytes([VERSION]) + pickle.dumps(body, protocol=4)


def decode_cluster(blob: bytes, config: EngineConfig, emit_global: bool = True, owns=None) -> Cluster:
    """The cluster of a blob; under version 3 with every partition cold (decoded when used)."""
    v, body = _frame(blob)
    if v == 2:
        return cluster_in(config, _unpack(body), emit_global=emit_global, owns=owns)
    head, parts = _unpack(body, zipped=False)
    cl = cluster_in(config, _unpack(head), emit_global=emit_global, owns=owns)
    cl.cold = parts
    cl.thaw_fn = thaw
    by_topic, by_broker = cl.by_topic, cl.by_broker
    for key, (_, hosts, _) in parts.items():
        by_topic[key[0]].add(key)
        for b in hosts:
            by_broker[b].add(key)
    return cl


def thaw(cl: Cluster, key: tuple) -> Partition:
    """Decode cold partition `key` into cl (Cluster.part calls this on first use)."""
    _, hosts, data = cl.cold.pop(key)
    p = partition_in(cl, _unpack(data))
    p.indexed = set(hosts)      # what cl.by_broker holds it under (decode_cluster indexed it so)
    cl.partitions[key] = p
    return p


def partition_bytes(p: Partition) -> int:
    """Encoded size of one partition's state (the benchmark's state bytes per partition)."""
    return len(_pack(partition_out(p)))
