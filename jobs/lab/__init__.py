"""Real Kafka 4.4.0 KRaft lab: a loopback cluster (cluster.py), a Java Admin/Producer driver
(java/lab/LabDriver.java) and named fault scenarios (scenarios.py) that record the controller's
metadata log. `isrflow lab --list`, `isrflow lab SCENARIO --out DIR`; see docs/lab.md."""
from __future__ import annotations

import sys


def add_parser(sub) -> None:
    """Register `isrflow lab` on the main CLI's subparsers."""
    p = sub.add_parser("lab", help="run a fault scenario on a real Kafka 4.4.0 cluster and record its metadata log")
    p.add_argument("scenario", nargs="?", help="scenario name (see --list)")
    p.add_argument("--out", help="recording directory (replaced): metadata/, acks.jsonl, manifest.json")
    p.add_argument("--list", action="store_true", help="list the scenarios")
    p.add_argument("--seed", type=int, default=0, help="the chaos scenario's schedule (default 0)")
    p.add_argument("--workdir", default=None, help="keep the cluster's directories and logs here")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="server.properties override for every node ('broker:KEY' / 'controller:KEY' for one role)")
    p.set_defaults(fn=cmd_lab)


def cmd_lab(args) -> int:
    from jobs.lab.scenarios import SCENARIOS, run_scenario
    if args.list or not args.scenario:
        for s in SCENARIOS.values():
            print(f"{s.name:18s} {s.family}\n{'':18s} {s.doc}")
        return 0 if args.list else 2
    if args.scenario not in SCENARIOS:
        print(f"error: unknown scenario {args.scenario!r}; try --list", file=sys.stderr)
        return 2
    if not args.out:
        print("error: lab needs --out DIR", file=sys.stderr)
        return 2
    overrides = {}
    for kv in args.set:
        k, sep, v = kv.partition("=")
        if not sep:
            print(f"error: --set wants KEY=VALUE, got {kv!r}", file=sys.stderr)
            return 2
        overrides[k] = v
    try:
        m = run_scenario(args.scenario, args.out, workdir=args.workdir, keep_workdir=bool(args.workdir),
                         overrides=overrides or None, log=lambda s: print(s, file=sys.stderr, flush=True),
                         seed=args.seed)
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(args.out)
    return 0 if m.get("error") is None else 1
