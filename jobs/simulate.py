"""Deterministic generator of isrflow input event streams (``isrflow simulate``).

The simulator plays the *environment* of a KRaft cluster -- brokers starting,
crashing, losing their controller session, producers, consumers and follower
fetchers -- and writes it as an input stream (SPEC §2): a directory of Parquet
(or JSON-lines) files whose names sort in stream order (``part-00000.parquet``,
...) plus a ``_simulation.json`` manifest with the parameters (underscore
files are ignored by the reader). The protocol itself (ISR, ELR, HWM,
elections) is computed by the engine; the simulator only keeps a rough belief
of who leads each partition so that it can address produce/consume requests,
and a rough count of produced records so that log-loss and consumer offsets
are plausible. Stale beliefs are fine: the engine answers them with errors.

Same parameters and seed -> identical bytes (numpy ``Generator(PCG64)``,
fixed Parquet writer settings, no wall-clock anywhere in the output).

Stream layout
-------------
* t=0: ``BrokerRegister`` (epochs from a global counter starting at 100,
  ``previous_broker_epoch`` -1) and ``BrokerUnfence`` for brokers 1..N, then
  ``CreatePartition`` for every partition (rack-aware round-robin placement,
  first replica rotating) and ``AlterConfig`` per topic
  (``min.insync.replicas``, default 2 when RF >= 3, plus ``topic_config``).
* Steady state, generated with numpy per window of cluster time (``window_ms``,
  also cut at every fault action): ``Produce`` (Poisson, per-topic rate and
  acks mix) to the believed leader; modeled follower ``Fetch`` rows (only
  topic/partition/broker) per follower at a per-replica cadence drawn from
  ``fetch_interval_ms`` with +-25% jitter; ``Tick`` per live broker every
  ``tick_interval_ms``; ``ListOffsets`` / ``ConsumerFetch`` at
  ``consumer_rate``. With ``delivery="explicit"`` also
  ``AlterPartitionArrive``/``AlterPartitionResponse`` pairs a few ms after
  fetches and ticks, and ``MetadataSync`` per live broker every
  ``metadata_interval_ms`` (``up_to_seq`` null).
* The simulator's leader belief follows the controller's rules (SPEC §4, roughly;
  the engine computes the truth), updated at every fault action so that each
  window of steady traffic has one believed leader per partition:

  - a rough ISR / ELR per partition: brokers leave every ISR when fenced or in
    controlled shutdown (KIP-966: while the ISR is below min ISR the leavers
    join the ELR, a broker restarting after an unclean shutdown leaves it);
    followers that are up (alive, unfenced, not shutting down) and reachable
    rejoin the ISR of a reachable leader at once;
  - the leader is STICKY: it stays while it is a valid leader (in the ISR,
    unfenced, not shutting down -- a crashed or isolated leader stays leader
    until its session expires, but gets no traffic meanwhile). Otherwise the
    first valid replica in replica order: in the ISR, or in the ELR when the
    ISR is empty; then the last known leader; then, with
    ``unclean.leader.election.enable``, any acceptable replica; else the
    partition is leaderless (0) and gets no produce / consumer / fetch rows;
  - a returning broker takes leadership back only through the preferred
    election: the auto rebalance every ``leader_imbalance_interval_ms`` (on its
    multiples, where the preferred replica is in the ISR and up) or
    ``elect:preferred``;
  - reassignments: replicas = target + removing while in progress, leader kept;
    completion when the adding replicas have caught up (about their second
    fetch), then removed replicas leave and a removed leader is replaced by the
    first valid target replica; cancel reverts (replicas minus adding).

  ``Produce``, ``ListOffsets`` and ``ConsumerFetch`` go to the believed leader.
  After a leader change a client with stale metadata still sends up to one
  produce request per partition to the previous leader within a seeded window
  of up to 1 s (if that broker is reachable); the engine answers it with
  NOT_LEADER_OR_FOLLOWER. The summary counts them (``stale_leader_produces``).

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
``reassign:TP->B,B,..@T``                   Reassign TP to the replica list (the simulator assumes it
                                            completes once the adding replicas caught up, or
                                            ``reassign_settle_ms`` later if one is down; unless cancelled).
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
import heapq
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.events import EVENT_ARROW_SCHEMA as INPUT_ARROW_SCHEMA

__all__ = [
    "INPUT_ARROW_SCHEMA",
    "SCENARIOS",
    "Fault",
    "parse_duration",
    "parse_faults",
    "simulate",
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
    if "@" not in item:
        raise ValueError("missing '@TIME' (e.g. crash:3@120s)")
    head, _, when = item.rpartition("@")
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
    kind, *args = [a.strip() for a in head.split(":")] if head else [""]
    kind = kind.lower()
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (expected one of: {', '.join(FAULT_KINDS)})")
    pos = [a for a in args if "=" not in a or kind == "config"]
    opts: dict[str, str] = {}
    if kind != "config":
        for a in args:
            if "=" in a:
                k, _, v = a.partition("=")
                opts[k.strip().lower()] = v.strip()
    f = Fault(kind=kind, at_ms=at, dur_ms=dur)

    def need(n: int, usage: str) -> None:
        if len(pos) != n:
            raise ValueError(f"expected {usage}")

    def allow_opts(*names: str) -> None:
        bad = sorted(set(opts) - set(names))
        if bad:
            allowed = ", ".join(names) if names else "none"
            raise ValueError(f"unknown option(s) {', '.join(bad)} for {kind} (allowed: {allowed})")

    def no_dur() -> None:
        if dur is not None:
            raise ValueError(f"{kind} takes no '+DURATION'")

    def lose_frac() -> dict[str, Any]:
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

    if kind in ("crash", "partition", "isolate"):
        need(1, f"{kind}:BROKER@TIME[+DURATION], e.g. {kind}:2@60s+30s")
        allow_opts()
        f = replace(f, broker=_parse_broker(pos[0], cl))
    elif kind == "unclean-crash":
        need(1, "unclean-crash:BROKER[:lose=N|P%][:frac=F]@TIME[+DURATION], e.g. unclean-crash:2@300s")
        allow_opts("lose", "frac")
        f = replace(f, broker=_parse_broker(pos[0], cl), **lose_frac())
    elif kind == "slow":
        need(1, "slow:BROKER[:factor=F]@TIME[+DURATION], e.g. slow:4:factor=10@0s+120s")
        allow_opts("factor")
        factor = None
        if "factor" in opts:
            try:
                factor = float(opts["factor"])
            except ValueError:
                factor = -1.0
            if not (factor >= 1.0 and math.isfinite(factor)):
                raise ValueError(f"factor={opts['factor']!r}: must be a number >= 1")
        f = replace(f, broker=_parse_broker(pos[0], cl), factor=factor)
    elif kind == "rolling-restart":
        need(0, "rolling-restart[:down=DURATION]@TIME[+GAP], e.g. rolling-restart@60s+90s")
        allow_opts("down")
        down = None
        if "down" in opts:
            try:
                down = parse_duration(opts["down"])
            except ValueError as e:
                raise ValueError(f"down=: {e}") from None
            if down <= 0:
                raise ValueError("down= must be positive")
        f = replace(f, down_ms=down)
    elif kind == "zone-outage":
        need(1, "zone-outage:RACK@TIME[+DURATION], e.g. zone-outage:rack1@400s+60s")
        allow_opts("lose", "frac")
        r = pos[0].lower()
        r = r[4:] if r.startswith("rack") else r
        if not r.isdigit() or not 0 <= int(r) < cl.racks:
            raise ValueError(f"unknown rack {pos[0]!r} (racks are rack0..rack{cl.racks - 1})")
        f = replace(f, rack=int(r), **lose_frac())
    elif kind == "reassign":
        no_dur()
        allow_opts()
        if len(pos) != 1 or "->" not in pos[0]:
            raise ValueError("expected reassign:TOPIC-PARTITION->B1,B2,..@TIME, e.g. reassign:t0-3->1,4,5@200s")
        tp_s, _, reps_s = pos[0].partition("->")
        topic, part = _parse_tp(tp_s, cl)
        reps = tuple(_parse_broker(x.strip(), cl) for x in reps_s.split(",") if x.strip())
        if not reps:
            raise ValueError("empty replica list after '->' (use cancel-reassign:TP@TIME to cancel)")
        if len(set(reps)) != len(reps):
            raise ValueError(f"replica list {list(reps)} repeats a broker")
        f = replace(f, topic=topic, partition=part, replicas=reps)
    elif kind == "cancel-reassign":
        no_dur()
        allow_opts()
        need(1, "cancel-reassign:TOPIC-PARTITION@TIME, e.g. cancel-reassign:t0-3@260s")
        topic, part = _parse_tp(pos[0], cl)
        f = replace(f, topic=topic, partition=part)
    elif kind == "elect":
        no_dur()
        allow_opts()
        usage = ("elect:preferred|unclean[:TOPIC-PARTITION]@TIME or "
                 "elect:designated:TOPIC-PARTITION:BROKER@TIME")
        if not pos:
            raise ValueError(f"expected {usage}")
        et = pos[0].upper()
        if et not in ("PREFERRED", "UNCLEAN", "DESIGNATED"):
            raise ValueError(f"unknown election type {pos[0]!r} (preferred, unclean or designated)")
        topic = part = target = None
        if et == "DESIGNATED":
            need(3, usage)
            topic, part = _parse_tp(pos[1], cl)
            target = _parse_broker(pos[2], cl)
        elif len(pos) == 2 and pos[1].lower() != "all":
            topic, part = _parse_tp(pos[1], cl)
        elif len(pos) > 2:
            raise ValueError(f"expected {usage}")
        f = replace(f, election=et, topic=topic, partition=part, target=target)
    elif kind == "config":
        no_dur()
        if len(pos) < 2 or any("=" not in a for a in pos[1:]):
            raise ValueError("expected config:TOPIC[-PARTITION]:KEY=VALUE[:KEY=VALUE]@TIME, "
                             "e.g. config:t0:min.insync.replicas=1@300s")
        topic, part = _parse_tp(pos[0], cl, allow_topic_only=True)
        kv = tuple((a.partition("=")[0].strip(), a.partition("=")[2].strip()) for a in pos[1:])
        if any(not k for k, _ in kv):
            raise ValueError("empty config key")
        f = replace(f, topic=topic, partition=part, config=kv)
    return f


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
_GRACE_MS = 5_000   # a reassignment's new leader keeps fetching this long (see _reassign_done_at)

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


class _Sim:
    def __init__(self, *, brokers, racks, topics, partitions, rf, duration_ms, min_isr, topic_config,
                 produce_rate, records_per_produce, acks_mix, fetch_interval_ms, tick_interval_ms,
                 consumer_rate, delivery, metadata_interval_ms, alter_partition_interval_ms,
                 session_timeout_ms, leader_imbalance_interval_ms, reassign_settle_ms, window_ms,
                 log_loss_fraction, faults, steady_rng, fault_rng, writer, stale_rng,
                 stale_max_ms=1_000.0):
        self.N, self.racks, self.topics, self.ppt, self.rf = brokers, racks, topics, partitions, rf
        self.P = len(topics) * partitions
        self.duration, self.window = duration_ms, window_ms
        self.min_isr, self.topic_config = min_isr, topic_config
        self.delivery = delivery
        self.session_timeout = session_timeout_ms
        self.rebalance_ms = leader_imbalance_interval_ms
        self.settle_ms = reassign_settle_ms
        self.loss_frac = log_loss_fraction
        self.faults = faults
        self.rng, self.frng = steady_rng, fault_rng
        self.stale_max_ms = float(stale_max_ms)
        self.w = writer
        self.seq = 1
        self.counts: dict[str, int] = {}
        self.skipped: list[str] = []

        P = self.P
        self.topic_of = np.repeat(np.arange(len(topics), dtype=np.int32), partitions)
        self.pnum_of = np.tile(np.arange(partitions, dtype=np.int32), len(topics))
        self.orig = _place_replicas(P, brokers, racks, rf)
        # replica slots: a reassignment in progress holds target + removing (the union of the lists)
        self.R = max(rf, min(brokers, rf + sum(len(f.replicas) for f in faults if f.kind == "reassign")))
        self.rep = np.zeros((P, self.R), dtype=np.int32)   # 0 = empty slot
        self.rep[:, :rf] = self.orig
        self.reassign_adding: dict[int, list[int]] = {}   # reassignment in progress: adding replicas
        self.reassign_target: dict[int, tuple[int, ...]] = {}
        self.reassign_due: dict[int, int | None] = {}      # token of the scheduled completion
        self.reassign_fi: dict[int, int] = {}
        self._n_token = 0
        self.leader = self.orig[:, 0].copy()               # believed leader, 0 = leaderless
        self.produced = np.zeros(P, dtype=np.int64)
        # The controller-side belief (SPEC §4 rules, roughly): ISR / ELR membership per broker
        # (column 0 unused, always False), the last known leader, per-partition min ISR and
        # unclean election flag (topic config).
        self.isr = np.zeros((P, brokers + 1), bool)
        self.isr[np.arange(P)[:, None], self.orig] = True
        self.elr = np.zeros((P, brokers + 1), bool)
        self.lke = np.zeros(P, np.int32)
        mi = np.ones(len(topics), np.int64)
        unc = np.zeros(len(topics), bool)
        for ti in range(len(topics)):
            cfg = {"min.insync.replicas": str(min_isr) if min_isr is not None else "1"}
            cfg.update({str(k): str(v) for k, v in (topic_config[ti] or {}).items()})
            mi[ti], unc[ti] = self._cfg_vals(cfg, 1, False)
        self.min_isr_p = mi[self.topic_of]
        self.unclean_p = unc[self.topic_of]
        # Clients with stale metadata: after a leader change, up to `stale_left` produce requests
        # before `stale_until` still go to `stale_to` (the previous leader).
        self.last_leader = self.leader.copy()
        self.stale_to = np.zeros(P, np.int32)
        self.stale_left = np.zeros(P, np.int64)
        self.stale_until = np.zeros(P, float)
        self.srng = stale_rng
        self.n_stale = 0
        # after a believed reassignment completion the new leader keeps fetching for a while
        self.grace_b = np.zeros(P, np.int32)
        self.grace_until = np.zeros(P, float)
        self._grace: list[int] = []

        # brokers (index 0 unused)
        n1 = brokers + 1
        self.alive = np.zeros(n1, bool)
        self.fenced = np.ones(n1, bool)
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
        if not rows:
            return
        for r in rows:
            self.counts[r["type"]] = self.counts.get(r["type"], 0) + 1
        self.w.add(_rows_table(rows, self.seq))
        self.seq += len(rows)

    def _tp(self, p: int) -> dict:
        return {"topic": self.topics[self.topic_of[p]], "partition": int(self.pnum_of[p])}

    def _gp(self, topic: str, part: int) -> int:
        return self.topics.index(topic) * self.ppt + part

    # ---------------------------------------------------------------- beliefs
    def _up(self) -> np.ndarray:
        up = self.alive & ~self.fenced & ~self.shutting
        up[0] = False
        return up

    def _acceptable(self) -> np.ndarray:
        """The controller's view: registered, unfenced, not in controlled shutdown. A crashed
        broker stays acceptable until its session expires (BrokerFence)."""
        acc = ~self.fenced & ~self.shutting
        acc[0] = False
        return acc

    @staticmethod
    def _cfg_vals(cfg: Mapping[str, str], mi: int, unc: bool) -> tuple[int, bool]:
        # the engine's own parser (protocol.config), so a value means the same to both
        from protocol.config import ConfigError, parse_bool, parse_int
        v = cfg.get("min.insync.replicas")
        if v is not None:
            try:
                mi = parse_int("min.insync.replicas", v, 1)
            except ConfigError:
                pass
        v = cfg.get("unclean.leader.election.enable")
        if v is not None:
            try:
                unc = parse_bool("unclean.leader.election.enable", v)
            except ConfigError:
                unc = False
        return mi, unc

    def _set_isr(self, ps: np.ndarray, new_isr: np.ndarray, unclean_out: int = 0) -> None:
        """ISR of partitions ps -> new_isr (bool rows), with KIP-966's ELR rule: while the ISR is
        below min ISR, members leaving it (and the ELR so far) are eligible, except a broker that
        restarted after an unclean shutdown; at or above min ISR the ELR is empty. An ISR that
        becomes empty remembers the last leader."""
        if ps.size == 0:
            return
        old = self.isr[ps]
        n_rep = (self.rep[ps] > 0).sum(axis=1)
        below = new_isr.sum(axis=1) < np.minimum(self.min_isr_p[ps], np.maximum(n_rep, 1))
        elr = (self.elr[ps] | old) & ~new_isr & below[:, None]
        if unclean_out:
            elr[:, unclean_out] = False
        emptied = ~new_isr.any(axis=1) & old.any(axis=1) & (self.leader[ps] > 0)
        self.lke[ps[emptied]] = self.leader[ps[emptied]]
        self.isr[ps] = new_isr
        self.elr[ps] = elr

    def _elect(self, ps: np.ndarray, preferred: bool = False, unclean: bool = False) -> None:
        """Controller election (PartitionChangeBuilder.electLeader, roughly) for partitions ps:
        the current leader stays while valid (preferred: the first replica if valid); else the
        first valid replica in replica order (in the ISR, or in the ELR when the ISR is empty);
        else the last known leader when ISR and ELR are empty; else, with unclean election, the
        first acceptable replica; else leaderless (0)."""
        if ps.size == 0:
            return
        acc_b = self._acceptable()
        R = self.rep[ps]
        k = np.arange(ps.size)
        rows = ps[:, None]
        acc = acc_b[R] & (R > 0)
        isr_empty = ~self.isr[ps].any(axis=1)
        elr_any = self.elr[ps].any(axis=1)
        valid = acc & (self.isr[rows, R] | (isr_empty[:, None] & self.elr[rows, R]))
        cur = self.leader[ps]
        cur_valid = (valid & (R == cur[:, None])).any(axis=1)
        first = np.where(valid.any(axis=1), R[k, valid.argmax(axis=1)], 0)
        new = np.where(cur_valid, cur, first)
        if preferred:
            new = np.where(valid[:, 0], R[:, 0], new)
        new = new.astype(np.int32)
        # ELR election: the new leader becomes the ISR
        from_elr = isr_empty & (new > 0) & (new != cur)
        # last known leader (ISR and ELR empty)
        lk = self.lke[ps]
        lk_ok = (new == 0) & isr_empty & ~elr_any & (lk > 0) & acc_b[lk] & (R == lk[:, None]).any(axis=1)
        new = np.where(lk_ok, lk, new)
        # unclean election
        unc = (new == 0) & (self.unclean_p[ps] | unclean) & acc.any(axis=1)
        new = np.where(unc, R[k, acc.argmax(axis=1)], new)
        reset = from_elr | lk_ok | unc
        if reset.any():
            pr, nl = ps[reset], new[reset]
            self.isr[pr] = False
            self.isr[pr, nl] = True
            self.elr[pr, nl] = False
            wipe = lk_ok | unc
            self.elr[ps[wipe]] = False
        self.lke[ps[(new > 0) & (new != cur)]] = 0
        self.leader[ps] = new

    def _settle(self, t: int, before: np.ndarray) -> None:
        """After an action: fenced / shutting-down brokers leave every ISR, partitions whose
        believed leader is gone (or not in the ISR any more) elect a new one, followers that are
        up and reachable join the ISR of a reachable leader, and clients get a short window of
        stale metadata for partitions whose leader changed."""
        acc = self._acceptable()
        drop = self.isr & ~acc[None, :]
        ps = np.flatnonzero(drop.any(axis=1))
        self._set_isr(ps, self.isr[ps] & ~drop[ps])
        P = np.arange(self.P)
        lead = self.leader
        need = np.flatnonzero((lead == 0) | ~acc[lead] | ~self.isr[P, lead])
        self._elect(need)
        # ISR expansion (followers catch up quickly)
        up = self._up()
        reach = self._reachable()
        ok = up & reach
        lead_ok = ok[self.leader]
        join = (self.rep > 0) & ok[self.rep] & lead_ok[:, None]
        jr, jc = np.nonzero(join)
        self.isr[jr, self.rep[jr, jc]] = True
        n_rep = (self.rep > 0).sum(axis=1)
        full = self.isr.sum(axis=1) >= np.minimum(self.min_isr_p, np.maximum(n_rep, 1))
        self.elr[full] = False
        self.elr &= ~self.isr
        for p in [q for q, due in self.reassign_due.items() if due is None]:
            self._schedule_reassign_done(p, t)
        if self._grace:
            g = np.array(self._grace)
            self._grace = []
            self.grace_b[g] = self.leader[g]
            self.grace_until[g] = t + _GRACE_MS
        # stale metadata after a leader change
        new = self.leader
        ch = np.flatnonzero((new > 0) & (new != before) & (new != self.last_leader) & (self.last_leader > 0))
        if ch.size:
            self.stale_to[ch] = self.last_leader[ch]
            self.stale_left[ch] = 1
            self.stale_until[ch] = t + self.srng.random(ch.size) * self.stale_max_ms
        self.last_leader = np.where(new > 0, new, self.last_leader).astype(np.int32)

    def _reachable(self) -> np.ndarray:
        r = self.alive & (self.isolated == 0)
        r[0] = False
        return r

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

    # ---------------------------------------------------------------- steady state
    def steady(self, a: int, b: int) -> None:
        rng, P = self.rng, self.P
        dt = (b - a) / 1000.0
        reach = self._reachable()
        leader_ok = reach[self.leader]
        parts: list[tuple] = []  # (t, type, p, broker, records, acks, fetch_offset, spec, iso)

        # follower fetches
        rep = self.rep
        follower = (rep != self.leader[:, None]) | ((rep == self.grace_b[:, None]) & (self.grace_until > a)[:, None])
        active = (rep > 0) & reach[rep] & follower & leader_ok[:, None]
        iv = self.fetch_base * self.slow[rep]
        flat_idx, ft = _periodic(self.fetch_next.reshape(-1), iv.reshape(-1), active.reshape(-1),
                                 a, b, 0.25, rng)
        fp = flat_idx // self.R
        fb = rep.reshape(-1)[flat_idx]
        nf = ft.size

        # produce
        lam = np.where(leader_ok, self.rate * dt, 0.0)
        pc = rng.poisson(lam)
        pp = np.repeat(np.arange(P), pc)
        npr = pp.size
        pt = a + rng.random(npr) * (b - a)
        recs = (1 + rng.poisson(np.maximum(self.rec_mean[self.topic_of[pp]] - 1.0, 0.0))).astype(np.int32)
        u = rng.random(npr)
        aidx = (u[:, None] >= self.acks_cum[self.topic_of[pp]]).sum(axis=1)
        acks = self.acks_vals[np.minimum(aidx, 2)]

        # consumers
        clam = np.where(leader_ok, self.crate * dt, 0.0)
        cc = rng.poisson(clam)
        cp = np.repeat(np.arange(P), cc)
        ncs = cp.size
        ct = a + rng.random(ncs) * (b - a)
        is_list = rng.random(ncs) < 0.3
        spec = np.where(rng.random(ncs) < 0.7, 0, 1)
        iso_u = rng.random(ncs)
        iso = np.where(iso_u < 0.5, -1, np.where(iso_u < 0.7, 0, 1))
        base = self.produced[cp].astype(float)
        fo = np.where(rng.random(ncs) < 0.2, 0.0, np.floor(base * rng.uniform(0.5, 0.98, ncs))).astype(np.int64)

        # ticks
        tb, tt = _periodic(self.tick_next, self.tick_iv, self.alive.copy(), a, b, 0.0, rng)

        cols_t = [ft, pt, ct, tt.astype(float)]
        cols_type = [np.full(nf, _T_FETCH, np.int8), np.full(npr, _T_PRODUCE, np.int8),
                     np.where(is_list, _T_LIST, _T_CFETCH).astype(np.int8), np.full(tb.size, _T_TICK, np.int8)]
        cols_p = [fp, pp, cp, np.full(tb.size, -1)]
        cols_b = [fb, self._produce_targets(pp, pt, reach), self.leader[cp], tb]
        n_ap = 0
        if self.delivery == "explicit":
            # AlterPartition round trips after some fetches and after every tick (leader's partitions)
            sel = rng.random(nf) < self.ap_prob
            ap_p, ap_t0 = [fp[sel]], [ft[sel]]
            for bk, t0 in zip(tb.tolist(), tt.tolist()):
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
            cols_t += [arr, resp, mt]
            cols_type += [np.full(n_ap, _T_APARR, np.int8), np.full(n_ap, _T_APRESP, np.int8),
                          np.full(mb.size, _T_MSYNC, np.int8)]
            cols_p += [app, app, np.full(mb.size, -1)]
            cols_b += [np.full(n_ap, -1), np.full(n_ap, -1), mb]

        t_all = np.concatenate(cols_t)
        n = t_all.size
        if n == 0:
            self.produced += np.bincount(pp, weights=recs, minlength=P).astype(np.int64)
            return
        typ = np.concatenate(cols_type)
        p_all = np.concatenate(cols_p).astype(np.int64)
        b_all = np.concatenate(cols_b).astype(np.int32)
        off_p = nf
        rec_all = np.zeros(n, np.int32)
        rec_all[off_p:off_p + npr] = recs
        acks_all = np.zeros(n, np.int32)
        acks_all[off_p:off_p + npr] = acks
        off_c = off_p + npr
        fo_all = np.zeros(n, np.int64)
        fo_all[off_c:off_c + ncs] = fo
        spec_all = np.full(n, -1, np.int32)
        spec_all[off_c:off_c + ncs] = np.where(is_list, spec, -1)
        iso_all = np.full(n, -1, np.int32)
        iso_all[off_c:off_c + ncs] = np.where(is_list, iso, -1)

        order = np.argsort(t_all, kind="stable")
        t_all = t_all[order]
        typ, p_all, b_all = typ[order], p_all[order], b_all[order]
        rec_all, acks_all, fo_all = rec_all[order], acks_all[order], fo_all[order]
        spec_all, iso_all = spec_all[order], iso_all[order]
        ts = np.floor(t_all).astype(np.int64)

        no_p = p_all < 0
        pidx = np.where(no_p, 0, p_all)
        is_prod = typ == _T_PRODUCE
        arrays = {
            "seq": pa.array(np.arange(self.seq, self.seq + n, dtype=np.int64)),
            "ts_ms": pa.array(ts),
            "type": _dict_col(typ.astype(np.int32), _TYPE_NAMES, None),
            "topic": _dict_col(self.topic_of[pidx], pa.array(self.topics, pa.string()), no_p),
            "partition": pa.array(self.pnum_of[pidx], pa.int32(), mask=no_p),
            "broker": pa.array(b_all, pa.int32(), mask=b_all < 0),
            "offset_spec": _dict_col(np.maximum(spec_all, 0), _OFFSET_SPECS, spec_all < 0),
            "isolation": _dict_col(np.maximum(iso_all, 0), _ISOLATIONS, iso_all < 0),
            "records": pa.array(rec_all, pa.int32(), mask=~is_prod),
            "acks": pa.array(acks_all, pa.int32(), mask=~is_prod),
            "fetch_offset": pa.array(fo_all, pa.int64(), mask=typ != _T_CFETCH),
        }
        cols = [arrays[nm] if nm in arrays else pa.nulls(n, t) for nm, t in _INPUT_COLUMNS]
        self.w.add(pa.Table.from_arrays(cols, schema=INPUT_ARROW_SCHEMA))
        self.seq += n
        tc = np.bincount(typ, minlength=len(_TYPE_NAMES))
        for code, c in enumerate(tc.tolist()):
            if c:
                name = _TYPE_NAMES[code].as_py()
                self.counts[name] = self.counts.get(name, 0) + c
        self.produced += np.bincount(pp, weights=recs, minlength=P).astype(np.int64)

    def _produce_targets(self, pp: np.ndarray, pt: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """Broker of each produce request: the believed leader, except the first ``stale_left``
        requests (in time order) of a partition before its ``stale_until``, which a client with
        stale metadata still sends to the previous leader (if that one is reachable)."""
        out = self.leader[pp]
        if pp.size == 0 or not self.stale_left.any():
            return out
        cand = np.flatnonzero((self.stale_left[pp] > 0) & (pt < self.stale_until[pp]) & reach[self.stale_to[pp]])
        if cand.size == 0:
            return out
        cand = cand[np.lexsort((pt[cand], pp[cand]))]
        cp = pp[cand]
        start = np.flatnonzero(np.r_[True, cp[1:] != cp[:-1]])
        rank = np.arange(cand.size) - np.repeat(start, np.diff(np.r_[start, cand.size]))
        sel = cand[rank < self.stale_left[cp]]
        out[sel] = self.stale_to[pp[sel]]
        self.n_stale += int(sel.size)
        self.stale_left -= np.bincount(pp[sel], minlength=self.P)
        return out

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
                # "reassign_settle" (completion) is scheduled when the reassignment starts
                add(T, fi, 0, "reassign", gp=self._gp(f.topic, f.partition), replicas=f.replicas)
            elif f.kind == "cancel-reassign":
                add(T, fi, 0, "cancel", gp=self._gp(f.topic, f.partition))
            elif f.kind == "elect":
                gp = None if f.topic is None else self._gp(f.topic, f.partition)
                add(T, fi, 0, "elect", gp=gp, election=f.election, target=f.target)
            elif f.kind == "config":
                add(T, fi, 0, "config", topic=f.topic, partition=f.partition, config=dict(f.config))
        if self.rebalance_ms and self.rebalance_ms > 0:
            for k in range(1, self.duration // self.rebalance_ms + 1):
                add(k * self.rebalance_ms, -1, 0, "rebalance")
        acts = [x for x in acts if x[0] < self.duration]
        acts.sort(key=lambda x: (x[0], x[1] if x[1] >= 0 else 1 << 30, x[2]))
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
        """Run one action at time t; returns rows. A fault whose first action
        cannot happen is skipped entirely (its later actions too). Then the
        leader belief follows the controller (``_settle``)."""
        before = self.leader.copy()
        rows = self._apply(t, fi, name, kw, dead)
        self._settle(t, before)
        return rows

    def _apply(self, t: int, fi: int, name: str, kw: dict, dead: set) -> list[dict]:
        key = (fi, kw.get("sub", 0))
        if key in dead:
            return []
        b = kw.get("broker")
        rows: list[dict] = []

        def skip(why: str) -> list[dict]:
            dead.add(key)
            self.skipped.append(f"{self.faults[fi].spec()} ({why} at {_fmt_ms(t)})")
            return []

        if name == "shutdown":
            if not self.alive[b] or self.shutting[b]:
                return skip(f"broker {b} is not running")
            self.shutting[b] = True
            rows.append({"type": "BrokerControlledShutdown", "broker": b})
        elif name == "crash":
            if not self.alive[b]:
                return skip(f"broker {b} is not running")
            clean = kw["clean"]
            self.alive[b] = False
            self.shutting[b] = False
            self.last_clean[b] = clean
            rows.append({"type": "BrokerCrash", "broker": b, "clean": clean})
            if not clean:
                hosted = np.flatnonzero((self.rep == b).any(axis=1))
                pick = hosted[self.frng.random(hosted.size) < kw["frac"]]
                lose = kw.get("lose")
                for p in pick.tolist():
                    prod = int(self.produced[p])
                    if lose is None:
                        recent = max(1, int(self.rate[p] * self.rec_mean[self.topic_of[p]] * 2))
                        lost = int(self.frng.integers(1, recent + 1))
                    elif lose.endswith("%"):
                        lost = max(1, int(math.ceil(prod * int(lose[:-1]) / 100.0)))
                    else:
                        lost = int(lose)
                    rows.append({"type": "ReplicaLogLoss", **self._tp(p), "broker": b,
                                 "log_end_offset": max(0, prod - lost)})
        elif name == "fence":
            if not self.fenced[b]:
                self.fenced[b] = True
                rows.append({"type": "BrokerFence", "broker": b})
        elif name == "restart":
            if self.alive[b]:
                return []
            self.epoch_counter += 1
            prev = int(self.epoch[b]) if self.last_clean[b] else -1
            self.epoch[b] = self.epoch_counter
            self.alive[b] = True
            self.fenced[b] = True
            rows.append({"type": "BrokerRegister", "broker": b, "broker_epoch": self.epoch_counter,
                         "previous_broker_epoch": prev})
            if prev < 0:  # unclean shutdown: out of every ISR and ELR
                ps = np.flatnonzero(self.isr[:, b] | self.elr[:, b])
                new_isr = self.isr[ps]
                new_isr[:, b] = False
                self._set_isr(ps, new_isr, unclean_out=b)
        elif name == "unfence":
            if self.alive[b] and self.fenced[b] and self.ctrl_cut[b] == 0 and self.isolated[b] == 0:
                self.fenced[b] = False
                rows.append({"type": "BrokerUnfence", "broker": b})
        elif name == "cut_start":
            if not self.alive[b]:
                return skip(f"broker {b} is not running")
            (self.ctrl_cut if kw["cut"] == "ctrl" else self.isolated)[b] += 1
        elif name == "session_expire":
            if self.alive[b] and not self.fenced[b] and (self.ctrl_cut[b] or self.isolated[b]):
                self.fenced[b] = True
                rows.append({"type": "BrokerFence", "broker": b})
        elif name == "cut_end":
            arr = self.ctrl_cut if kw["cut"] == "ctrl" else self.isolated
            arr[b] = max(0, arr[b] - 1)
            if self.alive[b] and self.fenced[b] and self.ctrl_cut[b] == 0 and self.isolated[b] == 0:
                self.fenced[b] = False
                rows.append({"type": "BrokerUnfence", "broker": b})
        elif name == "slow_start":
            self.slow_list[b].append(kw["factor"])
            self.slow[b] = max(self.slow_list[b])
        elif name == "slow_end":
            if kw["factor"] in self.slow_list[b]:
                self.slow_list[b].remove(kw["factor"])
            self.slow[b] = max(self.slow_list[b], default=1.0)
        elif name == "reassign":
            # Kafka: replicas = target + removing (sorted), the leader stays while it is valid
            p, reps = kw["gp"], tuple(kw["replicas"])
            cur = [int(x) for x in self.rep[p] if x > 0]
            self.reassign_adding[p] = sorted(set(reps) - set(cur))
            self.reassign_target[p] = reps
            self._set_reps(p, list(reps) + sorted(set(cur) - set(reps)), t)
            rows.append({"type": "Reassign", **self._tp(p), "replicas": list(reps)})
            self.reassign_due[p] = None
            self.reassign_fi[p] = fi
            self._schedule_reassign_done(p, t)
        elif name == "reassign_settle":
            # completed (all target replicas caught up): removing replicas leave; a removed
            # leader is replaced by the first valid target replica (_settle)
            p, reps = kw["gp"], tuple(kw["replicas"])
            if self.reassign_target.get(p) == reps and self.reassign_due.get(p) == kw["token"]:
                del self.reassign_target[p], self.reassign_adding[p], self.reassign_due[p]
                self._set_reps(p, list(reps), t)
                self._keep_replicas(p)
                self._grace.append(p)
        elif name == "cancel":
            p = kw["gp"]
            if p in self.reassign_target:
                adding = self.reassign_adding.pop(p)
                del self.reassign_target[p], self.reassign_due[p]
                self._set_reps(p, [int(x) for x in self.rep[p] if x > 0 and x not in adding], t)
                self._keep_replicas(p)
            rows.append({"type": "Reassign", **self._tp(p), "replicas": None})
        elif name == "elect":
            et, gp = kw["election"], kw["gp"]
            ps = range(self.P) if gp is None else [gp]
            for p in ps:
                r = {"type": "ElectLeaders", **self._tp(p), "election_type": et}
                if kw.get("target") is not None:
                    r["target"] = kw["target"]
                rows.append(r)
            ps = np.arange(self.P) if gp is None else np.array([gp])
            if et == "PREFERRED":
                self._elect(ps, preferred=True)
            elif et == "DESIGNATED":
                tgt = kw["target"]
                if self.leader[gp] == 0 and self._acceptable()[tgt] and (self.rep[gp] == tgt).any():
                    if self.leader[gp] != tgt:
                        self.lke[gp] = 0
                    if not self.isr[gp, tgt] and not (not self.isr[gp].any() and self.elr[gp, tgt]):
                        self.isr[gp] = False   # unclean: the target alone
                        self.elr[gp] = False
                    self.isr[gp, tgt] = True
                    self.elr[gp, tgt] = False
                    self.leader[gp] = tgt
            else:  # UNCLEAN: only leaderless partitions
                self._elect(ps[self.leader[ps] == 0], unclean=True)
        elif name == "config":
            r = {"type": "AlterConfig", "topic": kw["topic"], "config": kw["config"]}
            if kw.get("partition") is not None:
                r["partition"] = kw["partition"]
            rows.append(r)
            ps = np.arange(self.P) if kw.get("partition") is None else np.array([self._gp(kw["topic"], kw["partition"])])
            ps = ps[self.topic_of[ps] == self.topics.index(kw["topic"])]
            for q in ps.tolist():
                self.min_isr_p[q], self.unclean_p[q] = self._cfg_vals(
                    kw["config"], int(self.min_isr_p[q]), bool(self.unclean_p[q]))
        elif name == "rebalance":
            # auto.leader.rebalance: the preferred replica takes over where it is a valid leader
            pref = self.rep[:, 0]
            ps = np.flatnonzero((self.leader != pref) & self._acceptable()[pref] & self.isr[np.arange(self.P), pref])
            self.lke[ps] = 0
            self.leader[ps] = pref[ps]
        for r in rows:
            r["ts_ms"] = t
        return rows

    def _schedule_reassign_done(self, p: int, t: int) -> None:
        """Schedule the completion of p's reassignment (in progress since t or earlier) if it can
        be foreseen now. The controller completes it as soon as every adding replica is in the
        ISR: with nothing to add at once; with immediate delivery, once every adding replica and
        the leader are up and reachable (re-checked after every action), about when each adding
        replica fetches for the second time (the first fetch copies the log, the second reports
        the new LEO); with explicit delivery ``reassign_settle_ms`` after the start. The estimate
        may be early: the new leader keeps fetching as a follower for a grace period
        (``_GRACE_MS``) so that the engine completes it anyway."""
        adding = self.reassign_adding[p]
        if not adding:
            done = t
        elif self.delivery != "immediate":
            done = t + self.settle_ms
        else:
            ok = self._up() & self._reachable()
            if not ok[adding].all() or not ok[self.leader[p]]:
                return
            slots = np.flatnonzero(np.isin(self.rep[p], adding))
            second = self.fetch_next[p, slots] + self.fetch_base[p, slots] * self.slow[adding]
            done = max(t, int(math.ceil(float(second.max())))) + 1
        self._n_token += 1
        self.reassign_due[p] = self._n_token
        self._schedule(done, self.reassign_fi[p], 1, "reassign_settle", gp=p,
                       replicas=self.reassign_target[p], token=self._n_token)

    def _schedule(self, t: int, fi: int, step: int, name: str, **kw) -> None:
        """Add an action during the run (same order rules as ``expand``)."""
        if t >= self.duration:
            return
        self._n_act += 1
        heapq.heappush(self._heap, (t, fi if fi >= 0 else 1 << 30, step, self._n_act, (t, fi, step, name, kw)))

    def _keep_replicas(self, p: int) -> None:
        """A replica set change (reassignment completed / cancelled): ISR and ELR keep only
        replicas; a leader outside the new replicas is replaced by ``_settle``."""
        mask = np.zeros(self.N + 1, bool)
        mask[self.rep[p][self.rep[p] > 0]] = True
        self.isr[p] &= mask
        self.elr[p] &= mask

    def _set_reps(self, p: int, reps: list[int], t: int) -> None:
        old = self.rep[p].copy()
        self.rep[p] = 0
        self.rep[p, : len(reps)] = reps
        changed = np.flatnonzero(self.rep[p] != old)
        if changed.size:  # a new occupant of a slot starts with a fresh phase
            self.fetch_next[p, changed] = t + self.frng.random(changed.size) * self.fetch_base[p, changed]

    # ---------------------------------------------------------------- driver
    def run(self) -> None:
        self.bootstrap()
        acts = self.expand()
        grid = list(range(self.window, self.duration, self.window)) + [self.duration]
        self._heap = [(a[0], a[1] if a[1] >= 0 else 1 << 30, a[2], i, a) for i, a in enumerate(acts)]
        heapq.heapify(self._heap)
        self._n_act = len(acts)
        dead: set = set()
        cur, gi = 0, 0
        while gi < len(grid) or self._heap:
            bnd = min(grid[gi] if gi < len(grid) else self.duration,
                      self._heap[0][0] if self._heap else self.duration)
            if bnd > cur:
                self.steady(cur, bnd)
                cur = bnd
            while gi < len(grid) and grid[gi] <= bnd:
                gi += 1
            rows: list[dict] = []
            while self._heap and self._heap[0][0] == bnd:
                t, fi, _step, name, kw = heapq.heappop(self._heap)[4]
                rows += self.apply(t, fi, name, kw, dead)
            self._emit_rows(rows)


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
    """
    t_start = time.perf_counter()
    if scenario is not None and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (one of: {', '.join(SCENARIOS)})")
    preset = dict(SCENARIOS[scenario].defaults) if scenario else {}

    def pick(name, value):
        if value is not None:
            return value
        if name in preset:
            return preset[name]
        return _DEFAULTS[name]

    brokers = int(pick("brokers", brokers))
    partitions = int(pick("partitions", partitions))
    rf = int(pick("rf", rf))
    racks = int(pick("racks", racks))
    acks_mix = pick("acks_mix", acks_mix)
    if min_isr is None:
        min_isr = preset.get("min_isr", 2 if rf >= 3 else None)
    duration_ms = parse_duration(duration_ms)
    topic_names = _resolve_topics(topics)

    if brokers < 1:
        raise ValueError(f"brokers must be >= 1 (got {brokers})")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1 (got {partitions})")
    if not 1 <= rf <= brokers:
        raise ValueError(f"rf must be between 1 and brokers={brokers} (got {rf})")
    if racks < 1:
        raise ValueError(f"racks must be >= 1 (got {racks})")
    if min_isr is not None and not 1 <= int(min_isr) <= rf:
        raise ValueError(f"min_isr must be between 1 and rf={rf} (got {min_isr})")
    if duration_ms <= 0:
        raise ValueError("duration must be positive")
    if fmt not in ("parquet", "json", "jsonl"):
        raise ValueError(f"fmt must be 'parquet' or 'json' (JSON-lines), got {fmt!r}")
    fmt = "parquet" if fmt == "parquet" else "json"
    if delivery not in ("immediate", "explicit"):
        raise ValueError(f"delivery must be 'immediate' or 'explicit', got {delivery!r}")
    if rows_per_file < 1:
        raise ValueError("rows_per_file must be >= 1")
    lo, hi = (float(x) for x in fetch_interval_ms)
    if not 0 < lo <= hi:
        raise ValueError(f"fetch_interval_ms must be (low, high) with 0 < low <= high, got {fetch_interval_ms!r}")
    if tick_interval_ms < 0 or metadata_interval_ms <= 0 or alter_partition_interval_ms <= 0:
        raise ValueError("tick_interval_ms must be >= 0 (0: no Tick rows); metadata/alter-partition intervals > 0")
    if window_ms < 100:
        raise ValueError("window_ms must be >= 100")
    for nm, v in (("produce_rate", produce_rate), ("consumer_rate", consumer_rate)):
        vals = v.values() if isinstance(v, Mapping) else [v]
        if any(float(x) < 0 for x in vals):
            raise ValueError(f"{nm} must be >= 0")

    ss = np.random.SeedSequence(int(seed))
    steady_ss, fault_ss, scen_ss, stale_ss = ss.spawn(4)
    fault_list: list[Fault] = []
    if scenario:
        ctx = _Ctx(brokers, racks, topic_names, partitions, duration_ms,
                   np.random.Generator(np.random.PCG64(scen_ss)), rf)
        fault_list += SCENARIOS[scenario].faults(ctx)
    fault_list += parse_faults(faults, brokers=brokers, racks=racks, topics=topic_names,
                               partitions=partitions, duration_ms=duration_ms)

    if isinstance(topic_config, Mapping) and topic_config and all(isinstance(v, Mapping) for v in topic_config.values()):
        tcfg = _per_topic({"default": None, **topic_config}, topic_names, "topic_config")
    else:
        tcfg = [dict(topic_config) if topic_config else None] * len(topic_names)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(p for p in out.iterdir() if p.name.startswith(("part-", "_tmp-part-", "_simulation")))
    if existing:
        if not overwrite:
            raise FileExistsError(f"{out} already holds a stream ({existing[0].name}, ...); "
                                  "use another directory or overwrite=True")
        for p in existing:
            p.unlink()

    # Bound memory: shrink the window so that one window holds ~_MAX_WINDOW_ROWS rows.
    n_parts = partitions * len(topic_names)
    fetch_rate = 1000.0 * (math.log(hi / lo) / (hi - lo) if hi > lo else 1.0 / lo)
    rates = [float(x) for x in (produce_rate.values() if isinstance(produce_rate, Mapping) else [produce_rate])]
    crates = [float(x) for x in (consumer_rate.values() if isinstance(consumer_rate, Mapping) else [consumer_rate])]
    per_part = (rf - 1) * fetch_rate * (1.0 + (0.6 if delivery == "explicit" else 0.0)) + max(rates) + max(crates)
    est_rows_per_s = max(1e-9, n_parts * per_part)
    window_ms = int(min(window_ms, max(100, (_MAX_WINDOW_ROWS / est_rows_per_s * 1000.0) // 100 * 100)))

    writer = _StreamWriter(out, fmt, int(rows_per_file))
    sim = _Sim(brokers=brokers, racks=racks, topics=topic_names, partitions=partitions, rf=rf,
               duration_ms=duration_ms, min_isr=min_isr, topic_config=tcfg,
               produce_rate=produce_rate, records_per_produce=records_per_produce, acks_mix=acks_mix,
               fetch_interval_ms=(lo, hi), tick_interval_ms=int(tick_interval_ms),
               consumer_rate=consumer_rate, delivery=delivery,
               metadata_interval_ms=int(metadata_interval_ms),
               alter_partition_interval_ms=int(alter_partition_interval_ms),
               session_timeout_ms=int(session_timeout_ms),
               leader_imbalance_interval_ms=int(leader_imbalance_interval_ms),
               reassign_settle_ms=int(reassign_settle_ms), window_ms=int(window_ms),
               log_loss_fraction=float(log_loss_fraction), faults=fault_list,
               steady_rng=np.random.Generator(np.random.PCG64(steady_ss)),
               fault_rng=np.random.Generator(np.random.PCG64(fault_ss)), writer=writer,
               stale_rng=np.random.Generator(np.random.PCG64(stale_ss)))
    sim.run()
    writer.close()

    def jsonable(v):
        if isinstance(v, Mapping):
            return {str(k): jsonable(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [jsonable(x) for x in v]
        return v

    params = {
        "brokers": brokers, "partitions": partitions, "rf": rf, "topics": topic_names,
        "racks": racks, "duration_ms": duration_ms, "seed": int(seed), "scenario": scenario,
        "faults": faults, "resolved_faults": [f.spec() for f in fault_list], "fmt": fmt,
        "rows_per_file": int(rows_per_file), "min_isr": min_isr, "topic_config": jsonable(topic_config),
        "produce_rate": jsonable(produce_rate), "records_per_produce": jsonable(records_per_produce),
        "acks_mix": jsonable(acks_mix), "fetch_interval_ms": [lo, hi],
        "tick_interval_ms": int(tick_interval_ms), "consumer_rate": jsonable(consumer_rate),
        "delivery": delivery, "metadata_interval_ms": int(metadata_interval_ms),
        "alter_partition_interval_ms": int(alter_partition_interval_ms),
        "session_timeout_ms": int(session_timeout_ms),
        "leader_imbalance_interval_ms": int(leader_imbalance_interval_ms),
        "reassign_settle_ms": int(reassign_settle_ms), "log_loss_fraction": float(log_loss_fraction),
        "window_ms": int(window_ms),
    }
    engine_config = {}
    if delivery == "explicit":
        engine_config = {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"}
    manifest = {
        "generator": "isrflow.simulate/1",
        # same parameters + same library versions -> same bytes
        "versions": {"numpy": np.__version__, "pyarrow": pa.__version__},
        "parameters": params,
        "engine_config": engine_config,
        "rows": writer.rows,
        "files": writer.files,
        "last_ts_ms": duration_ms,
        "counts": dict(sorted(sim.counts.items())),
        "skipped_faults": sim.skipped,
    }
    (out / "_simulation.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return {
        "out": str(out), "rows": writer.rows, "files": len(writer.files), "brokers": brokers,
        "partitions": partitions, "partitions_total": partitions * len(topic_names), "topics": topic_names,
        "rf": rf, "duration_ms": duration_ms, "seed": int(seed), "scenario": scenario,
        "faults": [f.spec() for f in fault_list], "skipped_faults": sim.skipped,
        "counts": dict(sorted(sim.counts.items())), "engine_config": engine_config,
        "stale_leader_produces": sim.n_stale,
        "elapsed_s": round(time.perf_counter() - t_start, 3),
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
    return p


def run_from_args(ns: argparse.Namespace) -> dict:
    summary = simulate(
        ns.out, brokers=ns.brokers, partitions=ns.partitions, rf=ns.rf, topics=ns.topics,
        racks=ns.racks, min_isr=ns.min_isr, duration_ms=ns.duration, seed=ns.seed, faults=ns.faults,
        scenario=ns.scenario, fmt=ns.fmt, rows_per_file=ns.rows_per_file, produce_rate=ns.produce_rate,
        consumer_rate=ns.consumer_rate, tick_interval_ms=ns.tick_interval, delivery=ns.delivery,
        overwrite=ns.overwrite)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    p = add_arguments(argparse.ArgumentParser(prog="isrflow simulate", description=__doc__.split("\n\n")[0]))
    ns = p.parse_args(argv)
    try:
        summary = run_from_args(ns)
    except (ValueError, FileExistsError) as e:
        print(f"isrflow simulate: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
