"""The leader replica (Partition.scala, ReplicaManager, DelayedProduce; Kafka 4.4.0): becoming and
leaving leader, the high watermark, ISR expansion and shrink through AlterPartition, the
acks=all purgatory, and the leader's half of every request (produce, follower fetch, client reads).

The leader reaches the controller only through `p.channels` (an AlterPartition request); it
reads broker registrations from its own metadata cache (`p.cl.view_of(broker)`).
"""
from __future__ import annotations
from typing import TYPE_CHECKING, Any

from ..config import effective_min_isr
from ..log import ReplicaLog
from ..messages import LEADER, NO_BROKER_EPOCH, RECOVERED, AlterPartitionRequest, IsrMember, grown
from ..replica import CommittedIsr, FollowerState, Produce, Replica, pending_isr

if TYPE_CHECKING:
    from ..partition import Partition

# B10: which AlterPartition errors roll back, which keep the pending state, the rest retry.
ROLLBACK_ERRORS = frozenset({"OPERATION_NOT_ATTEMPTED", "INELIGIBLE_REPLICA"})
STAY_PENDING_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID", "FENCED_LEADER_EPOCH",
                                 "INVALID_UPDATE_VERSION", "INVALID_REQUEST", "NEW_LEADER_ELECTED"})


def leader_isr_order(ids) -> tuple:
    """The order of the ISR a leader sends in AlterPartition (rule B9).

    Partition#prepareIsrExpand / #prepareIsrShrink (kafka_2.13 4.4.0) turn the committed ISR, a
    java.util.Set, into a scala.collection.mutable.HashSet (`asScala.map(...)`, then `+ r` or
    `diff(out)`) and send its `toList`. That set iterates bucket by bucket (index = improved hash
    & (table size - 1), table size 16 until it holds 12 elements, doubling after), each bucket
    in ascending hash order; an Int's improved hash is `h ^ (h >>> 16)`. For ids below the table
    size this is ascending order: replicas [3,1,2], shrink -> [2,3], expand -> [1,2,3] (seen on
    a real 4.4.0 cluster). ISRs the controller writes itself keep their list order (A9)."""
    ids = list(ids)
    cap = 16
    while len(ids) >= cap * 3 // 4:
        cap *= 2

    def key(r: int):
        h = (r ^ (r >> 16)) & 0xFFFFFFFF
        return (h & (cap - 1), h)
    return tuple(sorted(ids, key=key))


def check_leader_epoch(rep: Replica, cle) -> str | None:
    """C1 / Partition#checkCurrentLeaderEpoch: a request's current leader epoch against the
    replica's (-1 or none: not checked). The one place leader-epoch fencing is written."""
    if cle is not None and cle >= 0:
        if rep.leader_epoch > cle:
            return "FENCED_LEADER_EPOCH"
        if rep.leader_epoch < cle:
            return "UNKNOWN_LEADER_EPOCH"
    return None


# ---------------------------------------------------------------- becoming and leaving leader
def make_leader(p: Partition, rep: Replica, le: int, pe: int, replicas, isr) -> None:
    """B11 Partition.makeLeader."""
    was_leader = rep.role == LEADER
    # a new leader epoch resets the leader state; so does leading with no leader state at all
    new_epoch = le > rep.leader_epoch or rep.leso is None
    rep.role = LEADER
    rep.leader = rep.broker
    rep.assignment = replicas
    rep.md_lrs = RECOVERED
    rep.isr_state = CommittedIsr(isr)
    old = rep.followers
    fol: dict[int, FollowerState] = {}
    if new_epoch:
        now = p.now
        rep.leso = rep.log.leo
        rep.log.assign(le, rep.log.leo)
        for r in replicas:
            if r == rep.broker:
                continue
            in_isr = r in isr
            prev = old.get(r) if was_leader else None
            if prev is None:
                fs = FollowerState(-1, None, now if in_isr else None, -1, None)
            else:
                fs = FollowerState(prev.leo, now if in_isr else None, now if in_isr else None, rep.leso,
                                   prev.broker_epoch)
            fol[r] = fs
        rep.leader_epoch = le
        p.inv.new_leadership(p, rep)
    else:
        for r in replicas:
            if r != rep.broker:
                fol[r] = old.get(r) or FollowerState()
    rep.followers = fol
    rep.partition_epoch = pe
    maybe_increment_hw(p, rep, "BecomeLeader")


def resign(p: Partition, rep: Replica, result: str = "NOT_LEADER_OR_FOLLOWER") -> None:
    """Leadership lost: parked acks=all produces fail (DelayedProduce: NOT_LEADER_OR_FOLLOWER;
    a crashed leader never answers: NETWORK_EXCEPTION at the client)."""
    for pr in rep.purgatory:
        produce_outcome(p, pr, result, rep)
    rep.clear_leader_state()
    rep.role = None


