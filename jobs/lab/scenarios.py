"""Named fault scenarios against a real Kafka 4.4.0 cluster (jobs/lab/cluster.py).

Each scenario creates topics, produces with acks=all while the driver records every acknowledged
record, injects one family of faults, stops the cluster and leaves a recording in OUT:

    OUT/metadata/      the controller's __cluster_metadata-0: *.log segments, *.checkpoint
                       snapshots, quorum-state (not the preallocated .index/.timeindex)
    OUT/acks.jsonl     one line per acknowledged record: topic, partition, offset, ack_ms, send_ms, value
    OUT/manifest.json  scenario, Kafka version, cluster id, broker ids, ports, effective configs,
                       finalized features, producer counts, timeline of faults (wall-clock ms)
                       with describeTopics snapshots (leader, replicas, isr, elr, last_known_elr)

    run_scenario("sigkill-restart", "/tmp/rec")        # or: isrflow lab sigkill-restart --out /tmp/rec
"""
from __future__ import annotations

import json
import random
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from jobs.lab.records import summary as records_summary
from jobs.lab.cluster import CONTROLLER_ID, KAFKA_VERSION, Driver, DriverError, KafkaCluster, now_ms

# the default topic: RF 3, min ISR 2, one partition led by each broker (preferred leader first)
T = "t"
T_ASSIGN = "1,2,3/2,3,1/3,1,2"
RATE = 10           # produce rounds per second (one record per topic per round)


