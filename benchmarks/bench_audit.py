"""Benchmark: point-level audit of 10,000 trajectories of about 50 tags each.

Target (quality.md): under 10 s. Every trajectory is on its own image (no ground-truth reuse
between trajectories), with one tag call of ~50 noisy tags (omissions, duplicates, phantoms).
Records are built in memory beforehand; the timed part is ``audit_episodes`` (matching at tau
and at the two sensitivity scales, plus the DataFrame). Parsing the same records from a JSONL
log is timed separately as ``read_seconds``.

Run: ``python benchmarks/bench_audit.py [N]``
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
        "read_seconds": round(read_seconds, 3),
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(json.dumps(bench_audit(n)))


def bench_bootstrap(n_items: int = 1000, n_resamples: int = 10_000) -> dict:
    """10,000 paired bootstrap resamples of an accuracy difference over 1,000 items (< 1 s)."""
    import time

    import numpy as np

    from countgym.analysis import bootstrap_mean_ci

    rng = np.random.default_rng(0)
    diff = rng.integers(0, 2, n_items).astype(float) - rng.integers(0, 2, n_items)
    t0 = time.perf_counter()
    bootstrap_mean_ci(diff, n_resamples=n_resamples, seed=0)
    seconds = time.perf_counter() - t0
    return {"name": f"paired bootstrap ({n_resamples} resamples x {n_items} items)", "seconds": seconds, "target": "< 1 s", "ok": seconds < 1.0}
