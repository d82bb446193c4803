"""The `import` stage of `isrflow bench --engines import,...`: metadata-log import and audit speed.

A synthetic `__cluster_metadata-0` segment of about N records (mostly PartitionChangeRecords, 5,000
partitions, batches of 1,000 — like a fencing cycle at scale) is written with our own encoder, then decoded
(records/s, wall and CPU), converted to events, imported whole (stream + kafka_records written), and audited
whole (`isrflow audit`: import, replay with the local engine, every decision compared), with the audit's
wall time split into its import, replay and compare parts and its verdict counts.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path


def bench_import(records: int = 1_000_000, partitions: int = 5000, full: bool = True, audit: bool = True,
                 log=print) -> dict:
    from .audit import run_audit
    from .convert import convert
    from .importer import import_metadata
    from .reader import read_metadata
    from .synth import synthetic_log
    work = Path(tempfile.mkdtemp(prefix="isrflow-bench-import-"))
    try:
        src = work / "__cluster_metadata-0"
        src.mkdir()
        t = time.perf_counter()
        w = synthetic_log(records, partitions=partitions, batch_size=1000)
        seg = w.write(src / "00000000000000000000.log")
        out = {"records": w.offset, "bytes": seg.stat().st_size, "generate_s": round(time.perf_counter() - t, 2)}
        c0, t0 = time.process_time(), time.perf_counter()
        ml = read_metadata(src)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.update(decode_wall_s=round(wall, 2), decode_cpu_s=round(cpu, 2),
                   decode_records_per_s=round(len(ml.records) / wall),
                   decode_records_per_cpu_s=round(len(ml.records) / cpu))
        t0 = time.perf_counter()
        res = convert(ml)
        out.update(convert_s=round(time.perf_counter() - t0, 2), events=len(res.events))
        del ml, res
        if full:
            t0 = time.perf_counter()
            import_metadata(src, work / "stream")
            out["import_total_s"] = round(time.perf_counter() - t0, 2)
            out["import_records_per_s"] = round(out["records"] / out["import_total_s"])
            shutil.rmtree(work / "stream", ignore_errors=True)
        log(f"[bench] import: {out['records']:,} records decoded at {out['decode_records_per_s']:,}/s "
            f"({out['decode_records_per_cpu_s']:,}/CPU-s); whole import {out.get('import_records_per_s', '-'):,}/s")
        if audit:
            t0 = time.perf_counter()
            s = run_audit(src, work / "audit-tables")
            wall = time.perf_counter() - t0
            sec = s["seconds"]
            out["audit"] = {"wall_s": round(wall, 2), "records_per_s": round(out["records"] / wall),
                            "import_s": round(sec["import"], 2), "replay_s": round(sec["replay"], 2),
                            "compare_s": round(sec["compare"], 2), "alongside_s": round(sec["alongside"], 2),
                            "events": s["import"]["events"],
                            "decisions": s["decisions"], "agree": s["agree"], "differ": s["differ"],
                            "kafka_only": s["kafka_only"], "isrflow_only": s["isrflow_only"],
                            "unexplained": s["import"]["unexplained"]}
            a = out["audit"]
            log(f"[bench] audit: {out['records']:,} records in {a['wall_s']} s ({a['records_per_s']:,}/s; import "
                f"{a['import_s']} s, replay {a['replay_s']} s with {a['alongside_s']} s of records work alongside, "
                f"compare {a['compare_s']} s); {a['decisions']:,} "
                f"decisions: {a['agree']:,} agree, {a['differ']:,} differ, {a['kafka_only']:,} kafka-only, "
                f"{a['isrflow_only']:,} isrflow-only")
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(bench_import(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)))
