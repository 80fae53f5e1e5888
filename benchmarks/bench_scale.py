"""Scale-out rows: the Ray executor against the local one on the same sweep, and memory over a
long run (the target: memory stays flat; images are not held per finished episode).

    python benchmarks/bench_scale.py [ray|memory]
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_harness import _dataset, _rss_mb, _start_server  # noqa: E402


def bench_ray_vs_local(n_stimuli: int = 10, repeats: int = 20, num_cpus: int = 2) -> dict[str, Any]:
    """One sweep (blob-counter and noisy-pointer, ``n_stimuli x repeats`` episodes each) with the
    local executor (one process) and with Ray on ``num_cpus`` local CPUs; ratio of wall times.
    Ray's one-time start-up is reported apart: it is paid once per session, not per sweep. The
    load average is reported too: on a shared 2-core machine other work takes the second core."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return {"name": "ray vs local executor", "value": "skipped: ray not installed (pip install 'countgym[ray]')", "target": "", "ok": None}
    from countgym.executors.ray_executor import ensure_ray, run_sweep_ray
    from countgym.logs import read_records
    from countgym.sweep import SweepConfig, run_sweep

    with tempfile.TemporaryDirectory() as tmp:
        ds = _dataset(Path(tmp) / "data", n_stimuli)
        base = {"datasets": [str(ds.root)], "arms": ["blob-counter", "noisy-pointer"], "repeats": repeats}
        local_cfg = SweepConfig.model_validate({**base, "out": str(Path(tmp) / "local")})
        ray_cfg = SweepConfig.model_validate({**base, "out": str(Path(tmp) / "ray")})
        t0 = time.perf_counter()
        run_sweep(local_cfg, progress=False)
        local_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        started = ensure_ray(num_cpus=num_cpus)
        init_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            run_sweep_ray(ray_cfg, progress=False)
            ray_s = time.perf_counter() - t0
        finally:
            if started:
                import ray

                ray.shutdown()
        key = lambda r: (r.episode_id, r.answer, tuple(r.tags))  # noqa: E731
        same = sorted(map(key, read_records([local_cfg.out]))) == sorted(map(key, read_records([ray_cfg.out])))
        n = len(read_records([ray_cfg.out]))
    ratio = ray_s / local_s
    load = os.getloadavg()[0]
    return {
        "name": f"ray vs local executor: {n} scripted episodes, {num_cpus} CPUs",
        "value": f"{ratio:.2f}x local wall time ({ray_s:.1f} s vs {local_s:.1f} s; ray.init {init_s:.1f} s apart; load avg {load:.1f} on {os.cpu_count()} cores){'' if same else '; EPISODES DIFFER'}",
        "target": f"< 1.0x with {num_cpus} CPUs, same episodes",
        "ok": same and ratio < 1.0,
        "ray_s": ray_s,
        "local_s": local_s,
        "ray_init_s": init_s,
        "ratio": ratio,
        "episodes": n,
        "same_episodes": same,
        "load_avg": load,
    }


def _trim() -> bool:
    """Return glibc's free lists to the OS, so RSS shows memory in use (False: not glibc)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def bench_memory(n_episodes: int = 1000, checkpoint: int = 250, concurrency: int = 16) -> dict[str, Any]:
    """RSS after ``checkpoint`` and after ``n_episodes`` tag-loop episodes (litellm backend against
    the local test server, zero latency, ``concurrency`` threads): flat means within 10 %.

    With 16 threads glibc keeps per-thread arenas whose free lists make raw RSS drift by tens of
    MB either way; the verdict uses RSS after ``malloc_trim`` (memory in use) and the count of
    live Python allocations, and the raw RSS is reported beside them. A leaked 768 x 768 image
    per episode would add 1.7 GB here; allocator noise is a few percent."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")
    from countgym.agents.arms import arm_env_options, make_arm_policy
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.runner import CellSpec, run_cell

    n_stimuli = 10
    if n_episodes % n_stimuli or checkpoint % n_stimuli:
        raise ValueError("n_episodes and checkpoint must be multiples of 10")
    proc, base_url = _start_server(0.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ds = _dataset(Path(tmp) / "data", n_stimuli)
            backend = LiteLLMBackend("openai/blob", api_base=base_url, timeout_s=60)
            spec = CellSpec(dataset=str(ds.root), agent="tag", model="openai/blob", env_options=arm_env_options("tag"))

            def run(repeats: int) -> tuple[float, float, float, int]:
                # Same cell, more repeats: each call resumes and adds the rest.
                s = CellSpec(**{**spec.__dict__, "repeats": repeats})
                t0 = time.perf_counter()
                run_cell(s, Path(tmp) / "run", policy_factory=lambda: make_arm_policy("tag", backend),
                         dataset=ds, concurrency=concurrency, progress=False)
                wall = time.perf_counter() - t0
                gc.collect()
                raw = _rss_mb()
                _trim()
                return wall, raw, _rss_mb(), sys.getallocatedblocks()

            run(1)  # warm-up: imports, connection pool, caches
            t_a, raw_a, rss_a, blocks_a = run(checkpoint // n_stimuli)
            t_b, raw_b, rss_b, blocks_b = run(n_episodes // n_stimuli)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    growth = (rss_b - rss_a) / rss_a
    block_growth = (blocks_b - blocks_a) / blocks_a
    return {
        "name": f"memory: RSS after {checkpoint} vs {n_episodes} tag episodes (test server, {concurrency} threads)",
        "value": (
            f"{growth:+.1%} in use ({rss_a:.0f} -> {rss_b:.0f} MB; raw RSS {raw_a:.0f} -> {raw_b:.0f} MB; "
            f"Python allocations {block_growth:+.2%}; {n_episodes / (t_a + t_b):.0f} ep/s)"
        ),
        "target": "<= +10 %",
        "ok": growth <= 0.10 and block_growth <= 0.01,
        "rss_checkpoint_mb": rss_a,
        "rss_end_mb": rss_b,
        "raw_rss_checkpoint_mb": raw_a,
        "raw_rss_end_mb": raw_b,
        "python_blocks_checkpoint": blocks_a,
        "python_blocks_end": blocks_b,
        "growth": growth,
    }


if __name__ == "__main__":
    which = sys.argv[1:] or ["ray", "memory"]
    for name in which:
        row = {"ray": bench_ray_vs_local, "memory": bench_memory}[name]()
        for key, val in row.items():
            print(f"{key}: {val}")
