"""The import/audit stage of `isrflow bench --engines import` on a small synthetic log."""
from jobs.bench import bench, format_table
from jobs.metalog.bench_import import bench_import


def test_bench_import_stage_audits_the_synthetic_log_in_full_agreement():
    lines = []
    out = bench_import(3000, partitions=40, log=lines.append)
    assert out["records"] >= 3000 and out["decode_records_per_s"] > 0 and out["import_records_per_s"] > 0
    a = out["audit"]
    # the synthetic ISR changes are written as a real leader sends them: every decision is paired and agrees
    assert a["decisions"] >= 3000 - 20 and a["agree"] == a["decisions"]
    assert a["differ"] == a["kafka_only"] == a["isrflow_only"] == a["unexplained"] == 0
    assert a["events"] > a["decisions"]
    assert a["wall_s"] >= a["import_s"] + a["replay_s"] + a["compare_s"] - 0.01 > 0
    assert 0 < a["alongside_s"] <= a["replay_s"] + 0.01     # the records work runs inside the replay's span
    assert abs(a["records_per_s"] * a["wall_s"] - out["records"]) <= 0.01 * out["records"] + a["records_per_s"] * 0.01
    assert any(x.startswith("[bench] audit: ") and f"{a['agree']:,} agree" in x for x in lines)


def test_bench_engines_import_alone_runs_only_the_import_stage(tmp_path):
    lines = []
    res = bench((20, 300), 2000, ("import",), out_json=str(tmp_path / "b.json"), log=lines.append)
    assert res["runs"] == [] and res["import"]["audit"]["agree"] > 0
    assert "audit" in format_table(res) and '"audit"' in (tmp_path / "b.json").read_text()
