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

import contextlib
import io
import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countgym.detectable import read_csv_or_none
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
    index: Path | None = None
    """The rehearsal's ``index.html`` (its reports and the injected-vs-recovered table)."""


def _say(text: str) -> None:
    from countgym.termtext import terminal_safe

    print(terminal_safe(text), flush=True)  # lines can quote a provider's error


def _default_configs() -> Path:
    from countgym.catalog import default_config_dir

    folder = default_config_dir()
    if folder is None:
        raise UserError("no configs/ folder next to this countgym: pass --configs DIR")
    return folder


def run_folder(out: Path, config_out: str, config: Path) -> Path:
    """Where a config's ``out`` goes in a rehearsal: inside ``out``, so that the run folder and
    its audit folder (``NAME-audit`` beside it) stay under ``--out``. A relative ``out`` is
    taken under ``--out``; an absolute one is re-rooted there by its last part
    (``/data/runs/finger`` -> ``OUT/finger``); one that climbs out with ``..``, or names
    ``--out`` itself, is refused (a ``UserError``)."""
    given = Path(config_out)
    parts: list[str] = []
    for part in (given.name,) if given.is_absolute() else given.parts:
        if part == "..":
            if not parts:
                parts = [".."]
                break
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    if not parts or parts == [".."]:
        raise UserError(
            f"{config}: out = {config_out!r} leaves the rehearsal's --out folder (a rehearsal writes "
            "only under --out); give a folder inside it, such as \"runs/NAME\""
        )
    return out.joinpath(*parts)


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
        plans.append((f, with_overrides(cfg, out=str(run_folder(out, cfg.out, f)), limit=limit)))
    result = Rehearsal()
    started = time.monotonic()
    _say(f"rehearsal ({scale}): {len(files)} configs from {folder}, simulated models ({profiles.source} profile)"
         + (f", {limit} stimuli per cell" if limit else ", every config at its own size"))
    with simulation(profiles) as sim:
        for i, (f, cfg) in enumerate(plans, 1):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # --limit notices, one per cell: said once above
                notes: list[str] = []
                cells = expand(cfg, notes=notes)
            for line in notes:
                _say(f"  {line}")
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
        _audit(run_dir, audit_dir, quick=scale == "quick", profiles=profiles)
        result.audit_dirs.append(audit_dir)
    _say(f"rehearsal done in {time.monotonic() - started:.0f} s: {result.cells_run} cells, {result.episodes} episodes, "
         f"{len(result.skipped)} datasets skipped ({', '.join(result.skipped) or 'none'})")
    from countgym.detectable import print_detectable

    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        print_comparison(result.audit_dirs, profiles, scale=scale)
        print_detectable(result.audit_dirs, scale=scale)
    sys.stdout.write(table.getvalue())
    print_paper_map(result.audit_dirs)
    result.index = write_index(out, result, scale=scale, source=str(profiles.source),
                               seconds=time.monotonic() - started, comparison=table.getvalue())
    _say(f"\nindex of this rehearsal (its reports, linked to each other, and the table above): {result.index}")
    return result


def write_index(out: Path, result: Rehearsal, *, scale: str, source: str, seconds: float, comparison: str) -> Path:
    """``out/index.html``: the rehearsal's reports and its injected-vs-recovered table; each
    report gets links to its siblings and the index."""
    from countgym.analysis.study_index import StudyReport, link_sibling_reports, write_study_index

    reports = [StudyReport(d, _PAPER_OF_FOLDER.get(d.name.removesuffix("-audit"))) for d in result.audit_dirs]
    facts = [
        f"Scale: {scale}; simulated models ({source} profile); {seconds:.0f} s.",
        f"{result.cells_run} cells, {result.episodes} episodes; skipped datasets: "
        f"{', '.join(sorted(result.skipped)) or 'none'}; failed cells: {len(result.failed_cells)}.",
    ]
    index = write_study_index(out / "index.html", reports, title=f"countgym rehearsal ({scale})", facts=facts,
                              sections=[("Injected vs recovered", comparison.strip("\n"))], simulated=True)
    link_sibling_reports(reports, index)
    return index


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


