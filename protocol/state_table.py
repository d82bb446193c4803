"""The `partition_state` table: a projection of the touched partitions' state (SPEC §3)."""
from __future__ import annotations

from .messages import LEADER


def partition_state_rows(cl, keys=None) -> list[dict]:
    rows = []
    if keys is None:
        keys = [p.key for p in cl.all_partitions()]
    for key in sorted(keys):
        p = cl.partitions.get(key)
        if p is None:
            continue
        lrep = p.reps.get(p.leader) if p.leader >= 0 else None
        lead = lrep if lrep is not None and lrep.role == LEADER else None
        pend = None
        if lead is not None and lead.isr_state.is_pending:
            st = lead.isr_state
            pend = f"{st.change} {list(st.proposed)}"
        rows.append({
            "topic": p.topic, "partition": p.partition, "seq": p.last_seq, "idx": 0, "ts_ms": p.now,
            "leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
            "last_known_elr": list(p.lke), "adding": list(p.adding), "removing": list(p.removing),
            "leader_recovery_state": p.lrs,
            "leader_hwm": lead.log.hwm if lead else None, "leader_leo": lead.log.leo if lead else None,
            "leader_leso": lead.leso if lead else None,
            "maximal_isr": list(lead.isr_state.maximal_isr) if lead else None,
            "pending_alter_partition": pend, "replica_states": _replica_states(cl, p)})
    return rows


def _replica_states(cl, p) -> list[dict]:
    reps = []
    for b in sorted(p.reps):
        r = p.reps[b]
        br = cl.brokers.get(b)
        reps.append({"broker": b, "alive": bool(br and br.alive), "fenced": bool(br.fenced) if br else None,
                     "broker_epoch": br.epoch if br else None, "role": r.role, "leo": r.log.leo,
                     "hwm": r.log.hwm, "leader_epoch": r.leader_epoch})
    return reps
