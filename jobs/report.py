"""One self-contained HTML report of a replay (SPEC §4 `isrflow report`).

``build_report(tables_dir, out_html, compare_dir=None, partitions=None,
max_partitions=6)`` writes a single HTML file: no network, no external CSS or
JS, plots as inline SVG drawn here. It shows

* the what-if comparison with ``compare_dir`` (``jobs.compare``) at the top;
* summary cards (events, partitions, elections, violations, acknowledged
  records lost, produce outcomes, time without leader / under min ISR);
* bar charts: produce outcomes, elections by type, violations by invariant;
* per chosen partition (default: most violations, then most acknowledged
  records lost, then most elections, then longest without a leader; with
  ``compare_dir`` the ranking counts both runs and each partition is drawn
  for both), on one event-time axis:
  - offsets: each leader's high watermark (``hwm`` rows, one line per
    leadership term, ending when the term ends), the leader's log end offset
    after each append (``produce`` rows with a ``base_offset``:
    base_offset + records), followers' LEO where a fetch was logged
    (``fetch.replica_leo``; by default only errors, no-ops and divergence
    are logged, so these are samples, not a series), truncations (diverging
    fetches, fetch_offset -> truncated_to), each replica's final LEO
    (``partition_state``), and the invariant violations as red markers;
  - ISR and ELR size (``metadata_log`` step lines) against the effective min
    ISR, under-min-ISR time shaded;
  - leadership: the leader of each interval as coloured bands (hatched: none);
* the violations table (seq, ts, partition, invariant, detail).
"""
from __future__ import annotations

import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jobs.compare import NO_LEADER, Run, compare_summaries, fmt_delta, fmt_int, fmt_ms, fmt_value, summarize

MAX_VIOLATION_ROWS = 1000
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"]
RED = "#d62728"


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def broker_color(b) -> str:
    if b is None or b < 0:
        return "#9e9e9e"
    return PALETTE[(int(b) - 1) % len(PALETTE)] if b >= 1 else PALETTE[0]


# ---------------------------------------------------------------------------
# Scales and ticks
# ---------------------------------------------------------------------------


class Scale:
    def __init__(self, d0: float, d1: float, r0: float, r1: float):
        if d1 <= d0:
            d1 = d0 + 1
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, v: float) -> float:
        return self.r0 + (v - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out


_TIME_STEPS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000,
                  300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000]


def time_ticks(span_ms: int, n: int = 10) -> tuple[list[int], int]:
    span_ms = max(int(span_ms), 1)
    step = next((s for s in _TIME_STEPS_MS if span_ms / s <= n), _TIME_STEPS_MS[-1])
    return list(range(0, span_ms + 1, step)), step


def fmt_rel(ms: int, step: int) -> str:
    """Tick label for a time since the run start."""
    if step >= 60_000 or ms >= 600_000:
        s = ms // 1000
        if s >= 3600:
            return f"{s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"
        return f"{s // 60}:{s % 60:02d}"
    if step >= 1000:
        return f"{ms / 1000:g}"
    return f"{ms:,}"


def time_unit_label(step: int, span: int) -> str:
    if step >= 60_000 or span >= 600_000:
        return "min:s" if span < 3_600_000 else "h:min:s"
    if step >= 1000:
        return "s"
    return "ms"


def fmt_num(v: float) -> str:
    if abs(v) >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def thin_points(pts: list[tuple[float, float]], max_pts: int = 1500) -> list[tuple[float, float]]:
    """Keep first / min / max / last per pixel column (pts are in pixels, x-sorted)."""
    if len(pts) <= max_pts:
        return pts
    out: list[tuple[float, float]] = []
    bucket: list[tuple[float, float]] = []
    cur = None
    for p in pts:
        col = int(p[0])
        if col != cur and bucket:
            out.extend(_bucket_keep(bucket))
            bucket = []
        cur = col
        bucket.append(p)
    if bucket:
        out.extend(_bucket_keep(bucket))
    return out


def _bucket_keep(b):
    if len(b) <= 4:
        return b
    lo = min(b, key=lambda p: p[1])
    hi = max(b, key=lambda p: p[1])
    keep = {id(b[0]): b[0], id(lo): lo, id(hi): hi, id(b[-1]): b[-1]}
    return [p for p in b if id(p) in keep]


def step_path(points: Sequence[tuple[float, float]], x_end: float) -> str:
    """SVG path of a step function through (x, y) pixel points, held until x_end."""
    if not points:
        return ""
    d = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for (x, y) in points[1:]:
        d.append(f"H{x:.1f}V{y:.1f}")
    d.append(f"H{x_end:.1f}")
    return "".join(d)


# ---------------------------------------------------------------------------
# Bar charts
# ---------------------------------------------------------------------------


