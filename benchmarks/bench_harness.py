"""Harness overhead: tag-loop episodes through the litellm backend against the local test server
with a simulated model latency, as a share of the ideal throughput (aim >= 80 %).

Ideal wall time is ``n_calls * latency / concurrency``: what a harness with zero overhead would
need if every worker always had a call in flight. The server runs in its own process (as a real
endpoint would), so its pixel work does not compete with the harness for the GIL.

    python benchmarks/bench_harness.py [n_episodes] [concurrency] [latency_s]
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw


def _dataset(root: Path, n_stimuli: int = 10) -> Any:
    """``n_stimuli`` 768 x 768 images of 5-14 black discs (radius 14) with exact centres."""
    from countgym.stimulus import Dataset, Stimulus, write_manifest

    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for i in range(n_stimuli):
        n = 5 + i
        # A jittered lattice keeps discs apart, so the detector's count is exact.
        side = int(np.ceil(np.sqrt(n)))
        cells = rng.permutation(side * side)[:n]
        pts = [
            (
                (c % side + 0.5) * 768 / side + rng.uniform(-15, 15),
                (c // side + 0.5) * 768 / side + rng.uniform(-15, 15),
            )
            for c in cells
        ]
        im = Image.new("RGB", (768, 768), "white")
        d = ImageDraw.Draw(im)
        for x, y in pts:
            d.ellipse([x - 14, y - 14, x + 14, y + 14], fill="black")
        rel = f"images/s{i}.png"
        im.save(root / rel)
        stims.append(Stimulus(id=f"s{i}", n=n, obj="dots", obj_sing="dot", image=rel, points=pts))
    write_manifest(root, stims)
    return Dataset(root)


def _start_server(latency_s: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable,
        "-m",
        "countgym.testing.server",
        "--port",
        "0",
        "--latency",
        str(latency_s),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if " at " not in line:
        proc.kill()
        raise RuntimeError(f"test server did not start: {line!r}")
    return proc, line.split(" at ", 1)[1].split()[0]


def _cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (or of ``pid``, read from /proc)."""
    if pid is None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_harness(
    n_episodes: int = 200, concurrency: int = 64, latency_s: float = 1.0
) -> dict[str, Any]:
    """Run ``n_episodes`` tag-arm episodes (real env, runner and litellm backend) and report the
    achieved share of the ideal throughput."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")
    from countgym.agents.arms import arm_env_options, make_arm_policy
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.logs import read_records
    from countgym.runner import CellSpec, run_cell

    proc, base_url = _start_server(latency_s)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # Stimuli x repeats = n_episodes exactly (at most 10 distinct images).
            ds = _dataset(Path(tmp) / "data", math.gcd(n_episodes, 10))
            repeats = n_episodes // len(ds.ids())
            backend = LiteLLMBackend("openai/blob", api_base=base_url, timeout_s=60)
            backend.complete([{"role": "user", "content": [{"type": "text", "text": "warm up"}]}])
            spec = CellSpec(
                dataset=str(ds.root),
                agent="tag",
                model="openai/blob",
                env_options=arm_env_options("tag"),
                repeats=repeats,
            )
            rss0 = _rss_mb()
            cpu0, srv0 = _cpu_s(), _cpu_s(proc.pid)
            t0 = time.perf_counter()
            result = run_cell(
                spec,
                Path(tmp) / "run",
                policy_factory=lambda: make_arm_policy("tag", backend),
                dataset=ds,
                concurrency=concurrency,
                progress=False,
            )
            wall = time.perf_counter() - t0
            cpu1, srv1 = _cpu_s(), _cpu_s(proc.pid)
            rss1 = _rss_mb()
            records = read_records([result.log])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    n_calls = sum(len(r.steps) for r in records)
    ideal = n_calls * latency_s / concurrency
    share = ideal / wall if wall > 0 else 0.0
    correct = sum(r.answer == (r.truth.n if r.truth else None) for r in records)
    return {
        "name": f"harness: {len(records)} tag episodes, {n_calls} calls, concurrency {concurrency}, latency {latency_s:g} s",
        "value": f"{share:.0%} of ideal ({wall:.1f} s vs {ideal:.1f} s; {n_calls / wall:.1f} calls/s)",
        "target": ">= 80 %",
        "ok": share >= 0.8,
        "share": share,
        "wall_s": wall,
        "ideal_s": ideal,
        "n_calls": n_calls,
        "episodes": len(records),
        "errors": result.errors,
        "correct": correct,
        "rss_growth_mb": rss1 - rss0,
        # Where the time goes when the share is low: CPU per call of harness and server.
        "harness_cpu_ms_per_call": 1000 * (cpu1 - cpu0) / max(n_calls, 1),
        "server_cpu_ms_per_call": 1000 * (srv1 - srv0) / max(n_calls, 1),
        "cpu_cores": os.cpu_count(),
    }


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:4]]
    kw = dict(zip(("n_episodes", "concurrency", "latency_s"), args, strict=False))
    for k in ("n_episodes", "concurrency"):
        if k in kw:
            kw[k] = int(kw[k])
    for key, val in bench_harness(**kw).items():
        print(f"{key}: {val}")
