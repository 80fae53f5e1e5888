"""Smoke test of examples/reinforce_tiny.py as a subprocess with a tiny budget: it runs on CPU,
offline, well inside two minutes, and logs a finite loss and mean return for every step."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "reinforce_tiny.py"


@pytest.mark.slow
def test_reinforce_example_logs_finite_loss_and_returns(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "4", "--episodes", "8", "--envs", "4",
         "--workdir", str(tmp_path), "--log", str(log)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert [x["step"] for x in lines] == [0, 1, 2, 3]
    assert [json.loads(x) for x in log.read_text().splitlines()] == lines
    for x in lines:
        assert math.isfinite(x["loss"]) and math.isfinite(x["mean_return"])
        assert 0.0 <= x["answered"] <= 1.0 and x["tokens"] == 8
    assert wall < 120
