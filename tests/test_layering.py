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
                   "pickle", "zlib", "struct"}
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
