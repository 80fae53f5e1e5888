"""Calibrating the placement sampler's candidate cap against the paper's effective figures.

*CountVideoBench* (Appendix B) reports what the pose constraint does: polar angle concentrated on
[58.2, 65.0] deg, mean 63.1, std 1.4; 83.0 % of videos with an object leaving the frame; 3.29
objects leaving per video. It does not say how many candidates the rejection sampler tries before
a pose counts as failed. This module measures those figures for a given cap over the design (or
an evenly spread part of it), so the cap can be chosen and the choice re-checked::

    python -m countgym.scenes.video.calibrate --caps 2000 4000 8000 --videos 520

``--readings base-pan appendix-euler`` measures each reading of the camera offsets and object
origins (``geometry.READINGS``); ``--seed-offsets 0 1 2`` repeats the design with independent
seeds. ``--origin-heights 0 0.5 1`` adds, for the same videos (placement and camera unchanged), the
leaving-frame figures measured with the tested points at those heights instead of the objects'
origins (height 1): a diagnostic of the gap to the paper's leaving-frame figures.

The value in use, the measured figures and the search are recorded in docs/countvideobench.md.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .geometry import READING, READINGS, generate_geometry, with_reading
from .specs import VideoSpec, design, spread, video_seed

PAPER = {
    "polar_min": 58.2,
    "polar_max": 65.0,
    "polar_mean": 63.1,
    "polar_std": 1.4,
    "share_leaving": 0.830,
    "leaving_per_video": 3.29,
}
"""The effective figures reported in Appendix B and Section 4.3."""


@dataclass(frozen=True)
class CalibrationStats:
    """Effective distributions of one candidate cap over a set of videos."""

    cap: int
    videos: int
    reading: str
    seed_offset: int
    polar_min: float
    polar_max: float
    polar_mean: float
    polar_std: float
    share_leaving: float
    leaving_per_video: float
    mean_pose_attempts: float
    objects_never_in_frame: int
    """Objects whose origin is in no rendered frame (the visibility check makes this 0)."""
    videos_camera_redrawn: int
    """Videos whose camera keys the visibility check redrew."""
    leaving_by_origin_height: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Diagnostic: height -> (share of videos with an object leaving, objects leaving per
    video) with the tested points at that height (``--origin-heights``)."""


def _one(
    task: tuple[VideoSpec, int, int, tuple[float, ...], tuple[str, ...]],
) -> list[tuple[float, int, int, int, int, tuple[int, ...]]]:
    """One video's figures under each reading (placed once: the readings share it)."""
    spec, cap, offset, heights, readings = task
    first = generate_geometry(
        spec.n, spec.shape, spec.color, video_seed(spec, offset), candidate_cap=cap, reading=readings[0]
    )
    out = []
    for reading in readings:
        g = first if reading == readings[0] else with_reading(first, reading)
        vis = g.visibility()
        out.append((
            g.pose.polar_deg,
            vis["objects_leaving_frame"],
            g.pose_attempts,
            vis["objects_unseen_in_rendered"],
            int(g.camera_attempts > 1),
            tuple(int((~g.in_frame(origin_height=h).all(axis=0)).sum()) for h in heights),
        ))
    return out


def measure(
    cap: int,
    *,
    videos: int = 2600,
    seed_offset: int = 0,
    workers: int = 2,
    origin_heights: tuple[float, ...] = (),
    readings: tuple[str, ...] = (READING,),
) -> list[CalibrationStats]:
    """The effective figures for ``cap`` over ``videos`` videos spread over the design, one
    entry per reading."""
    specs = spread(design(), videos)
    heights = tuple(float(h) for h in origin_heights)
    tasks = [(s, cap, seed_offset, heights, tuple(readings)) for s in specs]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            per_video = list(pool.map(_one, tasks, chunksize=16))
    else:
        per_video = [_one(t) for t in tasks]
    return [_stats(cap, reading, seed_offset, [v[i] for v in per_video], heights) for i, reading in enumerate(readings)]


def _stats(cap: int, reading: str, seed_offset: int, rows: list[Any], heights: tuple[float, ...]) -> CalibrationStats:
    polar = np.array([r[0] for r in rows])
    leaving = np.array([r[1] for r in rows])
    attempts = np.array([r[2] for r in rows])
    by_height = {}
    for i, h in enumerate(heights):
        counts = np.array([r[5][i] for r in rows])
        by_height[f"{h:g}"] = (float((counts > 0).mean()), float(counts.mean()))
    return CalibrationStats(
        cap=cap,
        videos=len(rows),
        reading=reading,
        seed_offset=seed_offset,
        polar_min=float(polar.min()),
        polar_max=float(polar.max()),
        polar_mean=float(polar.mean()),
        polar_std=float(polar.std(ddof=1)),
        share_leaving=float((leaving > 0).mean()),
        leaving_per_video=float(leaving.mean()),
        mean_pose_attempts=float(attempts.mean()),
        objects_never_in_frame=int(sum(r[3] for r in rows)),
        videos_camera_redrawn=int(sum(r[4] for r in rows)),
        leaving_by_origin_height=by_height,
    )


def main(argv: list[str] | None = None) -> None:
    """Print one JSON line of figures per cap."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--caps", type=int, nargs="+", required=True)
    ap.add_argument("--videos", type=int, default=2600)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--origin-heights",
        type=float,
        nargs="+",
        default=[],
        metavar="H",
        help="also measure the leaving-frame figures with the tested points at these heights",
    )
    ap.add_argument("--readings", nargs="+", default=[READING], choices=READINGS,
                    help="camera/origin readings to measure (default: the generator's)")
    ap.add_argument("--seed-offsets", type=int, nargs="+", default=[0], metavar="K",
                    help="independent runs of the design (0 = the benchmark's seeds)")
    args = ap.parse_args(argv)
    print(json.dumps({"paper": PAPER}), flush=True)
    for cap in args.caps:
        for offset in args.seed_offsets:
            for st in measure(
                cap, videos=args.videos, seed_offset=offset, workers=args.workers,
                origin_heights=args.origin_heights, readings=tuple(args.readings),
            ):
                print(json.dumps(_rounded(asdict(st))), flush=True)


def _rounded(value: Any) -> Any:
    """Floats rounded to 4 places, through dicts, lists and tuples (for the JSON lines)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    main()