def bar_chart(title: str, data: dict[str, int], *, data_b: Optional[dict[str, int]] = None,
              unit: str = "count", color: str = "#1f77b4", colors: Optional[dict[str, str]] = None,
              width: int = 520) -> str:
    """Horizontal bar chart (one bar per key; with data_b two bars per key: A and B)."""
    keys = list(dict.fromkeys(list(data) + list(data_b or {})))
    if not keys:
        return (f'<div class="chart"><h3>{esc(title)}</h3><p class="muted">none</p></div>')
    label_w, val_w = 200, 70
    bar_h = 14 if data_b is not None else 18
    per = bar_h * (2 if data_b is not None else 1) + 10
    h = 24 + per * len(keys) + 26
    vmax = max([data.get(k, 0) for k in keys] + [(data_b or {}).get(k, 0) for k in keys] + [1])
    x = Scale(0, vmax, label_w, width - val_w)
    parts = [f'<svg class="bars" viewBox="0 0 {width} {h}" width="{width}" height="{h}" role="img" '
             f'aria-label="{esc(title)}">']
    if vmax < 20:  # counts: integer ticks
        ticks = list(range(0, int(vmax) + 1, max(1, math.ceil(vmax / 5))))
    else:
        ticks = nice_ticks(0, vmax, 4)
    for t in ticks:
        xx = x(t)
        parts.append(f'<line x1="{xx:.1f}" y1="16" x2="{xx:.1f}" y2="{h - 22}" class="grid"/>')
        parts.append(f'<text x="{xx:.1f}" y="{h - 8}" class="tick" text-anchor="middle">{esc(fmt_num(t))}</text>')
    y = 22
    for k in keys:
        series = [("A", data.get(k, 0), (colors or {}).get(k, color))]
        if data_b is not None:
            series = [("A", data.get(k, 0), "#4e79a7"), ("B", data_b.get(k, 0), "#f28e2b")]
        parts.append(f'<text x="{label_w - 8}" y="{y + (per - 10) / 2 + 4:.1f}" class="lbl" '
                     f'text-anchor="end">{esc(k)}</text>')
        for i, (side, v, c) in enumerate(series):
            yy = y + i * bar_h
            w = max(x(v) - label_w, 0.0 if v == 0 else 1.0)
            tip = f"{k}: {v:,}" + (f" ({side})" if data_b is not None else "")
            parts.append(f'<rect x="{label_w}" y="{yy}" width="{w:.1f}" height="{bar_h - 3}" fill="{c}" rx="2">'
                         f'<title>{esc(tip)}</title></rect>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{yy + bar_h - 5}" class="val">'
                         f'{esc(f"{v:,}")}</text>')
        y += per
    parts.append(f'<text x="{width - 4}" y="{h - 8}" class="tick" text-anchor="end">{esc(unit)}</text>')
    parts.append("</svg>")
    legend = ""
    if data_b is not None:
        legend = ('<div class="legend"><span><i style="background:#4e79a7"></i>A (this run)</span>'
                  '<span><i style="background:#f28e2b"></i>B (compared)</span></div>')
    return f'<div class="chart"><h3>{esc(title)}</h3>{"".join(parts)}{legend}</div>'


# ---------------------------------------------------------------------------
# Per-partition data
# ---------------------------------------------------------------------------


def _filter_part(t: Optional[pa.Table], key: tuple) -> list[dict]:
    if t is None or t.num_rows == 0:
        return []
    m = pc.and_(pc.equal(t["topic"], key[0]), pc.equal(t["partition"], key[1]))
    sub = t.filter(m.fill_null(False))
    if sub.num_rows == 0:
        return []
    return sub.sort_by([("seq", "ascending"), ("idx", "ascending")]).to_pylist()


class PartData:
    def __init__(self, run: Run, key: tuple):
        self.key = key
        self.tl = run.timelines.get(key, {"segments": [], "leaderless": [], "under_min_isr": []})
        self.hwm = _filter_part(run.table("hwm"), key)
        self.produce = [r for r in _filter_part(run.table("produce"), key) if r["base_offset"] is not None]
        self.fetch = [r for r in _filter_part(run.table("fetch"), key) if r["replica_leo"] is not None
                      or r["truncated_to"] is not None]
        self.violations = _filter_part(run.table("violations"), key)
        self.elections = _filter_part(run.table("elections"), key)
        st = _filter_part(run.table("partition_state"), key)
        self.final = st[-1] if st else None


def _term_end(segs: list[dict], broker, epoch, t_start: int, end_ts: int) -> int:
    """When the leadership term (broker, leader_epoch) that was current at t_start ended."""
    for s in segs:
        if s["t0"] >= t_start and (s["leader"] != broker or (epoch is not None and s["leader_epoch"] != epoch)):
            return s["t0"]
    return end_ts


# ---------------------------------------------------------------------------
# Partition chart
# ---------------------------------------------------------------------------

W = 1100
ML, MR = 78, 150
OFF_TOP, OFF_H = 14, 230
ISR_TOP, ISR_H = OFF_TOP + OFF_H + 22, 100
LEAD_TOP, LEAD_H = ISR_TOP + ISR_H + 22, 30
AXIS_Y = LEAD_TOP + LEAD_H
H = AXIS_Y + 44


def offset_max(pd: PartData) -> int:
    """The largest offset the partition's offset panel shows."""
    vals = [r["new_hwm"] for r in pd.hwm if r["new_hwm"] is not None]
    vals += [r["base_offset"] + (r["records"] or 0) for r in pd.produce]
    vals += [r["replica_leo"] for r in pd.fetch if r["replica_leo"] is not None]
    vals += [r["fetch_offset"] for r in pd.fetch if r["fetch_offset"] is not None]
    vals += [s["leo"] for s in ((pd.final or {}).get("replica_states") or []) if s.get("leo") is not None]
    return max(vals + [1])


def partition_chart(run: Run, pd: PartData, t0: int, t1: int, side: str = "", vmax: Optional[int] = None) -> str:
    """SVG of one partition (offsets, ISR/ELR, leadership) over [t0, t1]; vmax: offset-axis maximum
    (shared when two runs are drawn)."""
    key = pd.key
    x = Scale(t0, t1, ML, W - MR)
    xe = x(t1)
    uid = f"{side}{key[0]}-{key[1]}".replace(" ", "_")
    out = [f'<svg class="pchart" viewBox="0 0 {W} {H}" width="100%" role="img" '
           f'aria-label="{esc(f"partition {key[0]}-{key[1]} timeline")}">',
           '<defs><pattern id="hatch-' + esc(uid) + '" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f3f3"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="#b0b0b0" stroke-width="2"/></pattern></defs>']

    _time_grid(out, x, t0, t1)
    y = _offsets_axis(out, pd, xe, vmax)
    segs = pd.tl["segments"]
    _offset_lines(out, pd, segs, x, y, t1)
    _fetch_marks(out, pd, x, y)
    _final_leos(out, pd, y, xe)
    _violation_marks(out, pd, x)
    _isr_panel(out, pd, segs, x, xe)
    _leader_band(out, segs, x, xe, uid)
    out.append("</svg>")
    return "".join(out)


