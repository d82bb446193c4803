"""Tests for jobs/simulate.py: the deterministic event-schedule generator."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.simulate import (
    INPUT_ARROW_SCHEMA,
    SCENARIOS,
    main,
    parse_duration,
    parse_faults,
    simulate,
)

# SPEC §2 input columns, with the Arrow types the stream must carry (written out
# here independently of the module so a drift in either is caught).
EXPECTED_COLUMNS = [
    ("seq", pa.int64()), ("ts_ms", pa.int64()), ("type", pa.string()), ("topic", pa.string()),
    ("partition", pa.int32()), ("broker", pa.int32()), ("offset_spec", pa.string()),
    ("isolation", pa.string()), ("broker_epoch", pa.int64()), ("previous_broker_epoch", pa.int64()),
    ("replicas", pa.list_(pa.int32())), ("records", pa.int32()), ("acks", pa.int32()),
    ("target", pa.int32()), ("fetch_offset", pa.int64()), ("last_fetched_epoch", pa.int32()),
    ("current_leader_epoch", pa.int32()), ("log_end_offset", pa.int64()), ("up_to_seq", pa.int64()),
    ("election_type", pa.string()), ("clean", pa.bool_()), ("config", pa.map_(pa.string(), pa.string())),
    ("isr", pa.list_(pa.int32())), ("elr", pa.list_(pa.int32())), ("last_known_elr", pa.list_(pa.int32())),
    ("leader", pa.int32()), ("leader_epoch", pa.int32()), ("partition_epoch", pa.int32()),
    ("leader_recovery_state", pa.string()), ("epoch_start_offsets", pa.map_(pa.int32(), pa.int64())),
    ("hwm", pa.int64()),
]

FAULTS = ("crash:3@10s,unclean-crash:2@20s+15s,partition:1@5s+20s,slow:4@0s+30s,"
          "zone-outage:rack1@40s+10s,reassign:t0-3->1,4,5@25s,cancel-reassign:t0-3@28s,"
          "reassign:t0-5->2,3,4@30s,elect:preferred@50s,elect:unclean:t0-1@51s,"
          "elect:designated:t0-2:4@52s,config:t0:unclean.leader.election.enable=true@55s")


def _hashes(d) -> dict[str, str]:
    return {os.path.basename(p): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in sorted(glob.glob(os.path.join(d, "*")))}


def _read(d) -> pa.Table:
    files = sorted(glob.glob(os.path.join(d, "part-*.parquet")))
    assert files, f"no part files in {d}"
    return pa.concat_tables([pq.read_table(f) for f in files])


def _small(out, **kw):
    args = dict(partitions=20, duration_ms="1m", seed=11, faults=FAULTS, rows_per_file=4000)
    args.update(kw)
    return simulate(out, **args)


@pytest.fixture(scope="module")
def small_stream(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    summary = _small(d, delivery="explicit")
    return d, summary, _read(d).to_pandas()


# ---------------------------------------------------------------- determinism

@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_same_seed_identical_bytes(tmp_path, fmt):
    a, b = tmp_path / "a", tmp_path / "b"
    sa = _small(a, fmt=fmt, delivery="explicit")
    sb = _small(b, fmt=fmt, delivery="explicit")
    assert sa["files"] > 1  # several files, so file splitting is covered too
    ha, hb = _hashes(a), _hashes(b)
    assert ha == hb
    assert "_simulation.json" in ha


def test_different_seeds_differ(tmp_path):
    _small(tmp_path / "a", seed=1)
    _small(tmp_path / "b", seed=2)
    ha, hb = _hashes(tmp_path / "a"), _hashes(tmp_path / "b")
    assert ha["part-00000.parquet"] != hb["part-00000.parquet"]
    ta, tb = _read(tmp_path / "a"), _read(tmp_path / "b")
    assert ta.column("ts_ms").to_pylist() != tb.column("ts_ms").to_pylist()


# ---------------------------------------------------------------- stream shape

def test_schema_is_exactly_the_spec_columns(small_stream):
    d, _, _ = small_stream
    expected = pa.schema([pa.field(n, t, nullable=n not in ("seq", "ts_ms", "type"))
                          for n, t in EXPECTED_COLUMNS])
    assert INPUT_ARROW_SCHEMA.equals(expected)
    for f in sorted(glob.glob(os.path.join(d, "part-*.parquet"))):
        s = pq.read_schema(f)
        assert s.names == [n for n, _ in EXPECTED_COLUMNS]
        assert s.remove_metadata().equals(expected), f


def test_seq_and_ts_monotonic_across_files(small_stream):
    d, summary, df = small_stream
    files = sorted(glob.glob(os.path.join(d, "part-*.parquet")))
    assert len(files) == summary["files"] > 1
    assert [os.path.basename(f) for f in files] == [f"part-{i:05d}.parquet" for i in range(len(files))]
    seq = df["seq"].to_numpy()
    ts = df["ts_ms"].to_numpy()
    assert seq[0] == 1 and (np.diff(seq) == 1).all()
    assert (np.diff(ts) >= 0).all() and ts[0] == 0
    assert ts[-1] < 60_000
    assert len(df) == summary["rows"]
    manifest = json.loads((d / "_simulation.json").read_text())
    assert manifest["rows"] == summary["rows"]
    assert manifest["parameters"]["seed"] == 11
    assert manifest["files"] == [os.path.basename(f) for f in files]


def test_row_semantics(small_stream):
    _, summary, df = small_stream
    assert not summary["skipped_faults"] or all("not running" in s for s in summary["skipped_faults"])
    # bootstrap: every broker registered and unfenced before the first CreatePartition
    first_create = df.index[df.type == "CreatePartition"][0]
    boot = df.loc[: first_create - 1]
    assert sorted(boot[boot.type == "BrokerRegister"].broker) == list(range(1, 7))
    assert sorted(boot[boot.type == "BrokerUnfence"].broker) == list(range(1, 7))
    creates = df[df.type == "CreatePartition"]
    assert len(creates) == 20
    for reps in creates.replicas:
        assert len(set(reps)) == 3
        assert len({(b - 1) % 3 for b in reps}) == 3  # distinct racks
    assert len({r[0] for r in creates.replicas}) == 6  # leadership spread
    # broker epochs strictly increase per broker; previous epoch = last one (clean) or -1
    reg = df[df.type == "BrokerRegister"]
    crashes = df[df.type == "BrokerCrash"]
    for b, g in reg.groupby("broker"):
        epochs = g.broker_epoch.tolist()
        assert epochs == sorted(set(epochs))
        for i in range(1, len(g)):
            prev_row, row = g.iloc[i - 1], g.iloc[i]
            last_crash = crashes[(crashes.broker == b) & (crashes.seq < row.seq)].iloc[-1]
            want = prev_row.broker_epoch if last_crash.clean else -1
            assert row.previous_broker_epoch == want
    assert set(crashes.clean) == {True, False}
    loss = df[df.type == "ReplicaLogLoss"]
    assert len(loss) and (loss.log_end_offset >= 0).all()
    # modeled fetches: nothing but type/topic/partition/broker
    fetch = df[df.type == "Fetch"]
    assert len(fetch) > 1000
    extra = [c for c in df.columns if c not in ("seq", "ts_ms", "type", "topic", "partition", "broker")]
    assert fetch[extra].isna().all().all()
    prod = df[df.type == "Produce"]
    assert set(prod.acks.astype(int)) == {-1, 0, 1}
    assert (prod.records >= 1).all() and prod.broker.notna().all()
    cf = df[df.type == "ConsumerFetch"]
    assert len(cf) and (cf.fetch_offset >= 0).all()
    lo = df[df.type == "ListOffsets"]
    assert set(lo.offset_spec) <= {"LATEST", "EARLIEST"}
    ticks = df[df.type == "Tick"]
    assert len(ticks) and ticks.topic.isna().all()
    # faults turned into rows
    types = set(df.type)
    for t in ("BrokerControlledShutdown", "BrokerFence", "Reassign", "ElectLeaders", "AlterConfig",
              "AlterPartitionArrive", "AlterPartitionResponse", "MetadataSync"):
        assert t in types, t
    assert df[df.type == "Reassign"].replicas.isna().sum() == 1  # the cancel
    el = df[df.type == "ElectLeaders"]
    assert set(el.election_type) == {"PREFERRED", "UNCLEAN", "DESIGNATED"}
    assert el[el.election_type == "DESIGNATED"].target.tolist() == [4]
    ms = df[df.type == "MetadataSync"]
    assert ms.up_to_seq.isna().all()


def test_immediate_delivery_has_no_delivery_rows(tmp_path):
    _small(tmp_path / "s")
    types = set(_read(tmp_path / "s").column("type").to_pylist())
    assert not types & {"AlterPartitionArrive", "AlterPartitionResponse", "MetadataSync"}


def test_refuses_existing_stream_unless_overwrite(tmp_path):
    _small(tmp_path, duration_ms="5s", faults=None)
    with pytest.raises(FileExistsError):
        _small(tmp_path, duration_ms="5s", faults=None)
    s = _small(tmp_path, duration_ms="5s", faults=None, overwrite=True, rows_per_file=10**6)
    assert sorted(os.listdir(tmp_path)) == ["_simulation.json", "part-00000.parquet"]
    assert s["files"] == 1


# ---------------------------------------------------------------- scenarios

@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_preset_generates(tmp_path, name):
    s = simulate(tmp_path, scenario=name, duration_ms="2m", seed=3, partitions=12)
    assert s["scenario"] == name and s["rows"] > 1000 and s["faults"]
    df = _read(tmp_path).to_pandas()
    assert (np.diff(df.seq) == 1).all() and (np.diff(df.ts_ms) >= 0).all()
    c = s["counts"]
    if name == "last-replica-standing":
        assert s["brokers"] == 3
        fences = df[df.type == "BrokerFence"]
        assert fences.broker.tolist()[:2] == [3, 2]  # followers fenced one after another
        crash = df[df.type == "BrokerCrash"]
        assert crash.broker.tolist() == [1] and crash.clean.tolist() == [False]
        assert c["ReplicaLogLoss"] == 12
        unf = df[(df.type == "BrokerUnfence") & (df.seq > crash.seq.iloc[0])]
        assert unf.broker.tolist() == [1, 2, 3]  # leader back first, then the ELR member, then the last
        assert {1, -1} <= set(df[df.type == "Produce"].acks.astype(int))
    elif name == "rolling-restart":
        assert c["BrokerControlledShutdown"] == 6 and c["BrokerRegister"] == 12
    elif name == "zone-outage":
        crash = df[df.type == "BrokerCrash"]
        assert sorted(crash.broker) == [1, 4] and crash.ts_ms.nunique() == 1
    elif name == "reassignment":
        assert c["Reassign"] >= 2
    elif name == "flaky-network":
        assert c.get("BrokerFence", 0) + len([f for f in s["faults"] if f.startswith("slow")]) > 0


def test_unknown_scenario_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown scenario 'nope'.*last-replica-standing"):
        simulate(tmp_path, scenario="nope")


# ---------------------------------------------------------------- grammar

def test_parse_duration():
    assert parse_duration("10m") == 600_000
    assert parse_duration("90s") == 90_000
    assert parse_duration("1m30s") == 90_000
    assert parse_duration("500ms") == 500
    assert parse_duration("1.5s") == 1500
    assert parse_duration("2h") == 7_200_000
    assert parse_duration("250") == 250
    assert parse_duration(1234) == 1234
    for bad in ("", "ten", "5x", "-3s", "1m30", "s"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_fault_spec_roundtrip():
    fs = parse_faults(FAULTS, brokers=6, partitions=20, duration_ms=60_000)
    assert len(fs) == 12
    again = parse_faults(",".join(f.spec() for f in fs), brokers=6, partitions=20, duration_ms=60_000)
    assert again == fs
    ex = parse_faults("crash:3@120s,unclean-crash:2@300s,partition:1@60s+30s,slow:4@0s+120s,"
                      "zone-outage:rack1@400s+60s,reassign:t0-3->1,4,5@200s,elect:preferred@500s")
    assert [f.kind for f in ex] == ["crash", "unclean-crash", "partition", "slow", "zone-outage",
                                    "reassign", "elect"]
    assert ex[5].replicas == (1, 4, 5) and ex[4].rack == 1 and ex[2].dur_ms == 30_000
    assert parse_faults("slow:4:factor=5@1s ; isolate:2@3s")[0].factor == 5.0
    assert parse_faults("") == [] and parse_faults(None) == []


@pytest.mark.parametrize("spec, message", [
    ("crash:3", r"missing '@TIME'"),
    ("crsh:3@10s", r"unknown fault kind 'crsh' \(expected one of: crash, unclean-crash"),
    ("crash:9@10s", r"broker 9 does not exist \(brokers are 1..6\)"),
    ("crash:x@10s", r"'x' is not a broker id"),
    ("crash@10s", r"expected crash:BROKER@TIME"),
    ("crash:1@soon", r"bad time after '@'"),
    ("crash:1@10s+0s", r"must be positive"),
    ("crash:1@700s", r"not before the end of the simulation \(10m\)"),
    ("reassign:t0-3@10s", r"expected reassign:TOPIC-PARTITION->B1,B2"),
    ("reassign:t0-300->1,2,3@10s", r"partition 300 of 't0' does not exist"),
    ("reassign:t9-3->1,2,3@10s", r"unknown topic 't9'"),
    ("reassign:t0-3->1,1,2@10s", r"repeats a broker"),
    ("reassign:t0-3->1,2,3@10s+5s", r"takes no '\+DURATION'"),
    ("zone-outage:rack7@10s", r"unknown rack 'rack7' \(racks are rack0..rack2\)"),
    ("elect:bogus@10s", r"unknown election type 'bogus'"),
    ("elect:designated:t0-1@10s", r"elect:designated:TOPIC-PARTITION:BROKER"),
    ("slow:2:factor=0.5@10s", r"factor='0.5': must be a number >= 1"),
    ("slow:2:speed=3@10s", r"unknown option\(s\) speed for slow \(allowed: factor\)"),
    ("unclean-crash:2:lose=150%@10s", r"lose='150%'"),
    ("config:t0@10s", r"expected config:TOPIC"),
    ("crash:1@10s,crash:2", r"faults item 2 'crash:2': missing '@TIME'"),
])
def test_fault_grammar_rejects_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_faults(spec, brokers=6, racks=3, topics=["t0"], partitions=20, duration_ms=600_000)


def test_bad_parameters_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="rf must be between 1 and brokers=2"):
        simulate(tmp_path, brokers=2, rf=3)
    with pytest.raises(ValueError, match="faults item 1"):
        simulate(tmp_path, faults="crash:7@1s")
    with pytest.raises(ValueError, match="delivery"):
        simulate(tmp_path, delivery="sometimes")


def test_cli_main(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), "--duration", "20s", "--partitions", "5",
                 "--faults", "crash:2@5s+5s", "--seed", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] > 0 and out["duration_ms"] == 20_000 and out["seed"] == 4
    assert main(["--out", str(tmp_path / "t"), "--faults", "crash:99@5s"]) == 2
    assert "broker 99 does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------- speed (printed, not asserted)

def test_one_million_rows_timing(tmp_path, capsys):
    t0 = time.perf_counter()
    s = simulate(tmp_path, partitions=1000, duration_ms="130s", seed=1,
                 faults="crash:3@20s,unclean-crash:2@50s,zone-outage:rack0@80s+15s")
    dt = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[simulate] {s['rows']:,} rows in {s['files']} files: {dt:.2f} s "
              f"({s['rows'] / dt / 1e6:.2f} M rows/s)")
    assert s["rows"] > 900_000


# ---------------------------------------------------------------- closed loop: the core decides who leads

def _events(d) -> list[dict]:
    out = []
    for r in _read(d).to_pylist():
        r = {k: v for k, v in r.items() if v is not None}
        for k in ("config", "epoch_start_offsets"):
            if k in r:
                r[k] = dict(r[k])
        out.append(r)
    return out


def _replay(d, config=None) -> dict:
    from tests.engine_util import run_events
    return run_events(_events(d), config)


def _produce_results(out) -> tuple[int, int, int]:
    """(produce rows, NOT_LEADER_OR_FOLLOWER answered at once = misaddressed, in flight)."""
    prod = out.get("produce", [])
    nl = [r for r in prod if r["result"] == "NOT_LEADER_OR_FOLLOWER"]
    at_once = sum(1 for r in nl if r["result_seq"] == r["seq"])
    return len(prod), at_once, len(nl) - at_once


def test_last_replica_standing_follows_the_elr_leader(tmp_path):
    s = simulate(tmp_path, scenario="last-replica-standing", duration_ms="2m", seed=3, partitions=6)
    df = _read(tmp_path).to_pandas()
    crash = df[df.type == "BrokerCrash"].ts_ms.iloc[0]
    unf2 = df[(df.type == "BrokerUnfence") & (df.broker == 2) & (df.ts_ms > crash)].ts_ms.iloc[0]
    unf1 = df[(df.type == "BrokerUnfence") & (df.broker == 1) & (df.ts_ms > crash)].ts_ms.iloc[0]
    assert unf1 < unf2
    client = df[df.type.isin(["Produce", "ListOffsets", "ConsumerFetch"])]
    # crashed leader, then leaderless (the ELR member 2 is away; broker 1 lost its ELR place)
    assert not ((client.ts_ms >= crash) & (client.ts_ms <= unf2)).any()
    after = df[(df.type == "Produce") & (df.ts_ms > unf2)]
    # broker 2 (elected from the ELR) stays leader; at most one stale request per partition to 1
    assert (after.broker == 1).sum() <= 6 and (after.broker == 2).sum() > 100
    assert set(after.broker) <= {1, 2}
    out = _replay(tmp_path)
    n, misaddressed, _ = _produce_results(out)
    assert misaddressed == s["stale_leader_produces"] and misaddressed < 0.01 * n
    assert out.get("violations", []) == []
    off = _replay(tmp_path, {"eligible.leader.replicas.enable": "false"})
    assert "AckedRecordsDurable" in {v["invariant"] for v in off["violations"]}


def test_returning_broker_takes_leadership_back_only_by_preferred_election(tmp_path):
    s = simulate(tmp_path, partitions=12, duration_ms="400s", seed=5,
                 faults="crash:1@20s+10s,elect:preferred:t0-0@150s")
    df = _read(tmp_path).to_pandas()
    reps = {int(r.partition): list(r.replicas) for r in df[df.type == "CreatePartition"].itertuples()}
    led1 = sorted(p for p, r in reps.items() if r[0] == 1)
    assert 0 in led1 and len(led1) >= 2
    prod = df[df.type == "Produce"]
    back = df[(df.type == "BrokerUnfence") & (df.broker == 1) & (df.ts_ms > 0)].ts_ms.iloc[0]
    for p in led1:
        g = prod[prod.partition == p]
        assert (g[g.ts_ms < 20_000].broker == 1).all()
        mid = g[(g.ts_ms > back) & (g.ts_ms < (150_000 if p == 0 else 300_000))]
        assert (mid.broker == 1).sum() <= 1 and len(mid) > 50   # sticky: the new leader keeps it
        assert (mid.broker == reps[p][1]).sum() >= len(mid) - 1
        late = g[g.ts_ms > (151_000 if p == 0 else 301_000)]
        assert (late.broker == 1).all()                          # preferred election / auto rebalance
    n, misaddressed, _ = _produce_results(_replay(tmp_path))
    assert misaddressed == s["stale_leader_produces"]


def test_reassignment_moves_leadership_like_kafka(tmp_path):
    # t0-0 is [1, 5, 6] -> leader 1 removed: the first target replica leads once the adding ones caught up;
    # t0-1 is [2, 6, 1] -> leader 2 kept (still a replica)
    s = simulate(tmp_path, partitions=6, duration_ms="60s", seed=2,
                 faults="reassign:t0-0->3,4,5@10s,reassign:t0-1->4,2,5@10s")
    df = _read(tmp_path).to_pandas()
    reps = {int(r.partition): list(r.replicas) for r in df[df.type == "CreatePartition"].itertuples()}
    assert reps[0][0] == 1 and reps[1][0] == 2
    prod = df[df.type == "Produce"]
    p0, p1 = prod[prod.partition == 0], prod[prod.partition == 1]
    assert (p0[p0.ts_ms < 10_000].broker == 1).all()
    assert (p0[p0.ts_ms > 13_000].broker == 3).sum() >= len(p0[p0.ts_ms > 13_000]) - 1
    assert (p1.broker == 2).sum() >= len(p1) - 1
    out = _replay(tmp_path)
    n, misaddressed, _ = _produce_results(out)
    assert misaddressed == s["stale_leader_produces"]
    leaders = [r["leader"] for r in out["partition_state"] if r["partition"] in (0, 1)]
    assert leaders == [3, 2]


def test_mixed_faults_address_a_non_leader_only_as_stale_clients(tmp_path):
    s = _small(tmp_path)
    n, misaddressed, _ = _produce_results(_replay(tmp_path))
    assert n > 1000 and misaddressed == s["stale_leader_produces"] < 0.01 * n


ELR_OFF = {"eligible.leader.replicas.enable": "false"}


def _classify_not_leader_produces(d, config) -> tuple[int, int, list]:
    """Replays the stream row by row under `config` (the replay, not the simulator) and sorts every
    produce the core answered NOT_LEADER_OR_FOLLOWER at once into stale-client requests -- sent to
    a broker that led the partition (in the replay) before its latest leader change, the leader a
    client with old metadata last met, at most one per change -- and misaddressed ones: sent to a
    broker the protocol state at that row did not consider leader for any reason a client could
    have. Returns (produce rows, stale, misaddressed)."""
    from jobs.streamio import iter_raw_rows
    from protocol.cluster import Cluster
    from protocol.config import EngineConfig
    from schemas.events import validate

    cl = Cluster(EngineConfig(config))
    last: dict = {}      # partition -> its latest real leader
    prev: dict = {}      # partition -> the real leaders before that one
    allow: dict = {}     # partition -> stale requests still excused since the latest change
    n = stale = 0
    wrong: list = []
    for raw, _, err in iter_raw_rows(d):
        assert err is None
        ev, reason = validate(raw)
        assert ev is not None, reason
        cl.apply(ev)
        for key, p in cl.partitions.items():     # leader changes at this row (timers included)
            if p.leader > 0 and p.leader != last.get(key):
                if key in last:
                    prev.setdefault(key, set()).add(last[key])
                    allow[key] = 1
                last[key] = p.leader
        for r in cl.drain().get("produce", []):
            n += 1
            if r["result"] != "NOT_LEADER_OR_FOLLOWER" or r["result_seq"] != r["seq"]:
                continue                          # not refused at once (a parked acks=all produce's outcome)
            key = (r["topic"], r["partition"])
            if r["broker"] in prev.get(key, ()) and r["broker"] != last[key] and allow.get(key):
                allow[key] -= 1
                stale += 1
            else:
                wrong.append((r["seq"], key, r["broker"], last.get(key)))
    return n, stale, wrong


@pytest.mark.parametrize("kind", ["last-replica-standing", "mixed-faults"])
def test_elr_off_run_never_aims_a_produce_at_a_broker_the_core_does_not_call_leader(tmp_path, kind):
    """Issue 9: a what-if with ELR off is simulated under ELR off. The old open-loop simulator
    guessed ELR-on leaders and sent hundreds of produces to brokers that were not leading under
    ELR off (last-replica-standing: 499 of 1065, the mixed faults: 162 of 2248)."""
    if kind == "last-replica-standing":
        s = simulate(tmp_path, scenario=kind, duration_ms="2m", seed=3, partitions=6, config=ELR_OFF)
    else:
        s = _small(tmp_path, config=ELR_OFF)
    assert s["engine_config"] == ELR_OFF
    manifest = json.loads((tmp_path / "_simulation.json").read_text())
    assert manifest["engine_config"] == ELR_OFF
    n, stale, wrong = _classify_not_leader_produces(tmp_path, s["engine_config"])
    assert n > 1000
    assert wrong == []
    assert stale == s["stale_leader_produces"]
    if kind == "last-replica-standing":
        # ELR off: the crashed last leader's partitions stay leaderless until it returns; no client
        # traffic meanwhile (with ELR on, broker 2 leads from the ELR before that)
        df = _read(tmp_path).to_pandas()
        crash = df[df.type == "BrokerCrash"].ts_ms.iloc[0]
        back = df[(df.type == "BrokerUnfence") & (df.broker == 1) & (df.ts_ms > crash)].ts_ms.iloc[0]
        client = df[df.type.isin(["Produce", "ListOffsets", "ConsumerFetch"])]
        assert not ((client.ts_ms > crash) & (client.ts_ms < back)).any()


@pytest.mark.parametrize("config", [{}, ELR_OFF])
def test_replay_reproduces_the_simulators_core(tmp_path, config):
    """The simulator's core saw exactly the rows the replay sees: same final partition_state, no
    row refused, the same invariant violations."""
    from jobs.sim_core import state_digest
    s = _small(tmp_path, delivery="explicit", config=config)
    assert s["core"]["rejected_rows"] == 0, s["core"]["first_rejection"]
    out = _replay(tmp_path, s["engine_config"])
    assert not out.get("rejected")
    assert state_digest(out["partition_state"]) == s["core"]["final_state_sha256"]
    assert len(out.get("violations", [])) == s["core"]["violations"]


def test_fast_fed_rows_are_the_validated_rows(small_stream):
    """The core gets steady-state rows as blank row + columns (CoreDriver.feed_fast): exactly what
    schema validation makes of the row the stream holds."""
    from jobs.sim_core import _BLANK
    from schemas.events import validate
    d, _, _ = small_stream
    seen = set()
    for raw in _read(d).to_pylist():
        if raw["type"] in ("Fetch", "Produce", "Tick", "ListOffsets", "ConsumerFetch", "MetadataSync",
                           "AlterPartitionArrive", "AlterPartitionResponse"):
            seen.add(raw["type"])
            fields = {k: v for k, v in raw.items() if v is not None}
            assert validate(raw) == ({**_BLANK, **fields}, None)
    assert len(seen) == 8


def test_stop_on_violation_names_the_seed_and_the_step(tmp_path):
    """VOPR style: every step is checked by the protocol's invariants; the first violation stops
    the run with its seed and step (seq)."""
    from jobs.simulate import SimulationViolation
    unsafe = dict(ELR_OFF, **{"unclean.leader.election.enable": "true"})
    kw = dict(scenario="last-replica-standing", duration_ms="2m", seed=3, partitions=6, config=unsafe,
              min_isr=1)
    s = simulate(tmp_path / "all", **kw)
    first = s["core"]["first_violation"]
    assert s["core"]["violations"] > 0 and first["invariant"]
    with pytest.raises(SimulationViolation) as e:
        simulate(tmp_path / "stop", stop_on_violation=True, **kw)
    assert (e.value.seed, e.value.seq) == (3, first["seq"])
    assert f"seed 3, step (seq) {first['seq']}" in str(e.value)
    safe = simulate(tmp_path / "safe", scenario="last-replica-standing", duration_ms="2m", seed=3,
                    partitions=6, stop_on_violation=True)
    assert safe["core"]["violations"] == 0


def test_cli_set_simulates_under_that_config(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "s"), "--duration", "20s", "--partitions", "5", "--seed", "4",
                 "--set", "eligible.leader.replicas.enable=false"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine_config"] == ELR_OFF
    manifest = json.loads((tmp_path / "s" / "_simulation.json").read_text())
    assert manifest["engine_config"] == ELR_OFF
    assert main(["--out", str(tmp_path / "t"), "--set", "eligible.leader.replicas.enable=maybe"]) == 2
    assert "eligible.leader.replicas.enable" in capsys.readouterr().err


def test_the_core_is_fed_exactly_the_rows_the_stream_holds(tmp_path, monkeypatch):
    """Closed loop means the simulator's core and a replay of its stream see the same rows: every row
    the core was fed equals schema validation of the row written, in order (a ListOffsets without an
    isolation level was once fed as READ_COMMITTED and written as null)."""
    from protocol.cluster import Cluster
    from schemas.events import validate
    fed = []
    orig = Cluster.apply

    def record(self, ev, raw=None):
        fed.append(dict(ev))
        return orig(self, ev, raw)
    monkeypatch.setattr(Cluster, "apply", record)
    _small(tmp_path, consumer_rate=2.0)
    written = [validate(raw)[0] for raw in _read(tmp_path).to_pylist()]
    assert any(r["type"] == "ListOffsets" and r["isolation"] is None for r in written)
    assert len(fed) == len(written)
    bad = next((i for i, (a, b) in enumerate(zip(fed, written)) if a != b), None)
    assert bad is None, (fed[bad], written[bad])
