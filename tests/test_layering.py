"""The import rules of the rooms (docs/architecture.md), checked by parsing every import.

protocol/ is the sans-I/O core: it may import only itself and a small set of pure standard-library
modules, so that it stays deterministic (no clock, no randomness, no files, no Spark). schemas/ is
the one schema source and must not depend on the engines. A rule broken here fails the suite."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Pure standard-library modules the protocol core may use. Everything that touches time, randomness,
# the file system, processes, threads or the network is left out on purpose.
PROTOCOL_STDLIB = {"__future__", "bisect", "collections", "dataclasses", "enum", "functools",
                   "heapq", "itertools", "math", "operator", "typing", "types", "abc",
                   # codec.py: the versioned state encoding (bytes in, bytes out)
                   "pickle", "zlib", "struct",
                   # cold.py: the cold partitions in columns (pure containers)
                   "array",
                   # topic_configs.py: Kafka's value syntax (ConfigDef's parsers) and Double#toString
                   "re", "decimal"}
FORBIDDEN_EVERYWHERE_IN_PROTOCOL = {"time", "random", "datetime", "os", "io", "pathlib", "socket",
                                    "subprocess", "threading", "multiprocessing", "uuid", "secrets"}

RULES = {
    # room: (allowed first-party packages, allowed third-party top-level modules, stdlib allowed?)
    "protocol": ({"protocol"}, set(), PROTOCOL_STDLIB),
    "schemas": ({"schemas"}, {"pydantic", "pyarrow", "annotated_types", "pyspark"}, None),
    "conf": ({"conf"}, set(), None),
}
FIRST_PARTY = {"protocol", "schemas", "jobs", "conf", "tests", "tools"}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: stays inside the package
                continue
            yield node.lineno, (node.module or "").split(".")[0]


def _violations(room: str) -> list[str]:
    first_party, third_party, stdlib_ok = RULES[room]
    bad = []
    for f in sorted((ROOT / room).rglob("*.py")):
        for line, mod in _imports(f):
            where = f"{f.relative_to(ROOT)}:{line} imports {mod}"
            if mod in FIRST_PARTY:
                if mod not in first_party:
                    bad.append(where)
            elif mod in sys.stdlib_module_names or mod == "__future__":
                if stdlib_ok is not None and mod not in stdlib_ok:
                    bad.append(where + " (not on the protocol's pure stdlib list)")
                if room == "protocol" and mod in FORBIDDEN_EVERYWHERE_IN_PROTOCOL:
                    bad.append(where + " (clock, randomness or I/O in the core)")
            elif mod not in third_party:
                bad.append(where + " (third-party)")
    return bad


def test_protocol_is_sans_io():
    assert _violations("protocol") == []


def test_schemas_do_not_depend_on_engines():
    assert _violations("schemas") == []


def test_conf_is_leaf():
    assert _violations("conf") == []


def test_the_checker_catches_a_forbidden_import(tmp_path, monkeypatch):
    # the rule must be able to fail: a protocol module reading the clock is reported
    fake = tmp_path / "protocol"
    fake.mkdir()
    (fake / "x.py").write_text("import time\nfrom jobs import cli\nfrom .log import y\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    got = _violations("protocol")
    assert any("imports time" in g for g in got) and any("imports jobs" in g for g in got)
    assert not any("log" in g for g in got)


# ---------------------------------------------------------------- rooms inside protocol/
# Kafka's own seam: the controller (controller/) and the brokers (broker/) never import each other;
# they meet only through channels.py (metadata records one way, AlterPartition the other), which
# they reach as `p.channels`, an object handed to them. Above them sit the drivers that start work
# in both rooms: the router (cluster.py and lifecycle.py: input events) and the clock (timers.py). The leaves
# (the shared vocabulary and data) import only leaves; the invariant checker imports leaves only.
PROTOCOL_LEAVES = {"messages", "config", "topic_configs", "log", "replica", "registry", "cold"}
PROTOCOL_ROOMS = {
    # module or package: the protocol modules it may import
    "messages": set(),
    "config": {"messages", "topic_configs"},
    "topic_configs": set(),
    "log": set(),
    "cold": set(),
    "replica": {"log", "messages"},
    "registry": {"messages"},
    "invariants": PROTOCOL_LEAVES,
    "controller": PROTOCOL_LEAVES | {"controller"},
    "broker": PROTOCOL_LEAVES | {"broker"},
    "channels": PROTOCOL_LEAVES | {"controller", "broker"},
    "timers": PROTOCOL_LEAVES | {"controller", "broker"},
    "partition": PROTOCOL_LEAVES | {"channels", "timers", "broker"},
    "state_table": PROTOCOL_LEAVES,
    "lifecycle": PROTOCOL_LEAVES | {"controller", "broker", "channels"},
    "cluster": PROTOCOL_LEAVES | {"controller", "broker", "channels", "timers", "partition", "invariants",
                                  "state_table", "lifecycle"},
    "codec": PROTOCOL_LEAVES | {"cluster", "partition", "invariants"},
}
# Imports for annotations only (under `if TYPE_CHECKING:`, never run): the broker's handlers, the
# controller's registration writes, the metadata channel, the clock and the invariant checker take
# the Partition they act on (and a Partition its Cluster), and the partition_state projection reads
# them, typed so that the compiled core (jobs/compiled.py, mypyc) reads its slots directly. Nothing
# else may cross a room that way.
TYPE_ONLY = {"broker": {"partition"}, "timers": {"partition"}, "invariants": {"partition"}, "partition": {"cluster"},
             "state_table": {"partition"}, "controller": {"partition"}, "channels": {"partition"}}
# the only modules that import both controller/ and broker/: the bridge, and the drivers that start
# work in both (the router with its broker life-cycle handlers, and the clock)
BRIDGES = {"channels", "timers", "cluster", "lifecycle"}


def _protocol_imports(path: Path, root: Path):
    """(line, protocol room) for every import of a protocol module from `path`."""
    pkg = path.relative_to(root / "protocol").parts[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only = _type_checking_imports(tree)
    allowed = TYPE_ONLY.get(_room_of(path, root), set())
    for node in ast.walk(tree):
        if id(node) in type_only and isinstance(node, ast.ImportFrom) and node.level and node.module \
                and node.module.split(".")[0] in allowed:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[:len(pkg) - (node.level - 1)]) if node.level > 1 else list(pkg)
                mod = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names] if not node.module else []
            elif (node.module or "").startswith("protocol"):
                mod = node.module.split(".")[1:]
                names = [a.name for a in node.names] if len(mod) == 0 else []
            else:
                continue
            if mod:
                yield node.lineno, mod[0]
            else:               # `from . import channels`, `from protocol import x`
                for n in names:
                    yield node.lineno, n
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "protocol" and len(parts) > 1:
                    yield node.lineno, parts[1]


def _type_checking_imports(tree) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks (no else: those run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def _room_of(path: Path, root: Path) -> str:
    rel = path.relative_to(root / "protocol").parts
    return rel[0] if len(rel) > 1 else rel[0][:-3]


def _room_violations(root: Path = None) -> list[str]:
    root = root or ROOT
    bad = []
    for f in sorted((root / "protocol").rglob("*.py")):
        room = _room_of(f, root)
        if room == "__init__":
            continue
        allowed = PROTOCOL_ROOMS.get(room)
        if allowed is None:
            bad.append(f"{f.relative_to(root)}: protocol module with no room rule (add it to PROTOCOL_ROOMS)")
            continue
        seen = set()
        for line, mod in _protocol_imports(f, root):
            seen.add(mod)
            if mod != room and mod not in allowed:
                bad.append(f"{f.relative_to(root)}:{line} imports protocol.{mod} (room {room} may import "
                           f"{sorted(allowed) or 'no protocol module'})")
        if {"controller", "broker"} <= seen and room not in BRIDGES:
            bad.append(f"{f.relative_to(root)} imports both controller/ and broker/ (only {sorted(BRIDGES)} may)")
    return bad


def test_protocol_rooms():
    assert _room_violations() == []


def test_controller_and_broker_never_import_each_other():
    for room, other in (("controller", "broker"), ("broker", "controller")):
        for f in sorted((ROOT / "protocol" / room).rglob("*.py")):
            mods = {m for _, m in _protocol_imports(f, ROOT)}
            assert other not in mods and not mods & BRIDGES, f"{f.relative_to(ROOT)} reaches {other}/"


def test_the_room_checker_catches_a_crossing(tmp_path, monkeypatch):
    for d in ("protocol/controller", "protocol/broker"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "protocol" / "controller" / "x.py").write_text("from ..broker import leader\n"
                                                               "from ..messages import A\n")
    (tmp_path / "protocol" / "broker" / "y.py").write_text("from protocol.controller.replication import c\n")
    (tmp_path / "protocol" / "invariants.py").write_text("from . import channels\n")
    # a type-only import is let through only where TYPE_ONLY says, and only under TYPE_CHECKING
    (tmp_path / "protocol" / "broker" / "z.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..partition import Partition\n"
        "    from ..controller import replication\nfrom ..partition import P2\n")
    got = _room_violations(tmp_path)
    assert not any("broker/z.py:3 " in g for g in got)
    assert any("broker/z.py:4 imports protocol.controller" in g for g in got)
    assert any("broker/z.py:5 imports protocol.partition" in g for g in got)
    assert any("controller/x.py:1 imports protocol.broker" in g for g in got)
    assert any("broker/y.py:1 imports protocol.controller" in g for g in got)
    assert any("invariants.py:1 imports protocol.channels" in g for g in got)
    assert not any("imports protocol.messages" in g for g in got)


def test_no_function_over_80_lines():
    """A function that long is several steps wanting names (the old Partition.fetch and .build, the
    simulator's `simulate`), in protocol/ and in jobs/ alike."""
    long = []
    for f in sorted([*(ROOT / "protocol").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")]):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80:
                long.append(f"{f.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []



# ---------------------------------------------------------------- wings of jobs/
# jobs/ is everything around the core, in wings that depend on each other in one direction only:
# io (reading streams, writing tables, the run record, where the JARs and the compiled core are) is the
# floor; the engines stand on it; the simulator drives the core through them; the metadata-log
# import/audit and the lab (a real Kafka cluster) stand on io and the engines; analysis (compare,
# report) reads tables;
# the front doors (the CLI, the bench, the spark-submit entry) may reach every wing and nothing
# reaches them. A module with no wing fails the test, so a new file has to be placed on purpose.
JOB_WINGS = {
    "io": {"streamio", "windows", "delta_sink", "runinfo", "jars", "compiled"},
    "engines": {"local_engine", "spark_engine", "spark_source", "spark_session", "jvm_archive", "spark_sql", "kafka_source",
                "buckets"},
    "sim": {"simulate", "sim_core"},
    "metalog": {"metalog"},
    "lab": {"lab"},
    "analysis": {"compare", "report"},
    "front": {"cli", "bench", "spark_job"},
}
WING_MAY_IMPORT = {
    "io": {"io"},
    "engines": {"io", "engines"},
    "sim": {"io", "engines", "sim"},
    "metalog": {"io", "engines", "metalog"},
    "lab": {"io", "metalog", "lab"},
    "analysis": {"io", "metalog", "analysis"},
    "front": set(JOB_WINGS),
}


def _wing_of(module: str) -> str | None:
    for wing, mods in JOB_WINGS.items():
        if module in mods:
            return wing
    return None


def _jobs_imports(path: Path, root: Path):
    """(line, top-level jobs module) for every import of a jobs module from `path`."""
    pkg = path.relative_to(root).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        mods = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[:len(pkg) - (node.level - 1)])
                full = base + (node.module.split(".") if node.module else [])
                mods = [full + [a.name] for a in node.names] if not node.module else [full]
            elif (node.module or "").split(".")[0] == "jobs":
                full = node.module.split(".")
                mods = [full + [a.name] for a in node.names] if len(full) == 1 else [full]
        elif isinstance(node, ast.Import):
            mods = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "jobs"]
        for m in mods:
            if len(m) > 1 and m[0] == "jobs":
                yield node.lineno, m[1].removesuffix(".py")


def _wing_violations(root: Path = None) -> list[str]:
    root = root or ROOT
    bad = []
    for f in sorted((root / "jobs").rglob("*.py")):
        rel = f.relative_to(root / "jobs").parts
        me = rel[0] if len(rel) > 1 else rel[0][:-3]
        if me == "__init__":
            continue
        wing = _wing_of(me)
        if wing is None:
            bad.append(f"jobs/{'/'.join(rel)}: module with no wing (add it to JOB_WINGS)")
            continue
        for line, mod in _jobs_imports(f, root):
            other = _wing_of(mod)
            if other is None:
                bad.append(f"jobs/{'/'.join(rel)}:{line} imports jobs.{mod}, which has no wing")
            elif other not in WING_MAY_IMPORT[wing]:
                bad.append(f"jobs/{'/'.join(rel)}:{line} imports jobs.{mod} (wing {wing} may import "
                           f"{sorted(WING_MAY_IMPORT[wing])}, not {other})")
    return bad


def test_jobs_wings():
    assert _wing_violations() == []


def test_the_wing_checker_catches_a_crossing(tmp_path):
    (tmp_path / "jobs" / "metalog").mkdir(parents=True)
    (tmp_path / "jobs" / "streamio.py").write_text("from jobs.spark_engine import x\nfrom . import delta_sink\n")
    (tmp_path / "jobs" / "metalog" / "audit.py").write_text("from ..report import y\nfrom ..local_engine import z\n")
    (tmp_path / "jobs" / "newthing.py").write_text("")
    got = _wing_violations(tmp_path)
    assert any("streamio.py:1 imports jobs.spark_engine" in g for g in got)
    assert any("metalog/audit.py:1 imports jobs.report" in g for g in got)
    assert any("newthing.py: module with no wing" in g for g in got)
    assert not any("delta_sink" in g or "local_engine" in g for g in got)