def _time_grid(out: list, x, t0: int, t1: int) -> None:
    span = t1 - t0
    ticks, step = time_ticks(span)
    for tk in ticks:
        xx = x(t0 + tk)
        out.append(f'<line x1="{xx:.1f}" y1="{OFF_TOP}" x2="{xx:.1f}" y2="{AXIS_Y}" class="grid"/>')
        out.append(f'<text x="{xx:.1f}" y="{AXIS_Y + 16}" class="tick" text-anchor="middle">'
                   f'{esc(fmt_rel(tk, step))}</text>')
    unit = time_unit_label(step, span)
    out.append(f'<text x="{(ML + W - MR) / 2:.1f}" y="{AXIS_Y + 36}" class="axis" text-anchor="middle">'
               f'event time since ts_ms={t0:,} ({esc(unit)})</text>')


def _offsets_axis(out: list, pd: PartData, xe: float, vmax):
    """The offsets panel's frame and axis; returns its y scale."""
    vmax = max(offset_max(pd), vmax or 0)
    yt = nice_ticks(0, vmax, 5)
    if yt[-1] < vmax:
        yt.append(yt[-1] + (yt[1] - yt[0] if len(yt) > 1 else vmax))
    y = Scale(0, yt[-1], OFF_TOP + OFF_H, OFF_TOP)
    out.append(f'<rect x="{ML}" y="{OFF_TOP}" width="{xe - ML:.1f}" height="{OFF_H}" class="panel"/>')
    for v in yt:
        yy = y(v)
        out.append(f'<line x1="{ML}" y1="{yy:.1f}" x2="{xe:.1f}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{ML - 6}" y="{yy + 4:.1f}" class="tick" text-anchor="end">{esc(fmt_num(v))}</text>')
    out.append(f'<text transform="translate(16,{OFF_TOP + OFF_H / 2}) rotate(-90)" class="axis" '
               f'text-anchor="middle">offset (records)</text>')
    return y


def _offset_lines(out: list, pd: PartData, segs, x, y, t1: int) -> None:
    # leader LEO after appends, per leadership term
    terms: dict[tuple, list] = defaultdict(list)
    for r in pd.produce:
        terms[(r["broker"], r["leader_epoch"])].append((r["ts_ms"], r["base_offset"] + (r["records"] or 0)))
    for (b, ep), pts in terms.items():
        pts.sort()
        end = _term_end(segs, b, ep, pts[0][0], t1)
        px = thin_points([(x(t), y(v)) for t, v in pts])
        out.append(f'<path d="{step_path(px, x(max(end, pts[-1][0])))}" class="leo" stroke="{broker_color(b)}">'
                   f'<title>{esc(f"leader {b} LEO after appends (epoch {ep})")}</title></path>')
    # HWM per leadership term
    hterms: dict[tuple, list] = defaultdict(list)
    for r in pd.hwm:
        if r["new_hwm"] is not None:
            hterms[(r["broker"], r["leader_epoch"])].append((r["ts_ms"], r["new_hwm"]))
    for (b, ep), pts in hterms.items():
        end = _term_end(segs, b, ep, pts[0][0], t1)
        px = thin_points([(x(t), y(v)) for t, v in pts])
        out.append(f'<path d="{step_path(px, x(max(end, pts[-1][0])))}" class="hwm" stroke="{broker_color(b)}">'
                   f'<title>{esc(f"HWM of leader {b} (epoch {ep}): last {pts[-1][1]:,}")}</title></path>')


def _fetch_marks(out: list, pd: PartData, x, y) -> None:
    # follower LEO samples + truncations
    for r in pd.fetch:
        xx = x(r["ts_ms"])
        c = broker_color(r["broker"])
        if r["truncated_to"] is not None and r["fetch_offset"] is not None and r["fetch_offset"] != r["truncated_to"]:
            trunc_tip = (f"broker {r['broker']} truncated {r['fetch_offset']:,} -> {r['truncated_to']:,} "
                         f"({r['result']})")
            out.append(f'<line x1="{xx:.1f}" y1="{y(r["fetch_offset"]):.1f}" x2="{xx:.1f}" '
                       f'y2="{y(r["truncated_to"]):.1f}" class="trunc" stroke="{c}"/>')
            out.append(f'<path d="M{xx - 4:.1f},{y(r["truncated_to"]) - 5:.1f}l4,5l4,-5" class="trunc" stroke="{c}">'
                       f'<title>{esc(trunc_tip)}</title>'
                       f'</path>')
        if r["replica_leo"] is not None:
            leo_tip = f"broker {r['broker']} LEO {r['replica_leo']:,} after fetch ({r['result']})"
            out.append(f'<circle cx="{xx:.1f}" cy="{y(r["replica_leo"]):.1f}" r="2.6" class="sample" stroke="{c}">'
                       f'<title>{esc(leo_tip)}'
                       f'</title></circle>')


