"""The audit section of `isrflow report` (shown when the tables directory has an `audit` table)."""
from __future__ import annotations

import html
import json
from pathlib import Path


def _e(v) -> str:
    return html.escape("null" if v is None else str(v))


def audit_section(tables_dir, max_rows: int = 200) -> str:
    root = Path(tables_dir)
    if not (root / "audit" / "_delta_log").exists():
        return ""
    from jobs.delta_sink import read_table
    rows = read_table(str(root), "audit").to_pylist()
    inv = []
    if (root / "audit_invariants" / "_delta_log").exists():
        inv = read_table(str(root), "audit_invariants").to_pylist()
    summary = {}
    if (root / "_audit.json").exists():
        summary = json.loads((root / "_audit.json").read_text())
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    decisions = sum(v for k, v in counts.items() if k != "isrflow_only")
    cards = "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{v:,}</div></div>'
                    for k, v in [("decisions", decisions)] + sorted(counts.items()))
    whys: dict[str, int] = {}
    for r in rows:
        if r["verdict"] != "agree":
            whys[r.get("why") or ""] = whys.get(r.get("why") or "", 0) + 1
    why_html = "".join(f"<tr><td>{n}</td><td>{_e(w)}</td></tr>" for w, n in sorted(whys.items(), key=lambda x: -x[1]))
    cols = ("offset", "topic", "partition", "cause", "verdict", "diff", "kafka_leader", "kafka_isr", "kafka_elr",
            "kafka_last_known_elr", "kafka_leader_epoch", "kafka_partition_epoch", "isrflow_leader", "isrflow_isr",
            "isrflow_elr", "isrflow_last_known_elr", "isrflow_leader_epoch", "isrflow_partition_epoch", "rule",
            "why")
    bad = [r for r in rows if r["verdict"] != "agree"][:max_rows]
    table = ("<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in cols) + "</tr>" for r in bad)
             + "</table>") if bad else "<p>Every real decision agrees with isrflow&rsquo;s.</p>"
    inv_counts: dict[str, int] = {}
    for f in inv:
        inv_counts[f["invariant"]] = inv_counts.get(f["invariant"], 0) + 1
    inv_rows = "".join(f"<tr><td>{_e(f.get('offset'))}</td><td>{_e(f['invariant'])}</td><td>{_e(f.get('detail'))}"
                       f"</td><td>{_e(f.get('duration_ms'))}</td></tr>" for f in inv[:max_rows])
    imp = summary.get("import", {})
    note = (f"Imported {imp.get('records', '?')} records, {imp.get('events', '?')} stream rows; skipped "
            f"{imp.get('skipped', '?')}; {len(imp.get('issues', []))} issue(s). ") if imp else ""
    return ('<section id="audit"><h2>Audit of a real metadata log</h2>'
            f'<p class="note">{_e(note)}Each PartitionRecord / PartitionChangeRecord of the real controller next to '
            'the change isrflow committed for the same event (docs/metadata-import.md).</p>'
            f'<div class="cards">{cards}</div>'
            + (f"<h3>Differences by cause</h3><table><tr><th>rows</th><th>why</th></tr>{why_html}</table>"
               if why_html else "")
            + f"<h3>Decisions that differ</h3>{table}"
            + "<h3>Invariants on the real history</h3>"
            + ("<p>" + ", ".join(f"{_e(k)}: {v}" for k, v in sorted(inv_counts.items())) + "</p>"
               f"<table><tr><th>offset</th><th>invariant</th><th>detail</th><th>duration ms</th></tr>{inv_rows}"
               "</table>" if inv else "<p>No finding.</p>")
            + "</section>")
