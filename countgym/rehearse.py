"""``countgym rehearse``: the whole study, for free, before paying for it.

Every sweep config in ``configs/`` runs against the simulated model (``countgym.simulate``) into
the configs' own shared folders under ``--out`` (``runs/finger``, ``runs/countercount``,
``runs/countvideo``); each folder is then audited once, as ``countgym audit`` does, and the
behaviour the simulation injected is printed next to what the audit recovered, per model:
omissions, duplicates and phantoms per 100 objects and the pointing error (tool loop), the
canonical-answer probability vs the bias rate (CounterCount), the relative count bias vs the
mean signed error (video, answer-only arms), and the counting range R80.

``--scale quick`` runs ``QUICK_LIMIT`` stimuli per cell (minutes of CPU); ``--scale full`` runs
every config at its own size (the papers' studies; hours). Datasets that need a download
(FSC-147, PixMo) cannot run offline: their cells are skipped, with one line per dataset.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countgym.errors import UserError

QUICK_LIMIT = 2
"""Stimuli per cell of ``--scale quick`` (CounterCount: stimuli of the paired battery)."""

DOWNLOAD_HINTS: tuple[str, ...] = ("download", "official release", "release folder")
"""Words of a dataset error that mean the data is not on this machine (the cell is skipped)."""


@dataclass
class Rehearsal:
    """What a rehearsal did: folders run and audited, cells skipped, per-folder audits."""

    run_dirs: list[Path] = field(default_factory=list)
    audit_dirs: list[Path] = field(default_factory=list)
    cells_run: int = 0
    episodes: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    """Dataset -> why its cells were skipped."""
    failed_cells: list[str] = field(default_factory=list)


def _say(text: str) -> None:
    print(text, flush=True)


def _default_configs() -> Path:
    from countgym.catalog import default_config_dir

    folder = default_config_dir()
    if folder is None:
        raise UserError("no configs/ folder next to this countgym: pass --configs DIR")
    return folder


def rehearse(
    out: Path,
    *,
    scale: str = "quick",
    profile: str | Path | None = None,
    configs: Path | None = None,
    progress: bool = True,
) -> Rehearsal:
    """Run every config in ``configs`` under the simulated model into ``out``, audit each shared
    folder once, print injected vs recovered behaviour and the paper map."""
    from countgym.simulate import profiles_from, simulation
    from countgym.sweep import expand, load_config, with_overrides

    if scale not in ("quick", "full"):
        raise UserError(f"--scale must be quick or full, got {scale!r}")
    folder = configs or _default_configs()
    files = sorted(folder.glob("*.toml")) + sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml"))
    if not files:
        raise UserError(f"no sweep configs (*.toml, *.yaml) in {folder}")
    profiles = profiles_from(profile)  # a bad profile fails before any work
    limit = QUICK_LIMIT if scale == "quick" else None
    plans = []
    for f in files:
        cfg = load_config(f)
        target = out / cfg.out if not Path(cfg.out).is_absolute() else out / Path(cfg.out).name
        plans.append((f, with_overrides(cfg, out=str(target), limit=limit)))
    result = Rehearsal()
    started = time.monotonic()
    _say(f"rehearsal ({scale}): {len(files)} configs from {folder}, simulated models ({profiles.source} profile)"
         + (f", {limit} stimuli per cell" if limit else ", every config at its own size"))
    with simulation(profiles) as sim:
        for i, (f, cfg) in enumerate(plans, 1):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # --limit notices, one per cell: said once above
                cells = expand(cfg)
            run_dir = Path(cfg.out)
            if run_dir not in result.run_dirs:
                result.run_dirs.append(run_dir)
            _say(f"[{i}/{len(plans)}] {f.name}: {len(cells)} cells -> {run_dir}")
            for k, cell in enumerate(cells, 1):
                _run_one(sim, cell, cfg, run_dir, result)
                if progress and k % 20 == 0 and k < len(cells):
                    _say(f"  {k}/{len(cells)} cells ({time.monotonic() - started:.0f} s so far)")
            _say(f"  done ({time.monotonic() - started:.0f} s so far, {result.episodes} episodes)")
    for run_dir in result.run_dirs:
        if not any(run_dir.rglob("*.jsonl")):
            continue
        audit_dir = run_dir.with_name(run_dir.name + "-audit")
        _say(f"auditing {run_dir} -> {audit_dir}")
        _audit(run_dir, audit_dir, quick=scale == "quick")
        result.audit_dirs.append(audit_dir)
    _say(f"rehearsal done in {time.monotonic() - started:.0f} s: {result.cells_run} cells, {result.episodes} episodes, "
         f"{len(result.skipped)} datasets skipped ({', '.join(result.skipped) or 'none'})")
    print_comparison(result.audit_dirs, profiles)
    from countgym.detectable import print_detectable

    print_detectable(result.audit_dirs, scale=scale)
    print_paper_map(result.audit_dirs)
    return result


def _run_one(sim: Any, cell: Any, cfg: Any, run_dir: Path, result: Rehearsal) -> None:
    """One cell against the simulated model; a dataset that is not here skips its cells."""
    from countgym.runner import run_cell

    if cell.dataset in result.skipped:
        return
    try:
        factory, ds = sim.prepare(cell, concurrency=cfg.concurrency)
    except UserError as e:
        text = str(e)
        if any(h in text.lower() for h in DOWNLOAD_HINTS):
            why = text.splitlines()[0]
            if why not in result.skipped.values():  # one line per missing download, not per subset
                _say(f"skipped: {cell.dataset} and every dataset that needs the same data, in every config "
                     f"(not on this machine): {why}")
            result.skipped[cell.dataset] = why
        else:
            result.failed_cells.append(f"{cell.log_name()}: {text}")
            _say(f"  skipped cell {cell.agent} {cell.model} on {cell.dataset}: {text}")
        return
    res = run_cell(cell, run_dir, policy_factory=factory, dataset=ds, concurrency=cfg.concurrency,
                   progress=False)
    result.cells_run += 1
    result.episodes += res.ran
    if res.errors:
        first = res.error_messages[0] if res.error_messages else ""
        _say(f"  {cell.agent} {cell.model} on {cell.dataset}: {res.errors} of {res.ran} episodes ended in error"
             f" (first: {first[:200]})")


QUICK_RESAMPLES = 400
"""Bootstrap resamples of a quick rehearsal's audits (the full scale uses the audit's 2,000): the
rehearsal reads point values; its CIs only need to exist."""
QUICK_VIEWER_EPISODES = 12
"""Episodes in a quick rehearsal's trajectory viewer (the audit's default is 40)."""


def _audit(run_dir: Path, audit_dir: Path, *, quick: bool = False) -> None:
    """What ``countgym audit RUN_DIR --out AUDIT_DIR`` does, with its defaults (the run's own
    model as judge: the simulated replies never need one); a failure is one line, not the end.
    ``quick``: fewer bootstrap resamples and viewer episodes (``QUICK_RESAMPLES``,
    ``QUICK_VIEWER_EPISODES``)."""
    from countgym.agents.registry import audit_hooks
    from countgym.analysis.extraction import SAME_MODEL
    from countgym.analysis.glance import glance_of_audit, render
    from countgym.analysis.tables import write_audit_files
    from countgym.analysis.viewer import ViewerOptions
    from countgym.logs import find_logs

    try:
        files = write_audit_files(
            find_logs([run_dir]), audit_dir, judge=SAME_MODEL, parser=None, **audit_hooks(),
            warn=lambda line: print(f"warning: {line}", file=sys.stderr), report=True,
            viewer=ViewerOptions(max_episodes=QUICK_VIEWER_EPISODES) if quick else ViewerOptions(),
            n_resamples=QUICK_RESAMPLES if quick else 2000,
        )
    except Exception as e:  # noqa: BLE001 - one folder's audit must not end the rehearsal
        _say(f"  audit of {run_dir} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        return
    where = f"full tables: {files.tables['summary']}" + (f"; report: {files.report}" if files.report else "")
    sys.stdout.write(render(glance_of_audit(audit_dir), where=where))


# --- injected vs recovered ------------------------------------------------------------------------
def _read_csv(path: Path) -> Any:
    import pandas as pd

    if not path.is_file():
        return None
    try:
        return pd.read_csv(path)
    except (ValueError, OSError):
        return None


def _f(v: Any, digits: int = 1) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def comparison_rows(audit_dirs: Sequence[Path], profiles: Any) -> list[list[str]]:
    """Per audit folder and model: injected values next to what the audit recovered (read from
    the audit's ``episodes.csv``: the same per-episode columns the summary tables pool)."""
    import numpy as np

    rows: list[list[str]] = []
    for d in audit_dirs:
        ep = _read_csv(d / "episodes.csv")
        if ep is None or ep.empty:
            continue
        for model, g in ep.groupby("model", sort=True):
            p = profiles.for_model(str(model))
            audited = g[g["audited"].astype(bool)] if "audited" in g else g.iloc[:0]
            objects = float(audited["n_true"].sum()) if len(audited) else 0.0

            def per100(col: str, frame: Any = audited, n: float = objects) -> str:
                return _f(100.0 * frame[col].sum() / n) if n else "-"

            answer_only = g[g["arm"].astype(str).isin(("direct", "cot")) | g["arm"].astype(str).str.startswith("video")]
            mse = "-"
            if len(answer_only):
                n_true = answer_only["n_true"].astype(float)
                signed = answer_only["signed_error"].astype(float)
                ok = n_true > 0
                mse = _f(np.nanmean(signed[ok] / n_true[ok]), 3) if ok.any() else "-"
            bias = _cf_bias_of(d, str(model))
            pe = _f(np.nanmedian(audited["pointing_error"].astype(float)), 1) if len(audited) else "-"
            def pair(injected: str, recovered: str) -> str:
                return "-" if recovered == "-" else f"{injected}/{recovered}"  # measured here or not

            rows.append([
                d.name, str(model),
                pair(f"{100 * p.omission:.1f}", per100("omission")),
                pair(f"{100 * (1 - p.omission) * p.duplicate:.1f}", per100("duplicate")),
                pair(f"{100 * p.phantom:.1f}", per100("phantom")),
                pair(f"{p.pointing_sigma * math.sqrt(2 * math.log(2)):.1f}", pe),
                pair(f"{p.canonical:.2f}", bias),
                pair(f"{p.count_bias:+.3f}", mse),
                _r80_of(d, str(model)),
            ])
    return rows


def _cf_bias_of(audit_dir: Path, model: str) -> str:
    """A model's CounterCount bias rate over all its formats and interventions (the rows of the
    audit's ``countercount/cf_scores.csv``, weighted by their counterfactual items)."""
    scores = _read_csv(audit_dir / "countercount" / "cf_scores.csv")
    if scores is None or not {"model", "bias_rate", "n_cf"} <= set(scores.columns):
        return "-"
    rows = scores[(scores["model"].astype(str) == model) & scores["bias_rate"].notna()]
    n = float(rows["n_cf"].sum()) if len(rows) else 0.0
    return _f(float((rows["bias_rate"] * rows["n_cf"]).sum()) / n, 2) if n else "-"


def _r80_of(audit_dir: Path, model: str) -> str:
    """The range of R80 over a model's rows of the audit's ``summary.csv`` (``-`` when none)."""
    summary = _read_csv(audit_dir / "summary.csv")
    if summary is None or "r80" not in summary.columns or "model" not in summary.columns:
        return "-"
    rows = summary[(summary["model"].astype(str) == model) & summary["r80"].notna()]
    if rows.empty:
        return "-"
    lo, hi = rows["r80"].min(), rows["r80"].max()
    return _f(lo, 0) if lo == hi else f"{_f(lo, 0)}-{_f(hi, 0)}"


def print_comparison(audit_dirs: Sequence[Path], profiles: Any) -> None:
    """The injected-vs-recovered table (each cell ``injected/recovered``)."""
    rows = comparison_rows(audit_dirs, profiles)
    if not rows:
        return
    head = ["audit", "model", "omit/100", "dup/100", "phantom/100", "point.err", "canonical/bias",
            "count_bias/MSE", "R80"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("\ninjected/recovered per model, all cells of the folder pooled (expected under the profile / what the "
          "audit measured; dup: (1 - omission) x duplicate; point.err: 1.18 x pointing_sigma vs the median "
          "on-target distance; MSE: mean signed error / n of answer-only and video arms; R80 over the model's "
          "rows; '-': not measured in that folder):")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    sys.stdout.flush()


_PAPER_OF_FOLDER = {"finger": "finger", "countvideo": "countvideobench", "countercount": "countercount"}
"""The paper whose tables and figures each shared run folder's audit holds."""


def print_paper_map(audit_dirs: list[Path]) -> None:
    """Where the rehearsal's audits are, and the paper map: every table and figure of each paper
    with the place in its folder's report that has it, or why not."""
    from countgym.analysis.paper_map import paper_map_text

    print("\naudits:")
    for d in audit_dirs:
        report = d / "report.html"
        print(f"  {d}: {report if report.is_file() else '(no report)'}")
    for d in audit_dirs:
        paper = _PAPER_OF_FOLDER.get(d.name.removesuffix("-audit"))
        if paper is None:
            continue
        print(f"\npaper map ({d / 'report.html'}):")
        print(paper_map_text(d, papers=[paper]))
