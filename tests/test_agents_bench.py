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


def test_rows_use_rounds_for_the_ideal_and_compare_each_path_with_zero_cost_and_inspect() -> None:
    import bench_harness as bh

    runs = {"zero-cost": _run(512, 8.0, 2.0, 300), "direct": _run(512, 8.5, 4.096, 250),
            "litellm": _run(512, 16.0, 6.4, 400), "inspect": _run(512, 9.0, 7.68, 200)}
    runs["direct"]["server_cpu_s"] = 1.024
    rows = bh._rows(runs, 256, 64, 1.0)
    zero, direct, lite, dcpu, dmem, lcpu, lmem = rows
    assert "100% of ideal (8.0 s vs 8.0 s)" in zero["value"]  # 4 rounds x 2 calls x 1 s
    assert direct["name"].startswith("harness direct throughput") and direct["value"].startswith("0.94 ")
    assert direct["ok"] is True and "server 2.0 ms CPU/call" in direct["value"]
    assert lite["name"].startswith("harness litellm throughput") and lite["value"].startswith("0.50 ") and lite["ok"] is False
    assert dcpu["value"].startswith("0.53x (8.0 vs 15.0 ms/call)") and dcpu["ok"] is True
    assert dcpu["target"] == "<= 0.8x" and "warmed Inspect AI" in dcpu["name"]
    assert "256 distinct images" in zero["name"]
    assert dmem["value"].startswith("1.25x (250 vs 200 MiB)") and dmem["ok"] is True
    assert lcpu["value"].startswith("0.83x (12.5 vs 15.0 ms/call)") and lcpu["ok"] is False
    assert lmem["value"].startswith("2.00x (400 vs 200 MiB)") and lmem["ok"] is False


def test_rows_note_a_missing_inspect_venv() -> None:
    import bench_harness as bh

    rows = bh._rows({"zero-cost": _run(512, 8.0, 2.0, 300), "direct": _run(512, 16.0, 5.12, 400)}, 256, 64, 1.0)
    assert len(rows) == 4
    assert rows[1]["ok"] is False and rows[1]["value"].startswith("0.50 ")
    assert all(r["ok"] is None and "skipped" in r["value"] for r in rows[2:])


def test_runs_are_summarised_by_their_median_with_the_range() -> None:
    """Three runs per harness: each number is the median (not the mean, not the last run), and
    the rows name the number of runs and the range of wall times and peak memories."""
    import bench_harness as bh

    trials = {
        "zero-cost": [_run(512, 8.0, 2.0, 300), _run(512, 9.0, 2.1, 310), _run(512, 20.0, 9.0, 900)],
        "direct": [_run(512, 9.5, 5.0, 250), _run(512, 8.5, 5.2, 240), _run(512, 30.0, 5.1, 260)],
        "inspect": [_run(512, 9.0, 7.6, 200), _run(512, 9.0, 7.7, 210), _run(512, 9.0, 7.8, 190)],
    }
    runs = bh.median_runs(trials)
    assert runs["zero-cost"]["wall_s"] == 9.0 and runs["direct"]["wall_s"] == 9.5
    assert runs["direct"]["cpu_s"] == 5.1 and runs["direct"]["peak_rss_mib"] == 250
    assert runs["direct"]["wall_range"] == (8.5, 30.0) and runs["inspect"]["rss_range"] == (190, 210)
    zero, direct, dcpu, dmem = bh._rows(runs, 256, 64, 1.0)
    assert "median of 3 runs" in zero["name"] and "[runs 8.0-20.0 s]" in zero["value"]
    assert direct["value"].startswith("0.95 ") and "[runs 8.5-30.0 s]" in direct["value"]
    assert dmem["value"].startswith("1.25x (250 [runs 240.0-260.0 MiB] vs 200 [runs 190.0-210.0 MiB] MiB)")


def test_episodes_must_fill_the_slots() -> None:
    import bench_harness as bh

    with pytest.raises(ValueError, match="multiple of the slots"):
        bh.bench_harness(n_episodes=200, concurrency=64)
    with pytest.raises(ValueError, match="multiple of the images"):
        bh.bench_harness(n_episodes=64, concurrency=64, images=10)


def test_reused_images_are_labelled() -> None:
    import bench_harness as bh

    rows = bh._rows({"zero-cost": _run(512, 8.0, 2.0, 300), "direct": _run(512, 8.0, 2.0, 300)}, 256, 64, 1.0,
                    label=bh._label(256, 2))
    assert "2 images reused 128x each" in rows[0]["name"]


def test_every_episode_gets_its_own_image(tmp_path: Path) -> None:
    import bench_harness as bh

    ds = bh._dataset(tmp_path / "d", 12, 96)
    pixels = [ds.load_image(ds[i]).tobytes() for i in ds.ids()]
    assert len(ds.ids()) == 12 and len(set(pixels)) == 12


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
def test_bench_harness_smoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("litellm")
    import bench_harness as bh

    monkeypatch.setattr(bh, "INSPECT_PYTHON", tmp_path / "absent" / "python")
    rows = bh.bench_harness(n_episodes=4, concurrency=2, latency_s=0.0, repeats=2, with_inspect=False)
    assert "median of 2 runs" in rows[0]["name"] and "[runs " in rows[1]["value"]
    assert [r["name"].split(":")[0].split(" (")[0] for r in rows] == [
        "harness zero-cost", "harness direct throughput vs zero-cost", "harness litellm throughput vs zero-cost",
        "harness direct CPU per call vs Inspect AI", "harness direct peak memory vs Inspect AI",
        "harness litellm CPU per call vs Inspect AI", "harness litellm peak memory vs Inspect AI"]
    assert "(8 calls, 0 errors, 4 correct)" in rows[1]["name"] and "(8 calls, 0 errors, 4 correct)" in rows[2]["name"]
    assert "skipped" in rows[3]["value"]


@pytest.mark.slow
def test_bench_startup_sees_the_notice_before_the_first_request() -> None:
    pytest.importorskip("litellm")
    import bench_startup

    row = bench_startup.bench_startup("litellm")
    assert row["notice_cpu_s"] is not None and row["notice_cpu_s"] < row["first_request_cpu_s"]
    assert "loaded then: litellm" in row["value"]
    direct = bench_startup.bench_startup()  # openai/ with an api_base: nothing to announce
    assert direct["notice_cpu_s"] is None and "litellm" not in direct["value"].split("loaded then:")[1]