class Ctx:
    """What a scenario function gets: the cluster, the driver and timeline helpers."""

    def __init__(self, cluster: KafkaCluster, driver: Driver, seed: int = 0):
        self.c, self.d = cluster, driver
        self.seed = seed            # the chaos scenario's schedule
        self.topics: list[dict] = []

    def event(self, event: str, **detail) -> dict:
        return self.c.event(event, **detail)

    def call(self, cmd: str, **kw) -> dict:
        return self.d.call(cmd, **kw)

    def create(self, topic: str, partitions: int, rf: int, assign: str | None = None, **configs) -> None:
        cfg = " ".join(f"{k.replace('_', '.')}={v}" for k, v in configs.items())
        a = f" assign={assign}" if assign else ""
        self.call(f"create {topic} {partitions} {rf}{a} {cfg}".strip())
        self.wait(f"{topic} visible", lambda: bool(self.describe(topic, record=False)), 20)
        self.topics.append({"topic": topic, "partitions": partitions, "rf": rf, "assign": assign,
                            "configs": {k.replace('_', '.'): str(v) for k, v in configs.items()}})
        self.event("create_topic", **self.topics[-1])

    def produce(self, topics: str = T, rate: int = RATE) -> None:
        self.call(f"produce-start {rate} {topics}")
        self.event("produce_start", topics=topics.split(","), rate_per_s=rate)

    def produce_stop(self) -> dict:
        r = self.call("produce-stop", timeout=60)
        r.pop("ok", None)
        self.event("produce_stop", **r)
        return r

    def describe(self, topics: str = T, record: bool = True, label: str | None = None) -> list[dict]:
        r = self.call(f"describe {topics}")["partitions"]
        if record:
            self.event("describe", label=label, partitions=r)
        return r

    def brokers(self) -> list[int]:
        return self.call("brokers")["brokers"]

    def signal(self, broker: int, sig: int, **kw) -> None:
        self.c.kill(broker, sig, **kw)

    def start(self, broker: int, timeout: float = 60) -> None:
        self.c.start(broker, timeout=timeout)

    def elect(self, kind: str, target: str) -> list[dict]:
        r = self.call(f"elect {kind} {target}")["results"]
        self.event("elect", election=kind, target=target, results=r)
        return r

    def config(self, kind: str, name: str, **kv) -> None:
        pairs = {k.replace('_', '.'): str(v) for k, v in kv.items()}
        self.call(f"config {kind} {name or '-'} " + " ".join(f"{k}={v}" for k, v in pairs.items()))
        self.event("alter_config", resource_type=kind, resource=name, configs=pairs)

    def refused(self, cmd: str, request: dict) -> dict:
        """Send a request the controller must refuse and record its answer: the event `refused` holds
        the request as an isrflow event (`request`) and Kafka's error code name and message, which
        isrflow's `admin` row for the same request must equal (tests/test_lab.py). An election's
        answer is per partition (the first); any other refusal comes back as the call's error."""
        r = self.call(cmd, check=False)
        if r.get("ok") and "results" in r:
            r = r["results"][0]
        elif r.get("ok"):
            r = {"error_code": "NONE", "message": None}
        return self.event("refused", command=cmd, request=request, error=r["error_code"], message=r["message"])

    def sleep(self, s: float) -> None:
        time.sleep(s)

    def wait(self, what: str, pred: Callable[[], bool], timeout: float = 30, every: float = 0.3,
             required: bool = True) -> bool:
        """Poll `pred` until true (True) or `timeout`: then raise, or return False when not
        `required` (the real cluster decided otherwise; the timeline says so)."""
        t0 = time.time()
        while True:
            try:
                if pred():
                    self.event("waited", what=what, seconds=round(time.time() - t0, 2))
                    return True
            except DriverError:
                pass
            if time.time() - t0 > timeout:
                self.event("wait_timeout", what=what, seconds=timeout)
                if not required:
                    return False
                raise TimeoutError(f"{what}: not within {timeout}s")
            time.sleep(every)

    def wait_fenced(self, broker: int, since_pos: int, timeout: float = 20, required: bool = True) -> None:
        """Session-timeout fencing, read from the controller's log (works with no broker up)."""
        pat = re.compile(rf"Fencing broker {broker} at epoch \d+ because its session has timed out")
        log = self.c.controller.log

        def fenced() -> bool:
            with open(log, "rb") as f:
                f.seek(since_pos)
                return bool(pat.search(f.read().decode(errors="replace")))
        self.wait(f"broker {broker} fenced", fenced, timeout, required=required)

    def controller_log_pos(self) -> int:
        return self.c._log_size(self.c.controller)

    def kill_and_fence(self, broker: int) -> None:
        pos = self.controller_log_pos()
        self.signal(broker, signal.SIGKILL)
        self.wait_fenced(broker, pos)

    def wait_out_of_isrs(self, broker: int, topics: str = T, timeout: float = 15) -> None:
        """After the controller fenced `broker`, wait until the metadata the admin client reads shows
        it out of every ISR: a broker's metadata cache trails the controller's log, by seconds
        under load (not required: if it stays in, the describe that follows records that)."""
        self.wait(f"{broker} out of every ISR",
                  lambda: all(broker not in p["isr"] for p in self.describe(topics, record=False)),
                  timeout, required=False)

    def isr_full(self, topics: str = T) -> bool:
        return all(sorted(p["isr"]) == sorted(p["replicas"]) and p["leader"] >= 0
                   for p in self.describe(topics, record=False))

    def wait_isr_full(self, topics: str = T, timeout: float = 40) -> None:
        self.wait(f"ISR complete ({topics})", lambda: self.isr_full(topics), timeout)


def _std_topic(x: Ctx) -> None:
    x.create(T, 3, 3, assign=T_ASSIGN, min_insync_replicas=2)


