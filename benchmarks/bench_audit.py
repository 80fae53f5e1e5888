"""Benchmark: point-level audit of 10,000 trajectories of about 50 tags each.

Target: under 10 s. Every trajectory is on its own image (no ground-truth reuse
between trajectories), with one tag call of ~50 noisy tags (omissions, duplicates, phantoms).
Records are built in memory beforehand; the timed part is ``audit_episodes`` (matching at tau
and at the two sensitivity scales, plus the DataFrame). Parsing the same records from a JSONL
log is timed separately as ``read_seconds``.

``bench_write_audit`` times the whole audit folder on the same records (``write_audit_files``:
tables, contrasts, R80 bootstraps, principle tables, figures and the HTML report with its
capped trajectory viewer); ``bench_bootstrap`` times 10,000 paired bootstrap resamples over
1,000 items (target < 1 s).

Run: ``python benchmarks/bench_audit.py [N] [--full]`` (``--full`` adds the audit-folder time).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from countgym.analysis import audit_episodes
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth, iter_records
from countgym.stimulus import Dataset, Stimulus, write_manifest

SIDE = 768


def _synthetic(
    n_trajectories: int, n_objects: int, rng: np.random.Generator
) -> tuple[list[Stimulus], list[EpisodeRecord]]:
    stims: list[Stimulus] = []
    recs: list[EpisodeRecord] = []
    for i in range(n_trajectories):
        pts = rng.uniform(20, SIDE - 20, (n_objects, 2))
        keep = rng.random(n_objects) >= 0.1
        tags = pts[keep] + rng.normal(0, 2.0, (int(keep.sum()), 2))
        dups = pts[rng.random(n_objects) < 0.05] + rng.uniform(-2, 2, (1, 2))
        phantoms = rng.uniform(0, SIDE, (int(rng.binomial(n_objects, 0.08)), 2))
        allt = np.concatenate([tags, dups, phantoms])
        tag_list = [(float(x), float(y)) for x, y in allt]
        sid = f"s{i}"
        stims.append(
            Stimulus(
                id=sid,
                n=n_objects,
                obj="dots",
                obj_sing="dot",
                image=f"{sid}.png",
                points=pts.tolist(),
            )
        )
        recs.append(
            EpisodeRecord(
                episode_id=f"cell/{sid}/r0",
                stimulus_id=sid,
                dataset="bench",
                arm=ArmSpec(name="tag", options={"tools": ["tag"]}),
                model="noisy-pointer",
                seed=i,
                image_size=(SIDE, SIDE),
                stimulus_size=(SIDE, SIDE),
                steps=[
                    StepRecord(index=0, action={"tool": "tag"}, tags_added=tag_list),
                    StepRecord(index=1, action={"tool": "answer", "count": len(tag_list)}),
                ],
                tags=tag_list,
                answer=len(tag_list),
                end="answer",
                truth=Truth(n=n_objects),
                countgym_version="bench",
                template_hash="bench",
                started_at="",
                finished_at="",
            )
        )
    return stims, recs


def bench_audit(n_trajectories: int = 10_000, n_objects: int = 50, seed: int = 0) -> dict:
    """Time ``audit_episodes`` on ``n_trajectories`` synthetic trajectories of ~50 tags."""
    rng = np.random.default_rng(seed)
    stims, recs = _synthetic(n_trajectories, n_objects, rng)
    with tempfile.TemporaryDirectory() as tmp:
        write_manifest(Path(tmp) / "bench", stims)
        ds = Dataset(Path(tmp) / "bench")
        log = Path(tmp) / "log.jsonl"
        log.write_text("".join(r.model_dump_json() + "\n" for r in recs), encoding="utf-8")
        start = time.perf_counter()
        n_read = sum(1 for _ in iter_records([log]))
        read_seconds = time.perf_counter() - start

    start = time.perf_counter()
    df = audit_episodes(recs, resolve=lambda name: ds)
    seconds = time.perf_counter() - start
    assert len(df) == n_trajectories == n_read and df["audited"].all()
    return {
        "name": f"audit of {n_trajectories} trajectories (~{df['n_tags'].mean():.0f} tags each)",
        "seconds": round(seconds, 3),
        "target": "< 10 s",
        "ok": seconds < 10.0,
        "read_seconds": round(read_seconds, 3),
    }


def bench_write_audit(n_trajectories: int = 10_000, n_objects: int = 50, seed: int = 0) -> dict:
    """Time ``write_audit_files`` (every table, figure and the report) on synthetic trajectories.

    The synthetic stimuli have no image files, so the viewer's re-rendering is not part of
    this time (it is capped at 40 episodes whatever the run size).
    """
    from countgym.analysis import write_audit_files

    rng = np.random.default_rng(seed)
    stims, recs = _synthetic(n_trajectories, n_objects, rng)
    with tempfile.TemporaryDirectory() as tmp:
        write_manifest(Path(tmp) / "bench", stims)
        ds = Dataset(Path(tmp) / "bench")
        start = time.perf_counter()
        files = write_audit_files(recs, Path(tmp) / "audit", resolve=lambda name: ds)
        seconds = time.perf_counter() - start
        size = files.report.stat().st_size if files.report else 0
    return {
        "name": f"audit folder of {n_trajectories} trajectories (tables, figures, report)",
        "seconds": round(seconds, 3),
        "target": "< 30 s",
        "ok": seconds < 30.0,
        "report_bytes": size,
    }


def bench_bootstrap(n_items: int = 1000, n_resamples: int = 10_000) -> dict:
    """10,000 paired bootstrap resamples over 1,000 items (< 1 s): the EM and MAE differences
    of two arms, as ``contrasts.csv`` computes them."""
    from countgym.analysis import paired_contrasts

    rng = np.random.default_rng(0)
    truth = rng.integers(1, 60, n_items)
    answer_a = truth + rng.integers(-2, 3, n_items)
    answer_b = truth + rng.integers(-1, 2, n_items)
    t0 = time.perf_counter()
    paired_contrasts(truth, answer_a, answer_b, n_resamples=n_resamples, seed=0)
    seconds = time.perf_counter() - t0
    return {"name": f"paired bootstrap ({n_resamples} resamples x {n_items} items)", "seconds": seconds, "target": "< 1 s", "ok": seconds < 1.0}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 10_000
    result = bench_audit(n)
    if "--full" in sys.argv[1:]:
        full = bench_write_audit(n)
        result.update(write_audit_seconds=full["seconds"], report_bytes=full["report_bytes"])
    print(json.dumps(result))