def _final_leos(out: list, pd: PartData, y, xe: float) -> None:
    # final LEO per replica
    labels = []
    fin = (pd.final or {}).get("replica_states") or []
    for s in sorted(fin, key=lambda s: -(s.get("leo") or 0)):
        if s.get("leo") is None:
            continue
        yy = y(s["leo"])
        c = broker_color(s["broker"])
        out.append(f'<path d="M{xe + 2:.1f},{yy:.1f}l7,-4.5v9z" fill="{c}"/>')
        ly = yy + 4
        end_lbl = f"b{s['broker']} LEO {s['leo']:,}"
        for prev in labels:
            if abs(prev - ly) < 12:
                ly = prev + 12
        labels.append(ly)
        out.append(f'<text x="{xe + 12:.1f}" y="{ly:.1f}" class="endlbl" fill="{c}">'
                   f'{esc(end_lbl)}</text>')


def _violation_marks(out: list, pd: PartData, x) -> None:
    # violations
    for v in pd.violations:
        xx = x(v["ts_ms"])
        vtip = f"seq {v['seq']} {v['invariant']}: {v['detail']}"
        out.append(f'<line x1="{xx:.1f}" y1="{OFF_TOP}" x2="{xx:.1f}" y2="{ISR_TOP + ISR_H}" class="viol"/>')
        out.append(f'<circle cx="{xx:.1f}" cy="{OFF_TOP + 6}" r="4.5" fill="{RED}"><title>'
                   f'{esc(vtip)}</title></circle>')


def _isr_panel(out: list, pd: PartData, segs, x, xe: float) -> None:
    nrep = max([len(s["replicas"]) for s in segs] + [len(s["isr"]) for s in segs] + [1])
    yi = Scale(0, nrep, ISR_TOP + ISR_H, ISR_TOP + 6)
    out.append(f'<rect x="{ML}" y="{ISR_TOP}" width="{xe - ML:.1f}" height="{ISR_H}" class="panel"/>')
    for a, b in pd.tl["under_min_isr"]:
        out.append(f'<rect x="{x(a):.1f}" y="{ISR_TOP}" width="{max(x(b) - x(a), 1):.1f}" height="{ISR_H}" '
                   f'class="undermin"><title>{esc(f"under min ISR for {fmt_ms(b - a)}")}</title></rect>')
    for v in range(0, nrep + 1):
        yy = yi(v)
        out.append(f'<line x1="{ML}" y1="{yy:.1f}" x2="{xe:.1f}" y2="{yy:.1f}" class="grid"/>')
        out.append(f'<text x="{ML - 6}" y="{yy + 4:.1f}" class="tick" text-anchor="end">{v}</text>')
    out.append(f'<text transform="translate(16,{ISR_TOP + ISR_H / 2}) rotate(-90)" class="axis" '
               f'text-anchor="middle">replicas</text>')
    if segs:
        mi = [(x(s["t0"]), yi(s["min_isr"])) for s in segs]
        out.append(f'<path d="{step_path(mi, xe)}" class="minisr"><title>effective min ISR</title></path>')
        elr = [(x(s["t0"]), yi(len(s["elr"])) + 1.5) for s in segs]
        out.append(f'<path d="{step_path(elr, xe)}" class="elr"><title>ELR size</title></path>')
        isr = [(x(s["t0"]), yi(len(s["isr"]))) for s in segs]
        out.append(f'<path d="{step_path(isr, xe)}" class="isr"><title>ISR size</title></path>')
        last = segs[-1]
        out.append(f'<text x="{xe + 6:.1f}" y="{yi(len(last["isr"])) + 4:.1f}" class="endlbl" fill="#222">'
                   f'ISR {esc(last["isr"])}</text>')
        if last["elr"]:
            out.append(f'<text x="{xe + 6:.1f}" y="{yi(len(last["elr"])) + 16:.1f}" class="endlbl" fill="#2ca02c">'
                       f'ELR {esc(last["elr"])}</text>')


def _leader_band(out: list, segs, x, xe: float, uid: str) -> None:
    out.append(f'<text transform="translate(16,{LEAD_TOP + LEAD_H / 2}) rotate(-90)" class="axis" '
               f'text-anchor="middle" style="font-size:10px">leader</text>')
    merged: list[list] = []
    for s in segs:
        if merged and merged[-1][2] == s["leader"]:
            merged[-1][1] = s["t1"]
        else:
            merged.append([s["t0"], s["t1"], s["leader"], s["leader_epoch"]])
    for a, b, ld, ep in merged:
        xa, xb = x(a), x(b)
        w = max(xb - xa, 0.8)
        if ld is None or ld == NO_LEADER:
            fill = f'url(#hatch-{esc(uid)})'
            tip = f"no leader for {fmt_ms(b - a)}"
            lbl = "none"
        else:
            fill = broker_color(ld)
            tip = f"leader {ld} (epoch {ep}) for {fmt_ms(b - a)}"
            lbl = f"b{ld}"
        out.append(f'<rect x="{xa:.1f}" y="{LEAD_TOP}" width="{w:.1f}" height="{LEAD_H}" fill="{fill}" '
                   f'class="band"><title>{esc(tip)}</title></rect>')
        if w > 30:
            cls = "bandlbl dark" if ld == NO_LEADER else "bandlbl"
            out.append(f'<text x="{xa + w / 2:.1f}" y="{LEAD_TOP + LEAD_H / 2 + 4}" class="{cls}" '
                       f'text-anchor="middle">{esc(lbl)}</text>')
    out.append(f'<rect x="{ML}" y="{LEAD_TOP}" width="{xe - ML:.1f}" height="{LEAD_H}" class="frame"/>')


