"""Record-type counts of a recording's metadata-log files, for the lab's manifest: which types, how
many, in which file. The decoding is the importer's (`jobs.metalog.reader`); this only names the
types the way Kafka's DumpLogSegments and MetadataRecordType do (PARTITION_CHANGE_RECORD, ...)."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from jobs.metalog.reader import read_binary


def _kafka_name(rec) -> str:
    if rec.control:
        return rec.type                      # LeaderChange, SnapshotHeader, KRaftVoters, ...
    if rec.type.startswith("Unknown"):
        return f"TYPE_{rec.api_key}"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rec.type).upper()   # PartitionChangeRecord -> PARTITION_CHANGE_RECORD


def summary(metadata_dir) -> dict:
    """Per file: record count and record-type counts (an unreadable batch counts as UNREADABLE_BATCH)."""
    res = {}
    for f in sorted(Path(metadata_dir).iterdir()):
        if f.suffix in (".log", ".checkpoint"):
            issues: list = []
            recs = read_binary(f, issues, snapshot=f.name if f.suffix == ".checkpoint" else None)
            types = Counter(_kafka_name(r) for r in recs)
            if issues:
                types["UNREADABLE_BATCH"] += len(issues)
            res[f.name] = {"records": len(recs), "types": dict(types)}
    return res