# ---------------------------------------------------------------- high watermark
def eligible(p: Partition, rep: Replica, r: int, fs: FollowerState) -> bool:
    """B5 Partition#isReplicaIsrEligible (KRaft), against this broker's metadata cache."""
    reg = p.cl.view_of(rep.broker).get(r)
    if reg is None or not reg.registered or reg.fenced or reg.in_cs:
        return False
    if fs.broker_epoch is None:
        return False
    return fs.broker_epoch == NO_BROKER_EPOCH or fs.broker_epoch == reg.epoch


def under_min_isr(p: Partition, rep: Replica) -> bool:
    """B2: the committed ISR below the effective min ISR (of the leader's assignment)."""
    return len(rep.isr_state.isr) < effective_min_isr(p.conf.min_isr, len(rep.assignment))


def maybe_increment_hw(p: Partition, rep: Replica, trigger: str) -> None:
    """B6 Partition#maybeIncrementLeaderHW."""
    if under_min_isr(p, rep):
        return
    st = rep.isr_state
    log = rep.log
    leo = log.leo
    old = log.hwm
    if leo <= old:
        return                # the candidate HWM never exceeds the leader's LEO
    hw = leo
    now = p.now
    lag = p.cl.config.lag_ms
    maximal = st.maximal_isr
    for r, fs in rep.followers.items():
        if fs.leo < hw and (r in maximal or (fs.is_caught_up(leo, now, lag) and eligible(p, rep, r, fs))):
            hw = fs.leo
            if hw <= old:
                return        # the candidate only falls from here: no advance (the checks are pure)
    if hw > old:
        log.hwm = hw
        p.emit("hwm", {"broker": rep.broker, "leader_epoch": rep.leader_epoch, "old_hwm": old,
                       "new_hwm": hw, "trigger": trigger})
        p.inv.on_leader_hwm(p, rep, hw)
        complete_delayed(p, rep)


def complete_delayed(p: Partition, rep: Replica) -> None:
    """DelayedProduce.tryComplete for every parked produce the HWM has passed (B13)."""
    if not rep.purgatory:
        return
    hw = rep.log.hwm
    keep = []
    ok = len(rep.isr_state.maximal_isr) >= effective_min_isr(p.conf.min_isr, len(rep.assignment))
    for pr in rep.purgatory:
        if hw >= pr.required:
            produce_outcome(p, pr, "ACKED" if ok else "NOT_ENOUGH_REPLICAS_AFTER_APPEND", rep)
        else:
            keep.append(pr)
    rep.purgatory = keep


def produce_outcome(p: Partition, pr: Produce, result: str, rep: Replica) -> None:
    """The row of an acks=all produce carries its request's seq/idx/ts and the outcome's seq/ts."""
    p.cl.out.add("produce", {
        "topic": p.topic, "partition": p.partition, "seq": pr.seq, "idx": pr.idx, "ts_ms": pr.ts,
        "broker": rep.broker, "acks": -1, "records": pr.records, "base_offset": pr.base,
        "leader_epoch": pr.epoch, "result": result, "result_seq": p.cur_seq, "result_ts_ms": p.now})
    if result == "ACKED":
        p.inv.on_acked(p, pr)


def expire_produces(p: Partition, rep: Replica, t: int) -> None:
    """Parked produces whose request.timeout.ms ran out by t: REQUEST_TIMED_OUT."""
    keep = []
    for pr in rep.purgatory:
        if pr.deadline <= t:
            produce_outcome(p, pr, "REQUEST_TIMED_OUT", rep)
        else:
            keep.append(pr)
    rep.purgatory = keep


# ---------------------------------------------------------------- ISR changes (B1, B7-B10)
def propose(p: Partition, rep: Replica, change: str, proposed: tuple) -> None:
    """B9: submit AlterPartition; the maximal ISR follows from the pending state (B1). While this
    broker's process still waits for the answer to an earlier request for the partition (a
    metadata update reset the leader's pending state meanwhile), AlterPartitionManager#submit
    fails the new one at once with OPERATION_NOT_ATTEMPTED, and Partition#handleAlterPartitionError
    reverts to the committed state (B10): nothing is sent, the next check tries again
    (PartitionTest#testAlterIsrLeaderAndIsrRace)."""
    if _submit_in_flight(p, rep.broker):
        _emit_proposal(p, rep, change, proposed, rep.isr_state.maximal_isr, "ROLLED_BACK", "OPERATION_NOT_ATTEMPTED")
        return
    pid = p.next_pid
    p.next_pid += 1
    rep.isr_state = pending_isr(change, rep.isr_state.isr, proposed, pid)
    send_alter_partition(p, rep)


