"""Smoke test of the harness benchmark with a tiny budget (real runner, env, server process)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("litellm")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
def test_bench_harness_smoke() -> None:
    from bench_harness import bench_harness

    res = bench_harness(n_episodes=4, concurrency=2, latency_s=0.0)
    assert res["episodes"] == 4 and res["n_calls"] == 8
    assert res["errors"] == 0 and res["correct"] == 4
    assert res["wall_s"] > 0 and res["share"] >= 0
