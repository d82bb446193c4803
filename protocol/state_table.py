"""The `partition_state` table: a projection of the touched partitions' state (SPEC §3).

The projection is defined once, column-wise (partition_state_columns): both engines turn it into
Arrow without a dict per partition and per replica (schemas.tables.partition_state_arrow), since
at 100k partitions building and converting those dicts cost ~1.2 s per 100k rows, a large share
of a replay that touches every partition in every batch. partition_state_rows gives the same
projection as row dicts (tests, the simulator's digest, small tables).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .log import ReplicaLog
from .messages import LEADER
from .registry import Broker
from .replica import Replica

if TYPE_CHECKING:
    from .partition import Partition

# the columns of one partition's row, in the table's order; replica_states is nested (REPLICA_COLUMNS)
PARTITION_COLUMNS = ("topic", "partition", "seq", "idx", "ts_ms", "leader", "leader_epoch", "partition_epoch",
                     "replicas", "isr", "elr", "last_known_elr", "adding", "removing", "leader_recovery_state",
                     "leader_hwm", "leader_leo", "leader_leso", "maximal_isr", "pending_alter_partition")
# the columns whose values are lists (partition_state_columns gives the partitions' own)
_LIST_COLUMNS = ("replicas", "isr", "elr", "last_known_elr", "adding", "removing", "maximal_isr")
REPLICA_COLUMNS = ("broker", "alive", "fenced", "broker_epoch", "role", "leo", "hwm", "leader_epoch")


def partition_state_columns(cl, keys=None) -> tuple[dict[str, list], list[int], dict[str, list]]:
    """The rows of the partitions `keys` (default: all), in key order, as columns:
    (PARTITION_COLUMNS -> values, each row's number of replica states, REPLICA_COLUMNS -> values of
    all rows' replica states one after the other, each row's in broker order). List values are the
    partitions' own lists, not copies (a fifth of the projection at 100k partitions): turn the
    columns into Arrow (or copy them: partition_state_rows) before the cluster applies an event."""
    # all_partitions() comes in key order already (and thaws the cold ones); other keys are sorted here
    order = [p.key for p in cl.all_partitions()] if keys is None else _key_order(keys)
    cols: dict[str, list] = {c: [] for c in PARTITION_COLUMNS}
    reps: dict[str, list] = {c: [] for c in REPLICA_COLUMNS}
    (topic, partition, seq, idx, ts_ms, leader, leader_epoch, partition_epoch, replicas, isr, elr, lke, adding,
     removing, lrs, leader_hwm, leader_leo, leader_leso, maximal_isr, pending) = (cols[c] for c in PARTITION_COLUMNS)
    r_broker, r_alive, r_fenced, r_epoch, r_role, r_leo, r_hwm, r_le = (reps[c] for c in REPLICA_COLUMNS)
    counts: list[int] = []
    parts = cl.partitions
    brokers = cl.brokers
    # typed locals: the compiled core then reads the slots directly. The loop runs once per
    # partition a batch touched: ~100k per batch at 100k partitions (docs/core-speed.md)
    p: Partition | None
    lrep: Replica | None
    lead: Replica | None
    r: Replica
    br: Broker | None
    log: ReplicaLog
    rlog: ReplicaLog
    for key in order:
        p = parts.get(key)
        if p is None:
            continue
        lrep = p.reps.get(p.leader) if p.leader >= 0 else None
        lead = lrep if lrep is not None and lrep.role == LEADER else None
        topic.append(p.topic)
        partition.append(p.partition)
        seq.append(p.last_seq)
        idx.append(0)
        ts_ms.append(p.now)
        leader.append(p.leader)
        leader_epoch.append(p.leader_epoch)
        partition_epoch.append(p.partition_epoch)
        replicas.append(p.replicas)
        isr.append(p.isr)
        elr.append(p.elr)
        lke.append(p.lke)
        adding.append(p.adding)
        removing.append(p.removing)
        lrs.append(p.lrs)
        if lead is not None:
            log = lead.log
            st = lead.isr_state
            leader_hwm.append(log.hwm)
            leader_leo.append(log.leo)
            leader_leso.append(lead.leso)
            maximal_isr.append(st.maximal_isr)
            pending.append(f"{st.change} {list(st.proposed)}" if st.is_pending else None)
        else:
            leader_hwm.append(None)
            leader_leo.append(None)
            leader_leso.append(None)
            maximal_isr.append(None)
            pending.append(None)
        prs = p.reps
        counts.append(len(prs))
        for b in sorted(prs):
            r = prs[b]
            br = brokers.get(b)
            r_broker.append(b)
            if br is not None:
                r_alive.append(bool(br.alive))
                r_fenced.append(bool(br.fenced))
                r_epoch.append(br.epoch)
            else:
                r_alive.append(False)
                r_fenced.append(None)
                r_epoch.append(None)
            r_role.append(r.role)
            rlog = r.log
            r_leo.append(rlog.leo)
            r_hwm.append(rlog.hwm)
            r_le.append(r.leader_epoch)
    return cols, counts, reps


def partition_state_rows(cl, keys=None) -> list[dict]:
    """partition_state_columns as one dict per row (replica_states: a list of dicts)."""
    cols, counts, reps = partition_state_columns(cl, keys)
    for c in _LIST_COLUMNS:
        cols[c] = [None if v is None else list(v) for v in cols[c]]
    rep_rows = [dict(zip(REPLICA_COLUMNS, vals)) for vals in zip(*(reps[c] for c in REPLICA_COLUMNS))]
    rows = []
    at = 0
    for vals, n in zip(zip(*(cols[c] for c in PARTITION_COLUMNS)), counts):
        row = dict(zip(PARTITION_COLUMNS, vals))
        row["replica_states"] = rep_rows[at:at + n]
        at += n
        rows.append(row)
    return rows


def _key_order(keys) -> list[tuple[str, int]]:
    """The keys (topic, partition) sorted. Sorted per topic as plain ints: `sorted` over 100k
    (str, int) tuples compares through each tuple, spread over the heap (0.13-0.19 s at 100k
    partitions); grouping first and sorting ints took 0.06 s."""
    by_topic: dict[str, list[int]] = {}
    for key in keys:
        t = key[0]
        ns = by_topic.get(t)
        if ns is None:
            by_topic[t] = ns = []
        ns.append(key[1])
    out: list[tuple[str, int]] = []
    for t in sorted(by_topic):
        ns = by_topic[t]
        ns.sort()
        out.extend([(t, n) for n in ns])
    return out