def _submit_in_flight(p: Partition, b: int) -> bool:
    """B9: broker b's AlterPartitionManager holds an item for the partition: a request of b's current
    process (its broker epoch) that the controller has not answered, or whose answer b has not
    handled yet (the manager removes the item when it handles the answer). A restarted broker's
    manager starts empty: the requests of its earlier process do not count."""
    if not (p.ap_requests or p.ap_responses):
        return False
    br = p.cl.brokers.get(b)
    epoch = br.proc_epoch if br is not None else -1
    return any(m.leader == b and m.broker_epoch == epoch for m in p.ap_requests) or any(
        m.leader == b and m.broker_epoch == epoch for m in p.ap_responses)


def _emit_proposal(p: Partition, rep: Replica, change: str, proposed, maximal, phase: str, error) -> None:
    """The leader's `alter_partition` row for a proposal: sent (PROPOSED) or refused by its own
    AlterPartitionManager (ROLLED_BACK)."""
    p.emit("alter_partition", {"leader": rep.broker, "leader_epoch": rep.leader_epoch,
                               "partition_epoch": rep.partition_epoch, "change": change,
                               "proposed_isr": list(proposed), "maximal_isr": list(maximal),
                               "phase": phase, "error": error})


def send_alter_partition(p: Partition, rep: Replica) -> None:
    """(Re)send the pending proposal through the AlterPartition channel."""
    st = rep.isr_state
    brokers = p.cl.brokers
    own = brokers[rep.broker].proc_epoch if rep.broker in brokers else -1
    new_isr = []
    for r in st.proposed:
        if r == rep.broker:
            new_isr.append(IsrMember(r, own))
        else:
            fs = rep.followers.get(r)
            new_isr.append(IsrMember(r, fs.broker_epoch if fs is not None and fs.broker_epoch is not None else -1))
    req = AlterPartitionRequest(st.pid, rep.broker, own, rep.leader_epoch, rep.partition_epoch, RECOVERED,
                                tuple(new_isr), st.change)
    _emit_proposal(p, rep, st.change, st.proposed, st.maximal_isr, "PROPOSED", None)
    p.channels.send_alter_partition(p, req)


def maybe_expand(p: Partition, rep: Replica, r: int, fs: FollowerState) -> None:
    """B7 Partition#maybeExpandIsr."""
    st = rep.isr_state
    if st.is_pending or r in st.isr:
        return
    if not eligible(p, rep, r, fs):
        return
    if fs.leo >= rep.log.hwm and fs.leo >= rep.leso:
        propose(p, rep, "EXPAND", leader_isr_order(tuple(st.isr) + (r,)))


def maybe_shrink(p: Partition, rep: Replica) -> None:
    """B8 Partition#maybeShrinkIsr at `now`."""
    st = rep.isr_state
    if st.is_pending:
        return
    leo = rep.log.leo
    now = p.now
    lag = p.cl.config.lag_ms
    out = []
    for r in st.isr:
        if r == rep.broker:
            continue
        fs = rep.followers.get(r)
        if fs is None or not fs.is_caught_up(leo, now, lag):
            out.append(r)
    if out:
        propose(p, rep, "SHRINK", leader_isr_order(r for r in st.isr if r not in out))


def shrink_due(p: Partition, rep: Replica, lo: int) -> int | None:
    """Earliest time >= lo at which maybe_shrink would act (state unchanged meanwhile)."""
    st = rep.isr_state
    if st.is_pending:
        return None
    leo = rep.log.leo
    lag = p.cl.config.lag_ms
    best = None
    for r in st.isr:
        if r == rep.broker:
            continue
        fs = rep.followers.get(r)
        if fs is None or (fs.leo != leo and fs.last_caught_up_ms is None):
            return lo
        if fs.leo == leo:
            continue
        t = max(lo, fs.last_caught_up_ms + lag + 1)
        if best is None or t < best:
            best = t
    return best