# Requests the controller refuses on the standard topic as _std_topic leaves it (every leader the
# preferred one, no reassignment, brokers 1-3): the admin client's command and the same request as
# an isrflow event. Nothing of them reaches the metadata log; the manifest keeps Kafka's answers.
REFUSALS = [
    ("create bad!name 1 3", {"type": "CreatePartition", "topic": "bad!name", "partition": 0, "replicas": [1, 2, 3]}),
    ("create .. 1 3", {"type": "CreatePartition", "topic": "..", "partition": 0, "replicas": [1, 2, 3]}),
    (f"create {'n' * 250} 1 3", {"type": "CreatePartition", "topic": "n" * 250, "partition": 0, "replicas": [1, 2, 3]}),
    ("config topic absent min.insync.replicas=2",
     {"type": "AlterConfig", "topic": "absent", "config": {"min.insync.replicas": "2"}}),
    ("config topic absent foo.bar=1",         # the configs are checked before the topic's existence
     {"type": "AlterConfig", "topic": "absent", "config": {"foo.bar": "1"}}),
    ("config topic t min.insync.replicas=0",
     {"type": "AlterConfig", "topic": T, "config": {"min.insync.replicas": "0"}}),
    ("config topic t unclean.leader.election.enable=maybe",
     {"type": "AlterConfig", "topic": T, "config": {"unclean.leader.election.enable": "maybe"}}),
    ("config topic t foo.bar=1", {"type": "AlterConfig", "topic": T, "config": {"foo.bar": "1"}}),
    ("cancel t 0", {"type": "Reassign", "topic": T, "partition": 0, "replicas": None}),
    ("reassign t 0 1,2,9", {"type": "Reassign", "topic": T, "partition": 0, "replicas": [1, 2, 9]}),
    ("reassign t 0 1,1,2", {"type": "Reassign", "topic": T, "partition": 0, "replicas": [1, 1, 2]}),
    ("reassign t 7 1,2,3", {"type": "Reassign", "topic": T, "partition": 7, "replicas": [1, 2, 3]}),
    ("reassign absent 0 1,2,3", {"type": "Reassign", "topic": "absent", "partition": 0, "replicas": [1, 2, 3]}),
    ("elect PREFERRED t:9", {"type": "ElectLeaders", "topic": T, "partition": 9, "election_type": "PREFERRED"}),
    ("elect PREFERRED absent:0",
     {"type": "ElectLeaders", "topic": "absent", "partition": 0, "election_type": "PREFERRED"}),
    ("elect PREFERRED t:0", {"type": "ElectLeaders", "topic": T, "partition": 0, "election_type": "PREFERRED"}),
    ("elect UNCLEAN t:1", {"type": "ElectLeaders", "topic": T, "partition": 1, "election_type": "UNCLEAN"}),
]


def _refusals(x: Ctx) -> None:
    for cmd, request in REFUSALS:
        x.refused(cmd, request)


# -- the scenarios --------------------------------------------------------------------------

def sigkill_restart(x: Ctx) -> None:
    """SIGKILL broker 2 (unclean shutdown), wait for the controller to fence it, restart it and
    wait until it is back in every ISR. First the refusals (REFUSALS), before anything moves."""
    _std_topic(x)
    x.wait_isr_full()
    _refusals(x)
    x.produce()
    x.sleep(3)
    x.kill_and_fence(2)
    x.wait_out_of_isrs(2)
    x.describe(label="after fence of 2")
    x.sleep(2)
    x.start(2)
    x.wait_isr_full()
    x.describe(label="after restart of 2")
    x.sleep(2)
    # the controller writes its snapshots in the background (every ~4 KB of records, DEFAULTS): on a
    # loaded machine the first one beyond the bootstrap snapshot can come after the steps above
    x.wait("a metadata snapshot beyond the bootstrap one",
           lambda: len(list(x.c.metadata_dir.glob("*.checkpoint"))) >= 2, 30, required=False)


def sigterm_restart(x: Ctx) -> None:
    """SIGTERM broker 3 (controlled shutdown: leaderships move, ISR shrink, fence), restart it
    (clean) and wait until it is back in every ISR."""
    _std_topic(x)
    x.produce()
    x.sleep(3)
    x.signal(3, signal.SIGTERM, wait=True)
    x.sleep(1)
    x.describe(label="after controlled shutdown of 3")
    x.sleep(1)
    x.start(3)
    x.wait_isr_full()
    x.describe(label="after restart of 3")
    x.sleep(2)


def sigstop_isolate(x: Ctx) -> None:
    """SIGSTOP broker 1 (alive but silent: cut off from the controller and its followers) until
    the controller fences it by session timeout, then SIGCONT: it resumes with the same broker
    epoch, is unfenced and catches up."""
    _std_topic(x)
    x.produce()
    x.sleep(3)
    pos = x.controller_log_pos()
    x.signal(1, signal.SIGSTOP)
    x.wait_fenced(1, pos)
    x.sleep(2)
    x.wait_out_of_isrs(1)
    x.describe(label="broker 1 stopped and fenced")
    x.signal(1, signal.SIGCONT)
    x.wait("broker 1 unfenced", lambda: 1 in x.brokers(), 30)
    x.wait_isr_full()
    x.describe(label="after SIGCONT of 1")
    x.sleep(2)


