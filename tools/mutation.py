"""Mutation testing for isrflow: a small, seeded AST mutator (no third-party tool).

Every mutation point of the protocol core (`protocol/**/*.py`) and of the input validation layer
(`schemas/events.py`) is enumerated -- comparison operators, `and`/`or`, `+`/`-`, removal of
`not`, `True`/`False`, small integer constants -- and a seeded sample of them is applied one at
a time to a private copy of the repository. For each mutant the fast tier runs with
`pytest -x -q` (the mutant's package first on PYTHONPATH, so `isrflow` subprocesses see it too).
A mutant is *killed* when the tier fails, *survives* when it passes, and is a *timeout* (counted
as killed) when the tier takes more than --timeout seconds.

    ./dev mutation                      # 200 mutants, seed 0
    ./dev mutation --sample 50 --seed 3
    ./dev mutation --full               # every mutation point (slow)
    ./dev mutation --list               # only print the mutation points
    ./dev mutation --only protocol/log.py:45   # mutants on one line (repeatable)

CPU-heavy: the runs hold /tmp/isrflow-heavy.lock (flock), released every --lock-hold seconds so
other work on a shared machine interleaves. Prints the score and every surviving mutant as
`file:line  original -> mutant`. Equivalent survivors are listed in docs/testing.md.
"""
from __future__ import annotations

import argparse
import ast
import copy
import fcntl
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def targets(root: Path = ROOT) -> list[str]:
    """What is mutated: the protocol core and the input validation layer."""
    return sorted(str(p.relative_to(root)) for p in (root / "protocol").rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts) + ["schemas/events.py"]

# The fast tier, quickest-killing first (pytest -x stops at the first failure).
TIER = [
    "tests/test_rules_log.py",
    "tests/test_rules_controller.py",
    "tests/test_rules_leader.py",
    "tests/test_rules_config.py",
    "tests/test_rules_cluster.py",
    "tests/test_rules_codec.py",
    "tests/test_invariants.py",
    "tests/test_kafka44_clear_elr.py",
    "tests/test_kafka44_isr_expiration.py",
    "tests/test_kafka44_isr_order.py",
    "tests/test_kafka44_sessions.py",
    "tests/test_kafka44_topic_configs.py",
    "tests/test_topic_existence.py",
    "tests/test_kafka44_change_builder.py",
    "tests/test_kafka44_epoch_cache.py",
    "tests/test_controller.py",
    "tests/test_admin_errors.py",
    "tests/test_leader.py",
    "tests/test_codec.py",
    # protocol/cold.py (a state blob's undecoded partitions) against a dict model
    "tests/test_cold.py",
    "tests/test_quarantine.py",
    "tests/test_schemas.py",
    # schemas.events.plain_rows (the column-wise check of a Parquet batch) against validate()
    "tests/test_plain_rows.py",
    "tests/test_properties.py",
    "tests/test_simulated_safety.py",
    "tests/test_scenarios.py",
    # the fast paths (fetch, timers, HWM, broker index) against the full paths: a mutant of a
    # fast path alone changes no other test's outcome
    "tests/test_fast_path.py",
    # Cluster.apply_run (runs of a reader's plain rows) against LocalEngine.feed row by row
    "tests/test_feed_rows.py",
    # Cluster.release (a Spark bucket's cluster freed by reference counting) and the bucket calls'
    # GC discipline: no table changes with them, only the live objects
    "tests/test_bucket_gc.py",
    # Cluster.commutes / apply_run(window=True): windows applied grouped by partition against the
    # same streams in stream order, table for table
    "tests/test_windows.py",
]

CMP_SWAP = {
    ast.Lt: [ast.LtE, ast.GtE], ast.LtE: [ast.Lt, ast.Gt], ast.Gt: [ast.GtE, ast.LtE],
    ast.GtE: [ast.Gt, ast.Lt], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
    ast.In: [ast.NotIn], ast.NotIn: [ast.In], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is],
}
OP_SYM = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
          ast.And: "and", ast.Or: "or", ast.Add: "+", ast.Sub: "-"}


@dataclass(frozen=True)
class Mutant:
    path: str
    index: int          # position of the node in ast.walk order
    line: int
    kind: str           # cmp | bool | arith | not | const
    sub: int            # which operand / which replacement
    original: str
    mutant: str

    def key(self) -> str:
        return f"{self.path}:{self.line}"

    def describe(self) -> str:
        return f"{self.path}:{self.line}  {self.original}  ->  {self.mutant}"


