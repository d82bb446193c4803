"""Running event lists through the protocol core in-process, for tests."""
from __future__ import annotations

from protocol.cluster import Cluster
from protocol.codec import decode_cluster, encode_cluster
from protocol.config import EngineConfig
from schemas.events import validate


def run_events(events: list[dict], config: dict | None = None, *, roundtrip_every: int = 0,
               finish: bool = True) -> dict[str, list[dict]]:
    """Applies events in order; returns every output table's rows (plus partition_state).
    roundtrip_every=k re-creates the cluster from its encoded state every k events, as the
    Spark state store does between micro-batches."""
    cfg = EngineConfig(config or {})
    cl = Cluster(cfg)
    out: dict[str, list[dict]] = {}
    for i, raw in enumerate(events):
        ev, reason = validate(raw)
        if ev is None:
            cl.reject({}, None, reason, True)
        else:
            cl.apply(ev)
        if roundtrip_every and (i + 1) % roundtrip_every == 0:
            for k, v in cl.drain().items():
                out.setdefault(k, []).extend(v)
            cl = decode_cluster(encode_cluster(cl), cfg)
    if finish:
        cl.finish()
    for k, v in cl.drain().items():
        out.setdefault(k, []).extend(v)
    out["partition_state"] = cl.partition_state_rows()
    out["_cluster"] = cl
    return out


def rows(out, table, **match):
    return [r for r in out.get(table, []) if all(r.get(k) == v for k, v in match.items())]


def canonical(out) -> dict:
    """Tables as sorted lists of row tuples, for equality checks."""
    res = {}
    for k, v in out.items():
        if k.startswith("_"):
            continue
        res[k] = sorted((tuple(sorted((kk, repr(vv)) for kk, vv in r.items())) for r in v))
    return res
