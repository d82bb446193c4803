"""protocol.controller.change_builder against Kafka 4.4.0's own PartitionChangeBuilder
(kafka-metadata-4.4.0, run by java/lab/ChangeBuilderOracle.java): for thousands of seeded random
registrations and controller decisions (ISR changes, reassignments, elections of every kind, unclean
shutdowns, ELR on and off, any min ISR, any acceptable leaders), isrflow's builder writes the same
PartitionChangeRecord, field for field and in the same order, or, like Kafka's, none.
"""
from __future__ import annotations

import json
import random
from types import SimpleNamespace as NS

import pytest

from protocol.config import EngineConfig
from protocol.controller.change_builder import PartitionChangeBuilder
from protocol.messages import RECOVERED, RECOVERING
from tests.kafka_oracle import ask, needs_kafka_java

pytestmark = needs_kafka_java
LRS = {RECOVERED: 0, RECOVERING: 1}


def _subset(rng: random.Random, xs: list, p: float) -> list:
    return [x for x in xs if rng.random() < p]


def _case(rng: random.Random) -> dict:
    """A registration a controller could hold, and one decision on it."""
    brokers = [1, 2, 3, 4, 5]
    replicas = rng.sample(brokers, rng.randint(1, 4))
    isr = _subset(rng, replicas, 0.6)
    out = [r for r in replicas if r not in isr]
    elr = _subset(rng, out, 0.5)
    lke = _subset(rng, [r for r in out if r not in elr], 0.4)
    leader = rng.choice(isr) if isr and rng.random() < 0.9 else -1
    adding: list = []
    removing: list = []
    if len(replicas) > 1 and rng.random() < 0.2:
        k = rng.randint(1, len(replicas) - 1)
        moving = rng.sample(replicas, k)
        adding = [r for r in moving if rng.random() < 0.5]
        removing = [r for r in moving if r not in adding]
    c = {"replicas": replicas, "isr": isr, "elr": elr, "lke": lke, "leader": leader,
         "lrs": 1 if rng.random() < 0.1 else 0, "adding": adding, "removing": removing,
         "min_isr": rng.randint(1, 3), "elr_on": rng.random() < 0.7,
         "acceptable": _subset(rng, brokers, 0.7),
         "election": rng.choice(["ONLINE", "ONLINE", "PREFERRED", "UNCLEAN"])}
    kind = rng.random()
    if kind < 0.5:                                   # an AlterPartition or a fencing: a new ISR
        c["target_isr"] = rng.sample(replicas, rng.randint(0, len(replicas)))
    elif kind < 0.65:                                # a reassignment
        target = rng.sample(brokers, rng.randint(1, 4))
        c["target_replicas"] = list(dict.fromkeys(target + [r for r in replicas if rng.random() < 0.3]))
        c["target_adding"] = [r for r in c["target_replicas"] if r not in replicas]
        c["target_removing"] = [r for r in replicas if r not in c["target_replicas"]]
        c["target_replicas"] = list(dict.fromkeys(c["target_replicas"] + c["target_removing"]))
    elif kind < 0.75:                                # an unclean shutdown among the ISR's leavers
        c["target_isr"] = _subset(rng, isr, 0.5)
        c["unclean_shutdown"] = [r for r in isr if r not in c["target_isr"] and rng.random() < 0.6]
    elif kind < 0.8:                                 # a recovered leader (AlterPartition's RECOVERED)
        c["target_lrs"] = 0
    return c


def _isrflow(c: dict) -> dict:
    """isrflow's record for case c (as the oracle prints Kafka's)."""
    conf = NS(effective_min_isr=lambda n, m=c["min_isr"]: m, unclean=False, strategy="Balanced")
    p = NS(replicas=list(c["replicas"]), isr=list(c["isr"]), elr=list(c["elr"]), lke=list(c["lke"]),
           leader=c["leader"], lrs=RECOVERING if c["lrs"] else RECOVERED, adding=list(c["adding"]),
           removing=list(c["removing"]), conf=conf)
    cfg = EngineConfig({"eligible.leader.replicas.enable": str(c["elr_on"]).lower()})
    acc = set(c["acceptable"]).__contains__
    kw = {k: c[k] for k in ("target_isr", "target_replicas", "target_adding", "target_removing") if k in c}
    if "unclean_shutdown" in c:
        kw["unclean_shutdown"] = c["unclean_shutdown"]
    if "target_lrs" in c:
        kw["target_lrs"] = RECOVERING if c["target_lrs"] else RECOVERED
    rec, _ = PartitionChangeBuilder(p, cfg, election=c["election"], acc=acc,
                                    longest_log=lambda reps, a: None, **kw).build()
    if rec is None:
        return {}
    return {k: (LRS[v] if k == "lrs" else v) for k, v in rec.items()}


@pytest.mark.parametrize("seed", range(4))
def test_every_record_is_kafkas(seed):
    rng = random.Random(seed)
    cases = [_case(rng) for _ in range(1500)]
    kafka = [json.loads(x) for x in ask("ChangeBuilderOracle", [json.dumps(c) for c in cases])]
    assert len(kafka) == len(cases)
    wrong = []
    for c, want in zip(cases, kafka):
        assert "error" not in want, (c, want)
        got = _isrflow(c)
        if got != want:
            wrong.append(f"{json.dumps(c)}\n  isrflow {got}\n  Kafka   {want}")
    assert not wrong, f"{len(wrong)} of {len(cases)} differ:\n" + "\n".join(wrong[:8])
    assert sum(1 for k in kafka if k) > len(cases) // 2          # most decisions write a record
