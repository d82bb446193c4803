"""The follower replica (Partition.makeFollower, AbstractFetcherThread; Kafka 4.4.0): the fetch it
sends, modelled from its own state, and what it does with the leader's answer -- copy records and
the high watermark (C8), truncate on divergence (C6) or when ahead of the leader (C7).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..log import ReplicaLog
from ..messages import FOLLOWER, LEADER, NO_BROKER_EPOCH
from ..registry import Broker
from ..replica import Replica
from .leader import resign

if TYPE_CHECKING:
    from ..partition import Partition


def make_follower(p: Partition, rep: Replica, leader: int, le: int, pe: int, replicas: tuple, isr: tuple,
                  lrs: str) -> None:
    """B12 Partition.makeFollower."""
    if rep.role == LEADER:
        resign(p, rep)
    rep.role = FOLLOWER
    rep.leader = leader
    if le > rep.leader_epoch:
        rep.leader_epoch = le
    rep.partition_epoch = pe
    rep.assignment = replicas
    rep.md_lrs = lrs
    rep.leso = None


def fetch_request(p: Partition, ev: dict, frep: Replica | None, br: Broker):
    """The fetch broker `br` sends: a modelled fetch (all columns null) takes them from the
    replica's state; a recorded one keeps its columns, fills the nulls from the model, and reports
    where it drifts from the model. -> (target, fetch offset, last fetched epoch, current leader
    epoch, broker epoch)."""
    if frep is not None:
        flog = frep.log
        m_target = frep.leader if frep.role == FOLLOWER else None
        m_off = flog.leo
        m_lfe = flog.cache[-1][0] if flog.cache else -1
        m_cle = frep.leader_epoch if frep.leader_epoch >= 0 else None
    else:
        m_target, m_off, m_lfe, m_cle = None, 0, -1, None
    m_be = br.proc_epoch
    target = ev["target"]
    off, lfe, cle, bepoch = ev["fetch_offset"], ev["last_fetched_epoch"], ev["current_leader_epoch"], ev["broker_epoch"]
    if off is None and lfe is None and cle is None and bepoch is None:
        off, lfe, cle, bepoch = m_off, m_lfe, m_cle, m_be
    else:
        drift(p, ev, frep, m_target, m_off, m_lfe, m_cle, m_be)
        off = m_off if off is None else off
        lfe = m_lfe if lfe is None else lfe
        cle = m_cle if cle is None else cle
        bepoch = m_be if bepoch is None else bepoch
    if target is None:
        target = m_target
    return target, off, lfe, cle, bepoch


def drift(p: Partition, ev, frep, m_target, m_off, m_lfe, m_cle, m_be) -> None:
    """A recorded fetch whose columns differ from the model: report, and trust the row."""
    found = []
    if ev["fetch_offset"] is not None and ev["fetch_offset"] != m_off:
        found.append(f"fetch_offset {ev['fetch_offset']} vs model LEO {m_off}")
    if ev["last_fetched_epoch"] is not None and ev["last_fetched_epoch"] != m_lfe:
        found.append(f"last_fetched_epoch {ev['last_fetched_epoch']} vs model {m_lfe}")
    if ev["current_leader_epoch"] is not None and ev["current_leader_epoch"] != m_cle:
        found.append(f"current_leader_epoch {ev['current_leader_epoch']} vs model {m_cle}")
    if ev["broker_epoch"] is not None and ev["broker_epoch"] not in (NO_BROKER_EPOCH, m_be):
        # (NO_BROKER_EPOCH: the request carries none, which is no claim about it)
        found.append(f"broker_epoch {ev['broker_epoch']} vs model {m_be}")
    if ev["target"] is not None and m_target is not None and ev["target"] != m_target:
        found.append(f"target {ev['target']} vs model leader {m_target}")
    if not found:
        return
    row = fetch_row(ev["broker"], ev["target"] if ev["target"] is not None else m_target, ev["fetch_offset"])
    row["replica_leo"] = m_off
    row["replica_hwm"] = frep.log.hwm if frep is not None else None
    row["result"] = "DRIFT"
    row["detail"] = "; ".join(found)
    p.emit("fetch", row)
    off = ev["fetch_offset"]
    if frep is not None and off is not None and off < frep.log.leo:
        frep.log.truncate_to(off)   # the follower's log is shorter than the model thought
        p.inv.on_log_change(p, frep)


def fetch_row(broker, target, off) -> dict:
    return {"broker": broker, "target": target, "fetch_offset": off, "result": None,
            "diverging_epoch": None, "diverging_end_offset": None, "truncated_to": None,
            "replica_leo": None, "replica_hwm": None}


def emit_fetch(p: Partition, row: dict, result: str, frep: Replica | None) -> None:
    """A fetch row, with the follower's log after the answer was applied."""
    row["result"] = result
    if frep is not None:
        row["replica_leo"] = frep.log.leo
        row["replica_hwm"] = frep.log.hwm
    p.emit("fetch", row)


def apply_records(flog: ReplicaLog, llog: ReplicaLog, off: int, leader_leo: int, resp_hw: int) -> None:
    """C8: the follower receives records [off, leader LEO) and the HWM captured before the
    leader updated its follower state."""
    if flog.leo == off and leader_leo > off:
        flog.copy_from(llog, off, leader_leo)
    flog.hwm = resp_hw if resp_hw < flog.leo else flog.leo


def out_of_range(p: Partition, row, frep, llog) -> None:
    """C7: the follower truncates to the leader's LEO when it is ahead."""
    if frep is not None and llog.leo < frep.log.leo:
        frep.log.truncate_to(llog.leo)
        row["truncated_to"] = llog.leo
        p.inv.on_log_change(p, frep)
    emit_fetch(p, row, "OFFSET_OUT_OF_RANGE", frep)


def truncate_on_divergence(p: Partition, frep: Replica, e: int, o: int, row: dict) -> None:
    """C6 AbstractFetcherThread#getOffsetTruncationState."""
    log = frep.log
    fe, fo = log.end_offset_for(e)
    if fe == -1:
        to = min(o, log.leo)
    elif fe != e:
        to = min(fo, log.leo)
    else:
        to = min(fo, o, log.leo)
    log.truncate_to(to)
    row["truncated_to"] = to
    p.inv.on_log_change(p, frep)