def partition_legend(brokers: Iterable[int]) -> str:
    items = "".join(f'<span><i style="background:{broker_color(b)}"></i>broker {esc(b)}</span>'
                    for b in sorted(set(b for b in brokers if b is not None and b >= 0)))
    return (
        '<div class="legend">'
        f'{items}'
        '<span><svg width="26" height="10"><line x1="0" y1="5" x2="26" y2="5" stroke="#555" stroke-width="2.4"/>'
        '</svg>leader HWM</span>'
        '<span><svg width="26" height="10"><line x1="0" y1="5" x2="26" y2="5" stroke="#555" stroke-width="1.2" '
        'stroke-dasharray="4 3"/></svg>leader LEO after appends</span>'
        '<span><svg width="12" height="10"><circle cx="6" cy="5" r="3" fill="#fff" stroke="#555"/></svg>'
        'follower LEO at a logged fetch</span>'
        '<span><svg width="14" height="12"><path d="M2,4l5,5l5,-5" fill="none" stroke="#555" stroke-width="1.5"/>'
        '</svg>truncation</span>'
        f'<span><svg width="12" height="12"><circle cx="6" cy="6" r="4.5" fill="{RED}"/></svg>violation</span>'
        '<span><svg width="26" height="10"><line x1="0" y1="5" x2="26" y2="5" stroke="#222" stroke-width="2.2"/>'
        '</svg>ISR size</span>'
        '<span><svg width="26" height="10"><line x1="0" y1="5" x2="26" y2="5" stroke="#2ca02c" stroke-width="2"/>'
        '</svg>ELR size</span>'
        '<span><svg width="26" height="10"><line x1="0" y1="5" x2="26" y2="5" stroke="#d62728" stroke-width="1.5" '
        'stroke-dasharray="6 3"/></svg>min ISR</span>'
        '<span><i style="background:rgba(214,39,40,.16)"></i>under min ISR</span>'
        '<span><i class="hatch"></i>no leader</span>'
        '</div>')


# ---------------------------------------------------------------------------
# Choosing partitions
# ---------------------------------------------------------------------------


def _per_part_counts(run: Run, name: str) -> dict[tuple, int]:
    t = run.table(name)
    if t is None or t.num_rows == 0:
        return {}
    g = t.group_by(["topic", "partition"]).aggregate([("seq", "count")]).to_pylist()
    return {(r["topic"], r["partition"]): int(r["seq_count"]) for r in g}


def _lost_per_part(run: Run) -> dict[tuple, int]:
    from jobs.compare import parse_acked_lost
    t = run.table("violations")
    out: dict[tuple, int] = defaultdict(int)
    if t is None or t.num_rows == 0:
        return out
    for r in t.select(["topic", "partition", "invariant", "detail"]).to_pylist():
        if r["invariant"] == "AckedRecordsDurable":
            out[(r["topic"], r["partition"])] += parse_acked_lost(r["detail"])
    return out


def choose_partitions(runs: Sequence[Run], max_partitions: int) -> list[tuple]:
    score: dict[tuple, list] = defaultdict(lambda: [0, 0, 0, 0])
    for run in runs:
        for k, n in _per_part_counts(run, "violations").items():
            score[k][0] += n
        for k, n in _lost_per_part(run).items():
            score[k][1] += n
        for k, n in _per_part_counts(run, "elections").items():
            score[k][2] += n
        for k, tl in run.timelines.items():
            score[k][3] += sum(b - a for a, b in tl["leaderless"])
    for run in runs:
        for k in run.partitions:
            score[k]
    ranked = sorted(score, key=lambda k: tuple(-v for v in score[k]) + (str(k[0]), k[1]))
    return ranked[:max_partitions]


def parse_partition(s) -> tuple:
    """'topic-3' / 'topic:3' / ('topic', 3) -> ('topic', 3)."""
    if isinstance(s, (tuple, list)):
        return (str(s[0]), int(s[1]))
    s = str(s)
    for sep in (":", "-"):
        if sep in s:
            t, p = s.rsplit(sep, 1)
            if p.strip().isdigit():
                return (t, int(p))
    raise ValueError(f"partition {s!r}: expected TOPIC-N or TOPIC:N")


# ---------------------------------------------------------------------------
# Page
# ---------------------------------------------------------------------------