def reassignment(x: Ctx) -> None:
    """Topic r (RF 2): reassign r-0 [1,2] -> [2,3] and let it complete; then with broker 3 shut
    down, reassign r-1 [2,1] -> [2,3] (it cannot complete), list it, cancel it; restart 3."""
    _std_topic(x)
    x.create("r", 2, 2, assign="1,2/2,1", min_insync_replicas=1)
    x.produce(f"{T},r")
    x.sleep(3)
    x.call("reassign r 0 2,3")
    x.event("reassign", topic="r", partition=0, target=[2, 3])

    def done() -> bool:
        p = x.describe("r", record=False)[0]
        return p["replicas"] == [2, 3] and sorted(p["isr"]) == [2, 3]
    x.wait("r-0 reassignment complete", done, 40)
    x.describe(f"{T},r", label="r-0 moved to [2,3]")
    x.sleep(1)
    x.signal(3, signal.SIGTERM, wait=True)
    x.wait("broker 3 fenced", lambda: 3 not in x.brokers(), 20)
    x.call("reassign r 1 2,3")
    x.event("reassign", topic="r", partition=1, target=[2, 3])
    x.sleep(1)
    x.event("list_reassignments", reassignments=x.call("reassignments")["reassignments"])
    x.describe(f"{T},r", label="r-1 reassignment pending")
    x.sleep(2)
    x.call("cancel r 1")
    x.event("cancel_reassignment", topic="r", partition=1)
    x.sleep(1)
    x.describe(f"{T},r", label="r-1 reassignment cancelled")
    x.start(3)
    x.wait_isr_full(f"{T},r")
    x.describe(f"{T},r", label="after restart of 3")
    x.sleep(2)


def elections(x: Ctx) -> None:
    """Preferred election after a controlled restart of broker 1 (t-0 goes back to 1). Then the
    last-replica-standing case: SIGKILL 2 (ISR [1,3]), SIGTERM 3 (clean: ISR [1], ELR [3]),
    SIGKILL 1 (leaderless; ELR [1,3], lastKnownElr [1]); restart 2 (in no ISR/ELR: no election)
    and electLeaders(UNCLEAN) for t-0 only; restart 1 (unclean shutdown: removed from the ELRs);
    restart 3 (clean shutdown, still in the ELR: elected leader of t-1 and t-2 from the ELR).
    Anything still leaderless after that gets electLeaders(UNCLEAN)."""
    _std_topic(x)
    x.produce()
    x.sleep(3)
    # preferred
    x.signal(1, signal.SIGTERM, wait=True)
    x.sleep(1)
    x.start(1)
    x.wait_isr_full()
    x.describe(label="1 back, t-0 led by another broker")
    x.elect("PREFERRED", T)
    x.wait("t-0 led by 1", lambda: x.describe(record=False)[0]["leader"] == 1, 15, required=False)
    x.describe(label="after preferred election")
    x.sleep(2)
    # last replica standing
    x.kill_and_fence(2)
    x.signal(3, signal.SIGTERM, wait=True)
    x.wait_out_of_isrs(3)
    x.describe(label="ISR [1], ELR [3]")
    x.kill_and_fence(1)
    x.start(2)
    x.sleep(1)
    x.describe(label="2 back; t leaderless")
    x.elect("UNCLEAN", f"{T}:0")
    x.wait("t-0 led by 2", lambda: x.describe(record=False)[0]["leader"] == 2, 15, required=False)
    x.describe(label="after unclean election of t-0")
    x.start(1)
    x.sleep(2)
    x.describe(label="1 back (unclean shutdown)")
    x.start(3)
    led = x.wait("every partition led", lambda: all(p["leader"] >= 0 for p in x.describe(record=False)), 15,
                 required=False)
    x.describe(label="3 back (clean shutdown, ELR member)")
    if not led:
        left = [p["partition"] for p in x.describe(record=False) if p["leader"] < 0]
        x.elect("UNCLEAN", f"{T}:" + ",".join(map(str, left)))
    x.wait_isr_full()
    x.describe(label="all back")
    x.sleep(2)


