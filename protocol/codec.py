"""Compact, versioned encoding of protocol state (it lives in Spark's state store).

Layout: b"IF" + one version byte + zlib(pickle(nested tuples of builtins)). Only builtins
are pickled (ints, strings, tuples, lists, dicts, None, bools), so any Python reads it and no
class path is frozen into a checkpoint: the NamedTuples of protocol/messages.py are stored as
plain tuples in field order, and the leader's ISR state as (committed ISR, maximal ISR, pending).
A future version adds a decoder for its own version byte and keeps the old ones.
"""
from __future__ import annotations

import pickle
import zlib
from collections import deque

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
VERSION = 2   # 2: broker session state (broker.session.timeout.ms)


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
    p.ap_requests = deque(_ap_request_in(x) for x in t[15])
    p.ap_responses = deque(_ap_response_in(x) for x in t[16])
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
def cluster_out(cl: Cluster) -> tuple:
    return ([b.to_tuple() for b in cl.brokers.values()], cl.topic_cfg,
            [partition_out(cl.partitions[k]) for k in sorted(cl.partitions)],
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


def encode(obj: tuple, level: int = 1) -> bytes:
    return MAGIC + bytes([VERSION]) + zlib.compress(pickle.dumps(obj, protocol=4), level)


def decode(blob: bytes) -> tuple:
    if len(blob) < 3 or blob[:2] != MAGIC:
        raise CodecError("not an isrflow state blob")
    v = blob[2]
    if v != VERSION:
        raise CodecError(f"state blob version {v} is not supported by this isrflow (reads version {VERSION})")
    return pickle.loads(zlib.decompress(blob[3:]))


def encode_cluster(cl: Cluster) -> bytes:
    return encode(cluster_out(cl))


def decode_cluster(blob: bytes, config: EngineConfig, emit_global: bool = True, owns=None) -> Cluster:
    return cluster_in(config, decode(blob), emit_global=emit_global, owns=owns)


def partition_bytes(p: Partition) -> int:
    """Encoded size of one partition's state (the benchmark's state bytes per partition)."""
    return len(encode(partition_out(p)))
