"""Comparing two tables directories row for row (differential tests of the engines)."""
from __future__ import annotations

import json

from jobs.delta_sink import read_table
from schemas.tables import TABLES

COMPARED = tuple(n for n in TABLES if n != "progress")


def _key(v):
    return json.dumps(v, sort_keys=True, default=str)


def table_rows(tables_dir, name) -> list[str]:
    rows = read_table(str(tables_dir), name).to_pylist()
    return sorted(_key(r) for r in rows)


def diff_tables(a, b, names=COMPARED) -> dict:
    """{table: (rows only in a, rows only in b)} for every table that differs."""
    out = {}
    for n in names:
        ra, rb = table_rows(a, n), table_rows(b, n)
        if ra != rb:
            sa, sb = set(ra), set(rb)
            out[n] = (len(ra), len(rb), sorted(sa - sb)[:3], sorted(sb - sa)[:3])
    return out


def progress_totals(tables_dir) -> dict:
    rows = read_table(str(tables_dir), "progress").to_pylist()
    return {k: sum(r[k] or 0 for r in rows) for k in ("input_rows", "applied", "rejected")}


def engine_info(table_dir) -> set[str]:
    """Who wrote the table's batches: the engineInfo (Spark's, "Apache-Spark/... Delta-Lake/...") or
    clientVersion (delta-rs's) of each commit that records an app transaction (a micro-batch's
    write; not the delta-rs CREATE TABLE every table starts with)."""
    from pathlib import Path
    infos = set()
    for f in sorted((Path(table_dir) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if any("txn" in a for a in actions):
            for a in actions:
                if "commitInfo" in a:
                    ci = a["commitInfo"]
                    infos.add(str(ci.get("engineInfo") or ci.get("clientVersion") or ""))
    return infos
