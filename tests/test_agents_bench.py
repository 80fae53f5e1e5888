"""The harness benchmark: a smoke run with a tiny budget (real runner, env, server process) and
its rows computed from known runs (ideal time, ratios, the Inspect row skipped when absent)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def _run(n_calls: int, wall: float, cpu: float, rss: float, episodes: int = 256) -> dict:
    return {"n_calls": n_calls, "wall_s": wall, "cpu_s": cpu, "peak_rss_mib": rss, "episodes": episodes,
            "errors": 0, "correct": episodes}


def test_rows_use_rounds_for_the_ideal_and_compare_with_zero_cost_and_inspect() -> None:
    import bench_harness as bh

    runs = {"zero-cost": _run(512, 8.0, 2.0, 300), "litellm": _run(512, 8.5, 5.12, 400),
            "inspect": _run(512, 9.0, 7.68, 200)}
    rows = bh._rows(runs, 256, 64, 1.0)
    zero, ours, cpu, mem = rows
    assert "100% of ideal (8.0 s vs 8.0 s)" in zero["value"]  # 4 rounds x 2 calls x 1 s
    assert ours["value"].startswith("0.94 ") and ours["ok"] is True
    assert cpu["value"].startswith("0.67x (10.0 vs 15.0 ms/call)") and cpu["ok"] is True
    assert mem["value"].startswith("2.00x (400 vs 200 MiB)") and mem["ok"] is False


def test_rows_note_a_missing_inspect_venv() -> None:
    import bench_harness as bh

    rows = bh._rows({"zero-cost": _run(512, 8.0, 2.0, 300), "litellm": _run(512, 16.0, 5.12, 400)}, 256, 64, 1.0)
    assert len(rows) == 4
    assert rows[1]["ok"] is False and rows[1]["value"].startswith("0.50 ")
    assert all(r["ok"] is None and "skipped" in r["value"] for r in rows[2:])


def test_episodes_must_fill_the_slots() -> None:
    import bench_harness as bh

    with pytest.raises(ValueError, match="multiple of the slots"):
        bh.bench_harness(n_episodes=200, concurrency=64)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
def test_bench_harness_smoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("litellm")
    import bench_harness as bh

    monkeypatch.setattr(bh, "INSPECT_PYTHON", tmp_path / "absent" / "python")
    rows = bh.bench_harness(n_episodes=4, concurrency=2, latency_s=0.0)
    assert [r["name"].split(":")[0].split(" (")[0] for r in rows] == [
        "harness zero-cost", "harness litellm throughput vs zero-cost", "harness CPU per call vs Inspect AI",
        "harness peak memory vs Inspect AI"]
    assert "(8 calls, 0 errors, 4 correct)" in rows[1]["name"]
    assert "skipped" in rows[2]["value"]


@pytest.mark.slow
def test_bench_startup_sees_the_notice_before_the_first_request() -> None:
    pytest.importorskip("litellm")
    import bench_startup

    row = bench_startup.bench_startup()
    assert row["notice_cpu_s"] is not None and row["notice_cpu_s"] < row["first_request_cpu_s"]
    assert "loaded then: litellm" in row["value"]