CSS = """
:root{--fg:#1d2330;--muted:#667085;--line:#e4e7ec;--bg:#f7f8fa;--card:#fff;--accent:#1f5fbf;--bad:#c0262d;--good:#1a7f37}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Liberation Sans",sans-serif;
 color:var(--fg);background:var(--bg)}
header{background:#17233b;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px;font-weight:600;letter-spacing:.2px}
header .sub{color:#c7d0e0;font-size:13px;margin-top:4px;overflow-wrap:anywhere}
header code{background:#2a3a5c;color:#e8edf6}
main{max-width:1240px;margin:0 auto;padding:20px 32px 48px}
h2{font-size:18px;margin:28px 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:0 0 8px;color:#344054}
.muted{color:var(--muted)}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card .k{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.4px}
.card .v{font-size:24px;font-weight:600;margin-top:2px;font-variant-numeric:tabular-nums}
.card .d{font-size:12px;color:var(--muted);margin-top:2px}
.card.bad{border-color:#f3c1c3;background:#fff7f7}.card.bad .v{color:var(--bad)}
.card.good .v{color:var(--good)}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start;margin-top:12px}
.chart{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
table{border-collapse:collapse;background:var(--card);font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600;font-size:12px;color:#344054;position:sticky;top:0}
td.n,th.n{text-align:right;white-space:nowrap}
.cmpgrid{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.cmpside{display:flex;flex-direction:column;gap:12px}
.cmp{border:1px solid var(--line);font-size:13px}.cmp td,.cmp th{padding:3px 10px}
.cmp.main{min-width:560px}.cmp td.n{min-width:90px}
.cmp td.worse{color:var(--bad);font-weight:600}.cmp td.better{color:var(--good);font-weight:600}
.cmp tr.sec td{background:#fafbfc;color:var(--muted);font-size:12px;font-weight:600}
.verdict{background:#fffbea;border:1px solid #f1e2a4;border-radius:8px;padding:12px 16px;margin:12px 0}
.part{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px;margin:14px 0}
.part h3{font-size:16px;margin:0 0 4px}
.part h4{font-size:13px;margin:10px 0 2px;color:#475467}
.badges span{display:inline-block;font-size:12px;border-radius:10px;padding:1px 8px;margin:0 6px 4px 0;
 background:#eef2f7;color:#344054}
.badges span.bad{background:#fde8e8;color:var(--bad)}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;color:#475467;margin:6px 0 2px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px}
.legend i.hatch{background:repeating-linear-gradient(45deg,#f3f3f3 0 3px,#b0b0b0 3px 5px)}
.legend svg{overflow:visible}
svg text{font-family:inherit}
.tick{font-size:11px;fill:#475467}.axis{font-size:12px;fill:#344054}
.lbl{font-size:12px;fill:#344054}.val{font-size:11px;fill:#475467}
.endlbl{font-size:11px;font-weight:600}
.grid{stroke:#eceef2;stroke-width:1}
.panel{fill:#fff;stroke:#d0d5dd}
.frame{fill:none;stroke:#d0d5dd}
.hwm{fill:none;stroke-width:2.4}
.leo{fill:none;stroke-width:1.2;stroke-dasharray:4 3;opacity:.85}
.sample{fill:#fff;stroke-width:1.4}
.trunc{fill:none;stroke-width:1.6}
.viol{stroke:#d62728;stroke-width:1;stroke-dasharray:3 3;opacity:.7}
.isr{fill:none;stroke:#222;stroke-width:2.2}
.elr{fill:none;stroke:#2ca02c;stroke-width:2}
.minisr{fill:none;stroke:#d62728;stroke-width:1.5;stroke-dasharray:6 3}
.undermin{fill:rgba(214,39,40,.16)}
.band{stroke:#fff;stroke-width:.5}
.bandlbl{font-size:11px;fill:#fff;font-weight:600}.bandlbl.dark{fill:#555}
.vtable{width:100%;border:1px solid var(--line);font-size:13px}
.vtable td.detail{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12px}
.tablewrap{max-height:560px;overflow:auto;border-radius:8px}
.note{font-size:12px;color:var(--muted);margin:4px 0}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12px;
 background:#eef1f5;padding:1px 4px;border-radius:3px}
footer{color:var(--muted);font-size:12px;margin-top:32px}
"""


def _card(k: str, v: str, d: str = "", cls: str = "") -> str:
    return (f'<div class="card {cls}"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div>'
            f'<div class="d">{esc(d)}</div></div>')


def _cards(s: dict) -> str:
    el = s["elections"]
    by = ", ".join(f"{k} {v:,}" for k, v in el["by_type"].items()) or "none"
    vio = s["violations"]
    lost = s["acked_lost"]
    pr = s["produce"]
    acked = pr["by_result"].get("ACKED", 0)
    failed = pr["total"] - acked
    ll, um = s["leaderless"], s["under_min_isr"]
    cards = [
        _card("Input events", fmt_int(s["events"]),
              f"{fmt_int(s['rejected'])} rejected" if s["rejected"] is not None else ""),
        _card("Partitions", fmt_int(s["partitions"]), f"over {fmt_ms(s['duration_ms'])} of event time"),
        _card("Elections", fmt_int(el["leader_changes"]), by),
        _card("Invariant violations", fmt_int(vio["total"]),
              f"in {vio['partitions']:,} partition(s)" if vio["total"] else "all invariants held",
              "bad" if vio["total"] else "good"),
        _card("Acked records lost", fmt_int(lost["records"]),
              f"acks=all, in {lost['partitions']:,} partition(s)" if lost["records"] else "acks=all: none lost",
              "bad" if lost["records"] else "good"),
        _card("HWM regressions", fmt_int(s["hwm_regressions"]["total"]),
              f"{s['hwm_regressions']['violations']:,} true-HWM, {s['hwm_regressions']['hwm_rows']:,} leader HWM",
              "bad" if s["hwm_regressions"]["total"] else ""),
        _card("Produce requests", fmt_int(pr["total"]),
              f"{acked:,} acked, {failed:,} failed" if pr["total"] else ""),
        _card("Time without leader", fmt_ms(ll["total_ms"]),
              f"sum over {ll['partitions']:,} partition(s); worst {fmt_ms(ll['max_ms'])}"
              if ll["total_ms"] else "always a leader"),
        _card("Time under min ISR", fmt_ms(um["total_ms"]),
              f"sum over {um['partitions']:,} partition(s); worst {fmt_ms(um['max_ms'])}"
              if um["total_ms"] else "never under min ISR"),
    ]
    return '<div class="cards">' + "".join(cards) + "</div>"


