"""Deterministic generator of isrflow input event streams (``isrflow simulate``).

The simulator plays the *environment* of a KRaft cluster -- brokers starting,
crashing, losing their controller session, producers, consumers and follower
fetchers -- and writes it as an input stream (SPEC §2): a directory of Parquet
(or JSON-lines) files whose names sort in stream order (``part-00000.parquet``,
...) plus a ``_simulation.json`` manifest with the parameters (underscore
files are ignored by the reader).

Closed loop (VOPR style). The simulator has no model of the controller. It
feeds every row it writes, in stream order, into the real protocol core
(``jobs.sim_core.CoreDriver``: a ``protocol.cluster.Cluster`` built from
conf/engine.properties plus the stream's ``engine_config``, exactly what the
replay builds) and asks that core what clients and followers do next: who
leads a partition, its replica list, a replica's log end offset and high
watermark. Seeded randomness decides only the environment (fault schedule,
request times and sizes, fetch cadences); every row's meaning comes from the
core's state at that row. A what-if of another config is therefore another
stream (same seed, same fault schedule and workload intent) simulated under
that config (``config=`` / ``--set KEY=VALUE``), recorded in the manifest's
``engine_config``. The core checks the protocol invariants after every step;
their count is in the summary (``core``), and ``stop_on_violation`` stops at
the first with its seed and step (seq).

Same parameters and seed -> identical bytes (numpy ``Generator(PCG64)``,
fixed Parquet writer settings, no wall-clock anywhere in the output).

Stream layout
-------------
* t=0: ``BrokerRegister`` (epochs from a global counter starting at 100,
  ``previous_broker_epoch`` -1) and ``BrokerUnfence`` for brokers 1..N, then
  ``CreatePartition`` for every partition (rack-aware round-robin placement,
  first replica rotating) and ``AlterConfig`` per topic
  (``min.insync.replicas``, default 2 when RF >= 3, plus ``topic_config``).
* Steady state, per window of cluster time (``window_ms``, also cut at every
  fault action): drawn with numpy from the core's leaders at the window start,
  then fed to the core row by row, each row asking the core first:

  - ``Produce`` (Poisson, per-topic rate and acks mix), ``ListOffsets`` /
    ``ConsumerFetch`` (``consumer_rate``) go to the partition's leader in the
    core at that row (the controller's leader whose replica has become leader,
    after the broker sessions and the partition's timers due by then fired) and
    are not sent while there is none or it is unreachable (crashed, isolated);
    a ``ConsumerFetch`` reads from a fraction of that leader's high watermark;
  - modeled follower ``Fetch`` rows (only topic/partition/broker), per replica
    at a cadence drawn from ``fetch_interval_ms`` with +-25% jitter, are sent
    while the fetcher is one of the core's replicas and not the leader, and
    both ends are reachable (fetcher slots follow the core's replica list
    through reassignments);
  - ``Tick`` per live broker every ``tick_interval_ms``; with
    ``delivery="explicit"`` also ``AlterPartitionArrive`` /
    ``AlterPartitionResponse`` pairs a few ms after fetches and ticks, and
    ``MetadataSync`` per live broker every ``metadata_interval_ms``
    (``up_to_seq`` null).

* Clients with stale metadata: when a client row first meets a new leader in
  the core, the next produce request within a seeded window of up to 1 s may
  still go to the leader the clients met before (if that broker is reachable);
  the core answers it NOT_LEADER_OR_FOLLOWER. The summary counts them
  (``stale_leader_produces``): with every other produce aimed at the core's
  leader, they are the only produces a replay refuses as misaddressed.
* Elections, reassignment completion, the auto leader rebalance, ISR and ELR
  changes are the core's: the simulator writes the admin request
  (``ElectLeaders``, ``Reassign``, ``AlterConfig``) and follows what the core
  decided.

Fault grammar (``faults=``)
---------------------------
Items are separated by ``,`` or ``;``::

    item   := KIND [":" ARG]* "@" TIME ["+" DURATION]
    TIME, DURATION := number with unit: 500ms, 30s, 2m, 1h, 1m30s (a bare number is ms)
    B      := broker id (1..brokers)
    TP     := topic-partition, e.g. t0-3 (topic t0, partition 3)

==========================================  ==========================================================
``crash:B@T[+D]``                           clean restart: BrokerControlledShutdown at T, BrokerCrash
                                            clean=true + BrokerFence ~0.2-2 s later, BrokerRegister
                                            (previous_broker_epoch = last epoch) at T+D (default 30s),
                                            BrokerUnfence 0.5-3 s after.
``unclean-crash:B[:lose=N|P%][:frac=F]@T[+D]``  BrokerCrash clean=false at T with ReplicaLogLoss on a
                                            fraction F (default 0.5) of its partitions, each losing N
                                            records / P% of the records produced so far (default: a
                                            few recent ones); BrokerFence after the session timeout;
                                            BrokerRegister (previous -1) at T+D (default 60s), Unfence.
``partition:B@T[+D]``                       broker-controller network partition: the broker keeps running
                                            and fetching; BrokerFence once the session times out,
                                            BrokerUnfence at T+D (default 30s).
``isolate:B@T[+D]``                         full network isolation: no fetches from or to B, BrokerFence
                                            after the session timeout, back (Unfence) at T+D (default 30s).
``slow:B[:factor=F]@T[+D]``                 B's follower fetches F times (default 10) less often for D
                                            (default 60s).
``rolling-restart[:down=D2]@T[+G]``         clean restart of every broker in turn, one every G (default
                                            60s), each down for D2 (default G/2).
``zone-outage:RACK[:lose=..][:frac=F]@T[+D]``  every broker of rack RACK (``rack0``.., or a number) crashes
                                            uncleanly at the same T, all back at T+D (default 120s).
``reassign:TP->B,B,..@T``                   Reassign TP to the replica list (the core completes it once
                                            the adding replicas joined the ISR; fetchers follow).
``cancel-reassign:TP@T``                    Reassign with replicas null (cancel).
``elect:preferred|unclean[:TP]@T``          ElectLeaders for TP, or (no TP / ``all``) every partition.
``elect:designated:TP:B@T``                 ElectLeaders DESIGNATED with target B.
``config:TOPIC[-P]:key=value[:key=value]@T``  AlterConfig (topic-wide, or one partition).
==========================================  ==========================================================

Example: ``crash:3@120s,unclean-crash:2@300s,partition:1@60s+30s,slow:4@0s+120s,
zone-outage:rack1@400s+60s,reassign:t0-3->1,4,5@200s,elect:preferred@500s``.
Faults on a broker that is already in that state (crashing a crashed broker)
are skipped at run time and listed in the summary (``skipped_faults``).

Scenarios (``scenario=``): ``last-replica-standing``, ``rolling-restart``,
``zone-outage``, ``flaky-network``, ``reassignment`` -- see ``SCENARIOS``.
They set defaults (e.g. brokers=3 for last-replica-standing) that explicit
arguments override, and their fault times scale with ``duration_ms``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.sim_core import _BLANK as _BLANK_EVENT
from jobs.sim_core import SimulationViolation
from schemas.events import EVENT_ARROW_SCHEMA as INPUT_ARROW_SCHEMA

__all__ = [
    "INPUT_ARROW_SCHEMA",
    "SCENARIOS",
    "Fault",
    "parse_duration",
    "parse_faults",
    "simulate",
    "SimulationViolation",
    "add_arguments",
    "run_from_args",
    "main",
]

# --------------------------------------------------------------------------
# Schema (SPEC §2 input columns)
# --------------------------------------------------------------------------

# The input schema is defined once, in schemas.events (SPEC §1: not written twice).
_INPUT_COLUMNS: list[tuple[str, pa.DataType]] = [(f.name, f.type) for f in INPUT_ARROW_SCHEMA]
_COLUMN_NAMES = [n for n, _ in _INPUT_COLUMNS]

# Steady-state row type codes (column "type" of the generated arrays).
_T_FETCH, _T_PRODUCE, _T_TICK, _T_LIST, _T_CFETCH, _T_APARR, _T_APRESP, _T_MSYNC = range(8)
_TYPE_NAMES = pa.array(
    ["Fetch", "Produce", "Tick", "ListOffsets", "ConsumerFetch",
     "AlterPartitionArrive", "AlterPartitionResponse", "MetadataSync"],
    pa.string(),
)
_OFFSET_SPECS = pa.array(["LATEST", "EARLIEST"], pa.string())
_ISOLATIONS = pa.array(["READ_UNCOMMITTED", "READ_COMMITTED"], pa.string())
# the same names as plain strings, for the rows fed to the core (indexed by the same codes)
_OFFSET_SPEC_NAMES = ("LATEST", "EARLIEST")
_ISOLATION_NAMES = ("READ_UNCOMMITTED", "READ_COMMITTED")
_AP_TYPE_NAMES = {_T_APARR: "AlterPartitionArrive", _T_APRESP: "AlterPartitionResponse"}

# --------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DUR_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?", re.IGNORECASE)


def parse_duration(value: str | int | float) -> int:
    """``"10m"`` -> 600000. Units ms, s, m, h, d, combinable (``"1m30s"``);
    a bare number (or an int) is milliseconds. Raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"invalid duration {value!r}: must be a non-negative number of ms")
        return int(round(value))
    text = str(value).strip()
    if not text:
        raise ValueError("invalid duration '': expected e.g. 500ms, 30s, 10m, 1h, 1m30s")
    pos, total, units_seen = 0, 0.0, 0
    while pos < len(text):
        m = _DUR_PART.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(
                f"invalid duration {value!r}: expected e.g. 500ms, 30s, 10m, 1h, 1m30s "
                "(a bare number means milliseconds)")
        num, unit = float(m.group(1)), (m.group(2) or "").lower()
        if not unit:
            if m.end() != len(text) or units_seen:
                raise ValueError(f"invalid duration {value!r}: missing unit after {m.group(1)!r}")
            unit = "ms"
        total += num * _UNIT_MS[unit]
        units_seen += 1
        pos = m.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
    return int(round(total))


def _fmt_ms(ms: int) -> str:
    if ms % 60_000 == 0 and ms:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


# --------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------

FAULT_KINDS = (
    "crash", "unclean-crash", "partition", "isolate", "slow", "rolling-restart",
    "zone-outage", "reassign", "cancel-reassign", "elect", "config",
)
_DEFAULT_DUR = {
    "crash": 30_000, "unclean-crash": 60_000, "partition": 30_000, "isolate": 30_000,
    "slow": 60_000, "rolling-restart": 60_000, "zone-outage": 120_000,
}


