"""Run every benchmark and print one table of measured values against the project's targets.

    python benchmarks/run.py                 # all rows
    python benchmarks/run.py env audit       # selected rows
    python benchmarks/run.py --tiny all      # each benchmark once at tiny size (CI: none can rot)

Every row shows what was measured, its target and a verdict: ``ok``, ``MISS``, or ``-`` for a
reference row without a target. A benchmark that fails (raises) gets a ``FAILED`` row and makes
the exit status 1; ``--tiny`` runs exercise the code paths only, so their verdicts are not
judged (the rows say "tiny").
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

BENCHES: dict[str, tuple[str, str]] = {
    "env": ("bench_env", "bench_env_step"),
    "scenes": ("bench_scenes", "bench_battery_generation"),
    "audit": ("bench_audit", "bench_audit"),
    "audit_100k": ("bench_audit", "bench_audit_100k"),
    "audit_full": ("bench_audit", "bench_audit_full"),
    "audit_full_100k": ("bench_audit", "bench_audit_full_100k"),
    "bootstrap": ("bench_audit", "bench_bootstrap"),
    "write_audit": ("bench_audit", "bench_write_audit"),
    "harness": ("bench_harness", "bench_harness"),
    "harness_reused": ("bench_harness", "bench_harness"),
    "harness_memory": ("bench_harness", "bench_harness_memory"),
    "harness_sources": ("bench_harness", "bench_harness_sources"),
    "litellm_profile": ("bench_litellm", "bench_litellm_profile"),
    "startup": ("bench_startup", "bench_startup"),
    "video": ("bench_video", "bench_video"),
    "video_build": ("bench_video", "bench_video_build"),
    "video_episode": ("bench_video", "bench_video_episode"),
    "ray": ("bench_scale", "bench_ray_vs_local"),
    "memory": ("bench_scale", "bench_memory"),
}

FULL: dict[str, dict[str, Any]] = {
    "harness_reused": {"images": 2},
}
"""Arguments of the full-size rows that differ from the function's defaults."""

TINY: dict[str, dict[str, Any]] = {
    "env": {"repeats": 2},
    "scenes": {"tiny": True},
    "audit": {"n_trajectories": 200},
    "audit_100k": {"n_trajectories": 300},
    "audit_full": {"n_trajectories": 200},
    "audit_full_100k": {"n_trajectories": 300},
    "bootstrap": {"n_items": 50, "n_resamples": 200},
    "write_audit": {"n_trajectories": 200},
    "harness": {"n_episodes": 4, "concurrency": 2, "latency_s": 0.0, "repeats": 1, "install_inspect": False},
    "harness_reused": {"n_episodes": 4, "concurrency": 2, "latency_s": 0.0, "repeats": 1, "images": 2,
                       "kinds": ("zero-cost", "direct"), "with_inspect": False},
    "harness_memory": {"concurrencies": (1, 2), "latency_s": 0.0},
    "harness_sources": {"sizes": (96, 1100), "n_episodes": 2, "concurrency": 2, "latency_s": 0.0, "repeats": 1},
    "litellm_profile": {"n_calls": 3},
    "startup": {},
    "video": {"videos": 1, "size": (160, 90), "cycles": False},
    "video_build": {"videos": 4, "size": (96, 54), "repeats": 1},
    "video_episode": {"videos": 1, "size": (160, 90), "passes": 1, "photos": 2, "photo_px": 64},
    "ray": {"n_stimuli": 2, "repeats": 1},
    "memory": {"n_episodes": 20, "checkpoint": 10, "concurrency": 2},
}
"""Arguments of each benchmark's tiny run: every code path once, in seconds (not timed)."""


def _row(name: str, r: dict[str, Any], tiny: bool) -> tuple[str, str, str, str]:
    value = r.get("value", f"{r.get('seconds', float('nan')):.2f} s")
    target = str(r.get("target", "")) or "-"
    ok = r.get("ok")
    if ok is None and "seconds" in r and isinstance(r.get("target"), str) and r["target"].startswith("< "):
        limit = r["target"][2:].split()
        try:
            ok = float(r["seconds"]) < float(limit[0]) and limit[1:2] == ["s"]
        except (ValueError, IndexError):
            ok = None
    verdict = "-" if ok is None else ("ok" if ok else "MISS")
    if tiny:
        verdict = "(tiny)"
    return (str(r.get("name", name)), str(value), target, verdict)


def main(argv: list[str]) -> int:
    tiny = "--tiny" in argv
    names = [a for a in argv if a != "--tiny"]
    if names in ([], ["all"]):
        names = list(BENCHES)
    rows: list[tuple[str, str, str, str]] = []
    failed = 0
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; choose from all, {', '.join(BENCHES)}", file=sys.stderr)
            return 2
    for name in names:
        mod, fn = BENCHES[name]
        kwargs = TINY.get(name, {}) if tiny else FULL.get(name, {})
        try:
            res = getattr(importlib.import_module(mod), fn)(**kwargs)
            results = res if isinstance(res, list) else [res]
        except Exception as e:  # noqa: BLE001 - one failing row must not hide the others
            traceback.print_exc()
            failed += 1
            first = (str(e).strip().splitlines() or [""])[0][:200]
            rows.append((name, f"failed: {type(e).__name__}: {first} (traceback above)", "-", "FAILED"))
            print(f"  FAILED: {name}", file=sys.stderr, flush=True)
            continue
        for r in results:
            rows.append(_row(name, r, tiny))
            print(f"  done: {rows[-1][0]}", file=sys.stderr, flush=True)
    header = ("benchmark", "measured", "target", "verdict")
    w = [max(len(r[i]) for r in [*rows, header]) for i in range(4)]
    line = lambda r: "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()  # noqa: E731
    print(line(header))
    print(line(tuple("-" * x for x in w)))
    for r in rows:
        print(line(r))
    if failed:
        print(f"{failed} benchmark(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
