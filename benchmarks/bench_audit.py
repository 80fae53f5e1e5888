"""Benchmark: point-level audit of 10,000 and 100,000 trajectories of about 50 tags each.

Targets (issue 14): the audit of 10,000 trajectories x ~50 tags in < 5 s of CPU, peak memory
that does not grow with the number of trajectories beyond the compact per-episode table, and
100,000 trajectories under 2 GiB.

Every trajectory is on its own image (no ground-truth reuse between trajectories), with one tag
call of ~50 noisy tags (omissions, duplicates, phantoms). The dataset manifest and the JSONL log
are written to a temporary folder first (streamed, never held as lists); the measured part runs
in a fresh subprocess: it loads the dataset (ground truth), then ``load_episodes`` reads the log,
validates every record, matches tags at tau and the two sensitivity scales and builds the
episodes table. Reported: the CPU seconds of ``load_episodes`` (``resource.getrusage``, user +
system), the process's peak RSS (``ru_maxrss``), the RSS after the dataset loaded, and the
growth per trajectory between the two.

``bench_write_audit`` times the whole audit folder on in-memory records (``write_audit_files``:
tables, contrasts, R80 bootstraps, principle tables, figures and the HTML report with its
capped trajectory viewer); ``bench_bootstrap`` times 10,000 paired bootstrap resamples over
1,000 items (target < 1 s).

``bench_audit_full`` (rows ``audit_full``, ``audit_full_100k``) runs the whole ``countgym audit
log.jsonl --out audit`` as a user does, in a fresh process: the CPU seconds of that process
(imports, tables, figures, report and viewer) and its peak RSS; targets < 5 s CPU at 10,000
trajectories and < 2 GiB at 100,000.

Run: ``python benchmarks/bench_audit.py [N] [--full | --audit-full]`` (one audit of N
trajectories, default 10,000; ``--full`` adds the audit-folder time, ``--audit-full`` runs the
whole command instead), or ``python benchmarks/run.py audit audit_100k audit_full audit_full_100k``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth
from countgym.stimulus import Dataset, Stimulus, write_manifest

CPU_TARGET_S = 5.0
"""CPU seconds for 10,000 trajectories."""
RSS_TARGET_MIB = 2048.0
"""Peak RSS for 100,000 trajectories."""

SIDE = 768


def _pairs(n_trajectories: int, n_objects: int, rng: np.random.Generator) -> Iterator[tuple[Stimulus, EpisodeRecord]]:
    """One (stimulus, episode record) per trajectory, generated lazily."""
    for i in range(n_trajectories):
        pts = rng.uniform(20, SIDE - 20, (n_objects, 2))
        keep = rng.random(n_objects) >= 0.1
        tags = pts[keep] + rng.normal(0, 2.0, (int(keep.sum()), 2))
        dups = pts[rng.random(n_objects) < 0.05] + rng.uniform(-2, 2, (1, 2))
        phantoms = rng.uniform(0, SIDE, (int(rng.binomial(n_objects, 0.08)), 2))
        allt = np.concatenate([tags, dups, phantoms])
        tag_list = [(float(x), float(y)) for x, y in allt]
        sid = f"s{i}"
        stim = Stimulus(id=sid, n=n_objects, obj="dots", obj_sing="dot", image=f"{sid}.png", points=pts.tolist())
        rec = EpisodeRecord(
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
        yield stim, rec


def _synthetic(
    n_trajectories: int, n_objects: int, rng: np.random.Generator
) -> tuple[list[Stimulus], list[EpisodeRecord]]:
    stims: list[Stimulus] = []
    recs: list[EpisodeRecord] = []
    for stim, rec in _pairs(n_trajectories, n_objects, rng):
        stims.append(stim)
        recs.append(rec)
    return stims, recs


def write_bench_logs(folder: Path, n_trajectories: int, n_objects: int = 50, seed: int = 0) -> tuple[Path, Path]:
    """Write the dataset folder ``folder/bench`` and the log ``folder/log.jsonl`` (streamed)."""
    log = folder / "log.jsonl"
    with log.open("w", encoding="utf-8") as f:

        def stimuli() -> Iterator[Stimulus]:
            for stim, rec in _pairs(n_trajectories, n_objects, np.random.default_rng(seed)):
                f.write(rec.model_dump_json() + "\n")
                yield stim

        write_manifest(folder / "bench", stimuli())
    return folder / "bench", log


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _child(dataset_dir: str, log: str) -> None:
    """The measured process: load the ground truth, then audit the log (prints one JSON line)."""
    from countgym.analysis import load_episodes

    ds = Dataset(dataset_dir)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = _cpu()
    df = load_episodes([log], resolve=lambda name: ds)
    cpu = _cpu() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    ok = bool(df["audited"].all())
    print(json.dumps({
        "rows": len(df), "audited": ok, "n_tags": float(df["n_tags"].mean()), "cpu_s": cpu,
        "base_rss_mib": base_rss / 1024, "peak_rss_mib": peak / 1024,
    }))  # fmt: skip


def measure_audit(n_trajectories: int, n_objects: int = 50, seed: int = 0) -> dict:
    """Write the logs, then audit them in a fresh subprocess; its CPU seconds and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir, log = write_bench_logs(Path(tmp), n_trajectories, n_objects, seed)
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(dataset_dir), str(log)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["rows"] == n_trajectories and res["audited"], res
    growth = (res["peak_rss_mib"] - res["base_rss_mib"]) * 1024 * 1024 / n_trajectories
    return {**res, "n": n_trajectories, "growth_bytes_per_episode": growth}