@dataclass(frozen=True)
class Fault:
    """One parsed fault. ``spec()`` gives its normalized text."""

    kind: str
    at_ms: int
    dur_ms: int | None = None
    broker: int | None = None
    rack: int | None = None
    topic: str | None = None
    partition: int | None = None
    replicas: tuple[int, ...] | None = None
    election: str | None = None
    target: int | None = None
    factor: float | None = None
    lose: str | None = None          # "N" records or "P%" of produced
    frac: float | None = None
    down_ms: int | None = None
    config: tuple[tuple[str, str], ...] | None = None

    def spec(self) -> str:
        k = self.kind
        args: list[str] = []
        tp = f"{self.topic}-{self.partition}" if self.topic is not None and self.partition is not None else None
        if k in ("crash", "unclean-crash", "partition", "isolate", "slow"):
            args.append(str(self.broker))
        elif k == "zone-outage":
            args.append(f"rack{self.rack}")
        elif k == "reassign":
            args.append(f"{tp}->{','.join(map(str, self.replicas or ()))}")
        elif k == "cancel-reassign":
            args.append(tp)
        elif k == "elect":
            args.append(self.election.lower())
            if tp:
                args.append(tp)
            if self.target is not None:
                args.append(str(self.target))
        elif k == "config":
            args.append(tp if tp else self.topic)
            args += [f"{a}={b}" for a, b in self.config or ()]
        if self.lose is not None:
            args.append(f"lose={self.lose}")
        if self.frac is not None:
            args.append(f"frac={self.frac:g}")
        if self.factor is not None:
            args.append(f"factor={self.factor:g}")
        if self.down_ms is not None:
            args.append(f"down={_fmt_ms(self.down_ms)}")
        s = k + "".join(":" + a for a in args) + "@" + _fmt_ms(self.at_ms)
        if self.dur_ms is not None:
            s += "+" + _fmt_ms(self.dur_ms)
        return s


_ITEM_SPLIT = re.compile(r"\s*[,;]\s*(?=[A-Za-z][A-Za-z_-]*\s*[:@])")


@dataclass
class _Cluster:
    """Static layout the fault parser validates against."""

    brokers: int
    racks: int
    topics: list[str]
    partitions: int  # per topic
    duration_ms: int

    def rack_of(self, b: int) -> int:
        return (b - 1) % self.racks


def _split_items(spec: str) -> list[str]:
    spec = spec.strip()
    if not spec:
        return []
    return [s for s in _ITEM_SPLIT.split(spec)]


def parse_faults(spec: str | None, *, brokers: int = 6, racks: int = 3,
                 topics: Sequence[str] = ("t0",), partitions: int = 100,
                 duration_ms: int | None = None) -> list[Fault]:
    """Parse and validate a fault spec (grammar in the module docstring).

    Raises ValueError naming the offending item and what to write instead."""
    if spec is None:
        return []
    cl = _Cluster(brokers, racks, list(topics), partitions, duration_ms or 2**62)
    out = []
    for i, item in enumerate(_split_items(spec), 1):
        try:
            out.append(_parse_item(item.strip(), cl))
        except ValueError as e:
            raise ValueError(f"faults item {i} {item.strip()!r}: {e}") from None
    return out


def _parse_broker(s: str, cl: _Cluster) -> int:
    try:
        b = int(s)
    except ValueError:
        raise ValueError(f"{s!r} is not a broker id (brokers are 1..{cl.brokers})") from None
    if not 1 <= b <= cl.brokers:
        raise ValueError(f"broker {b} does not exist (brokers are 1..{cl.brokers})")
    return b


def _parse_tp(s: str, cl: _Cluster, *, allow_topic_only: bool = False) -> tuple[str, int | None]:
    s = s.strip()
    if allow_topic_only and s in cl.topics:
        return s, None
    if "-" not in s:
        raise ValueError(f"{s!r} is not a topic-partition: write TOPIC-PARTITION, e.g. {cl.topics[0]}-0")
    topic, _, p = s.rpartition("-")
    if topic not in cl.topics:
        raise ValueError(f"unknown topic {topic!r} in {s!r} (topics: {', '.join(cl.topics)})")
    try:
        part = int(p)
    except ValueError:
        raise ValueError(f"{p!r} in {s!r} is not a partition number") from None
    if not 0 <= part < cl.partitions:
        raise ValueError(f"partition {part} of {topic!r} does not exist (0..{cl.partitions - 1})")
    return topic, part


def _parse_item(item: str, cl: _Cluster) -> Fault:
    """``KIND[:ARG]*@TIME[+DURATION]`` -> Fault. The checks run in a fixed order (the time, then
    the kind, then the kind's own arguments), so an item with several mistakes always reports the
    same one."""
    if "@" not in item:
        raise ValueError("missing '@TIME' (e.g. crash:3@120s)")
    head, _, when = item.rpartition("@")
    at, dur = _parse_when(when, cl)
    args = _ItemArgs.split(head, dur)
    return _KIND_PARSERS[args.kind](Fault(kind=args.kind, at_ms=at, dur_ms=dur), args, cl)


def _parse_when(when: str, cl: _Cluster) -> tuple[int, int | None]:
    """The ``TIME[+DURATION]`` after the '@'; a fault must start before the simulation ends."""
    if "+" in when:
        t_s, _, d_s = when.partition("+")
    else:
        t_s, d_s = when, None
    try:
        at = parse_duration(t_s)
    except ValueError as e:
        raise ValueError(f"bad time after '@': {e}") from None
    dur = None
    if d_s is not None:
        try:
            dur = parse_duration(d_s)
        except ValueError as e:
            raise ValueError(f"bad duration after '+': {e}") from None
        if dur <= 0:
            raise ValueError("the duration after '+' must be positive")
    if at >= cl.duration_ms:
        raise ValueError(
            f"time {_fmt_ms(at)} is not before the end of the simulation ({_fmt_ms(cl.duration_ms)})")
    return at, dur


class _ItemArgs:
    """The ``KIND:ARG:..`` head of an item: its positional arguments and ``key=value`` options,
    with the checks the kinds' parsers share (their messages name the kind)."""

    def __init__(self, kind: str, dur: int | None, pos: list[str], opts: dict[str, str]):
        self.kind, self.dur, self.pos, self.opts = kind, dur, pos, opts

    @classmethod
    def split(cls, head: str, dur: int | None) -> "_ItemArgs":
        kind, *args = [a.strip() for a in head.split(":")] if head else [""]
        kind = kind.lower()
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} (expected one of: {', '.join(FAULT_KINDS)})")
        # a config item's arguments are key=value pairs themselves: for it they are positional
        pos = [a for a in args if "=" not in a or kind == "config"]
        opts: dict[str, str] = {}
        if kind != "config":
            for a in args:
                if "=" in a:
                    k, _, v = a.partition("=")
                    opts[k.strip().lower()] = v.strip()
        return cls(kind, dur, pos, opts)

    def need(self, n: int, usage: str) -> None:
        if len(self.pos) != n:
            raise ValueError(f"expected {usage}")

    def allow_opts(self, *names: str) -> None:
        bad = sorted(set(self.opts) - set(names))
        if bad:
            allowed = ", ".join(names) if names else "none"
            raise ValueError(f"unknown option(s) {', '.join(bad)} for {self.kind} (allowed: {allowed})")

    def no_dur(self) -> None:
        if self.dur is not None:
            raise ValueError(f"{self.kind} takes no '+DURATION'")

    def lose_frac(self) -> dict[str, Any]:
        """The ``lose=`` / ``frac=`` options of the crashes that lose log (as Fault fields)."""
        opts = self.opts
        out: dict[str, Any] = {}
        if "lose" in opts:
            v = opts["lose"]
            m = re.fullmatch(r"(\d+)(%?)", v)
            if not m or (m.group(2) and int(m.group(1)) > 100):
                raise ValueError(f"lose={v!r}: write a record count (lose=20) or a percentage 0-100 (lose=30%)")
            out["lose"] = v
        if "frac" in opts:
            try:
                fr = float(opts["frac"])
            except ValueError:
                fr = -1.0
            if not 0.0 <= fr <= 1.0:
                raise ValueError(f"frac={opts['frac']!r}: must be a fraction between 0 and 1")
            out["frac"] = fr
        return out