def _cmp_table(metrics: list[dict], title: str, cls: str = "") -> str:
    rows = []
    for m in metrics:
        c = ""
        if m["kind"] in ("count", "ms") and m["delta"]:
            c = "worse" if m["delta"] > 0 else "better"
        label = m["label"].split(": ", 1)[1] if ": " in m["label"] else m["label"]
        rows.append(f'<tr><td>{esc(label)}</td><td class="n">{esc(fmt_value(m["a"], m["kind"]))}</td>'
                    f'<td class="n">{esc(fmt_value(m["b"], m["kind"]))}</td>'
                    f'<td class="n {c}">{esc(fmt_delta(m["delta"], m["kind"]))}</td></tr>')
    return (f'<table class="cmp {cls}"><thead><tr><th>{esc(title)}</th><th class="n">A</th><th class="n">B</th>'
            '<th class="n">B &minus; A</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")


def _compare_section(cmp: dict, a_dir, b_dir) -> str:
    section_of = {"elections.by_type": "Elections by type", "violations.by_invariant": "Violations by invariant",
                  "produce.by_result": "Produce outcomes"}
    groups: dict[str, list] = {"Overview": []}
    for m in cmp["metrics"]:
        sec = next((v for k, v in section_of.items() if m["key"].startswith(k + ".")), "Overview")
        groups.setdefault(sec, []).append(m)
    main_tbl = _cmp_table(groups.pop("Overview"), "metric", "main")
    side = "".join(_cmp_table(ms, sec) for sec, ms in groups.items())
    diff = ""
    if cmp.get("config_diff"):
        diff = ("<p>Configuration differences: " + "; ".join(
            f"<code>{esc(k)}</code> A=<b>{esc(a if a is not None else '(unset)')}</b> "
            f"B=<b>{esc(b if b is not None else '(unset)')}</b>" for k, (a, b) in cmp["config_diff"].items())
            + "</p>")
    elif cmp["a"].get("config") is None or cmp["b"].get("config") is None:
        diff = '<p class="note">Configurations unknown (no <code>_run.json</code> in one of the tables directories).</p>'
    charts = '<div class="charts">' + bar_chart(
        "Violations by invariant", cmp["a"]["violations"]["by_invariant"],
        data_b=cmp["b"]["violations"]["by_invariant"]) + bar_chart(
        "Produce outcomes (requests)", cmp["a"]["produce"]["by_result"],
        data_b=cmp["b"]["produce"]["by_result"]) + "</div>"
    return (
        '<section id="compare"><h2>What-if comparison</h2>'
        f'<p class="note">A (this report): <code>{esc(a_dir)}</code><br>B (compared): <code>{esc(b_dir)}</code></p>'
        f'{diff}<div class="verdict"><b>Verdict.</b> {esc(cmp["verdict"])}</div>'
        f'<div class="cmpgrid"><div>{main_tbl}</div><div class="cmpside">{side}</div></div>'
        '<p class="note">Times are event time summed over partitions; red: B is worse, green: B is better. '
        'Both runs replay the same recorded events: producers and followers act as the schedule says, not in '
        'reaction to the leaders each configuration elected, so after the runs diverge, produce and fetch '
        'outcomes (e.g. NOT_LEADER_OR_FOLLOWER to a broker that is no longer leader) partly reflect the '
        'schedule rather than the configuration.</p>'
        f"{charts}</section>")


def _violations_table(run: Run) -> str:
    t = run.table("violations")
    if t is None or t.num_rows == 0:
        return '<p class="muted">No invariant was broken.</p>'
    t = t.sort_by([("seq", "ascending"), ("topic", "ascending"), ("partition", "ascending"), ("idx", "ascending")])
    n = t.num_rows
    rows = t.slice(0, MAX_VIOLATION_ROWS).to_pylist()
    body = "".join(
        f'<tr><td class="n">{r["seq"]:,}</td><td class="n">{r["ts_ms"]:,}</td>'
        f'<td>{esc(r["topic"])}-{esc(r["partition"])}</td><td>{esc(r["invariant"])}</td>'
        f'<td class="detail">{esc(r["detail"])}</td></tr>' for r in rows)
    more = (f'<p class="note">Showing the first {MAX_VIOLATION_ROWS:,} of {n:,} violations '
            f'(query all with <code>isrflow sql --tables DIR "SELECT * FROM violations"</code>).</p>'
            if n > MAX_VIOLATION_ROWS else f'<p class="note">{n:,} violation(s).</p>')
    return (f'{more}<div class="tablewrap"><table class="vtable"><thead><tr><th class="n">seq</th>'
            f'<th class="n">ts_ms</th><th>partition</th><th>invariant</th><th>detail</th></tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def _badges(pd: PartData, run: Run) -> str:
    from jobs.compare import parse_acked_lost
    tl = run.timelines.get(pd.key, {"leaderless": [], "under_min_isr": []})
    lost = sum(parse_acked_lost(v["detail"]) for v in pd.violations if v["invariant"] == "AckedRecordsDurable")
    b = [(f"{len(pd.violations):,} violation(s)", bool(pd.violations)),
         (f"{lost:,} acked records lost", lost > 0),
         (f"{sum(1 for e in pd.elections if e['election'] != 'NONE'):,} election(s)", False),
         (f"no leader {fmt_ms(sum(y - x for x, y in tl['leaderless']))}", False),
         (f"under min ISR {fmt_ms(sum(y - x for x, y in tl['under_min_isr']))}", False)]
    if pd.final:
        b.append((f"final HWM {fmt_int(pd.final.get('leader_hwm'))}, leader {pd.final.get('leader')}", False))
    return '<div class="badges">' + "".join(
        f'<span class="{"bad" if bad else ""}">{esc(t)}</span>' for t, bad in b) + "</div>"


def _brokers_of(run: Run, key: tuple) -> set:
    tl = run.timelines.get(key)
    out = set()
    if tl:
        for s in tl["segments"]:
            out.update(s["replicas"])
    return out


def _subtitle(run, s: dict, cfg: dict) -> list[str]:
    sub = [f"tables <code>{esc(run.dir)}</code>"]
    if s.get("stream"):
        sub.append(f"stream <code>{esc(s['stream'])}</code>")
    if s.get("engine"):
        sub.append(f"engine {esc(s['engine'])}")
    if cfg:
        keys_of_interest = ("eligible.leader.replicas.enable", "min.insync.replicas",
                            "unclean.leader.election.enable", "unclean.recovery.manager.enabled",
                            "unclean.recovery.strategy")
        sub.append("config " + ", ".join(f"{esc(k)}={esc(cfg[k])}" for k in keys_of_interest if k in cfg)
                   + " (engine-wide; topic overrides from the stream apply)")
    return sub


def _partition_block(run, run_b, key, t0: int, t1: int) -> str:
    """One partition's charts (A, and B beside it in a what-if) on a shared offset axis."""
    brokers = _brokers_of(run, key) | (_brokers_of(run_b, key) if run_b else set())
    pd_a = PartData(run, key)
    pd_b = PartData(run_b, key) if run_b is not None else None
    vmax = max(offset_max(pd_a), offset_max(pd_b) if pd_b else 0)
    block = [f'<div class="part" id="p-{esc(key[0])}-{esc(key[1])}"><h3>Partition {esc(key[0])}-{esc(key[1])}</h3>']
    if run_b is not None:
        block.append(f"<h4>A &mdash; {esc(run.dir)}</h4>")
    block.append(_badges(pd_a, run))
    block.append(partition_chart(run, pd_a, t0, t1, "a", vmax))
    if run_b is not None:
        block.append(f"<h4>B &mdash; {esc(run_b.dir)}</h4>")
        block.append(_badges(pd_b, run_b))
        block.append(partition_chart(run_b, pd_b, t0, t1, "b", vmax))
    block.append(partition_legend(brokers))
    block.append("</div>")
    return "".join(block)


def build_report(tables_dir, out_html, *, compare_dir=None, partitions=None, max_partitions: int = 6,
                 min_isr: Optional[int] = None) -> Path:
    """Write the HTML report of the replay in `tables_dir` to `out_html`; returns its path.

    compare_dir: another replay of the same stream (what-if), shown side by side.
    partitions: partitions to draw ("topic-N", "topic:N" or (topic, N)); default: the most
    eventful ones, up to max_partitions."""
    run = Run(tables_dir, min_isr=min_isr)
    s = summarize(tables_dir, run=run)
    run_b = s_b = cmp = None
    if compare_dir is not None:
        run_b = Run(compare_dir, min_isr=min_isr)
        s_b = summarize(compare_dir, run=run_b)
        cmp = compare_summaries(s, s_b)
    if partitions:
        keys = [parse_partition(p) for p in partitions]
    else:
        keys = choose_partitions([r for r in (run, run_b) if r is not None], max_partitions)
    t0 = min(run.start_ts, run_b.start_ts) if run_b else run.start_ts
    t1 = max(run.end_ts, run_b.end_ts) if run_b else run.end_ts

    cfg = s.get("config") or {}
    sub = _subtitle(run, s, cfg)

    body = []
    if cmp is not None:
        body.append(_compare_section(cmp, run.dir, run_b.dir))
    body.append(f'<section id="summary"><h2>Summary</h2>{_cards(s)}'
                f'<p class="note">Effective min ISR from {esc(s["min_isr_source"])}.</p></section>')
    charts = [bar_chart("Produce outcomes (requests)", s["produce"]["by_result"],
                        colors={"ACKED": "#2ca02c"}, color="#e15759"),
              bar_chart("Elections by type", s["elections"]["by_type"], color="#4e79a7"),
              bar_chart("Violations by invariant", s["violations"]["by_invariant"], color=RED)]
    body.append('<section id="charts"><h2>Outcomes</h2><div class="charts">' + "".join(charts) + "</div></section>")

    parts_html = [_partition_block(run, run_b, key, t0, t1) for key in keys]
    fetch_note = ("Follower LEO samples come from logged fetches only "
                  + ("(<code>output.fetch=all</code>: every fetch)." if cfg.get("output.fetch") == "all" else
                     "(the default <code>output.fetch=errors</code> logs errors, no-ops and divergence, not "
                     "every fetch), so they are points, not a continuous series."))
    body.append(
        '<section id="partitions"><h2>Partitions</h2>'
        f'<p class="note">{"Chosen" if partitions else "Most eventful"} partitions '
        f'({len(keys)} of {s["partitions"]:,}{"; ranked over both runs" if run_b and not partitions else ""}). '
        'Top panel: each leader&rsquo;s high watermark (solid, one line per leadership term) and log end offset '
        'after appends (dashed, from acknowledged-or-not appends in the produce table); triangles on the right: '
        f'each replica&rsquo;s final LEO (partition_state). {fetch_note} Middle: ISR and ELR size against the '
        'effective min ISR (committed metadata_log). Bottom: the leader over time. Hover for details.</p>'
        + "".join(parts_html) + "</section>")
    from jobs.metalog.report_section import audit_section   # `isrflow audit`: real controller vs isrflow
    body.append(audit_section(run.dir))
    body.append(f'<section id="violations"><h2>Invariant violations</h2>{_violations_table(run)}</section>')
    if run_b is not None:
        body.append(f'<section id="violations-b"><h2>Invariant violations in B</h2>{_violations_table(run_b)}'
                    '</section>')

    title = "isrflow report" + (" — what-if comparison" if cmp else "")
    doc = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><div class="sub">{" &middot; ".join(sub)}</div></header>'
        f'<main>{"".join(body)}<footer>Generated by isrflow from the Delta tables. Event times are the '
        "stream&rsquo;s <code>ts_ms</code>.</footer></main></body></html>\n")
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(doc, encoding="utf-8")
    return out
