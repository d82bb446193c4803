"""The one bridge between the controller (controller/) and the brokers (broker/), which never
import each other. Two message channels, each delivered `immediate` (at once, inside the event
that sends) or `explicit` (held until a MetadataSync / AlterPartitionArrive /
AlterPartitionResponse row of the stream delivers it):

  * metadata: a committed registration (RegistrationSnapshot) to the replicas' brokers;
  * AlterPartition: a leader's request to the controller, and the answer back.

Both wings reach this module only through `p.channels`, an object handed to them, never an import.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .broker import leader as _leader
from .broker.metadata_cache import apply_metadata
from .controller.replication import handle_alter_partition, snapshot
from .messages import grown

if TYPE_CHECKING:
    from .partition import Partition


# ---------------------------------------------------------------- metadata
def publish(p: Partition) -> None:
    """A committed registration reaches the brokers: at once, or on MetadataSync."""
    snap = snapshot(p)
    if p.cl.config.md_immediate:
        brokers = p.cl.brokers
        for b in sorted(p.hosts()):
            br = brokers.get(b)
            if br is not None and br.alive:
                apply_metadata(p, b, snap, p.cur_seq)
    else:
        p.md_history = grown(p.md_history, (p.cur_seq, snap))


def apply_current(p: Partition, b: int) -> None:
    """Immediate delivery to one (re)started broker: the current registration."""
    apply_metadata(p, b, snapshot(p), p.cur_seq)


def sync_broker(p, b: int, up_to: int | None) -> None:
    """MetadataSync: broker b applies the newest registration committed at or before `up_to`."""
    hist = p.md_history
    if not hist:
        return
    pick = None
    for s, snap in reversed(hist):
        if up_to is None or s <= up_to:
            pick = (s, snap)
            break
    if pick is None:
        return
    seq, snap = pick
    rep = p.reps.get(b)
    if rep is not None and rep.md_seq >= seq and rep.partition_epoch >= snap.partition_epoch:
        return
    apply_metadata(p, b, snap, seq)
    _prune_history(p)


def _prune_history(p) -> None:
    hist = p.md_history
    if len(hist) < 2:
        return
    low = min((rep.md_seq for rep in p.reps.values()), default=-1)
    # always keep at least the newest entry (brokers added later need it)
    p.md_history = [h for h in hist if h[0] > low] or [hist[-1]]


# ---------------------------------------------------------------- AlterPartition
def send_alter_partition(p: Partition, req) -> None:
    p.ap_requests = grown(p.ap_requests, req)
    if p.cl.config.ap_immediate:
        deliver_alter_partition_request(p)
        deliver_alter_partition_response(p)


def deliver_alter_partition_request(p: Partition) -> None:
    """A19/A20: the controller handles the oldest undelivered AlterPartition (none waiting: nothing)."""
    if p.ap_requests:
        p.ap_responses = grown(p.ap_responses, handle_alter_partition(p, p.ap_requests.pop(0)))


def deliver_alter_partition_response(p: Partition) -> None:
    """B10: the leader handles the oldest undelivered answer (none waiting: nothing)."""
    if p.ap_responses:
        _leader.on_alter_partition_response(p, p.ap_responses.pop(0))