def _parse_broker_fault(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    """crash / partition / isolate: one broker, no options."""
    a.need(1, f"{a.kind}:BROKER@TIME[+DURATION], e.g. {a.kind}:2@60s+30s")
    a.allow_opts()
    return replace(f, broker=_parse_broker(a.pos[0], cl))


def _parse_unclean_crash(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.need(1, "unclean-crash:BROKER[:lose=N|P%][:frac=F]@TIME[+DURATION], e.g. unclean-crash:2@300s")
    a.allow_opts("lose", "frac")
    return replace(f, broker=_parse_broker(a.pos[0], cl), **a.lose_frac())


def _parse_slow(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.need(1, "slow:BROKER[:factor=F]@TIME[+DURATION], e.g. slow:4:factor=10@0s+120s")
    a.allow_opts("factor")
    factor = None
    if "factor" in a.opts:
        try:
            factor = float(a.opts["factor"])
        except ValueError:
            factor = -1.0
        if not (factor >= 1.0 and math.isfinite(factor)):
            raise ValueError(f"factor={a.opts['factor']!r}: must be a number >= 1")
    return replace(f, broker=_parse_broker(a.pos[0], cl), factor=factor)


def _parse_rolling_restart(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.need(0, "rolling-restart[:down=DURATION]@TIME[+GAP], e.g. rolling-restart@60s+90s")
    a.allow_opts("down")
    down = None
    if "down" in a.opts:
        try:
            down = parse_duration(a.opts["down"])
        except ValueError as e:
            raise ValueError(f"down=: {e}") from None
        if down <= 0:
            raise ValueError("down= must be positive")
    return replace(f, down_ms=down)


def _parse_zone_outage(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.need(1, "zone-outage:RACK@TIME[+DURATION], e.g. zone-outage:rack1@400s+60s")
    a.allow_opts("lose", "frac")
    r = a.pos[0].lower()
    r = r[4:] if r.startswith("rack") else r
    if not r.isdigit() or not 0 <= int(r) < cl.racks:
        raise ValueError(f"unknown rack {a.pos[0]!r} (racks are rack0..rack{cl.racks - 1})")
    return replace(f, rack=int(r), **a.lose_frac())


def _parse_reassign(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.no_dur()
    a.allow_opts()
    if len(a.pos) != 1 or "->" not in a.pos[0]:
        raise ValueError("expected reassign:TOPIC-PARTITION->B1,B2,..@TIME, e.g. reassign:t0-3->1,4,5@200s")
    tp_s, _, reps_s = a.pos[0].partition("->")
    topic, part = _parse_tp(tp_s, cl)
    reps = tuple(_parse_broker(x.strip(), cl) for x in reps_s.split(",") if x.strip())
    if not reps:
        raise ValueError("empty replica list after '->' (use cancel-reassign:TP@TIME to cancel)")
    if len(set(reps)) != len(reps):
        raise ValueError(f"replica list {list(reps)} repeats a broker")
    return replace(f, topic=topic, partition=part, replicas=reps)


def _parse_cancel_reassign(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.no_dur()
    a.allow_opts()
    a.need(1, "cancel-reassign:TOPIC-PARTITION@TIME, e.g. cancel-reassign:t0-3@260s")
    topic, part = _parse_tp(a.pos[0], cl)
    return replace(f, topic=topic, partition=part)


def _parse_elect(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.no_dur()
    a.allow_opts()
    usage = ("elect:preferred|unclean[:TOPIC-PARTITION]@TIME or "
             "elect:designated:TOPIC-PARTITION:BROKER@TIME")
    pos = a.pos
    if not pos:
        raise ValueError(f"expected {usage}")
    et = pos[0].upper()
    if et not in ("PREFERRED", "UNCLEAN", "DESIGNATED"):
        raise ValueError(f"unknown election type {pos[0]!r} (preferred, unclean or designated)")
    topic = part = target = None
    if et == "DESIGNATED":
        a.need(3, usage)
        topic, part = _parse_tp(pos[1], cl)
        target = _parse_broker(pos[2], cl)
    elif len(pos) == 2 and pos[1].lower() != "all":
        topic, part = _parse_tp(pos[1], cl)
    elif len(pos) > 2:
        raise ValueError(f"expected {usage}")
    return replace(f, election=et, topic=topic, partition=part, target=target)


def _parse_config(f: Fault, a: _ItemArgs, cl: _Cluster) -> Fault:
    a.no_dur()
    pos = a.pos
    if len(pos) < 2 or any("=" not in x for x in pos[1:]):
        raise ValueError("expected config:TOPIC[-PARTITION]:KEY=VALUE[:KEY=VALUE]@TIME, "
                         "e.g. config:t0:min.insync.replicas=1@300s")
    topic, part = _parse_tp(pos[0], cl, allow_topic_only=True)
    kv = tuple((x.partition("=")[0].strip(), x.partition("=")[2].strip()) for x in pos[1:])
    if any(not k for k, _ in kv):
        raise ValueError("empty config key")
    return replace(f, topic=topic, partition=part, config=kv)


# one parser per fault kind (every name in FAULT_KINDS)
_KIND_PARSERS: dict[str, Callable[[Fault, _ItemArgs, _Cluster], Fault]] = {
    "crash": _parse_broker_fault, "partition": _parse_broker_fault, "isolate": _parse_broker_fault,
    "unclean-crash": _parse_unclean_crash, "slow": _parse_slow, "rolling-restart": _parse_rolling_restart,
    "zone-outage": _parse_zone_outage, "reassign": _parse_reassign, "cancel-reassign": _parse_cancel_reassign,
    "elect": _parse_elect, "config": _parse_config,
}


# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    description: str
    defaults: Mapping[str, Any]
    faults: Callable[["_Ctx"], list[Fault]]


@dataclass
class _Ctx:
    brokers: int
    racks: int
    topics: list[str]
    partitions: int
    duration_ms: int
    rng: np.random.Generator
    rf: int


def _lrs_faults(c: _Ctx) -> list[Fault]:
    """Followers (brokers 2..N) isolated in two waves (upper half first, e.g. 3 then 2), broker 1
    (last replica standing) crashes uncleanly losing 60% of its log and returns; then the second
    wave (in the ELR) returns, then the first."""
    d = c.duration_ms
    others = list(range(2, c.brokers + 1))
    k = len(others) // 2
    wave1, wave2 = others[k:][::-1], others[:k][::-1]   # brokers=3: wave1 [3], wave2 [2]
    if not wave2:
        wave1, wave2 = [], wave1
    out = []
    for b in wave1:
        out.append(Fault("isolate", int(0.20 * d), int(0.75 * d) - int(0.20 * d), broker=b))
    for b in wave2:
        out.append(Fault("isolate", int(0.30 * d), int(0.65 * d) - int(0.30 * d), broker=b))
    out.append(Fault("unclean-crash", int(0.45 * d), int(0.55 * d) - int(0.45 * d), broker=1,
                     lose="60%", frac=1.0))
    return out


def _rolling_faults(c: _Ctx) -> list[Fault]:
    d = c.duration_ms
    gap = max(2_000, min(60_000, int(0.8 * d / max(1, c.brokers))))
    return [Fault("rolling-restart", int(0.1 * d), gap)]


def _zone_faults(c: _Ctx) -> list[Fault]:
    d = c.duration_ms
    return [Fault("zone-outage", int(0.3 * d), int(0.25 * d), rack=0),
            Fault("elect", int(0.8 * d), election="PREFERRED")]


def _flaky_faults(c: _Ctx) -> list[Fault]:
    d, rng = c.duration_ms, c.rng
    n = max(4, c.brokers)
    out = []
    kinds = ["partition", "isolate", "slow", "partition", "slow"]
    for _ in range(n):
        kind = kinds[int(rng.integers(len(kinds)))]
        at = int(rng.integers(int(0.05 * d), max(int(0.05 * d) + 1, int(0.8 * d))))
        dur = int(rng.integers(5_000, 60_001)) if d >= 60_000 else max(1, int(rng.integers(d // 20 + 1, d // 5 + 2)))
        b = int(rng.integers(1, c.brokers + 1))
        f = Fault(kind, at, dur, broker=b, factor=float(rng.choice([3.0, 10.0, 30.0])) if kind == "slow" else None)
        out.append(f)
    out.sort(key=lambda f: (f.at_ms, f.broker))
    return out


def _reassign_faults(c: _Ctx) -> list[Fault]:
    d, rng = c.duration_ms, c.rng
    total = len(c.topics) * c.partitions
    n = min(total, max(2, min(20, total // 10)))
    picks = rng.choice(total, size=n, replace=False)
    out = []
    for k, gp in enumerate(sorted(int(x) for x in picks)):
        topic, part = c.topics[gp // c.partitions], gp % c.partitions
        reps = rng.permutation(np.arange(1, c.brokers + 1))[: min(c.rf, c.brokers)]
        at = int(0.2 * d + k * (0.3 * d / n))
        out.append(Fault("reassign", at, topic=topic, partition=part, replicas=tuple(int(x) for x in reps)))
        if k == 0 and n > 1:
            out.append(Fault("cancel-reassign", at + max(1, int(0.02 * d)), topic=topic, partition=part))
    out.append(Fault("elect", int(0.7 * d), election="PREFERRED"))
    out.sort(key=lambda f: f.at_ms)
    return out


SCENARIOS: dict[str, Scenario] = {
    "last-replica-standing": Scenario(
        "RF 3, min ISR 2: the followers are isolated (fenced) one after another, the leader keeps taking "
        "acks=1 writes, crashes uncleanly losing 60% of its log (including committed records) and "
        "returns; then the others return (last fenced first). ELR off loses acknowledged data, ELR on "
        "does not.",
        {"brokers": 3, "rf": 3, "partitions": 10, "min_isr": 2, "acks_mix": {-1: 0.5, 1: 0.5, 0: 0.0}},
        _lrs_faults),
    "rolling-restart": Scenario(
        "Clean restart of every broker in turn (controlled shutdown, restart with its previous epoch).",
        {"min_isr": 2}, _rolling_faults),
    "zone-outage": Scenario(
        "All brokers of rack0 crash uncleanly at once (log loss) and come back; preferred election after.",
        {"min_isr": 2, "racks": 3}, _zone_faults),
    "flaky-network": Scenario(
        "Seeded controller-session losses, full isolations and slow followers on random brokers.",
        {}, _flaky_faults),
    "reassignment": Scenario(
        "Reassign ~10% of the partitions (at least 2, up to 20) to random replica lists, cancel the first one, "
        "preferred election later.",
        {}, _reassign_faults),
}

# --------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------


def _rows_table(rows: list[dict], seq0: int) -> pa.Table:
    """Python-dict rows (fault / bootstrap rows) -> table with seq assigned."""
    cols: dict[str, list] = {n: [None] * len(rows) for n in _COLUMN_NAMES}
    for i, r in enumerate(rows):
        for k, v in r.items():
            cols[k][i] = v
    cols["seq"] = list(range(seq0, seq0 + len(rows)))
    for name in ("config",):
        cols[name] = [None if v is None else list(v.items()) for v in cols[name]]
    return pa.Table.from_arrays(
        [pa.array(cols[n], type=t) for n, t in _INPUT_COLUMNS], schema=INPUT_ARROW_SCHEMA)


def _dict_col(codes: np.ndarray, dictionary: pa.Array, null_mask: np.ndarray | None) -> pa.Array:
    idx = pa.array(codes.astype(np.int32, copy=False), type=pa.int32(), mask=null_mask)
    return pa.DictionaryArray.from_arrays(idx, dictionary).dictionary_decode()


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


class _StreamWriter:
    def __init__(self, out: Path, fmt: str, rows_per_file: int):
        self.out, self.fmt, self.rows_per_file = out, fmt, rows_per_file
        self.buf: list[pa.Table] = []
        self.buffered = 0
        self.files: list[str] = []
        self.rows = 0

    def add(self, t: pa.Table) -> None:
        if t.num_rows == 0:
            return
        self.buf.append(t)
        self.buffered += t.num_rows
        while self.buffered >= self.rows_per_file:
            big = pa.concat_tables(self.buf)
            self._write(big.slice(0, self.rows_per_file))
            rest = big.slice(self.rows_per_file)
            self.buf = [rest] if rest.num_rows else []
            self.buffered = rest.num_rows

    def close(self) -> None:
        if self.buffered:
            self._write(pa.concat_tables(self.buf))
        self.buf, self.buffered = [], 0

    def _write(self, t: pa.Table) -> None:
        ext = "parquet" if self.fmt == "parquet" else "jsonl"
        name = f"part-{len(self.files):05d}.{ext}"
        tmp = self.out / f"_tmp-{name}"  # underscore: ignored by readers until renamed
        if self.fmt == "parquet":
            t = t.combine_chunks()
            pq.write_table(
                t, tmp, row_group_size=min(self.rows_per_file, 1 << 20), compression="zstd",
                compression_level=1, use_dictionary=True, write_statistics=True,
                version="2.6", data_page_version="1.0", store_schema=True)
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                for r in t.to_pylist():
                    o = {}
                    for k, v in r.items():
                        if v is None:
                            continue
                        if k in ("config", "epoch_start_offsets"):
                            v = {str(a): b for a, b in v}
                        o[k] = v
                    fh.write(json.dumps(o, separators=(",", ":")) + "\n")
        os.replace(tmp, self.out / name)
        self.files.append(name)
        self.rows += t.num_rows


# --------------------------------------------------------------------------
# The simulation
# --------------------------------------------------------------------------

_MAX_WINDOW_ROWS = 500_000

_DEFAULTS: dict[str, Any] = {
    "brokers": 6, "partitions": 100, "rf": 3, "racks": 3, "min_isr": None,
    "acks_mix": {-1: 0.8, 1: 0.15, 0: 0.05},
}


def _resolve_topics(topics: None | int | Sequence[str]) -> list[str]:
    if topics is None:
        return ["t0"]
    if isinstance(topics, int):
        if topics < 1:
            raise ValueError("topics must be >= 1")
        return [f"t{i}" for i in range(topics)]
    names = [str(t) for t in topics]
    if not names or len(set(names)) != len(names) or any(not n or "," in n or ":" in n or "@" in n for n in names):
        raise ValueError(f"topics must be distinct non-empty names without ',', ':' or '@': {names!r}")
    return names


def _per_topic(value: Any, topics: list[str], name: str) -> list[Any]:
    """A scalar/mix for every topic, or a mapping topic -> value (missing topics get 'default')."""
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        unknown = set(value) - set(topics) - {"default"}
        if unknown:
            raise ValueError(f"{name}: unknown topic(s) {sorted(unknown)}")
        if "default" not in value and set(value) != set(topics):
            raise ValueError(f"{name}: give every topic or a 'default' entry")
        return [value.get(t, value.get("default")) for t in topics]
    return [value] * len(topics)


def _place_replicas(n_parts_total: int, brokers: int, racks: int, rf: int) -> np.ndarray:
    """Rack-aware round-robin: brokers interleaved by rack, first replica rotating,
    followers shifted like Kafka's assignment, distinct racks while possible."""
    by_rack = [[b for b in range(1, brokers + 1) if (b - 1) % racks == r] for r in range(racks)]
    order: list[int] = []
    for i in range(max(len(x) for x in by_rack)):
        for r in range(racks):
            if i < len(by_rack[r]):
                order.append(by_rack[r][i])
    rack = {b: (b - 1) % racks for b in order}
    out = np.empty((n_parts_total, rf), dtype=np.int32)
    n = brokers
    cache: dict[tuple[int, int], list[int]] = {}
    for p in range(n_parts_total):
        start, shift = p % n, (1 + (p // n) % (n - 1)) if n > 1 else 0
        key = (start, shift)
        if key not in cache:
            leader = order[start]
            cands = [order[(start + shift + j) % n] for j in range(n)]
            cands = [b for b in dict.fromkeys(cands) if b != leader]
            chosen, used = [leader], {rack[leader]}
            for b in cands:
                if len(chosen) == rf:
                    break
                if rack[b] not in used:
                    chosen.append(b)
                    used.add(rack[b])
            for b in cands:
                if len(chosen) == rf:
                    break
                if b not in chosen:
                    chosen.append(b)
            cache[key] = chosen
        out[p] = cache[key]
    return out


def _periodic(next_t: np.ndarray, interval: np.ndarray, active: np.ndarray, a: float, b: float,
              jitter: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Jittered periodic processes (one per element) over [a, b).

    next_t (in/out): each process's next event time. Inactive processes are
    pushed past b (first event U(0, interval) after b) so they resume with a
    random phase. Returns (owner index, time) of the events in [a, b)."""
    inact = ~active & (next_t < b)
    if inact.any():
        next_t[inact] = b + rng.random(int(inact.sum())) * interval[inact]
    idx = np.flatnonzero(active & (next_t < b))
    if idx.size == 0:
        return idx, np.empty(0)
    nt = np.maximum(next_t[idx], a)
    iv = interval[idx]
    lo = iv * (1.0 - jitter)
    cnt = (np.floor((b - nt) / lo).astype(np.int64) + 1)
    starts = np.cumsum(cnt) - cnt
    owner = np.repeat(np.arange(idx.size), cnt)
    steps = iv[owner]
    if jitter:
        steps = steps * (1.0 - jitter + 2.0 * jitter * rng.random(steps.size))
    cs = np.cumsum(steps)
    base = cs[starts] - steps[starts]
    incl = cs - np.repeat(base, cnt)
    t = nt[owner] + (incl - steps)
    keep = t < b
    nkeep = np.add.reduceat(keep.astype(np.int64), starts)
    last = starts + nkeep - 1
    next_t[idx] = nt + incl[last]
    return idx[owner[keep]], t[keep]


class _SkipFault(Exception):
    """A fault action met a broker not in the state the fault needs (crashing a crashed broker):
    the fault is skipped, for this reason."""


class _Block(NamedTuple):
    """Steady-state rows of one type, drawn for a window: their times (float ms), type codes,
    global partitions and brokers (-1: none)."""

    t: np.ndarray
    typ: np.ndarray
    p: np.ndarray
    b: np.ndarray


def _merge_in_time_order(blocks: list[_Block], recs, acks, frac, spec, iso) -> tuple | None:
    """The window's blocks as one set of row columns sorted by time (stable: rows at the same ms
    keep the block order), ts floored to ms; None when the window has no rows. blocks[1] are the
    produces (recs, acks) and blocks[2] the consumer requests (frac, spec, iso); the other rows
    get 0 / -1 (none) in those columns.

    Returns (ts, typ, p_all, b_all, rec_all, acks_all, fr_all, spec_all, iso_all)."""
    t_all = np.concatenate([blk.t for blk in blocks])
    n = t_all.size
    if n == 0:
        return None
    typ = np.concatenate([blk.typ for blk in blocks])
    p_all = np.concatenate([blk.p for blk in blocks]).astype(np.int64)
    b_all = np.concatenate([blk.b for blk in blocks]).astype(np.int32)
    nf, npr, ncs = blocks[0].t.size, blocks[1].t.size, blocks[2].t.size
    off_p = nf
    rec_all = np.zeros(n, np.int32)
    rec_all[off_p:off_p + npr] = recs
    acks_all = np.zeros(n, np.int32)
    acks_all[off_p:off_p + npr] = acks
    off_c = off_p + npr
    fr_all = np.zeros(n, float)
    fr_all[off_c:off_c + ncs] = frac
    spec_all = np.full(n, -1, np.int32)
    spec_all[off_c:off_c + ncs] = spec
    iso_all = np.full(n, -1, np.int32)
    iso_all[off_c:off_c + ncs] = iso

    order = np.argsort(t_all, kind="stable")
    typ, p_all, b_all = typ[order], p_all[order], b_all[order]
    rec_all, acks_all, fr_all = rec_all[order], acks_all[order], fr_all[order]
    spec_all, iso_all = spec_all[order], iso_all[order]
    ts = np.floor(t_all[order]).astype(np.int64)
    return ts, typ, p_all, b_all, rec_all, acks_all, fr_all, spec_all, iso_all


class _Sim:
    """The environment of the cluster (broker processes, network, clients, fetchers) driving the
    real protocol core (``jobs.sim_core.CoreDriver``) row by row. The simulator decides only what
    the environment does; who leads, the replicas and the logs are the core's answers."""

    def __init__(self, *, brokers, racks, topics, partitions, rf, duration_ms, min_isr, topic_config,
                 produce_rate, records_per_produce, acks_mix, fetch_interval_ms, tick_interval_ms,
                 consumer_rate, delivery, metadata_interval_ms, alter_partition_interval_ms,
                 session_timeout_ms, window_ms, log_loss_fraction, faults, steady_rng, fault_rng, writer,
                 stale_rng, core, stale_max_ms=1_000.0):
        self.N, self.racks, self.topics, self.ppt, self.rf = brokers, racks, topics, partitions, rf
        self.P = len(topics) * partitions
        self.duration, self.window = duration_ms, window_ms
        self.min_isr, self.topic_config = min_isr, topic_config
        self.delivery = delivery
        self.session_timeout = session_timeout_ms
        self.loss_frac = log_loss_fraction
        self.faults = faults
        self.rng, self.frng = steady_rng, fault_rng
        self.stale_max_ms = float(stale_max_ms)
        self.w = writer
        self.core = core
        self.seq = 1
        self.counts: dict[str, int] = {}
        self.skipped: list[str] = []

        P = self.P
        self.topic_of = np.repeat(np.arange(len(topics), dtype=np.int32), partitions)
        self.pnum_of = np.tile(np.arange(partitions, dtype=np.int32), len(topics))
        self.orig = _place_replicas(P, brokers, racks, rf)
        # fetcher slots per partition, mirroring the core's replica list (a reassignment in
        # progress holds target + removing); 0 = empty slot
        self.R = max(rf, min(brokers, rf + sum(len(f.replicas) for f in faults if f.kind == "reassign")))
        self.rep = np.zeros((P, self.R), dtype=np.int32)
        self.rep[:, :rf] = self.orig
        self.moving: set[int] = set()      # partitions whose replica list a Reassign row may change
        self.leader = np.zeros(P, dtype=np.int32)   # the core's leaders, read at each window start
        # Clients with stale metadata: when a client row first meets a new leader in the core
        # (`seen`: the leader the clients last met), the next produce request within a seeded
        # window of up to `stale_max_ms` may still go to the previous leader (if reachable); the
        # core answers it NOT_LEADER_OR_FOLLOWER. `stale`: partition -> (previous leader, until).
        self.seen = [0] * P
        self.stale: dict[int, tuple[int, float]] = {}
        self.srng = stale_rng
        self.n_stale = 0

        # broker processes and the network (index 0 unused)
        n1 = brokers + 1
        self.alive = np.zeros(n1, bool)
        self.fenced = np.ones(n1, bool)      # what the simulator told the controller (rows it wrote)
        self.shutting = np.zeros(n1, bool)
        self.ctrl_cut = np.zeros(n1, np.int64)
        self.isolated = np.zeros(n1, np.int64)
        self.slow = np.ones(n1, float)
        self.slow_list: list[list[float]] = [[] for _ in range(n1)]
        self.epoch = np.full(n1, -1, np.int64)
        self.last_clean = np.zeros(n1, bool)
        self.epoch_counter = 100

        # per-topic traffic
        self.rate = np.array(_per_topic(produce_rate, topics, "produce_rate"), float)[self.topic_of]
        self.rec_mean = np.array(_per_topic(records_per_produce, topics, "records_per_produce"), float)
        self.crate = np.array(_per_topic(consumer_rate, topics, "consumer_rate"), float)[self.topic_of]
        mixes = _per_topic(acks_mix, topics, "acks_mix")
        cum = []
        for m in mixes:
            m = {int(k): float(v) for k, v in dict(m).items()}
            if set(m) - {-1, 0, 1} or any(v < 0 for v in m.values()) or sum(m.values()) <= 0:
                raise ValueError(f"acks_mix {m!r}: keys must be -1, 1, 0 with non-negative weights")
            s = sum(m.values())
            cum.append(np.cumsum([m.get(-1, 0) / s, m.get(1, 0) / s, m.get(0, 0) / s]))
        self.acks_cum = np.array(cum)
        self.acks_vals = np.array([-1, 1, 0], np.int32)

        lo, hi = fetch_interval_ms
        self.fetch_base = steady_rng.uniform(lo, hi, size=(P, self.R))
        self.fetch_next = steady_rng.uniform(0, 1, size=(P, self.R)) * self.fetch_base
        self.tick_iv = np.full(n1, float(tick_interval_ms))
        self.tick_next = steady_rng.uniform(0, tick_interval_ms, size=n1) if tick_interval_ms > 0 else np.full(n1, np.inf)
        self.ms_iv = np.full(n1, float(metadata_interval_ms))
        self.ms_next = steady_rng.uniform(0, metadata_interval_ms, size=n1)
        # probability that a fetch triggers an AlterPartition round trip (explicit delivery)
        mean_rate = (rf - 1) * (1000.0 * math.log(hi / lo) / (hi - lo) if hi > lo else 1000.0 / lo)
        self.ap_prob = min(1.0, (1000.0 / alter_partition_interval_ms) / max(mean_rate, 1e-9))

    # ---------------------------------------------------------------- output
    def _emit_rows(self, rows: list[dict]) -> None:
        """Fault / bootstrap rows: fed to the core in order, then written."""
        if not rows:
            return
        feed = self.core.feed_raw
        for i, r in enumerate(rows):
            self.counts[r["type"]] = self.counts.get(r["type"], 0) + 1
            feed({**r, "seq": self.seq + i})
        self.w.add(_rows_table(rows, self.seq))
        self.seq += len(rows)

    def _tp(self, p: int) -> dict:
        return {"topic": self.topics[self.topic_of[p]], "partition": int(self.pnum_of[p])}

    def _gp(self, topic: str, part: int) -> int:
        return self.topics.index(topic) * self.ppt + part

    def _reachable(self) -> np.ndarray:
        r = self.alive & (self.isolated == 0)
        r[0] = False
        return r

    # ---------------------------------------------------------------- the core's answers
    def _observe(self, t: int) -> None:
        """Read the core's leaders (and the replica lists of partitions being reassigned)."""
        core = self.core
        for p in sorted(self.moving):
            reps = core.replicas(core.parts[p])
            if [int(x) for x in self.rep[p] if x > 0] != list(reps):
                self._set_reps(p, list(reps), t)
        self.leader = np.array(core.leaders(), dtype=np.int32)

    def _set_reps(self, p: int, reps: list[int], t: int) -> None:
        old = self.rep[p].copy()
        self.rep[p] = 0
        self.rep[p, : len(reps)] = reps
        changed = np.flatnonzero(self.rep[p] != old)
        if changed.size:  # a new occupant of a slot starts with a fresh phase
            self.fetch_next[p, changed] = t + self.frng.random(changed.size) * self.fetch_base[p, changed]

    # ---------------------------------------------------------------- bootstrap
    def bootstrap(self) -> None:
        rows: list[dict] = []
        for b in range(1, self.N + 1):
            self.epoch_counter += 1
            self.epoch[b] = self.epoch_counter
            rows.append({"ts_ms": 0, "type": "BrokerRegister", "broker": b,
                         "broker_epoch": self.epoch_counter, "previous_broker_epoch": -1})
            self.alive[b] = True
        for b in range(1, self.N + 1):
            rows.append({"ts_ms": 0, "type": "BrokerUnfence", "broker": b})
            self.fenced[b] = False
        for p in range(self.P):
            rows.append({"ts_ms": 0, "type": "CreatePartition", **self._tp(p),
                         "replicas": [int(x) for x in self.orig[p]]})
        for ti, t in enumerate(self.topics):
            cfg = {}
            if self.min_isr is not None:
                cfg["min.insync.replicas"] = str(self.min_isr)
            cfg.update(self.topic_config[ti] or {})
            if cfg:
                rows.append({"ts_ms": 0, "type": "AlterConfig", "topic": t, "config": cfg})
        self._emit_rows(rows)
        self.core.bind_partitions([(self.topics[self.topic_of[p]], int(self.pnum_of[p])) for p in range(self.P)])
        self._observe(0)

    # ---------------------------------------------------------------- steady state
    def steady(self, a: int, b: int) -> None:
        """Traffic over [a, b) (no fault action inside): drawn with numpy from the core's state at
        a, then fed to the core row by row, each client / fetcher row re-aimed (or dropped) by the
        core's state at that row (``_feed_window``)."""
        self._observe(a)
        reach = self._reachable()
        leader_ok = (self.leader > 0) & reach[self.leader]
        # every draw comes from the one steady-state generator, so their order is part of the
        # stream's bytes: fetches, produces, consumers, ticks, then the explicit deliveries
        fetches = self._draw_follower_fetches(a, b, reach, leader_ok)
        produces, recs, acks = self._draw_produces(a, b, leader_ok)
        consumers, frac, spec, iso = self._draw_consumer_requests(a, b, leader_ok)
        ticks = self._draw_ticks(a, b)
        blocks = [fetches, produces, consumers, ticks]
        if self.delivery == "explicit":
            blocks += self._draw_explicit_deliveries(a, b, fetches, ticks)
        window = _merge_in_time_order(blocks, recs, acks, frac, spec, iso)
        if window is None:
            return
        keep, b_kept, fo_kept = self._feed_window(*window, reach)
        if keep.size == 0:
            return
        self._write_window(window, keep, b_kept, fo_kept)
        self.core.drain()

    def _draw_follower_fetches(self, a: int, b: int, reach: np.ndarray, leader_ok: np.ndarray) -> _Block:
        """Replicas other than the leader, both ends reachable, each at its own jittered cadence
        (stretched while its broker is slow)."""
        rep = self.rep
        active = (rep > 0) & reach[rep] & (rep != self.leader[:, None]) & leader_ok[:, None]
        iv = self.fetch_base * self.slow[rep]
        flat_idx, ft = _periodic(self.fetch_next.reshape(-1), iv.reshape(-1), active.reshape(-1),
                                 a, b, 0.25, self.rng)
        fp = flat_idx // self.R
        fb = rep.reshape(-1)[flat_idx]
        return _Block(ft, np.full(ft.size, _T_FETCH, np.int8), fp, fb)

    def _draw_produces(self, a: int, b: int, leader_ok: np.ndarray) -> tuple[_Block, np.ndarray, np.ndarray]:
        """Poisson produce requests per partition with a leader, with their record counts and acks."""
        rng = self.rng
        dt = (b - a) / 1000.0
        lam = np.where(leader_ok, self.rate * dt, 0.0)
        pc = rng.poisson(lam)
        pp = np.repeat(np.arange(self.P), pc)
        npr = pp.size
        pt = a + rng.random(npr) * (b - a)
        recs = (1 + rng.poisson(np.maximum(self.rec_mean[self.topic_of[pp]] - 1.0, 0.0))).astype(np.int32)
        u = rng.random(npr)
        aidx = (u[:, None] >= self.acks_cum[self.topic_of[pp]]).sum(axis=1)
        acks = self.acks_vals[np.minimum(aidx, 2)]
        return _Block(pt, np.full(npr, _T_PRODUCE, np.int8), pp, self.leader[pp]), recs, acks

    def _draw_consumer_requests(self, a: int, b: int, leader_ok: np.ndarray) -> tuple[_Block, ...]:
        """Poisson ListOffsets / ConsumerFetch requests per partition with a leader. A
        ConsumerFetch's offset is a fraction of the leader's high watermark at its row (known only
        when it is fed), so the fraction is drawn here; only ListOffsets rows keep a spec and an
        isolation level (-1: none)."""
        rng = self.rng
        dt = (b - a) / 1000.0
        clam = np.where(leader_ok, self.crate * dt, 0.0)
        cc = rng.poisson(clam)
        cp = np.repeat(np.arange(self.P), cc)
        ncs = cp.size
        ct = a + rng.random(ncs) * (b - a)
        is_list = rng.random(ncs) < 0.3
        spec = np.where(rng.random(ncs) < 0.7, 0, 1)
        iso_u = rng.random(ncs)
        iso = np.where(iso_u < 0.5, -1, np.where(iso_u < 0.7, 0, 1))
        frac = np.where(rng.random(ncs) < 0.2, 0.0, rng.uniform(0.5, 0.98, ncs))
        block = _Block(ct, np.where(is_list, _T_LIST, _T_CFETCH).astype(np.int8), cp, self.leader[cp])
        return block, frac, np.where(is_list, spec, -1), np.where(is_list, iso, -1)

    def _draw_ticks(self, a: int, b: int) -> _Block:
        tb, tt = _periodic(self.tick_next, self.tick_iv, self.alive.copy(), a, b, 0.0, self.rng)
        return _Block(tt.astype(float), np.full(tb.size, _T_TICK, np.int8), np.full(tb.size, -1), tb)

    def _draw_explicit_deliveries(self, a: int, b: int, fetches: _Block, ticks: _Block) -> list[_Block]:
        """delivery=explicit: AlterPartition round trips (arrive, then response) a few ms after
        some fetches and after every tick (one per partition the ticking broker leads), and a
        MetadataSync per live broker. A round trip that would end past b is not sent, so none
        straddles a fault action."""
        rng = self.rng
        sel = rng.random(fetches.t.size) < self.ap_prob
        ap_p, ap_t0 = [fetches.p[sel]], [fetches.t[sel]]
        for bk, t0 in zip(ticks.b.tolist(), ticks.t.tolist()):
            led = np.flatnonzero(self.leader == bk)
            ap_p.append(led)
            ap_t0.append(np.full(led.size, t0))
        app = np.concatenate(ap_p)
        at0 = np.concatenate(ap_t0)
        arr = at0 + rng.uniform(1.0, 50.0, app.size)
        resp = arr + rng.uniform(1.0, 50.0, app.size)
        ok = resp < b
        app, arr, resp = app[ok], arr[ok], resp[ok]
        n_ap = app.size
        mb, mt = _periodic(self.ms_next, self.ms_iv, self.alive.copy(), a, b, 0.3, rng)
        return [_Block(arr, np.full(n_ap, _T_APARR, np.int8), app, np.full(n_ap, -1)),
                _Block(resp, np.full(n_ap, _T_APRESP, np.int8), app, np.full(n_ap, -1)),
                _Block(mt, np.full(mb.size, _T_MSYNC, np.int8), np.full(mb.size, -1), mb)]

    def _feed_window(self, ts, typ, p_all, b_all, rec_all, acks_all, fr_all, spec_all, iso_all, reach):
        """Feed the window's rows to the core in order. Each row asks the core first:

        * a follower Fetch is sent only while the fetcher is a replica and not the leader, and the
          leader is reachable;
        * Produce / ListOffsets / ConsumerFetch go to the core's leader at that row (sessions and
          the partition's timers fired up to the row), or are not sent when there is none or it
          is unreachable; a produce in a stale-metadata window goes to the previous leader;
        * a ConsumerFetch reads from a fraction of the leader's high watermark.

        Returns (indices of the rows kept, their brokers, their fetch offsets)."""
        # the per-row loop below is the simulator's hot path: everything it touches is bound to a
        # local first, and its body stays inline (a call per row would cost more than the row)
        core = self.core
        parts, leader_of, hwm_of, catch_up, apply, blank, viol = self._core_hooks()
        rejected0 = core.cl.rejected
        topics, pnums = self._partition_labels()
        reach_l = reach.tolist()
        seen, stale, srand, stale_ms = self.seen, self.stale, self.srng.random, self.stale_max_ms
        specs, isos, ap_types = _OFFSET_SPEC_NAMES, _ISOLATION_NAMES, _AP_TYPE_NAMES
        keep: list[int] = []
        bout: list[int] = []
        foout: list[int] = []
        seq = self.seq
        for i, (t, ty, gp, b) in enumerate(zip(ts.tolist(), typ.tolist(), p_all.tolist(), b_all.tolist())):
            fo = 0
            if ty == _T_FETCH:
                p = parts[gp]
                ldr = p.leader
                if ldr == b or ldr <= 0 or not reach_l[ldr] or b not in p.replicas:
                    continue
                apply({**blank, "seq": seq, "ts_ms": t, "type": "Fetch", "topic": topics[gp],
                       "partition": pnums[gp], "broker": b})
            elif ty == _T_PRODUCE or ty == _T_LIST or ty == _T_CFETCH:
                p = catch_up(gp, t)
                ldr = leader_of(p)
                if not ldr or not reach_l[ldr]:
                    continue
                if ldr != seen[gp]:
                    if seen[gp]:
                        stale[gp] = (seen[gp], t + srand() * stale_ms)
                    seen[gp] = ldr
                ev = {"seq": seq, "ts_ms": t, "topic": topics[gp], "partition": pnums[gp], "broker": ldr}
                if ty == _T_PRODUCE:
                    if gp in stale:
                        old, until = stale.pop(gp)
                        if t < until and reach_l[old]:
                            ev["broker"] = ldr = old
                            self.n_stale += 1
                    ev["type"] = "Produce"
                    ev["records"] = int(rec_all[i])
                    ev["acks"] = int(acks_all[i])
                elif ty == _T_LIST:
                    ev["type"] = "ListOffsets"
                    ev["offset_spec"] = specs[spec_all[i]]
                    iso = iso_all[i]          # -1: none given (null in the stream; not isos[-1])
                    ev["isolation"] = isos[iso] if iso >= 0 else None
                else:
                    fo = int(hwm_of(p, ldr) * fr_all[i])
                    ev["type"] = "ConsumerFetch"
                    ev["fetch_offset"] = fo
                b = ldr
                apply({**blank, **ev})
            elif ty == _T_TICK:
                apply({**blank, "seq": seq, "ts_ms": t, "type": "Tick", "broker": b})
            elif ty == _T_MSYNC:
                apply({**blank, "seq": seq, "ts_ms": t, "type": "MetadataSync", "broker": b})
            else:
                apply({**blank, "seq": seq, "ts_ms": t, "type": ap_types[ty], "topic": topics[gp],
                       "partition": pnums[gp]})
            if viol:
                core.on_violation(seq, t)
            keep.append(i)
            bout.append(b)
            foout.append(fo)
            seq += 1
        if core.cl.rejected != rejected0:
            core.note_rejections(core.cl.rejected - rejected0)
        return (np.array(keep, np.int64), np.array(bout, np.int32), np.array(foout, np.int64))

    def _core_hooks(self) -> tuple:
        """What _feed_window calls on the core, bound once per window: (partitions, leader of,
        high watermark of, catch up, apply, blank event, violation rows)."""
        core = self.core
        # rows go to Cluster.apply as validated events: the blank row plus their columns (plain
        # ints and enum strings: what schemas.events.validate makes of them; a test checks it)
        return (core.parts, core.leader, core.hwm, core.catch_up, core.cl.apply, _BLANK_EVENT,
                core.viol_rows())

    def _partition_labels(self) -> tuple[list[str], list[int]]:
        """Global partition index -> topic name, partition number (as plain Python values)."""
        return [self.topics[i] for i in self.topic_of.tolist()], self.pnum_of.tolist()

    def _write_window(self, window: tuple, keep: np.ndarray, b_kept: np.ndarray, fo_kept: np.ndarray) -> None:
        """The rows the core took (``keep``), as one table continuing the stream's seq, with the
        brokers and fetch offsets they were sent with; counted by type for the summary."""
        ts, typ, p_all, _, rec_all, acks_all, _, spec_all, iso_all = window
        n = keep.size
        ts, typ, p_all = ts[keep], typ[keep], p_all[keep]
        rec_all, acks_all, spec_all, iso_all = rec_all[keep], acks_all[keep], spec_all[keep], iso_all[keep]
        no_p = p_all < 0
        pidx = np.where(no_p, 0, p_all)
        is_prod = typ == _T_PRODUCE
        arrays = {
            "seq": pa.array(np.arange(self.seq, self.seq + n, dtype=np.int64)),
            "ts_ms": pa.array(ts),
            "type": _dict_col(typ.astype(np.int32), _TYPE_NAMES, None),
            "topic": _dict_col(self.topic_of[pidx], pa.array(self.topics, pa.string()), no_p),
            "partition": pa.array(self.pnum_of[pidx], pa.int32(), mask=no_p),
            "broker": pa.array(b_kept, pa.int32(), mask=b_kept < 0),
            "offset_spec": _dict_col(np.maximum(spec_all, 0), _OFFSET_SPECS, spec_all < 0),
            "isolation": _dict_col(np.maximum(iso_all, 0), _ISOLATIONS, iso_all < 0),
            "records": pa.array(rec_all, pa.int32(), mask=~is_prod),
            "acks": pa.array(acks_all, pa.int32(), mask=~is_prod),
            "fetch_offset": pa.array(fo_kept, pa.int64(), mask=typ != _T_CFETCH),
        }
        cols = [arrays[nm] if nm in arrays else pa.nulls(n, t) for nm, t in _INPUT_COLUMNS]
        self.w.add(pa.Table.from_arrays(cols, schema=INPUT_ARROW_SCHEMA))
        self.seq += n
        tc = np.bincount(typ, minlength=len(_TYPE_NAMES))
        for code, c in enumerate(tc.tolist()):
            if c:
                name = _TYPE_NAMES[code].as_py()
                self.counts[name] = self.counts.get(name, 0) + c

    # ---------------------------------------------------------------- faults
    def expand(self) -> list[tuple[int, int, int, str, dict]]:
        """Faults -> primitive timed actions (t, fault index, step, action, args)."""
        acts: list[tuple[int, int, int, str, dict]] = []
        fr = self.frng

        def add(t, fi, step, name, **kw):
            acts.append((int(t), fi, step, name, kw))

        for fi, f in enumerate(self.faults):
            T, D = f.at_ms, f.dur_ms if f.dur_ms is not None else _DEFAULT_DUR.get(f.kind)
            if f.kind == "crash":
                self._expand_clean(add, fi, 0, f.broker, T, D)
            elif f.kind == "rolling-restart":
                gap = D
                down = f.down_ms if f.down_ms is not None else max(1, gap // 2)
                for i, bk in enumerate(range(1, self.N + 1)):
                    self._expand_clean(add, fi, 10 * i, bk, T + i * gap, down, sub=i)
            elif f.kind in ("unclean-crash", "zone-outage"):
                victims = [f.broker] if f.kind == "unclean-crash" else \
                    [bk for bk in range(1, self.N + 1) if (bk - 1) % self.racks == f.rack]
                lose, frac = f.lose, (f.frac if f.frac is not None else self.loss_frac)
                for i, bk in enumerate(victims):
                    add(T, fi, 10 * i, "crash", broker=bk, clean=False, lose=lose, frac=frac, sub=i)
                for i, bk in enumerate(victims):
                    add(min(T + self.session_timeout, T + D), fi, 10 * i + 1, "fence", broker=bk, sub=i)
                    add(T + D, fi, 10 * i + 2, "restart", broker=bk, sub=i)
                    add(T + D + int(fr.integers(500, 3001)), fi, 10 * i + 3, "unfence", broker=bk, sub=i)
            elif f.kind in ("partition", "isolate"):
                cut = "ctrl" if f.kind == "partition" else "iso"
                add(T, fi, 0, "cut_start", broker=f.broker, cut=cut)
                if self.session_timeout < D:
                    add(T + self.session_timeout, fi, 1, "session_expire", broker=f.broker)
                add(T + D, fi, 2, "cut_end", broker=f.broker, cut=cut)
            elif f.kind == "slow":
                factor = f.factor if f.factor is not None else 10.0
                add(T, fi, 0, "slow_start", broker=f.broker, factor=factor)
                add(T + D, fi, 1, "slow_end", broker=f.broker, factor=factor)
            elif f.kind == "reassign":
                add(T, fi, 0, "reassign", gp=self._gp(f.topic, f.partition), replicas=f.replicas)
            elif f.kind == "cancel-reassign":
                add(T, fi, 0, "cancel", gp=self._gp(f.topic, f.partition))
            elif f.kind == "elect":
                gp = None if f.topic is None else self._gp(f.topic, f.partition)
                add(T, fi, 0, "elect", gp=gp, election=f.election, target=f.target)
            elif f.kind == "config":
                add(T, fi, 0, "config", topic=f.topic, partition=f.partition, config=dict(f.config))
        acts = [x for x in acts if x[0] < self.duration]
        acts.sort(key=lambda x: (x[0], x[1], x[2]))
        return acts

    def _expand_clean(self, add, fi, step0, bk, T, D, sub=0):
        fr = self.frng
        t_crash = T + int(fr.integers(200, 2001))
        add(T, fi, step0, "shutdown", broker=bk, sub=sub)
        add(t_crash, fi, step0 + 1, "crash", broker=bk, clean=True, sub=sub)
        add(t_crash, fi, step0 + 2, "fence", broker=bk, sub=sub)
        t_up = max(T + D, t_crash + 1)
        add(t_up, fi, step0 + 3, "restart", broker=bk, sub=sub)
        add(t_up + int(fr.integers(500, 3001)), fi, step0 + 4, "unfence", broker=bk, sub=sub)

    def apply(self, t: int, fi: int, name: str, kw: dict, dead: set) -> list[dict]:
        """Run one environment action at time t; returns its rows. A fault whose first action
        cannot happen is skipped entirely (its later actions too)."""
        key = (fi, kw.get("sub", 0))
        if key in dead:
            return []
        try:
            rows = self._ACTIONS[name](self, kw.get("broker"), kw)
        except _SkipFault as e:
            dead.add(key)
            self.skipped.append(f"{self.faults[fi].spec()} ({e} at {_fmt_ms(t)})")
            return []
        for r in rows:
            r["ts_ms"] = t
        return rows

    # One method per action (``expand`` names them): each changes the environment's state and
    # returns the rows that tell the core, or raises _SkipFault when the broker is not in the
    # state the fault needs.
    def _act_shutdown(self, b: int, kw: dict) -> list[dict]:
        if not self.alive[b] or self.shutting[b]:
            raise _SkipFault(f"broker {b} is not running")
        self.shutting[b] = True
        return [{"type": "BrokerControlledShutdown", "broker": b}]

    def _act_crash(self, b: int, kw: dict) -> list[dict]:
        if not self.alive[b]:
            raise _SkipFault(f"broker {b} is not running")
        clean = kw["clean"]
        self.alive[b] = False
        self.shutting[b] = False
        self.last_clean[b] = clean
        rows = [{"type": "BrokerCrash", "broker": b, "clean": clean}]
        if not clean:
            rows += self._log_loss(b, kw)
        return rows

    def _act_fence(self, b: int, kw: dict) -> list[dict]:
        if self.fenced[b]:
            return []
        self.fenced[b] = True
        return [{"type": "BrokerFence", "broker": b}]

    def _act_restart(self, b: int, kw: dict) -> list[dict]:
        if self.alive[b]:
            return []
        self.epoch_counter += 1
        # only a broker that shut down cleanly registers with its previous epoch
        prev = int(self.epoch[b]) if self.last_clean[b] else -1
        self.epoch[b] = self.epoch_counter
        self.alive[b] = True
        self.fenced[b] = True
        return [{"type": "BrokerRegister", "broker": b, "broker_epoch": self.epoch_counter,
                 "previous_broker_epoch": prev}]

    def _act_unfence(self, b: int, kw: dict) -> list[dict]:
        # a broker still cut off from the controller cannot unfence: its cut_end unfences it
        if self.alive[b] and self.fenced[b] and self.ctrl_cut[b] == 0 and self.isolated[b] == 0:
            self.fenced[b] = False
            return [{"type": "BrokerUnfence", "broker": b}]
        return []

    def _act_cut_start(self, b: int, kw: dict) -> list[dict]:
        if not self.alive[b]:
            raise _SkipFault(f"broker {b} is not running")
        (self.ctrl_cut if kw["cut"] == "ctrl" else self.isolated)[b] += 1
        return []

    def _act_session_expire(self, b: int, kw: dict) -> list[dict]:
        if self.alive[b] and not self.fenced[b] and (self.ctrl_cut[b] or self.isolated[b]):
            self.fenced[b] = True
            return [{"type": "BrokerFence", "broker": b}]
        return []

    def _act_cut_end(self, b: int, kw: dict) -> list[dict]:
        # cuts nest (counters): the broker unfences when its last cut ends, if it is still running
        arr = self.ctrl_cut if kw["cut"] == "ctrl" else self.isolated
        arr[b] = max(0, arr[b] - 1)
        return self._act_unfence(b, kw)

    def _act_slow_start(self, b: int, kw: dict) -> list[dict]:
        self.slow_list[b].append(kw["factor"])
        self.slow[b] = max(self.slow_list[b])
        return []

    def _act_slow_end(self, b: int, kw: dict) -> list[dict]:
        if kw["factor"] in self.slow_list[b]:
            self.slow_list[b].remove(kw["factor"])
        self.slow[b] = max(self.slow_list[b], default=1.0)
        return []

    def _act_reassign(self, b: None, kw: dict) -> list[dict]:
        return [self._reassign_row(kw["gp"], list(kw["replicas"]))]

    def _act_cancel_reassign(self, b: None, kw: dict) -> list[dict]:
        return [self._reassign_row(kw["gp"], None)]

    def _reassign_row(self, p: int, replicas: list[int] | None) -> dict:
        # the core decides the replica list (target + removing while in progress) and when
        # the reassignment completes; the fetcher slots follow it (_observe)
        self.moving.add(p)
        return {"type": "Reassign", **self._tp(p), "replicas": replicas}

    def _act_elect(self, b: None, kw: dict) -> list[dict]:
        et, gp = kw["election"], kw["gp"]
        rows = []
        for p in (range(self.P) if gp is None else [gp]):
            r = {"type": "ElectLeaders", **self._tp(p), "election_type": et}
            if kw.get("target") is not None:
                r["target"] = kw["target"]
            rows.append(r)
        return rows

    def _act_config(self, b: None, kw: dict) -> list[dict]:
        r = {"type": "AlterConfig", "topic": kw["topic"], "config": kw["config"]}
        if kw.get("partition") is not None:
            r["partition"] = kw["partition"]
        return [r]

    _ACTIONS: dict[str, Callable[["_Sim", Any, dict], list[dict]]] = {
        "shutdown": _act_shutdown, "crash": _act_crash, "fence": _act_fence, "restart": _act_restart,
        "unfence": _act_unfence, "cut_start": _act_cut_start, "session_expire": _act_session_expire,
        "cut_end": _act_cut_end, "slow_start": _act_slow_start, "slow_end": _act_slow_end,
        "reassign": _act_reassign, "cancel": _act_cancel_reassign, "elect": _act_elect, "config": _act_config,
    }

    def _log_loss(self, b: int, kw: dict) -> list[dict]:
        """An unclean crash: a fraction of b's partitions lose the tail of b's log (the log end
        offset the core holds for b's replica)."""
        core = self.core
        hosted = np.flatnonzero((self.rep == b).any(axis=1))
        pick = hosted[self.frng.random(hosted.size) < kw["frac"]]
        lose = kw.get("lose")
        rows = []
        for p in pick.tolist():
            leo = int(core.leo(core.parts[p], b))
            if lose is None:
                recent = max(1, int(self.rate[p] * self.rec_mean[self.topic_of[p]] * 2))
                lost = int(self.frng.integers(1, recent + 1))
            elif lose.endswith("%"):
                lost = max(1, int(math.ceil(leo * int(lose[:-1]) / 100.0)))
            else:
                lost = int(lose)
            rows.append({"type": "ReplicaLogLoss", **self._tp(p), "broker": b,
                         "log_end_offset": max(0, leo - lost)})
        return rows

    # ---------------------------------------------------------------- driver
    def run(self) -> None:
        self.bootstrap()
        acts = self.expand()
        grid = list(range(self.window, self.duration, self.window)) + [self.duration]
        dead: set = set()
        cur, gi, ai = 0, 0, 0
        while gi < len(grid) or ai < len(acts):
            bnd = min(grid[gi] if gi < len(grid) else self.duration,
                      acts[ai][0] if ai < len(acts) else self.duration)
            if bnd > cur:
                self.steady(cur, bnd)
                cur = bnd
            while gi < len(grid) and grid[gi] <= bnd:
                gi += 1
            rows: list[dict] = []
            while ai < len(acts) and acts[ai][0] == bnd:
                t, fi, _step, name, kw = acts[ai]
                ai += 1
                rows += self.apply(t, fi, name, kw, dead)
            self._emit_rows(rows)
        self.core.drain()


def _make_core(engine_config: Mapping[str, str], seed: int, stop: bool):
    """The protocol core the simulator drives: conf/engine.properties + the stream's engine config,
    exactly what `isrflow replay --set` of the manifest's engine_config builds."""
    from conf import load_defaults
    from protocol.config import ConfigError

    from jobs.sim_core import CoreDriver
    try:
        return CoreDriver({**dict(load_defaults()), **engine_config}, seed=seed, stop_on_violation=stop)
    except ConfigError as e:
        raise ValueError(f"config: {e}") from None


def _core_summary(core) -> dict:
    """What the core reported while it was driven: its refusals of simulator rows (a simulator
    bug when not empty) and the protocol invariants it saw broken."""
    return {"rejected_rows": len(core.rejected), "first_rejection": core.rejected[0] if core.rejected else None,
            "violations": core.violations, "first_violation": core.first_violation,
            "final_state_sha256": core.final_state_digest()}


def simulate(
    out_dir: str | os.PathLike,
    *,
    brokers: int | None = None,
    partitions: int | None = None,
    rf: int | None = None,
    topics: int | Sequence[str] | None = None,
    duration_ms: int | str = 600_000,
    seed: int = 0,
    faults: str | None = None,
    scenario: str | None = None,
    fmt: str = "parquet",
    rows_per_file: int = 200_000,
    racks: int | None = None,
    min_isr: int | None = None,
    topic_config: Mapping[str, str] | Mapping[str, Mapping[str, str]] | None = None,
    produce_rate: float | Mapping[str, float] = 2.0,
    records_per_produce: float | Mapping[str, float] = 5.0,
    acks_mix: Mapping | None = None,
    fetch_interval_ms: tuple[float, float] = (100.0, 500.0),
    tick_interval_ms: int = 15_000,
    consumer_rate: float | Mapping[str, float] = 0.2,
    delivery: str = "immediate",
    metadata_interval_ms: int = 500,
    alter_partition_interval_ms: int = 2_000,
    session_timeout_ms: int = 9_000,
    leader_imbalance_interval_ms: int = 300_000,
    reassign_settle_ms: int = 20_000,
    log_loss_fraction: float = 0.5,
    window_ms: int = 10_000,
    overwrite: bool = False,
    config: Mapping[str, str] | None = None,
    stop_on_violation: bool = False,
) -> dict:
    """Generate a stream directory; returns a summary dict.

    ``brokers`` (default 6), ``partitions`` (per topic, default 100), ``rf``
    (default 3), ``racks`` (default 3), ``min_isr`` (default 2 if rf >= 3
    else none) and ``acks_mix`` (default {-1: .8, 1: .15, 0: .05}) default to
    the scenario's values when a scenario is given. ``topics``: None (one
    topic ``t0``), a count (``t0..tN-1``) or names. Rates are per partition
    per second (``produce_rate`` requests, ``consumer_rate`` ListOffsets +
    ConsumerFetch requests); rates, ``records_per_produce``, ``acks_mix`` and
    ``topic_config`` may be given per topic as {topic: value, "default": value}.
    ``faults`` and ``scenario`` combine (scenario faults first).

    ``config``: engine config overrides (Kafka names, as ``isrflow replay --set``). The stream is
    simulated closed-loop against the protocol core under that config (on top of
    conf/engine.properties) and the manifest's ``engine_config`` records it, so the replay must use
    it: a what-if of two configs means two streams from the same seed, each simulated under its
    own config. ``stop_on_violation``: raise ``SimulationViolation`` (seed, step) at the first
    protocol invariant the core reports; otherwise they are counted in the summary.
    ``leader_imbalance_interval_ms`` sets ``leader.imbalance.check.interval.seconds`` when it is
    not the default; ``reassign_settle_ms`` is ignored (the core completes reassignments).
    """
    call = _SimulateCall(SimpleNamespace(**locals()))   # the arguments as given
    call.apply_scenario_defaults()
    call.validate()
    call.schedule_faults()
    call.resolve_topic_config()
    call.prepare_out_dir()
    call.bound_window_to_memory()
    call.build_engine_config()
    call.build_core()
    call.run_closed_loop()
    call.write_manifest()
    return call.summary()


def _jsonable(v):
    """Mappings / tuples -> dicts / lists with string keys (acks_mix has int keys), for JSON."""
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


class _SimulateCall:
    """One ``simulate`` call as named steps, run in the order ``simulate`` lists them. ``a`` holds
    the arguments as given (the manifest records several of them so, e.g. ``faults`` and the
    rates); each step adds what it resolves as attributes for the later ones."""

    def __init__(self, given: SimpleNamespace):
        self.t_start = time.perf_counter()
        self.a = given

    def apply_scenario_defaults(self) -> None:
        """Explicit arguments win over the scenario's defaults, which win over _DEFAULTS."""
        a = self.a
        if a.scenario is not None and a.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {a.scenario!r} (one of: {', '.join(SCENARIOS)})")
        preset = dict(SCENARIOS[a.scenario].defaults) if a.scenario else {}

        def pick(name, value):
            if value is not None:
                return value
            if name in preset:
                return preset[name]
            return _DEFAULTS[name]

        self.brokers = int(pick("brokers", a.brokers))
        self.partitions = int(pick("partitions", a.partitions))
        self.rf = int(pick("rf", a.rf))
        self.racks = int(pick("racks", a.racks))
        self.acks_mix = pick("acks_mix", a.acks_mix)
        self.min_isr = a.min_isr
        if self.min_isr is None:
            self.min_isr = preset.get("min_isr", 2 if self.rf >= 3 else None)
        self.duration_ms = parse_duration(a.duration_ms)
        self.topic_names = _resolve_topics(a.topics)

    def validate(self) -> None:
        """Reject bad arguments before anything is written (the error names the argument)."""
        a, brokers, rf, min_isr = self.a, self.brokers, self.rf, self.min_isr
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1 (got {brokers})")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1 (got {self.partitions})")
        if not 1 <= rf <= brokers:
            raise ValueError(f"rf must be between 1 and brokers={brokers} (got {rf})")
        if self.racks < 1:
            raise ValueError(f"racks must be >= 1 (got {self.racks})")
        if min_isr is not None and not 1 <= int(min_isr) <= rf:
            raise ValueError(f"min_isr must be between 1 and rf={rf} (got {min_isr})")
        if self.duration_ms <= 0:
            raise ValueError("duration must be positive")
        if a.fmt not in ("parquet", "json", "jsonl"):
            raise ValueError(f"fmt must be 'parquet' or 'json' (JSON-lines), got {a.fmt!r}")
        self.fmt = "parquet" if a.fmt == "parquet" else "json"
        if a.delivery not in ("immediate", "explicit"):
            raise ValueError(f"delivery must be 'immediate' or 'explicit', got {a.delivery!r}")
        if a.rows_per_file < 1:
            raise ValueError("rows_per_file must be >= 1")
        lo, hi = (float(x) for x in a.fetch_interval_ms)
        if not 0 < lo <= hi:
            raise ValueError(f"fetch_interval_ms must be (low, high) with 0 < low <= high, got {a.fetch_interval_ms!r}")
        self.fetch_interval = (lo, hi)
        if a.tick_interval_ms < 0 or a.metadata_interval_ms <= 0 or a.alter_partition_interval_ms <= 0:
            raise ValueError("tick_interval_ms must be >= 0 (0: no Tick rows); metadata/alter-partition intervals > 0")
        if a.window_ms < 100:
            raise ValueError("window_ms must be >= 100")
        for nm, v in (("produce_rate", a.produce_rate), ("consumer_rate", a.consumer_rate)):
            vals = v.values() if isinstance(v, Mapping) else [v]
            if any(float(x) < 0 for x in vals):
                raise ValueError(f"{nm} must be >= 0")

    def schedule_faults(self) -> None:
        """The scenario's faults, then the ``faults`` argument's. The seed is split into four
        independent generators (steady state, fault timing, scenario, stale clients), so that
        adding a fault or a scenario does not move the traffic drawn from the others."""
        a = self.a
        ss = np.random.SeedSequence(int(a.seed))
        steady_ss, fault_ss, scen_ss, stale_ss = ss.spawn(4)
        self.seeds = (steady_ss, fault_ss, stale_ss)
        self.fault_list: list[Fault] = []
        if a.scenario:
            ctx = _Ctx(self.brokers, self.racks, self.topic_names, self.partitions, self.duration_ms,
                       np.random.Generator(np.random.PCG64(scen_ss)), self.rf)
            self.fault_list += SCENARIOS[a.scenario].faults(ctx)
        self.fault_list += parse_faults(a.faults, brokers=self.brokers, racks=self.racks,
                                        topics=self.topic_names, partitions=self.partitions,
                                        duration_ms=self.duration_ms)

    def resolve_topic_config(self) -> None:
        """``topic_config`` is one config for every topic, or {topic: config, "default": config}."""
        tc, names = self.a.topic_config, self.topic_names
        if isinstance(tc, Mapping) and tc and all(isinstance(v, Mapping) for v in tc.values()):
            self.tcfg = _per_topic({"default": None, **tc}, names, "topic_config")
        else:
            self.tcfg = [dict(tc) if tc else None] * len(names)

    def prepare_out_dir(self) -> None:
        """Create the directory; an old stream in it is an error unless ``overwrite`` (then it is
        removed: a stream mixing two runs' parts would replay as neither)."""
        out = Path(self.a.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        existing = sorted(p for p in out.iterdir() if p.name.startswith(("part-", "_tmp-part-", "_simulation")))
        if existing:
            if not self.a.overwrite:
                raise FileExistsError(f"{out} already holds a stream ({existing[0].name}, ...); "
                                      "use another directory or overwrite=True")
            for p in existing:
                p.unlink()
        self.out = out

    def bound_window_to_memory(self) -> None:
        """Bound memory: shrink the window so that one window holds ~_MAX_WINDOW_ROWS rows."""
        a, (lo, hi) = self.a, self.fetch_interval
        n_parts = self.partitions * len(self.topic_names)
        fetch_rate = 1000.0 * (math.log(hi / lo) / (hi - lo) if hi > lo else 1.0 / lo)
        rates = [float(x) for x in (a.produce_rate.values() if isinstance(a.produce_rate, Mapping) else [a.produce_rate])]
        crates = [float(x) for x in (a.consumer_rate.values() if isinstance(a.consumer_rate, Mapping) else [a.consumer_rate])]
        per_part = (self.rf - 1) * fetch_rate * (1.0 + (0.6 if a.delivery == "explicit" else 0.0)) + max(rates) + max(crates)
        est_rows_per_s = max(1e-9, n_parts * per_part)
        self.window_ms = int(min(a.window_ms, max(100, (_MAX_WINDOW_ROWS / est_rows_per_s * 1000.0) // 100 * 100)))

    def build_engine_config(self) -> None:
        """The engine config the stream is simulated under, and must be replayed under (the
        manifest records it): the delivery mode's, the rebalance interval's, then ``config``."""
        a = self.a
        engine_config: dict[str, str] = {}
        if a.delivery == "explicit":
            engine_config = {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"}
        if int(a.leader_imbalance_interval_ms) != 300_000:
            engine_config["leader.imbalance.check.interval.seconds"] = str(max(1, int(a.leader_imbalance_interval_ms) // 1000))
        engine_config.update({str(k): str(v) for k, v in (a.config or {}).items()})
        self.engine_config = engine_config

    def build_core(self) -> None:
        self.core = _make_core(self.engine_config, int(self.a.seed), bool(self.a.stop_on_violation))

    def run_closed_loop(self) -> None:
        """The environment (_Sim) drives the core and writes the stream; the writer is closed
        even when the core stops the run (stop_on_violation), so the rows up to there remain."""
        a, (steady_ss, fault_ss, stale_ss) = self.a, self.seeds
        self.writer = _StreamWriter(self.out, self.fmt, int(a.rows_per_file))
        self.sim = _Sim(
            brokers=self.brokers, racks=self.racks, topics=self.topic_names, partitions=self.partitions,
            rf=self.rf, duration_ms=self.duration_ms, min_isr=self.min_isr, topic_config=self.tcfg,
            produce_rate=a.produce_rate, records_per_produce=a.records_per_produce, acks_mix=self.acks_mix,
            fetch_interval_ms=self.fetch_interval, tick_interval_ms=int(a.tick_interval_ms),
            consumer_rate=a.consumer_rate, delivery=a.delivery,
            metadata_interval_ms=int(a.metadata_interval_ms),
            alter_partition_interval_ms=int(a.alter_partition_interval_ms),
            session_timeout_ms=int(a.session_timeout_ms), window_ms=int(self.window_ms),
            log_loss_fraction=float(a.log_loss_fraction), faults=self.fault_list,
            steady_rng=np.random.Generator(np.random.PCG64(steady_ss)),
            fault_rng=np.random.Generator(np.random.PCG64(fault_ss)), writer=self.writer,
            stale_rng=np.random.Generator(np.random.PCG64(stale_ss)), core=self.core)
        try:
            self.sim.run()
        finally:
            self.writer.close()
        self.core_report = _core_summary(self.core)

    def write_manifest(self) -> None:
        """``_simulation.json``: the parameters (as given where the reader wants the intent, e.g.
        ``faults``; resolved where a default applied), the engine config and what was written."""
        a = self.a
        params = {
            "brokers": self.brokers, "partitions": self.partitions, "rf": self.rf, "topics": self.topic_names,
            "racks": self.racks, "duration_ms": self.duration_ms, "seed": int(a.seed), "scenario": a.scenario,
            "faults": a.faults, "resolved_faults": [f.spec() for f in self.fault_list], "fmt": self.fmt,
            "rows_per_file": int(a.rows_per_file), "min_isr": self.min_isr,
            "topic_config": _jsonable(a.topic_config),
            "produce_rate": _jsonable(a.produce_rate), "records_per_produce": _jsonable(a.records_per_produce),
            "acks_mix": _jsonable(self.acks_mix), "fetch_interval_ms": list(self.fetch_interval),
            "tick_interval_ms": int(a.tick_interval_ms), "consumer_rate": _jsonable(a.consumer_rate),
            "delivery": a.delivery, "metadata_interval_ms": int(a.metadata_interval_ms),
            "alter_partition_interval_ms": int(a.alter_partition_interval_ms),
            "session_timeout_ms": int(a.session_timeout_ms),
            "leader_imbalance_interval_ms": int(a.leader_imbalance_interval_ms),
            "reassign_settle_ms": int(a.reassign_settle_ms), "log_loss_fraction": float(a.log_loss_fraction),
            "window_ms": int(self.window_ms),
        }
        manifest = {
            "generator": "isrflow.simulate/1",
            # same parameters + same library versions -> same bytes
            "versions": {"numpy": np.__version__, "pyarrow": pa.__version__},
            "parameters": params,
            "engine_config": self.engine_config,
            "rows": self.writer.rows,
            "files": self.writer.files,
            "last_ts_ms": self.duration_ms,
            "counts": dict(sorted(self.sim.counts.items())),
            "skipped_faults": self.sim.skipped,
            "core": self.core_report,
        }
        (self.out / "_simulation.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    def summary(self) -> dict:
        a, sim, writer = self.a, self.sim, self.writer
        return {
            "out": str(self.out), "rows": writer.rows, "files": len(writer.files), "brokers": self.brokers,
            "partitions": self.partitions, "partitions_total": self.partitions * len(self.topic_names),
            "topics": self.topic_names, "rf": self.rf, "duration_ms": self.duration_ms, "seed": int(a.seed),
            "scenario": a.scenario, "faults": [f.spec() for f in self.fault_list],
            "skipped_faults": sim.skipped, "counts": dict(sorted(sim.counts.items())),
            "engine_config": self.engine_config, "stale_leader_produces": sim.n_stale, "core": self.core_report,
            "elapsed_s": round(time.perf_counter() - self.t_start, 3),
        }


# --------------------------------------------------------------------------
# Command line (wired by jobs/cli.py as `isrflow simulate`; also `python -m jobs.simulate`)
# --------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `simulate` options to a (sub)parser."""
    p.add_argument("--out", required=True, help="stream directory to create")
    p.add_argument("--brokers", type=int, default=None, help="broker count (default 6; scenario may change)")
    p.add_argument("--partitions", type=int, default=None, help="partitions per topic (default 100)")
    p.add_argument("--rf", type=int, default=None, help="replication factor (default 3)")
    p.add_argument("--topics", type=int, default=None, help="number of topics t0..tN-1 (default 1)")
    p.add_argument("--racks", type=int, default=None, help="racks / zones (default 3)")
    p.add_argument("--min-isr", type=int, default=None, help="min.insync.replicas (default 2 if rf >= 3)")
    p.add_argument("--duration", type=parse_duration, default="10m", help="cluster time, e.g. 10m, 90s (default 10m)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--faults", default=None, help="fault spec, e.g. 'crash:3@120s,partition:1@60s+30s'")
    p.add_argument("--scenario", default=None, choices=sorted(SCENARIOS))
    p.add_argument("--format", dest="fmt", default="parquet", choices=["parquet", "json"])
    p.add_argument("--rows-per-file", type=int, default=200_000)
    p.add_argument("--produce-rate", type=float, default=2.0, help="produce requests / partition / s")
    p.add_argument("--consumer-rate", type=float, default=0.2, help="consumer requests / partition / s")
    p.add_argument("--tick-interval", type=parse_duration, default="15s")
    p.add_argument("--delivery", default="immediate", choices=["immediate", "explicit"])
    p.add_argument("--overwrite", action="store_true", help="replace an existing stream in --out")
    p.add_argument("--config", dest="engine_config_file", default=None,
                   help="engine config file the stream is simulated (and must be replayed) under")
    p.add_argument("--set", dest="engine_set", action="append", metavar="KEY=VALUE", default=None,
                   help="engine config override (Kafka names), e.g. eligible.leader.replicas.enable=false; "
                        "recorded in the manifest's engine_config")
    p.add_argument("--stop-on-violation", action="store_true",
                   help="stop at the first protocol invariant violation, naming the seed and step")
    return p


def _config_from_args(ns: argparse.Namespace) -> dict[str, str]:
    cfg: dict[str, str] = {}
    path = getattr(ns, "engine_config_file", None)
    if path:
        from conf import parse_config_file
        try:
            cfg.update(parse_config_file(path))
        except OSError as e:
            raise ValueError(f"--config {path}: {e}") from None
    for kv in getattr(ns, "engine_set", None) or []:
        if "=" not in kv:
            raise ValueError(f"--set {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        cfg[k.strip()] = v.strip()
    return cfg


def run_from_args(ns: argparse.Namespace) -> dict:
    summary = simulate(
        ns.out, brokers=ns.brokers, partitions=ns.partitions, rf=ns.rf, topics=ns.topics,
        racks=ns.racks, min_isr=ns.min_isr, duration_ms=ns.duration, seed=ns.seed, faults=ns.faults,
        scenario=ns.scenario, fmt=ns.fmt, rows_per_file=ns.rows_per_file, produce_rate=ns.produce_rate,
        consumer_rate=ns.consumer_rate, tick_interval_ms=ns.tick_interval, delivery=ns.delivery,
        overwrite=ns.overwrite, config=_config_from_args(ns),
        stop_on_violation=bool(getattr(ns, "stop_on_violation", False)))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = add_arguments(argparse.ArgumentParser(prog="isrflow simulate", description=__doc__.split("\n\n")[0]))
    ns = p.parse_args(argv)
    try:
        summary = run_from_args(ns)
    except (ValueError, FileExistsError, SimulationViolation) as e:
        print(f"isrflow simulate: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