def config_changes(x: Ctx) -> None:
    """min.insync.replicas 2 -> 3 with a 2-member ISR (acks=all produce fails), back to 1; then
    every broker killed, a non-ISR/non-ELR broker restarted and the topic's
    unclean.leader.election.enable set to true: the controller's periodic check
    (unclean.leader.election.interval.ms) elects it; finally configs reset and all restarted."""
    _std_topic(x)
    x.produce()
    x.sleep(3)
    x.kill_and_fence(3)
    x.describe(label="ISR [1,2]")
    x.config("topic", T, min_insync_replicas=3)
    x.sleep(3)
    x.event("producer_counts", **{k: v for k, v in x.call("counts").items() if k != "ok"})
    x.describe(label="min ISR 3")
    x.config("topic", T, min_insync_replicas=1)
    x.sleep(2)
    x.kill_and_fence(2)
    x.kill_and_fence(1)
    x.start(3)
    x.sleep(1)
    x.describe(label="3 back, t leaderless")
    x.config("topic", T, unclean_leader_election_enable="true")
    x.wait("t led by 3", lambda: all(p["leader"] == 3 for p in x.describe(record=False)), 20,
           required=False)
    x.describe(label="after unclean elections by config")
    x.config("topic", T, unclean_leader_election_enable="false", min_insync_replicas=2)
    x.start(1)
    x.start(2)
    x.wait_isr_full()
    x.describe(label="all back")
    x.sleep(2)


def controller_restart(x: Ctx) -> None:
    """SIGKILL the (single) controller for ~5 s while the producer keeps going, restart it (a new
    raft epoch: LeaderChange, REGISTER_CONTROLLER_RECORD), then create topic t2 through it and
    SIGKILL broker 2 so a fence happens under the new controller epoch; restart 2."""
    _std_topic(x)
    x.produce()
    x.sleep(3)
    pos = x.controller_log_pos()
    x.signal(CONTROLLER_ID, signal.SIGKILL)
    x.sleep(5)
    x.event("producer_counts", **{k: v for k, v in x.call("counts").items() if k != "ok"})
    x.c.start(CONTROLLER_ID)

    x.wait("controller active again", lambda: _active_since(x, pos), 40)

    def created() -> bool:
        r = x.call(f"create t2 1 3 assign=2,3,1 min.insync.replicas=2", check=False)
        return r.get("ok") or "TopicExists" in str(r.get("error"))
    x.wait("t2 created", created, 40, every=1.0)
    x.event("create_topic", topic="t2", partitions=1, rf=3, assign="2,3,1",
            configs={"min.insync.replicas": "2"})
    x.wait("t2 visible", lambda: bool(x.describe("t2", record=False)), 20)
    x.describe(f"{T},t2", label="after controller restart")
    x.kill_and_fence(2)
    x.describe(f"{T},t2", label="2 fenced by the new controller epoch")
    x.start(2)
    x.wait_isr_full(f"{T},t2")
    x.describe(f"{T},t2", label="all back")
    x.sleep(2)


# chaos: the steps of one schedule, and the faults a step may choose
CHAOS_STEPS = 10
CHAOS_FAULTS = ("SIGKILL", "SIGTERM", "SIGSTOP")


def chaos(x: Ctx) -> None:
    """Seeded random faults (`--seed N`): 10 steps, each with the acks=all producer running: a
    SIGKILL (waiting for the fence), a SIGTERM (controlled shutdown) or a SIGSTOP of a few seconds
    of a running broker, a restart of a stopped one, a preferred or unclean election of every
    partition, or a min.insync.replicas change (1-3); then every broker restarted and the config
    reset. The seed fixes the schedule (each step's choice depends on the seed and the schedule's
    own earlier steps only); the real cluster's timing is its own, so a recording is one run of it."""
    _chaos(x, admin=False)


def chaos_admin(x: Ctx) -> None:
    """`chaos` with the controller's other inputs among the steps: topic r (RF 2, min ISR 1) is
    reassigned to a random pair of brokers or its reassignment cancelled, topic t's
    unclean.leader.election.enable switched, and the controller SIGKILLed for 3-6 s and restarted."""
    _chaos(x, admin=True)


