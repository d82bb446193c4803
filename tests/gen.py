"""Random event schedules for property and differential tests.

The generator plays the environment only -- broker processes, the network, clients, the
controller's heartbeat view -- with a consistent life cycle per broker (running, fenced while
running, crashed, restarted). The engine computes the protocol. `max_unclean` bounds the
unclean (possibly lossy) crashes: with min.insync.replicas = m, KIP-966 tolerates m - 1.
"""
from __future__ import annotations

import random


def random_schedule(seed: int, n_events: int = 300, *, brokers: int = 4, partitions: int = 2, rf: int = 3,
                    topics: int = 1, explicit_ap: bool = False, explicit_md: bool = False,
                    max_unclean: int = 1, loss: bool = True, admin: bool = True,
                    start_ts: int = 0, creations: bool = False) -> list[dict]:
    """creations: later CreatePartition rows add partitions to the topics, of 1 to rf + 1 replicas,
    so that some match their topic's replication factor and some do not (off: the streams of
    earlier seeds stay as they were)."""
    rnd = random.Random(seed)
    ev: list[dict] = []
    ts = start_ts
    seq = 0

    def add(**kw):
        nonlocal seq
        seq += 1
        row = {"seq": seq, "ts_ms": ts}
        row.update(kw)
        ev.append(row)

    ids = list(range(1, brokers + 1))
    epoch = {}
    counter = 100
    state = {}          # up | isolated | down | fenced_down | registered (fenced, running)
    clean_file = {}     # broker -> epoch in its clean-shutdown file, or -1
    for b in ids:
        counter += 1
        epoch[b] = counter
        add(type="BrokerRegister", broker=b, broker_epoch=counter, previous_broker_epoch=-1)
    for b in ids:
        add(type="BrokerUnfence", broker=b)
        state[b] = "up"
    parts = []
    for t in range(topics):
        for p in range(partitions):
            reps = rnd.sample(ids, min(rf, brokers))
            parts.append((f"t{t}", p, reps))
            add(type="CreatePartition", topic=f"t{t}", partition=p, replicas=reps)
    produced = {(t, p): 0 for t, p, _ in parts}
    unclean_left = max_unclean

    for _ in range(n_events):
        ts += rnd.choice((0, 5, 20, 50, 100, 250, 1000, 3000))
        r = rnd.random()
        t, p, reps = rnd.choice(parts)
        if r < 0.30:
            add(type="Fetch", topic=t, partition=p, broker=rnd.choice(reps))
        elif r < 0.48:
            n = rnd.randint(1, 5)
            produced[(t, p)] += n
            add(type="Produce", topic=t, partition=p, broker=rnd.choice(reps), records=n,
                acks=rnd.choice((-1, -1, -1, 1, 0)))
        elif r < 0.53:
            add(type="Tick", broker=rnd.choice(ids + [None]))
        elif r < 0.56:
            add(type="ListOffsets", topic=t, partition=p, broker=rnd.choice(reps),
                offset_spec=rnd.choice(("LATEST", "EARLIEST")))
        elif r < 0.59:
            add(type="ConsumerFetch", topic=t, partition=p, broker=rnd.choice(reps),
                fetch_offset=rnd.randint(0, max(0, produced[(t, p)])))
        elif r < 0.66 and explicit_ap:
            add(type=rnd.choice(("AlterPartitionArrive", "AlterPartitionResponse")), topic=t, partition=p)
        elif r < 0.72 and explicit_md:
            add(type="MetadataSync", broker=rnd.choice(ids))
        elif r < 0.80:
            # broker life cycle
            b = rnd.choice(ids)
            s = state[b]
            live = [x for x in ids if state[x] == "up"]
            if s == "up" and len(live) > 1:
                k = rnd.random()
                if k < 0.3:
                    add(type="BrokerFence", broker=b)            # network partition from the controller
                    state[b] = "isolated"
                elif k < 0.6:
                    add(type="BrokerControlledShutdown", broker=b)
                    add(type="BrokerCrash", broker=b, clean=True)
                    add(type="BrokerFence", broker=b)
                    clean_file[b] = epoch[b]
                    state[b] = "fenced_down"
                elif unclean_left > 0:
                    unclean_left -= 1
                    add(type="BrokerCrash", broker=b, clean=False)
                    if loss:
                        for (tt, pp, rr) in parts:
                            if b in rr and rnd.random() < 0.7:
                                add(type="ReplicaLogLoss", topic=tt, partition=pp, broker=b,
                                    log_end_offset=rnd.randint(0, max(0, produced[(tt, pp)])))
                    clean_file[b] = -1
                    state[b] = "down"
            elif s == "isolated":
                add(type="BrokerUnfence", broker=b)
                state[b] = "up"
            elif s == "down":
                ts += 9000
                add(type="BrokerFence", broker=b)                # session timeout
                state[b] = "fenced_down"
            elif s == "fenced_down":
                ts += 9001      # the old incarnation's session (broker.session.timeout.ms) has expired
                counter += 1
                add(type="BrokerRegister", broker=b, broker_epoch=counter,
                    previous_broker_epoch=clean_file.get(b, -1))
                epoch[b] = counter
                state[b] = "registered"
            elif s == "registered":
                add(type="BrokerUnfence", broker=b)
                state[b] = "up"
        elif r < 0.83 and admin:
            add(type="ElectLeaders", topic=t, partition=p, election_type="PREFERRED")
        elif r < 0.84 and admin and brokers > rf:
            target = rnd.sample(ids, len(reps))
            add(type="Reassign", topic=t, partition=p, replicas=target)
        elif r < 0.87 and creations:
            t = rnd.choice(parts)[0]
            p = 1 + max(pp for tt, pp, _ in parts if tt == t)
            reps = rnd.sample(ids, rnd.randint(1, min(rf + 1, brokers)))
            parts.append((t, p, reps))
            produced[(t, p)] = 0
            add(type="CreatePartition", topic=t, partition=p, replicas=reps)
        else:
            ts += rnd.choice((1000, 5000, 16000))
            add(type="Tick", broker=None)
    return ev