def on_alter_partition_response(p: Partition, resp) -> None:
    """B10 Partition#handleAlterPartitionUpdate / handleAlterPartitionError."""
    b = resp.leader
    rep = p.reps.get(b)
    br = p.cl.brokers.get(b)
    base = {"leader": b, "change": None, "proposed_isr": None, "maximal_isr": None, "error": resp.error}
    st: Any = rep.isr_state if rep is not None else None
    if (rep is None or br is None or not br.alive or rep.role != LEADER or not st.is_pending
            or st.pid != resp.pid):
        p.emit("alter_partition", dict(base, leader_epoch=rep.leader_epoch if rep else None,
                                       partition_epoch=rep.partition_epoch if rep else None, phase="IGNORED"))
        return
    base.update(change=st.change, proposed_isr=list(st.proposed), leader_epoch=rep.leader_epoch,
                partition_epoch=rep.partition_epoch)
    err = resp.error
    if err is None:
        state = resp.state
        if state.leader_epoch != rep.leader_epoch or state.partition_epoch < rep.partition_epoch:
            p.emit("alter_partition", dict(base, maximal_isr=list(st.maximal_isr), phase="IGNORED"))
            return
        rep.isr_state = CommittedIsr(state.isr)
        rep.partition_epoch = state.partition_epoch
        p.emit("alter_partition", dict(base, maximal_isr=list(state.isr), phase="APPLIED"))
        p.inv.dirty = True
        maybe_increment_hw(p, rep, "AlterPartition")
    elif err in ROLLBACK_ERRORS:
        rep.isr_state = st.committed()
        p.emit("alter_partition", dict(base, maximal_isr=list(rep.isr_state.maximal_isr), phase="ROLLED_BACK"))
    elif err in STAY_PENDING_ERRORS:
        p.emit("alter_partition", dict(base, maximal_isr=list(st.maximal_isr), phase="IGNORED"))
    elif p.cl.config.ap_immediate:
        # NOT_CONTROLLER, STALE_BROKER_EPOCH, ...: the manager resubmits the same proposal; immediate
        # delivery would loop, so the retry waits for the next event on this partition
        p.retry = (b, st.pid)
        p.emit("alter_partition", dict(base, maximal_isr=list(st.maximal_isr), phase="IGNORED"))
    else:
        send_alter_partition(p, rep)


def resubmit(p: Partition) -> None:
    """The deferred retry of an AlterPartition (immediate delivery), at the partition's next event."""
    b, pid = p.retry
    p.retry = None
    rep = p.reps.get(b)
    if rep is not None and rep.isr_state.is_pending and rep.isr_state.pid == pid:
        send_alter_partition(p, rep)


# ---------------------------------------------------------------- requests at the leader
def produce(p: Partition, ev: dict) -> None:
    """B13 Partition#appendRecordsToLeader."""
    b = ev["broker"]
    acks = ev["acks"]
    n = ev["records"]
    rep = p.reps.get(b)
    br = p.cl.brokers.get(b)
    row = {"broker": b, "acks": acks, "records": n, "base_offset": None, "leader_epoch": None,
           "result_seq": p.cur_seq, "result_ts_ms": p.now}
    if acks not in (-1, 0, 1):
        row["result"] = "INVALID_REQUIRED_ACKS"
        p.emit("produce", row)
        return
    if br is None or not br.alive:
        row["result"] = "NETWORK_EXCEPTION"
        p.emit("produce", row)
        return
    if rep is None or rep.role != LEADER:
        row["result"] = "NOT_LEADER_OR_FOLLOWER"
        row["leader_epoch"] = rep.leader_epoch if rep is not None and rep.leader_epoch >= 0 else None
        p.emit("produce", row)
        return
    row["leader_epoch"] = rep.leader_epoch
    if acks == -1 and under_min_isr(p, rep):
        row["result"] = "NOT_ENOUGH_REPLICAS"
        p.emit("produce", row)
        return
    inc = br.proc_epoch
    base = rep.log.append(rep.leader_epoch, inc, n)
    row["base_offset"] = base
    if acks == -1:
        pr = Produce(p.cur_seq, p.now, base + n, base, n, p.now + p.cl.config.request_timeout_ms,
                     rep.leader_epoch, inc, p.idx)
        p.idx += 1     # the outcome row takes this place in the request's order
        rep.purgatory = grown(rep.purgatory, pr)
        if pr.deadline < p.t_wake:
            p.t_wake = pr.deadline    # the timers' bound on parked deadlines (timers.advance)
    else:
        row["result"] = "ACKED"
        p.emit("produce", row)
    maybe_increment_hw(p, rep, "Produce")


def fetch_error(rep: Replica | None, b: int, cle) -> str | None:
    """C1 current-leader-epoch check, then leadership; C2 the fetcher must be assigned."""
    if rep is None:
        return "NOT_LEADER_OR_FOLLOWER"
    err = check_leader_epoch(rep, cle)
    if err is not None:
        return err
    if rep.role != LEADER:
        return "NOT_LEADER_OR_FOLLOWER"
    if b not in rep.followers:
        return "UNKNOWN_LEADER_EPOCH" if cle is not None and cle >= 0 else "NOT_LEADER_OR_FOLLOWER"
    return None


OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"


def check_fetch_position(llog: ReplicaLog, lfe: int | None, off: int):
    """C3 divergence, then the offset's range: None (serve records), OUT_OF_RANGE, or the
    diverging (epoch, end offset) the response carries."""
    if lfe is not None and lfe >= 0:
        if llog.cache and llog.cache[-1][0] == lfe:
            e, o = lfe, llog.leo
        else:
            e, o = llog.end_offset_for(lfe)
        if e == -1 or o == -1:
            return OUT_OF_RANGE
        if e < lfe or o < off:
            return (e, o)
    if off > llog.leo or off < 0:
        return OUT_OF_RANGE
    return None


def fetcher_epoch_stale(p: Partition, leader: int, b: int, bepoch: Any) -> bool:
    """B3: the fetch carries a broker epoch older than the leader's metadata cache has for b. The
    cache answers for an alive broker only (KRaftMetadataCache#getAliveBrokerEpoch: none while b
    is fenced), so a fenced b's fetch is not checked."""
    if bepoch is None or bepoch == NO_BROKER_EPOCH:
        return False
    reg = p.cl.view_of(leader).get(b)
    return reg is not None and not reg.fenced and reg.epoch > bepoch


def update_follower_state(p: Partition, fs: FollowerState, off: int, leader_leo: int, bepoch: Any) -> bool:
    """B3 Replica#updateFetchStateOrThrow at the leader -> whether the follower's LEO moved."""
    now = p.now
    lcu = fs.last_caught_up_ms
    if off >= leader_leo:
        fs.last_caught_up_ms = now if lcu is None or now > lcu else lcu
    elif off >= fs.last_fetch_leader_leo and fs.last_fetch_ms is not None:
        lf = fs.last_fetch_ms
        fs.last_caught_up_ms = lf if lcu is None or lf > lcu else lcu
    if leader_leo > fs.last_fetch_leader_leo:
        fs.last_fetch_leader_leo = leader_leo
    fs.last_fetch_ms = now
    leo_changed = fs.leo != off
    fs.leo = off
    fs.broker_epoch = bepoch
    return leo_changed


def client_leader(p: Partition, b, cle):
    """A client request (ListOffsets, consumer fetch) at broker b: (replica, error or None)."""
    br = p.cl.brokers.get(b)
    if br is None or not br.alive:
        return None, "NETWORK_EXCEPTION"
    rep = p.reps.get(b)
    if rep is None:
        return None, "NOT_LEADER_OR_FOLLOWER"
    err = check_leader_epoch(rep, cle)
    if err is not None:
        return rep, err
    if rep.role != LEADER:
        return rep, "NOT_LEADER_OR_FOLLOWER"
    return rep, None


def list_offsets(p: Partition, ev: dict) -> None:
    """B14 Partition#fetchOffsetForTimestamp (client request: leader required)."""
    b = ev["broker"]
    spec = ev["offset_spec"]
    row = {"broker": b, "type": "ListOffsets", "fetch_offset": None, "result": "NONE", "offset": None,
           "records": None, "hwm": None}
    rep, err = client_leader(p, b, ev.get("current_leader_epoch"))
    if err:
        row["result"] = err
        if rep is not None:
            row["hwm"] = rep.log.hwm
        p.emit("consumer", row)
        return
    log = rep.log
    row["hwm"] = log.hwm
    if spec == "EARLIEST":
        row["offset"] = 0
    elif rep.leso is not None and rep.leso > log.hwm:
        row["result"] = "OFFSET_NOT_AVAILABLE"
    else:
        # READ_UNCOMMITTED answers the HWM; READ_COMMITTED the LSO, which is the HWM without transactions
        row["offset"] = log.hwm
    p.emit("consumer", row)


def consumer_fetch(p: Partition, ev: dict) -> None:
    b = ev["broker"]
    off = ev["fetch_offset"]
    row = {"broker": b, "type": "ConsumerFetch", "fetch_offset": off, "result": "NONE", "offset": None,
           "records": 0, "hwm": None}
    rep, err = client_leader(p, b, ev.get("current_leader_epoch"))
    if err:
        row["result"] = err
        row["records"] = None
        p.emit("consumer", row)
        return
    log = rep.log
    row["hwm"] = log.hwm
    if off > log.leo or off < 0:
        row["result"] = "OFFSET_OUT_OF_RANGE"
        row["records"] = None
    else:
        n = max(0, log.hwm - off)
        row["records"] = n
        if n:
            p.inv.on_consumed(p, rep, off, log.hwm)
    p.emit("consumer", row)