def _audit(run_dir: Path, audit_dir: Path, *, quick: bool = False, profiles: Any = None) -> None:
    """What ``countgym audit RUN_DIR --out AUDIT_DIR`` does, with its defaults (the run's own
    model as judge: the simulated model, on a server of its own, judges the replies it hedged);
    a failure is one line, not the end.
    ``quick``: fewer bootstrap resamples and viewer episodes (``QUICK_RESAMPLES``,
    ``QUICK_VIEWER_EPISODES``)."""
    from countgym.agents.registry import audit_hooks
    from countgym.analysis.extraction import SAME_MODEL
    from countgym.analysis.glance import glance_of_audit, render
    from countgym.analysis.tables import write_audit_files
    from countgym.analysis.viewer import ViewerOptions
    from countgym.logs import find_logs
    from countgym.simulate import SimulatedJudges
    from countgym.termtext import terminal_safe

    hooks = audit_hooks()
    try:
        with SimulatedJudges(profiles) as judges:  # the simulated model judges its own replies
            hooks["judge_backend"] = judges.judge_backend(hooks.get("judge_backend"))
            files = write_audit_files(
                find_logs([run_dir]), audit_dir, judge=SAME_MODEL, parser=None, **hooks,
                warn=lambda line: print(f"warning: {terminal_safe(line)}", file=sys.stderr), report=True,
                viewer=ViewerOptions(max_episodes=QUICK_VIEWER_EPISODES) if quick else ViewerOptions(),
                n_resamples=QUICK_RESAMPLES if quick else 2000,
                command=["countgym", "audit", str(run_dir), "--out", str(audit_dir)],
            )
    except Exception as e:  # noqa: BLE001 - one folder's audit must not end the rehearsal
        _say(f"  audit of {run_dir} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        return
    where = f"full tables: {files.tables['summary']}" + (f"; report: {files.report}" if files.report else "")
    sys.stdout.write(render(glance_of_audit(audit_dir), where=where))


# --- injected vs recovered ------------------------------------------------------------------------
def _f(v: Any, digits: int = 1) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


MIN_VERDICT_ITEMS = 20
"""Fewest items (audited episodes, CF items, answer-only episodes) a row of the injected-vs-recovered
table needs for a verdict: with fewer, its 95 % interval is too wide to tell a recovered rate from
a wrong one, and the row says ``too few to tell``."""
VERDICT_RESAMPLES = 400
"""Bootstrap resamples of the table's intervals (items resampled within the model's rows)."""

COMPARISON_HEAD: tuple[str, ...] = ("audit", "model", "metric", "injected", "recovered", "n", "95% CI", "verdict")


@dataclass(frozen=True)
class Check:
    """One row of the injected-vs-recovered table."""

    audit: str
    model: str
    metric: str
    injected: float | None
    recovered: float
    n: int
    low: float
    high: float
    verdict: str
    digits: int = 1

    def cells(self) -> list[str]:
        ci = "-" if math.isnan(self.low) else f"[{_f(self.low, self.digits)}, {_f(self.high, self.digits)}]"
        inj = "-" if self.injected is None else _f(self.injected, self.digits)
        return [self.audit, self.model, self.metric, inj, _f(self.recovered, self.digits), str(self.n), ci, self.verdict]


def _verdict(
    injected: float | None, low: float, high: float, n: int, why: str | None, estimate: float = float("nan")
) -> str:
    if injected is None:
        return "-"
    if n < MIN_VERDICT_ITEMS:
        return f"too few to tell ({n} < {MIN_VERDICT_ITEMS} items)"
    tol = 1e-9 + 0.05 * abs(injected)  # rounding of the printed profile value
    if why and why.startswith("no resample of"):  # every item alike: the value is certain
        low = high = estimate
    elif why:
        return f"too few to tell ({why})"
    elif math.isnan(low) or math.isnan(high):
        return "too few to tell (no interval)"
    return "recovered" if low - tol <= injected <= high + tol else "outside"


def _check(audit: str, model: str, metric: str, injected: float | None, samples: Any, estimate: float, n: int,
           digits: int = 1) -> Check:
    from countgym.analysis.bootstrap import estimable_interval

    lo, hi, why = estimable_interval(samples, n)
    return Check(audit, model, metric, injected, estimate, n, lo, hi, _verdict(injected, lo, hi, n, why, estimate),
                 digits)


def _ratio_samples(num: Any, den: Any, seed: int) -> Any:
    from countgym.analysis.bootstrap import bootstrap_ratios

    return bootstrap_ratios(num, den, n_resamples=VERDICT_RESAMPLES, seed=seed)


def comparison_checks(audit_dirs: Sequence[Path], profiles: Any) -> list[Check]:
    """Per audit folder, model and checked rate: injected value, recovered value, items, 95 %
    bootstrap CI and a verdict (``recovered`` / ``outside`` / ``too few to tell``). Read from the
    audit's ``episodes.csv`` (the per-episode columns the summary tables pool) and
    ``countercount/cf_scores.csv``."""
    import numpy as np

    from countgym.analysis.capacity import median_ci

    checks: list[Check] = []
    for d in audit_dirs:
        ep = read_csv_or_none(d / "episodes.csv")
        if ep is None or ep.empty:
            continue
        for model, g in ep.groupby("model", sort=True):
            p = profiles.for_model(str(model))
            m = str(model)
            audited = g[g["audited"].astype(bool)] if "audited" in g else g.iloc[:0]
            if len(audited):
                n_true = audited["n_true"].to_numpy(dtype=float)
                for col, inj in (("omission", 100 * p.omission), ("duplicate", 100 * (1 - p.omission) * p.duplicate),
                                 ("phantom", 100 * p.phantom)):
                    num = audited[col].to_numpy(dtype=float)
                    boot = 100 * _ratio_samples(num[None], n_true[None], 0)[0]
                    est = 100 * num.sum() / n_true.sum() if n_true.sum() else float("nan")
                    checks.append(_check(d.name, m, f"{col}/100", inj, boot, est, len(audited)))
                pe = audited["pointing_error"].to_numpy(dtype=float)
                pe = pe[~np.isnan(pe)]
                if len(pe):
                    est, lo, hi = median_ci(pe, n_resamples=VERDICT_RESAMPLES)
                    from countgym.analysis.bootstrap import ci_reason

                    why = ci_reason(None, len(pe), lo, hi)
                    lo, hi = (float("nan"), float("nan")) if why else (lo, hi)
                    inj = p.pointing_sigma * math.sqrt(2 * math.log(2))
                    checks.append(Check(d.name, m, "point.err", inj, est, len(pe), lo, hi,
                                        _verdict(inj, lo, hi, len(pe), why, est)))
            cf = _cf_counts(d, m)
            if cf is not None:
                biased, n_cf = cf
                items = np.r_[np.ones(biased), np.zeros(n_cf - biased)]
                boot = _ratio_samples(items[None], np.ones_like(items)[None], 1)[0]
                checks.append(_check(d.name, m, "bias rate", p.canonical, boot, biased / n_cf, n_cf, 2))
            answer_only = _answer_only(g)
            if len(answer_only):
                n_true = answer_only["n_true"].astype(float).to_numpy()
                signed = answer_only["signed_error"].astype(float).to_numpy()
                ok = (n_true > 0) & ~np.isnan(signed)
                if ok.any():
                    rel = signed[ok] / n_true[ok]
                    boot = _ratio_samples(rel[None], np.ones_like(rel)[None], 2)[0]
                    checks.append(_check(d.name, m, "MSE/n", p.count_bias, boot, float(rel.mean()), int(ok.sum()), 3))
            r80 = _r80_of(d, m)
            if r80 != "-":
                checks.append(Check(d.name, m, f"R80 {r80}", None, float("nan"), 0, float("nan"), float("nan"), "-"))
    return checks


def _answer_only(g: Any) -> Any:
    """The episodes of answer-only arms (the first message asks for a number: ``direct``,
    ``cot``; and the video task), read from the logged options, not the arm names."""
    prompt = g["prompt"].astype(str) if "prompt" in g.columns else None
    task = g["task"].astype(str) if "task" in g.columns else None
    keep = False
    if prompt is not None:
        keep = prompt.isin(("direct", "cot")) & ((task == "image") if task is not None else True)
    if task is not None:
        keep = keep | (task == "video")
    return g[keep] if not isinstance(keep, bool) else g.iloc[:0]


def comparison_rows(audit_dirs: Sequence[Path], profiles: Any) -> list[list[str]]:
    """The table's rows as text (``COMPARISON_HEAD``)."""
    return [c.cells() for c in comparison_checks(audit_dirs, profiles)]


def _cf_counts(audit_dir: Path, model: str) -> tuple[int, int] | None:
    """(biased, CF items) of a model over all its formats and interventions (the rows of the
    audit's ``countercount/cf_scores.csv``)."""
    scores = read_csv_or_none(audit_dir / "countercount" / "cf_scores.csv")
    if scores is None or not {"model", "bias_rate", "n_cf"} <= set(scores.columns):
        return None
    rows = scores[(scores["model"].astype(str) == model) & scores["bias_rate"].notna()]
    n = int(rows["n_cf"].sum()) if len(rows) else 0
    return (int(round(float((rows["bias_rate"] * rows["n_cf"]).sum()))), n) if n else None


def _r80_of(audit_dir: Path, model: str) -> str:
    """The range of R80 over a model's rows of the audit's ``summary.csv`` (``-`` when none)."""
    summary = read_csv_or_none(audit_dir / "summary.csv")
    if summary is None or "r80" not in summary.columns or "model" not in summary.columns:
        return "-"
    rows = summary[(summary["model"].astype(str) == model) & summary["r80"].notna()]
    if rows.empty:
        return "-"
    lo, hi = rows["r80"].min(), rows["r80"].max()
    return _f(lo, 0) if lo == hi else f"{_f(lo, 0)}-{_f(hi, 0)}"


def print_comparison(audit_dirs: Sequence[Path], profiles: Any, *, scale: str | None = None) -> None:
    """The injected-vs-recovered table: per model and rate, n, 95 % CI and a verdict."""
    checks = comparison_checks(audit_dirs, profiles)
    if not checks:
        return
    rows = [c.cells() for c in checks]
    head = list(COMPARISON_HEAD)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("\ninjected/recovered per model, all cells of the folder pooled (injected: expected under the profile; "
          "recovered: what the audit measured, with its 95 % bootstrap CI over the n items; duplicate: (1 - "
          "omission) x duplicate; point.err: 1.18 x pointing_sigma vs the median on-target distance; MSE/n: mean "
          "signed error / n of answer-only and video arms; verdict: recovered = injected inside the CI, outside, "
          f"or too few to tell (fewer than {MIN_VERDICT_ITEMS} items, or no interval)):")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    unverified = [c for c in checks if c.verdict.startswith("too few")]
    if unverified:
        names = ", ".join(f"{c.model} {c.metric} (n {c.n})" for c in unverified[:8])
        more = f" and {len(unverified) - 8} more" if len(unverified) > 8 else ""
        size = f"--scale {scale}" if scale else "this rehearsal"
        print(f"{size} is too small to verify {len(unverified)} of {sum(c.injected is not None for c in checks)} "
              f"checked rates: {names}{more}; run --scale full (or the configs with a larger --limit) to verify them.")
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