def bench_audit(n_trajectories: int = 10_000, n_objects: int = 50, seed: int = 0) -> list[dict]:
    """CPU seconds and peak RSS of the audit of ``n_trajectories`` trajectories (~50 tags)."""
    r = measure_audit(n_trajectories, n_objects, seed)
    target = CPU_TARGET_S * n_trajectories / 10_000
    return [
        {
            "name": f"audit of {n_trajectories} trajectories (~{r['n_tags']:.0f} tags each), CPU",
            "value": f"{r['cpu_s']:.2f} s",
            "seconds": r["cpu_s"],
            "target": f"< {target:g} s",
            "ok": r["cpu_s"] < target,
        },
        {
            "name": f"audit of {n_trajectories} trajectories, peak RSS",
            "value": f"{r['peak_rss_mib']:.0f} MiB (ground truth {r['base_rss_mib']:.0f} MiB, "
            f"+{r['growth_bytes_per_episode'] / 1024:.1f} KiB/episode)",
            "target": "table only",
            "ok": None,
        },
    ]


def bench_audit_100k(n_objects: int = 50, seed: int = 0, n_trajectories: int = 100_000) -> list[dict]:
    """The audit of 100,000 trajectories: peak RSS under 2 GiB (and its CPU seconds)."""
    r = measure_audit(n_trajectories, n_objects, seed)
    return [
        {
            "name": f"audit of {n_trajectories} trajectories, peak RSS",
            "value": f"{r['peak_rss_mib']:.0f} MiB (ground truth {r['base_rss_mib']:.0f} MiB, "
            f"+{r['growth_bytes_per_episode'] / 1024:.1f} KiB/episode)",
            "target": f"< {RSS_TARGET_MIB:.0f} MiB",
            "ok": r["peak_rss_mib"] < RSS_TARGET_MIB,
        },
        {
            "name": f"audit of {n_trajectories} trajectories, CPU",
            "value": f"{r['cpu_s']:.2f} s",
            "seconds": r["cpu_s"],
            "target": f"< {CPU_TARGET_S * 10:g} s",
            "ok": r["cpu_s"] < CPU_TARGET_S * 10,
        },
    ]


def _full_child(folder: str) -> None:
    """The measured process of ``audit_full``: ``countgym audit`` as a user runs it (prints one
    JSON line: CPU seconds of the whole process, imports included, and peak RSS)."""
    import contextlib
    import io
    import os

    os.chdir(folder)  # the log names its dataset "bench", a folder here
    from countgym.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["audit", "log.jsonl", "--out", "audit"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rc": rc, "cpu_s": _cpu(), "peak_rss_mib": peak / 1024}))


def measure_full_audit(n_trajectories: int, n_objects: int = 50, seed: int = 0) -> dict:
    """Write the logs, then run the whole ``countgym audit`` (tables, figures, report with its
    viewer) in a fresh process; its CPU seconds and peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        write_bench_logs(Path(tmp), n_trajectories, n_objects, seed)
        out = subprocess.run(
            [sys.executable, __file__, "--full-child", tmp], check=True, capture_output=True, text=True
        )
        ok = (Path(tmp) / "audit" / "report.html").is_file()
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["rc"] == 0 and ok, res
    return {**res, "n": n_trajectories}


def bench_audit_full(n_trajectories: int = 10_000, n_objects: int = 50, seed: int = 0) -> list[dict]:
    """The full ``countgym audit`` of 10,000 trajectories (< 5 s CPU); 100,000 (< 2 GiB)."""
    r = measure_full_audit(n_trajectories, n_objects, seed)
    big = n_trajectories >= 100_000
    cpu_target = CPU_TARGET_S * n_trajectories / 10_000
    return [
        {
            "name": f"full countgym audit of {n_trajectories} trajectories, CPU (whole process)",
            "value": f"{r['cpu_s']:.2f} s",
            "seconds": r["cpu_s"],
            "target": f"< {cpu_target:g} s",
            "ok": r["cpu_s"] < cpu_target,
        },
        {
            "name": f"full countgym audit of {n_trajectories} trajectories, peak RSS",
            "value": f"{r['peak_rss_mib']:.0f} MiB",
            "target": f"< {RSS_TARGET_MIB:.0f} MiB" if big else "table only",
            "ok": r["peak_rss_mib"] < RSS_TARGET_MIB if big else None,
        },
    ]


def bench_audit_full_100k(n_objects: int = 50, seed: int = 0, n_trajectories: int = 100_000) -> list[dict]:
    """The full ``countgym audit`` of 100,000 trajectories: peak RSS under 2 GiB."""
    return bench_audit_full(n_trajectories, n_objects, seed)


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
    if sys.argv[1:2] == ["--full-child"]:
        _full_child(sys.argv[2])
        raise SystemExit(0)
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3])
        raise SystemExit(0)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 10_000
    result = measure_audit(n)
    if "--audit-full" in sys.argv[1:]:
        print(json.dumps(measure_full_audit(n)))
        raise SystemExit(0)
    if "--full" in sys.argv[1:]:
        full = bench_write_audit(n)
        result.update(write_audit_seconds=full["seconds"], report_bytes=full["report_bytes"])
    print(json.dumps(result))