def _chaos(x: Ctx, admin: bool) -> None:
    rng = random.Random(x.seed)
    _std_topic(x)
    topics = T
    if admin:
        x.create("r", 2, 2, assign="1,2/2,1", min_insync_replicas=1)
        topics = f"{T},r"
    x.produce(topics)
    x.sleep(3)
    down: set[int] = set()
    for step in range(CHAOS_STEPS):
        running = [b for b in (1, 2, 3) if b not in down]
        acts = (["fault"] * 3 if running else []) + (["restart"] * 2 if down else [])
        if running:
            acts += ["elect-preferred", "elect-unclean", "min-isr"]
            if admin:
                acts += ["reassign", "reassign", "cancel", "unclean-config"]
        if admin:
            acts += ["controller"]
        act = rng.choice(acts)
        x.event("chaos_step", step=step, action=act, seed=x.seed)
        _chaos_step(x, rng, act, running, down)
        x.sleep(rng.uniform(1, 4))
        if len(down) < 3:               # with every broker down nobody answers (the admin call waits 60 s)
            try:
                x.describe(topics, label=f"after step {step} ({act})")
            except DriverError as e:
                x.event("describe_failed", label=f"after step {step} ({act})", error=str(e)[:200])
    for b in sorted(down):
        x.start(b)
    x.config("topic", T, min_insync_replicas=2, **({"unclean_leader_election_enable": "false"} if admin else {}))
    led = x.wait("every partition led", lambda: all(p["leader"] >= 0 for p in x.describe(record=False)), 20,
                 required=False)
    if not led:
        left = [p["partition"] for p in x.describe(record=False) if p["leader"] < 0]
        x.elect("UNCLEAN", f"{T}:" + ",".join(map(str, left)))
    x.wait("ISR complete", lambda: x.isr_full(), 40, required=False)
    x.describe(topics, label="all back")
    x.sleep(2)


def _chaos_step(x: Ctx, rng: random.Random, act: str, running: list[int], down: set[int]) -> None:
    """One step of a chaos schedule (`down`: the brokers it stopped, updated here)."""
    if act == "fault":
        b, sig = rng.choice(running), rng.choice(CHAOS_FAULTS)
        if sig == "SIGKILL":
            # not required: a broker still fenced after an earlier SIGSTOP gets no second fence
            pos = x.controller_log_pos()
            x.signal(b, signal.SIGKILL)
            x.wait_fenced(b, pos, required=False)
            down.add(b)
        elif sig == "SIGTERM":
            x.signal(b, signal.SIGTERM, wait=True)
            down.add(b)
        else:
            x.signal(b, signal.SIGSTOP)
            x.sleep(rng.uniform(2, 9))          # past the 6 s session timeout or not
            x.signal(b, signal.SIGCONT)
    elif act == "restart":
        b = rng.choice(sorted(down))
        x.start(b)
        down.discard(b)
    elif act == "controller":
        pos = x.controller_log_pos()
        x.signal(CONTROLLER_ID, signal.SIGKILL)
        x.sleep(rng.uniform(3, 6))
        x.c.start(CONTROLLER_ID)
        x.wait("controller active again", lambda: _active_since(x, pos), 40, required=False)
    else:
        try:                            # the admin client may reach no broker that answers in time
            if act == "min-isr":
                x.config("topic", T, min_insync_replicas=rng.randint(1, 3))
            elif act == "unclean-config":
                x.config("topic", T, unclean_leader_election_enable=rng.choice(["true", "false"]))
            elif act == "reassign":
                part, target = rng.randint(0, 1), rng.sample([1, 2, 3], 2)
                x.call(f"reassign r {part} {target[0]},{target[1]}")
                x.event("reassign", topic="r", partition=part, target=target)
            elif act == "cancel":
                part = rng.randint(0, 1)
                x.call(f"cancel r {part}")
                x.event("cancel_reassignment", topic="r", partition=part)
            else:
                x.elect("PREFERRED" if act == "elect-preferred" else "UNCLEAN", f"{T}:0,1,2")
        except DriverError as e:
            x.event("chaos_step_failed", action=act, error=str(e)[:200])