def _skip_nodes(tree: ast.AST) -> set[int]:
    """Nodes not worth mutating: docstrings, __slots__, version/format numbers in f-strings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            for sub in ast.walk(node):
                skip.add(id(sub))
    return skip


def _small_int(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and type(node.value) is int and -2 <= node.value <= 16)


def _const_mutant(v: int) -> int:
    return {0: 1, 1: 0}.get(v, v + 1)


def mutation_points(path: str, root: Path = ROOT) -> list[Mutant]:
    src = (root / path).read_text()
    tree = ast.parse(src)
    skip = _skip_nodes(tree)
    out: list[Mutant] = []
    lines = src.splitlines()

    def seg(node) -> str:
        s = ast.get_source_segment(src, node) or ast.unparse(node)
        s = " ".join(s.split())
        return s if len(s) <= 90 else s[:87] + "..."

    for i, node in enumerate(ast.walk(tree)):
        if id(node) in skip:
            continue
        ln = getattr(node, "lineno", 0)
        if ln and "# pragma: no mutate" in lines[ln - 1]:
            continue
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                for k, rep in enumerate(CMP_SWAP.get(type(op), [])):
                    out.append(Mutant(path, i, ln, "cmp", j * 4 + k, seg(node),
                                      f"{OP_SYM[type(op)]} -> {OP_SYM[rep]}"))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or if isinstance(node.op, ast.And) else ast.And
            out.append(Mutant(path, i, ln, "bool", 0, seg(node),
                              f"{OP_SYM[type(node.op)]} -> {OP_SYM[other]}"))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, (ast.Add, ast.Sub)):
            # string concatenation is not arithmetic
            if isinstance(node, ast.BinOp) and any(isinstance(x, (ast.Constant, ast.JoinedStr)) and
                                                   isinstance(getattr(x, "value", None), str)
                                                   for x in (node.left, node.right)):
                continue
            other = ast.Sub if isinstance(node.op, ast.Add) else ast.Add
            out.append(Mutant(path, i, ln, "arith", 0, seg(node),
                              f"{OP_SYM[type(node.op)]} -> {OP_SYM[other]}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append(Mutant(path, i, ln, "not", 0, seg(node), "drop `not`"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _small_int(node.operand):
            v = -node.operand.value
            out.append(Mutant(path, i, ln, "const", 0, str(v), str(_const_mutant(v))))
            skip.add(id(node.operand))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            out.append(Mutant(path, i, ln, "const", 0, str(node.value), str(not node.value)))
        elif _small_int(node):
            out.append(Mutant(path, i, ln, "const", 0, str(node.value), str(_const_mutant(node.value))))
    return out


def apply(m: Mutant, src: str) -> str:
    """The mutated module's source (`src`: the module the mutant was enumerated from)."""
    tree = ast.parse(src)
    node = list(ast.walk(tree))[m.index]
    if m.kind == "cmp":
        j, k = divmod(m.sub, 4)
        node.ops[j] = CMP_SWAP[type(node.ops[j])][k]()
    elif m.kind == "bool":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif m.kind == "arith":
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
    elif m.kind == "not":
        _replace(tree, node, node.operand)
    elif m.kind == "const":
        if isinstance(node, ast.UnaryOp):
            _replace(tree, node, ast.Constant(_const_mutant(-node.operand.value)))
        elif type(node.value) is bool:
            node.value = not node.value
        else:
            node.value = _const_mutant(node.value)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, v in enumerate(value):
                    if v is old:
                        value[i] = new
                        return
    raise RuntimeError("node not found")


class _Lock:
    """flock on the shared heavy-work lock, kept across runs for up to `hold` seconds, then released
    so that others' queued work gets its turn (one mutant's run never holds it longer than needed)."""

    def __init__(self, path: str | None, hold: float = 60.0):
        self.path = path
        self.hold = hold
        self.fd = None
        self.since = 0.0

    def acquire(self) -> None:
        if not self.path:
            return
        if self.fd is not None and time.monotonic() - self.since > self.hold:
            self.release()
            time.sleep(3)         # let a queued waiter take it (flock is not FIFO)
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            self.since = time.monotonic()

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def make_copy(dst: Path, rev: str | None = None) -> None:
    """The working tree (tests included); with `rev`, protocol/, schemas/, jobs/ and conf/ as of that
    git revision (to measure new tests while the code is being changed)."""
    for d in ("protocol", "schemas", "jobs", "conf", "tests", "tools", "examples", "java"):
        if (ROOT / d).exists():
            shutil.copytree(ROOT / d, dst / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml",):
        shutil.copy(ROOT / f, dst / f)
    if rev:
        for d in ("protocol", "schemas", "jobs", "conf"):
            shutil.rmtree(dst / d)
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "protocol", "schemas", "jobs", "conf"],
                              capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=arch, check=True)


DESELECT: list[str] = []


