"""Identical-output proof for refactors of the protocol core: run the in-process engine of two
source trees over the same inputs and compare every output table row for row.

    .venv/bin/python tools/compare_refactor.py --old /tmp/ref --new . [--quick] [--bench]

Each tree is imported in its own subprocess (its root first on sys.path, the shared venv), so
the two never mix. Inputs are generated once, by the --new tree's generators, and fed to both:

  * every scenario in tests/scenarios/*.json (its `events` and `config`), also with the state
    re-encoded every 7 events (the Spark state store's round trip);
  * 200 seeded random schedules from tests/gen.py `random_schedule` (plain, explicit
    AlterPartition/metadata delivery, unclean elections on, ELR off, KIP-966 recovery manager);
  * ~50 simulated streams (`jobs.simulate` presets and custom fault specs, several seeds);
  * examples/demo.

For every input the tables (plus partition_state and the decoded final state) must be equal, row
for row and in order. Checkpoints: the old tree's encoded state, taken half way, is resumed by
the new tree, and the result must equal the old tree's own run (a codec layout change shows here). --bench times the replay of a 1k-partition simulated stream in both trees,
interleaved (CPU time, best of the rounds), and prints the speed ratio new/old (>1: new is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- the worker
WORKER = r'''
import pickle, sys, time
root, job_path, out_path = sys.argv[1:4]
sys.path.insert(0, root)
from protocol.cluster import Cluster
from protocol.codec import decode, decode_cluster, encode_cluster
from protocol.config import EngineConfig
from schemas.events import validate

def run(events, config, roundtrip_every=0, validated=False, stop_at=None, blob=None):
    cfg = EngineConfig(config or {})
    cl = Cluster(cfg) if blob is None else decode_cluster(blob, cfg)
    out = {}
    if stop_at is not None:
        events = events[:stop_at]
    def drain():
        for k, v in cl.drain().items():
            out.setdefault(k, []).extend(v)
        out.setdefault("partition_state", []).extend(cl.partition_state_rows(cl.touched))
        cl.touched = set()
    for i, raw in enumerate(events):
        if validated:
            cl.apply(raw)
            continue
        if "_bad" in raw:
            cl.reject({}, None, raw["_bad"], True)
            continue
        ev, reason = validate(raw)
        if ev is None:
            cl.reject({}, None, reason, True)
        else:
            cl.apply(ev)
        if roundtrip_every and (i + 1) % roundtrip_every == 0:
            drain()
            cl = decode_cluster(encode_cluster(cl), cfg)
    if stop_at is not None:   # hand the state over, as a checkpoint would
        drain()
        out["_blob"] = encode_cluster(cl)
        return out
    cl.finish()
    drain()
    out["_state"] = [decode(encode_cluster(cl))]   # the decoded layout: equal state, any pickling
    out["_totals"] = [(cl.applied, cl.rejected, cl.last_seq, cl.max_ts)]
    return out

job = pickle.load(open(job_path, "rb"))
res = {}
if job.get("bench"):
    evs = job["bench"]
    cfg = job.get("config") or {}
    times = []
    for _ in range(job.get("reps", 1)):
        t0 = time.process_time()      # CPU time: steadier than wall time on a shared machine
        run(evs, cfg, validated=True)
        times.append(time.process_time() - t0)
    res = {"times": times, "events": len(evs)}
else:
    for name, item in job["items"]:
        try:
            evs = item["events"]
            res[name] = run(evs, item.get("config"), item.get("roundtrip", 0), stop_at=item.get("stop_at"),
                            blob=item.get("blob"))
        except Exception as e:  # an exception is an output too: both trees must raise it
            res[name] = {"_error": [f"{type(e).__name__}: {e}"]}
pickle.dump(res, open(out_path, "wb"), protocol=4)
'''


def run_tree(root: Path, job: dict, tmp: Path, tag: str) -> dict:
    jp, op, wp = tmp / f"job-{tag}.pkl", tmp / f"out-{tag}.pkl", tmp / "worker.py"
    wp.write_text(WORKER)
    with open(jp, "wb") as f:
        pickle.dump(job, f, protocol=4)
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED="0")
    subprocess.run([sys.executable, str(wp), str(root), str(jp), str(op)], check=True, env=env,
                   cwd=str(root))
    with open(op, "rb") as f:
        return pickle.load(f)


# ----------------------------------------------------------------------------- the inputs
def stream_events(path) -> list:
    """A stream directory's rows, read once (by this tree's reader) and fed to both trees."""
    sys.path.insert(0, str(HERE))
    from jobs.streamio import iter_raw_rows
    return [raw if err is None else {"_bad": err} for raw, text, err in iter_raw_rows(str(path))]


def scenario_items() -> list:
    items = []
    for f in sorted((HERE / "tests" / "scenarios").glob("*.json")):
        d = json.loads(f.read_text())
        items.append((f"scenario/{f.stem}", {"events": d["events"], "config": d.get("config") or {}}))
        items.append((f"scenario-rt/{f.stem}", {"events": d["events"], "config": d.get("config") or {},
                                                "roundtrip": 7}))
    return items


VARIANTS = [
    ("plain", {}, {}),
    ("explicit", {"explicit_ap": True, "explicit_md": True},
     {"delivery.alter_partition": "explicit", "delivery.metadata": "explicit"}),
    ("unclean", {"max_unclean": 2}, {"unclean.leader.election.enable": "true", "min.insync.replicas": "2"}),
    ("elr-off", {}, {"eligible.leader.replicas.enable": "false", "min.insync.replicas": "2"}),
    ("recovery", {"max_unclean": 2}, {"unclean.recovery.manager.enabled": "true", "min.insync.replicas": "2",
                                      "output.fetch": "all"}),
]


def schedule_items(n: int) -> list:
    sys.path.insert(0, str(HERE))
    from tests.gen import random_schedule
    items = []
    for seed in range(n):
        vname, gkw, cfg = VARIANTS[seed % len(VARIANTS)]
        evs = random_schedule(seed, **gkw)
        item = {"events": evs, "config": cfg}
        if seed % 10 == 3:
            item["roundtrip"] = 11
        items.append((f"schedule/{vname}/{seed}", item))
    return items


SIMS = [  # (scenario, faults, extra kwargs)
    ("last-replica-standing", None, {}),
    ("rolling-restart", None, {}),
    ("zone-outage", None, {}),
    ("flaky-network", None, {}),
    ("reassignment", None, {}),
    (None, "crash:2@60s,unclean-crash:1@120s,partition:3@90s+30s,elect:preferred@200s", {}),
    (None, "zone-outage:rack1@60s+40s,elect:preferred@180s", {"delivery": "explicit"}),
]


def sim_items(tmp: Path, n: int) -> list:
    sys.path.insert(0, str(HERE))
    from jobs.simulate import simulate
    items = []
    for i in range(n):
        scen, faults, kw = SIMS[i % len(SIMS)]
        seed = i // len(SIMS) + 1
        out = tmp / f"sim-{i}"
        simulate(out, scenario=scen, faults=faults, seed=seed, duration_ms="240s", partitions=8, fmt="jsonl",
                 overwrite=True, **kw)
        manifest = json.loads((out / "_simulation.json").read_text())
        items.append((f"sim/{scen or 'faults'}/{i}", {"events": stream_events(out),
                                                      "config": manifest.get("engine_config") or {}}))
    return items


def demo_items() -> list:
    d = HERE / "examples" / "demo"
    manifest = json.loads((d / "_simulation.json").read_text())
    return [("demo", {"events": stream_events(d), "config": manifest.get("engine_config") or {}})]


# ----------------------------------------------------------------------------- comparing
def first_difference(a: dict, b: dict) -> str | None:
    for table in sorted(set(a) | set(b)):
        ra, rb = a.get(table, []), b.get(table, [])
        for i, (x, y) in enumerate(zip(ra, rb)):
            if x != y:
                return f"{table} row {i}: old {x!r}\n    new {y!r}"
        if len(ra) != len(rb):
            return f"{table}: old has {len(ra)} rows, new {len(rb)}"
    return None


def compare(old: Path, new: Path, items: list, tmp: Path, label: str) -> tuple[int, int, int]:
    ro = run_tree(old, {"items": items}, tmp, "old")
    rn = run_tree(new, {"items": items}, tmp, "new")
    same = diff = rows = 0
    for name, _ in items:
        d = first_difference(ro[name], rn[name])
        rows += sum(len(v) for k, v in ro[name].items() if not k.startswith("_"))
        if d is None:
            same += 1
        else:
            diff += 1
            print(f"DIFF {name}: {d}")
    print(f"{label}: {same} identical, {diff} different, {rows} rows compared")
    return same, diff, rows


def cross_version(old: Path, new: Path, items: list, tmp: Path) -> tuple[int, int]:
    """Checkpoint compatibility: the old tree runs the first half and encodes its state; the new tree
    decodes it and runs the rest. The tables must equal the old tree's own run with one state round
    trip at the same place."""
    halves, refs = [], []
    for name, item in items:
        k = len(item["events"]) // 2 + 1
        halves.append((name, dict(item, stop_at=k, roundtrip=0)))
        refs.append((name, dict(item, roundtrip=k)))
    first = run_tree(old, {"items": halves}, tmp, "old-half")
    ref = run_tree(old, {"items": refs}, tmp, "old-ref")
    rest = []
    for name, item in halves:
        k = item["stop_at"]
        rest.append((name, {"events": item["events"][k:], "config": item.get("config"), "blob": first[name]["_blob"]}))
    second = run_tree(new, {"items": rest}, tmp, "new-rest")
    same = diff = 0
    for name, _ in items:
        joined = {}
        for part in (first[name], second[name]):
            for t, rows in part.items():
                if t != "_blob":
                    joined.setdefault(t, []).extend(rows)
        d = first_difference(ref[name], joined)
        if d is None:
            same += 1
        else:
            diff += 1
            print(f"DIFF (old state -> new tree) {name}: {d}")
    print(f"checkpoints (old tree's state resumed by the new tree): {same} identical, {diff} different")
    return same, diff


def bench(old: Path, new: Path, tmp: Path, rounds: int) -> float:
    sys.path.insert(0, str(HERE))
    from jobs.simulate import simulate
    out = tmp / "bench-stream"
    simulate(out, partitions=1000, brokers=6, duration_ms="60s", seed=7, fmt="parquet", overwrite=True)
    # validated once here, so the timing is the core's alone (Cluster.apply, timers, finish)
    from schemas.events import validate
    evs = [ev for ev, _ in map(validate, stream_events(out)) if ev is not None]
    job = {"bench": evs, "reps": 1}
    t_old, t_new = [], []
    for r in range(rounds):
        order = [(old, t_old, "old"), (new, t_new, "new")]
        if r % 2:
            order.reverse()
        for root, acc, tag in order:
            res = run_tree(root, job, tmp, f"bench-{tag}")
            acc.extend(res["times"])
    n = res["events"]
    best_old, best_new = min(t_old), min(t_new)
    ratio = best_old / best_new
    print(f"bench: {n} events, 1000 partitions; old best {best_old:.3f}s ({n / best_old:,.0f} ev/s), "
          f"new best {best_new:.3f}s ({n / best_new:,.0f} ev/s); speed new/old = {ratio:.3f} "
          f"(old runs {[round(t, 3) for t in t_old]}, new runs {[round(t, 3) for t in t_new]})")
    return ratio


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="/tmp/ref", help="reference tree (e.g. git archive HEAD | tar -x)")
    ap.add_argument("--new", default=str(HERE))
    ap.add_argument("--schedules", type=int, default=200)
    ap.add_argument("--sims", type=int, default=49)
    ap.add_argument("--quick", action="store_true", help="20 schedules, 7 simulated streams")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-rounds", type=int, default=4)
    ap.add_argument("--no-compare", action="store_true")
    a = ap.parse_args(argv)
    old, new = Path(a.old).resolve(), Path(a.new).resolve()
    if a.quick:
        a.schedules, a.sims = 20, 7
    total_diff = 0
    with tempfile.TemporaryDirectory(prefix="isrflow-cmp-") as td:
        tmp = Path(td)
        if not a.no_compare:
            t0 = time.perf_counter()
            for label, items in (("scenarios", scenario_items()), ("schedules", schedule_items(a.schedules)),
                                 ("simulated", sim_items(tmp, a.sims)), ("demo", demo_items())):
                _, d, _ = compare(old, new, items, tmp, label)
                total_diff += d
            sched = schedule_items(a.schedules)
            _, d = cross_version(old, new, scenario_items()[::2] + sched[: max(10, len(sched) // 4)], tmp)
            total_diff += d
            print(f"compare: {'IDENTICAL' if not total_diff else f'{total_diff} DIFFERENT'} "
                  f"({time.perf_counter() - t0:.0f}s)")
        if a.bench:
            bench(old, new, tmp, a.bench_rounds)
    return 1 if total_diff else 0


if __name__ == "__main__":
    sys.exit(main())