def _active_since(x: Ctx, pos: int) -> bool:
    """The controller logged that it became the active controller after log position `pos`."""
    with open(x.c.controller.log, "rb") as f:
        f.seek(pos)
        return b"Becoming the active controller" in f.read()


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    fn: Callable[[Ctx], None]
    brokers: int = 3
    timeout_s: int = 150

    @property
    def doc(self) -> str:
        return " ".join((self.fn.__doc__ or "").split())


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("sigkill-restart", "SIGKILL + unclean restart", sigkill_restart),
    Scenario("sigterm-restart", "SIGTERM (controlled shutdown) + clean restart", sigterm_restart),
    Scenario("sigstop-isolate", "broker cut off from the controller (SIGSTOP/SIGCONT)", sigstop_isolate),
    Scenario("reassignment", "reassignment and its cancellation", reassignment),
    Scenario("elections", "preferred and unclean elections, last replica standing (ELR)", elections),
    Scenario("config-changes", "min.insync.replicas and unclean.leader.election.enable changes", config_changes),
    Scenario("controller-restart", "controller SIGKILL + restart (new raft epoch)", controller_restart),
    Scenario("chaos", "seeded random faults, elections and min ISR changes", chaos, timeout_s=240),
    Scenario("chaos-admin", "chaos with reassignments, unclean-election configs and controller restarts",
             chaos_admin, timeout_s=300),
]}


def run_scenario(name: str, out, workdir=None, keep_workdir: bool = False,
                 overrides: dict | None = None, log=print, seed: int = 0) -> dict:
    """Run one scenario end to end and write the recording into `out` (replaced if present).
    Returns the manifest."""
    sc = SCENARIOS[name]
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise FileExistsError(f"--out {out} is not empty and not a lab recording; not replacing it")
    tmp = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"isrflow-lab-{name}-"))
    if tmp.exists() and any(tmp.iterdir()):
        if not (tmp / "cluster").is_dir():       # only ever wipe a previous lab workdir
            raise FileExistsError(f"workdir {tmp} is not empty and not a lab workdir")
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    acks = tmp / "acks.jsonl"
    t0 = time.time()
    features: dict = {}
    counts: dict = {}
    error = None
    cluster = KafkaCluster(tmp / "cluster", brokers=sc.brokers, overrides=overrides)
    try:
        with cluster as c:
            log(f"[lab] {name}: cluster ready in {time.time() - t0:.1f}s ({c.bootstrap_servers})")
            d = c.driver(acks)
            f = d.call("features")
            features = {k: f[k] for k in ("finalized", "supported", "finalized_epoch")}
            c.event("features", finalized=features["finalized"])
            x = Ctx(c, d, seed)
            try:
                sc.fn(x)
            finally:
                try:
                    counts = x.produce_stop()
                except (DriverError, OSError):
                    pass
            log(f"[lab] {name}: faults done at {time.time() - t0:.1f}s; stopping")
    except BaseException as e:          # still collect what there is, then re-raise
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        cluster.stop()
        if cluster.controller is not None and cluster.metadata_dir.is_dir():
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            files = cluster.collect_metadata(out / "metadata")
            if acks.exists():
                shutil.copy2(acks, out / "acks.jsonl")
            else:
                (out / "acks.jsonl").write_text("")
            n_acks = sum(1 for _ in open(out / "acks.jsonl"))
            manifest = {
                "scenario": name, "family": sc.family, "description": sc.doc, "seed": seed,
                "kafka_version": KAFKA_VERSION, "cluster_id": cluster.cluster_id,
                "controller_id": CONTROLLER_ID, "broker_ids": list(cluster.brokers),
                "ports": cluster.ports, "bootstrap_servers": cluster.bootstrap_servers,
                "config": cluster.config(), "features": features,
                "eligible_leader_replicas_version": features.get("finalized", {}).get(
                    "eligible.leader.replicas.version"),
                "producer": {"acks": "all", "rate_per_s_per_topic": RATE, **counts,
                             "acked_lines": n_acks},
                "started_ms": cluster.timeline[0]["ms"] if cluster.timeline else None,
                "ended_ms": now_ms(), "duration_s": round(time.time() - t0, 1),
                "error": error,
                "files": {fn: (out / "metadata" / fn).stat().st_size for fn in files},
                "records": records_summary(out / "metadata"),
                "timeline": cluster.timeline,
            }
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
            log(f"[lab] {name}: recording in {out} ({len(files)} files, {n_acks} acks, "
                f"{manifest['duration_s']}s)")
        if not keep_workdir and not workdir:
            shutil.rmtree(tmp, ignore_errors=True)
    return manifest