def run_tier(work: Path, tier: list[str], timeout: float, lock: "_Lock") -> tuple[str, float, str]:
    # the mutants are .py sources: the compiled core (ISRFLOW_CORE, jobs/compiled.py) must not run
    # the copy has no JAR cache: the checkout's (the real Kafka's answers, tests/test_kafka44_topic_configs.py)
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1",
               HYPOTHESIS_STORAGE_DIRECTORY=str(work / ".hypothesis"), ISRFLOW_CORE="pure",
               ISRFLOW_JARS=os.environ.get("ISRFLOW_JARS") or str(ROOT / ".cache" / "jars"))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "--no-header", "-o", "addopts=", *tier, *(f"--deselect={d}" for d in DESELECT)]
    lock.acquire()
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, ""
    dt = time.monotonic() - t0
    if p.returncode == 0:
        return "survived", dt, ""
    if p.returncode in (1,):
        failed = [ln for ln in p.stdout.splitlines() if ln.startswith("FAILED")]
        return "killed", dt, failed[0] if failed else ""
    # collection/import error or crash: the mutant broke the module -> killed
    return "killed", dt, f"pytest exit {p.returncode}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="./dev mutation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=200, help="mutants to run (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full", action="store_true", help="every mutation point")
    ap.add_argument("--list", action="store_true", help="print the mutation points and exit")
    ap.add_argument("--only", action="append", default=[], help="FILE[:LINE] to restrict to (repeatable)")
    ap.add_argument("--rerun", metavar="LOG",
                    help="run exactly the mutants listed as survivors in the output of an earlier run")
    ap.add_argument("--tier", nargs="*", help="test files (default: the fast tier)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant run")
    ap.add_argument("--lock", default="/tmp/isrflow-heavy.lock",
                    help="flock file held while mutants run ('' for none)")
    ap.add_argument("--lock-hold", type=float, default=90.0,
                    help="release the lock after this many seconds of runs, then queue again")
    ap.add_argument("--rev", default=None,
                    help="code (protocol/, schemas/, jobs/, conf/) as of this git revision; tests from the working tree")
    ap.add_argument("--deselect", action="append", default=[], metavar="NODEID",
                    help="leave this test out of the tier (repeatable), e.g. one that needs newer code")
    ap.add_argument("--fail-under", type=float, default=None, help="exit 1 if the score is below this %%")
    args = ap.parse_args(argv)
    DESELECT[:] = args.deselect

    work = Path(tempfile.mkdtemp(prefix="isrflow-mut-"))
    try:
        make_copy(work, args.rev)        # a snapshot: edits in the checkout during the run do not matter
        return _run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args, work: Path) -> int:
    lock = _Lock(args.lock or None, args.lock_hold)
    try:
        return _run_locked(args, work, lock)
    finally:
        lock.release()


def _run_locked(args, work: Path, lock: "_Lock") -> int:
    points = [m for path in targets(work) for m in mutation_points(path, work)]
    if args.only:
        def wanted(m):
            for o in args.only:
                f, _, ln = o.partition(":")
                if m.path == f and (not ln or str(m.line) == ln):
                    return True
            return False
        points = [m for m in points if wanted(m)]
    if args.rerun:
        want = set()
        for line in Path(args.rerun).read_text().splitlines():
            line = line.strip()
            if " survived " in line and "]" in line:
                want.add(line.split("s  ", 1)[1].strip())
            elif line and line.split(":", 1)[0].endswith(".py") and "->" in line:
                want.add(line)
        points = [m for m in points if m.describe() in want]
        print(f"re-running {len(points)} of {len(want)} listed survivors")
        args.full = True
    if args.list:
        for m in points:
            print(m.describe())
        print(f"{len(points)} mutation points")
        return 0
    if args.full or args.sample >= len(points):
        chosen = points
    else:
        chosen = random.Random(args.seed).sample(points, args.sample)
        chosen.sort(key=lambda m: (m.path, m.line, m.index, m.sub))
    tier = args.tier or [t for t in TIER if (work / t).exists()]
    print(f"{len(points)} mutation points; running {len(chosen)} (seed {args.seed}) against "
          f"{len(tier)} test files", flush=True)

    status, dt, why = run_tier(work, tier, args.timeout * 3, lock)
    if status != "survived":
        print(f"the unmutated tier does not pass ({status}: {why}); fix that first", file=sys.stderr)
        return 2
    print(f"unmutated tier: {dt:.1f}s", flush=True)
    timeout = max(args.timeout, dt * 3)
    killed = survived = timeouts = 0
    survivors: list[Mutant] = []
    t_all = time.monotonic()
    for n, m in enumerate(chosen, 1):
        target = work / m.path
        original = target.read_text()
        try:
            mutated = apply(m, original)
            target.write_text(mutated)
            status, dt, why = run_tier(work, tier, timeout, lock)
        finally:
            target.write_text(original)
        if status == "survived":
            survived += 1
            survivors.append(m)
        elif status == "timeout":
            timeouts += 1
        else:
            killed += 1
        print(f"[{n}/{len(chosen)}] {status:8s} {dt:5.1f}s  {m.describe()}"
              + (f"   ({why})" if why and status == "killed" else ""), flush=True)
    total = len(chosen)
    score = 100.0 * (killed + timeouts) / total if total else 100.0
    print()
    print(f"mutation score: {score:.1f}%  ({killed} killed, {timeouts} timed out, {survived} survived "
          f"of {total}; seed {args.seed}; {time.monotonic() - t_all:.0f}s)")
    by_file: dict[str, list[int]] = {}
    for m in chosen:
        by_file.setdefault(m.path, [0, 0])[1] += 1
    for m in survivors:
        by_file[m.path][0] += 1
    for f, (s, t) in sorted(by_file.items()):
        print(f"  {f:24s} {100.0 * (t - s) / t:5.1f}% killed ({t - s}/{t})")
    if survivors:
        print("\nsurviving mutants:")
        for m in survivors:
            print(f"  {m.describe()}")
    if args.fail_under is not None and score < args.fail_under:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
