"""CounterCount metrics (*CounterCount*, Section 3 and Appendix B.2): from episode logs to tables
and figures.

On factual items the canonical count is the right answer, so only accuracy is reported. On CF
items every prediction is ``correct`` (the edited count), ``biased`` (the canonical count) or an
``other`` error (anything else, no answer included): accuracy + bias rate + other-error rate = 1.
Rates are broken down by category, CF count, removal vs addition and intervention, with
percentile bootstrap CIs (numpy, seeded) and paired deltas between interventions.

The judge (Appendix B.2) is a separate, cached step for replies whose extraction found several
incompatible numbers: ``judge_ambiguous(frame, judge, ...)``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from countgym.envs import cf_templates as tpl
from countgym.envs.cf_env import build_question, extract_count
from countgym.errors import UserError
from countgym.logs import EpisodeRecord, read_records
from countgym.secrets import scrub_data
from countgym.stimulus import Dataset, Stimulus

from .bootstrap import bootstrap_ratios, percentile_interval

OUTCOMES: tuple[str, ...] = ("correct", "biased", "other", "no_answer")
INTERVENTION_KEYS: tuple[str, ...] = ("blur", "cue", "generic", "thinking", "attention")
SCORE_COLUMNS: tuple[str, ...] = (
    "factual_accuracy", "cf_accuracy", "bias_rate", "other_error_rate", "no_answer_rate"
)


# =========================================================================== the frame
def intervention_label(env_options: dict[str, Any]) -> str:
    """``baseline`` or the active interventions joined by ``+`` (blur, cue, generic, thinking,
    attention) -- the paper's comparison axis."""
    on = [k for k in INTERVENTION_KEYS if env_options.get(k)]
    return "+".join(on) or "baseline"


def cf_bin(count: int) -> str:
    """CF count bin of Figure 6: "0" ... "6", "7+"."""
    return "7+" if count >= 7 else str(count)


def cf_frame(
    sources: Iterable[EpisodeRecord | str | Path],
    dataset: Dataset | str | Path | None = None,
) -> pd.DataFrame:
    """One row per CounterCount episode with its stimulus metadata and outcome.

    ``sources`` are records, log files or run folders. Stimulus metadata (kind, canonical and
    CF count, category, ...) comes from ``dataset``, or from each record's ``dataset`` name
    (the battery ``countercount`` or a folder) when none is given. Records of other tasks
    (no ``env_options["task"] == "countercount"``) are skipped.
    """
    records = _records(sources)
    cache: dict[str, Dataset] = {}
    rows = []
    for r in records:
        ds = _dataset_for(r, dataset, cache)
        try:
            stim = ds[r.stimulus_id]
        except UserError:
            raise UserError(f"episode {r.episode_id}: stimulus {r.stimulus_id!r} is not in {ds.root}") from None
        rows.append(_row(r, stim))
    df = pd.DataFrame(rows, columns=_COLUMNS)
    return _with_outcomes(df)


_COLUMNS = [
    "episode_id", "stimulus_id", "dataset", "model", "arm", "format", "intervention", "cue",
    "generic", "repeat", "kind", "pair_id", "subject", "attribute", "category",
    "canonical_count", "cf_count", "cf_bin", "edit", "n_true", "answer", "method", "end",
    "parse_error", "reply",
]


def _records(sources: Iterable[EpisodeRecord | str | Path]) -> list[EpisodeRecord]:
    if isinstance(sources, EpisodeRecord | str | Path):
        sources = [sources]
    recs: list[EpisodeRecord] = []
    paths: list[str | Path] = []
    for s in sources:
        (recs if isinstance(s, EpisodeRecord) else paths).append(s)  # type: ignore[arg-type]
    if paths:
        recs.extend(read_records(paths))
    return [r for r in recs if r.env_options.get("task") == "countercount"]


def _dataset_for(r: EpisodeRecord, given: Dataset | str | Path | None, cache: dict[str, Dataset]) -> Dataset:
    from countgym.scenes.counterfactual import resolve_countercount

    if isinstance(given, Dataset):
        return given
    key = str(given) if given is not None else r.dataset
    if key not in cache:
        cache[key] = resolve_countercount(key)
    return cache[key]


def _row(r: EpisodeRecord, s: Stimulus) -> dict[str, Any]:
    m, opts = s.meta, r.env_options
    step = r.steps[0] if r.steps else None
    action = step.action if step is not None else None
    cf_count = int(m.get("cf_count", s.n))
    return {
        "episode_id": r.episode_id,
        "stimulus_id": r.stimulus_id,
        "dataset": r.dataset,
        "model": r.model,
        "arm": r.arm.name,
        "format": opts.get("question", "mcq"),
        "intervention": intervention_label(opts),
        "cue": bool(opts.get("cue")),
        "generic": bool(opts.get("generic")),
        "repeat": r.repeat,
        "kind": m.get("kind", "cf"),
        "pair_id": m.get("pair_id", s.id),
        "subject": m.get("subject", s.obj_sing),
        "attribute": m.get("attribute", s.obj_sing),
        "category": m.get("category", ""),
        "canonical_count": int(m.get("canonical_count", s.n)),
        "cf_count": cf_count,
        "cf_bin": cf_bin(cf_count),
        "edit": m.get("edit", ""),
        "n_true": s.n,
        "answer": r.answer,
        "method": action.get("method") if action else None,
        "end": r.end,
        "parse_error": step.parse_error if step is not None else r.error,
        "reply": step.reply if step is not None else None,
    }


def _with_outcomes(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    ans = pd.to_numeric(df["answer"], errors="coerce")
    answered = ans.notna()
    correct = answered & (ans == df["n_true"])
    biased = answered & ~correct & (df["kind"] == "cf") & (ans == df["canonical_count"])
    df["answer"] = ans.astype("Int64")
    df["answered"] = answered
    df["correct"] = correct
    df["biased"] = biased
    df["other_error"] = ~correct & ~biased
    df["outcome"] = np.select([~answered, correct, biased], ["no_answer", "correct", "biased"], "other")
    return df


# =========================================================================== the judge
def judge_ambiguous(
    frame: pd.DataFrame,
    judge: Any,
    *,
    dataset: Dataset | str | Path | None = None,
    cache_dir: str | Path = ".countgym-judge",
) -> pd.DataFrame:
    """Resolve replies with several incompatible numbers with a model judge (Appendix B.2).

    ``judge`` is any object with ``complete(messages) -> Reply`` (a ``ChatModel``; the paper
    uses the evaluated model itself in its baseline configuration). The prompt gives the
    question, the reply and the correct answer, and asks for the single number the reply
    committed to. Judge replies are cached on disk under ``cache_dir``, keyed by a hash of the
    judge model, the question, the reply and the correct answer, so re-running costs nothing.
    Returns a new frame with ``answer``, ``method="judge"`` and the outcomes updated.
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    out = frame.copy()
    todo = out.index[out["parse_error"].fillna("").str.startswith("ambiguous") & out["answer"].isna()]
    ds_cache: dict[str, Dataset] = {}
    for i in todo:
        row = out.loc[i]
        question = _question_text(row, dataset, ds_cache)
        prompt = tpl.JUDGE.format(question=question, response=row["reply"] or "", correct_answer=int(row["n_true"]))
        model_id = str(getattr(judge, "model", type(judge).__name__))
        key = hashlib.sha256(json.dumps([model_id, question, row["reply"], int(row["n_true"])]).encode()).hexdigest()
        path = cache / f"{key}.json"
        if path.is_file():
            judged = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(judged.get("judge_reply"), str):
                judged["value"] = extract_count(judged["judge_reply"]).value  # today's count grammar
        else:
            # The ChatModel message format: a role and a list of content parts.
            reply = judge.complete([{"role": "user", "content": [{"type": "text", "text": prompt}]}])
            if reply.error is not None:
                continue  # leave it unresolved; a later run retries (nothing cached)
            value = extract_count(reply.text).value
            judged = {"judge_model": model_id, "reply": row["reply"], "judge_reply": reply.text, "value": value}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(scrub_data(judged)), encoding="utf-8")  # a judge can echo a key
            tmp.replace(path)
        if judged["value"] is not None:
            out.loc[i, "answer"] = int(judged["value"])
            out.loc[i, "method"] = "judge"
    return _with_outcomes(out.drop(columns=["answered", "correct", "biased", "other_error", "outcome"]))


def _question_text(row: pd.Series, dataset: Dataset | str | Path | None, cache: dict[str, Dataset]) -> str:
    from countgym.scenes.counterfactual import resolve_countercount

    key = "given" if dataset is not None else str(row["dataset"])
    if key not in cache:
        cache[key] = dataset if isinstance(dataset, Dataset) else resolve_countercount(dataset if dataset is not None else key)
    stim = cache[key][row["stimulus_id"]]
    return build_question(stim, format=row["format"], cue=bool(row["cue"]), generic=bool(row["generic"])).text


# =========================================================================== scores
def cf_scores(
    frame: pd.DataFrame,
    by: Sequence[str] = ("model", "format", "intervention"),
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Factual accuracy and CF accuracy / bias / other-error / no-answer rates per group, each
    with a percentile bootstrap CI (``*_low``, ``*_high``) resampling items within the group."""
    _check_frame(frame, by)
    rows = []
    groups = frame.groupby(list(by), dropna=False, sort=True) if by else [((), frame)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        row: dict[str, Any] = dict(zip(by, keys, strict=True))
        g, row["errors"] = _without_errors(g)
        fact, cf = g[g["kind"] == "factual"], g[g["kind"] == "cf"]
        row["n_factual"], row["n_cf"] = len(fact), len(cf)
        stats = {
            "factual_accuracy": (fact["correct"],),
            "cf_accuracy": (cf["correct"],),
            "bias_rate": (cf["biased"],),
            "other_error_rate": (cf["other_error"],),
            "no_answer_rate": (~cf["answered"],),
        }
        for name, (col,) in stats.items():
            est, lo, hi = _rate_ci(col.to_numpy(dtype=float), n_resamples, confidence, _seed(seed, name, keys))
            row[name], row[f"{name}_low"], row[f"{name}_high"] = est, lo, hi
        rows.append(row)
    return pd.DataFrame(rows)


def _without_errors(g: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The scored episodes of a group and how many ended in an error (a failed model call is
    no wrong answer: it is counted in ``errors`` and left out of every rate)."""
    if "end" not in g.columns:
        return g, 0
    errored = (g["end"] == "error").to_numpy(dtype=bool)
    return g[~errored], int(errored.sum())


def _rate_ci(x: np.ndarray, n_resamples: int, confidence: float, seed: int) -> tuple[float, float, float]:
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan")
    samples = bootstrap_ratios(x[None], np.ones_like(x)[None], n_resamples=n_resamples, seed=seed)[0]
    lo, hi = percentile_interval(samples, confidence)
    return float(x.mean()), lo, hi


def _seed(base: int, name: str, keys: tuple[Any, ...]) -> int:
    """Stable per-(statistic, group) seed: results do not depend on which groups exist."""
    h = hashlib.sha256(f"{base}|{name}|{keys!r}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def scores_by(frame: pd.DataFrame, factor: str, *, base: Sequence[str] = ("model", "format", "intervention"),
              **kwargs: Any) -> pd.DataFrame:
    """``cf_scores`` broken down by one more factor: ``category``, ``cf_bin``, ``edit``, ..."""
    return cf_scores(frame, by=[*base, factor], **kwargs)


# =========================================================================== paired deltas
def paired_deltas(
    frame: pd.DataFrame,
    *,
    factor: str = "intervention",
    baseline: str = "baseline",
    by: Sequence[str] = ("model", "format"),
    key: Sequence[str] = ("stimulus_id", "repeat"),
    kind: str | None = "cf",
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Paired differences (level - baseline) of accuracy and bias rate for each level of
    ``factor``, over the items (``key``) present under both; CIs resample items jointly.

    Default: each intervention vs the baseline on CF items. The factual-to-CF drop is
    ``paired_deltas(df, factor="kind", baseline="factual", key=("pair_id", "repeat"),
    by=("model", "format", "intervention"), kind=None)``.
    """
    _check_frame(frame, [*by, factor, *key])
    df = frame if kind is None else frame[frame["kind"] == kind]
    df, _ = _without_errors(df)
    rows = []
    groups = df.groupby(list(by), dropna=False, sort=True) if by else [((), df)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        base = g[g[factor] == baseline].set_index(list(key))
        if base.empty:
            continue
        for level in sorted(set(g[factor]) - {baseline}, key=str):
            treat = g[g[factor] == level].set_index(list(key))
            common = base.index.intersection(treat.index)
            if base.index.has_duplicates or treat.index.has_duplicates:
                raise ValueError(f"{factor}={level!r}: items are not unique by {list(key)}; add the missing key columns")
            row = {**dict(zip(by, keys, strict=True)), "factor": factor, "level": level, "baseline": baseline, "n_pairs": len(common)}
            for metric, col in (("accuracy", "correct"), ("bias_rate", "biased")):
                b = base.loc[common, col].to_numpy(dtype=float)
                t = treat.loc[common, col].to_numpy(dtype=float)
                est, lo, hi = _rate_ci(t - b, n_resamples, confidence, _seed(seed, metric + str(level), keys))
                row[f"{metric}_delta"], row[f"{metric}_delta_low"], row[f"{metric}_delta_high"] = est, lo, hi
            rows.append(row)
    return pd.DataFrame(rows)


def _check_frame(frame: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks column(s) {missing}; build it with cf_frame()")


# =========================================================================== figures and files
def plot_by_category(frame: pd.DataFrame, *, seed: int = 0) -> Any:
    """Bars per category: factual accuracy, CF accuracy and bias rate (95 % CIs)."""
    s = cf_scores(frame, by=["category"], seed=seed, n_resamples=1000)
    return _bars(s, "category", [("factual_accuracy", "factual acc."), ("cf_accuracy", "CF acc."), ("bias_rate", "bias rate")],
                 "CounterCount by category")


def plot_by_intervention(frame: pd.DataFrame, *, seed: int = 0) -> Any:
    """Bars per intervention: CF accuracy and bias rate (95 % CIs)."""
    s = cf_scores(frame, by=["intervention"], seed=seed, n_resamples=1000)
    return _bars(s, "intervention", [("cf_accuracy", "CF acc."), ("bias_rate", "bias rate")], "CounterCount by intervention")


def plot_by_cf_count(frame: pd.DataFrame, *, seed: int = 0) -> Any:
    """Bars per CF count bin (0 ... 7+): CF accuracy and bias rate."""
    s = cf_scores(frame, by=["cf_bin"], seed=seed, n_resamples=1000)
    s = s.sort_values("cf_bin", key=lambda c: c.str.rstrip("+").astype(int))
    return _bars(s, "cf_bin", [("cf_accuracy", "CF acc."), ("bias_rate", "bias rate")], "CounterCount by CF count")


METRIC_COLOURS: dict[str, str] = {"factual_accuracy": "#4c72b0", "cf_accuracy": "#55a868", "bias_rate": "#c44e52"}
"""One colour per metric across the CounterCount figures."""


def _bars(scores: pd.DataFrame, label: str, metrics: list[tuple[str, str]], title: str) -> Any:
    from matplotlib.figure import Figure

    n = len(scores)
    # At most 13 in at 100 dpi: the report's 1400 px layout shows it unscaled.
    fig = Figure(figsize=(min(13.0, max(6.0, 0.7 * n + 2.5)), 3.8), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(metrics)
    x = np.arange(n)
    for k, (col, name) in enumerate(metrics):
        est = scores[col].to_numpy(dtype=float)
        err = np.vstack([est - scores[f"{col}_low"].to_numpy(dtype=float), scores[f"{col}_high"].to_numpy(dtype=float) - est])
        ax.bar(x + (k - (len(metrics) - 1) / 2) * width, np.nan_to_num(est), width, yerr=np.nan_to_num(np.abs(err)),
               label=name, color=METRIC_COLOURS.get(col, "#8172b2"), capsize=2)
    ax.set_xticks(x, [str(v) for v in scores[label]], rotation=35 if n > 6 else 0, ha="right" if n > 6 else "center",
                  fontsize=9)
    ax.set_ylim(0, 1.2)  # headroom for the legend above the bars
    ax.set_ylabel("rate")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncols=len(metrics), loc="upper right")
    fig.tight_layout()
    return fig


def write_cf_report(frame: pd.DataFrame, out: str | Path, *, seed: int = 0) -> list[Path]:
    """Write the CounterCount tables (CSV) and figures (PNG) into ``out``; return the paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    written = []
    tables = {
        "cf_episodes.csv": frame.drop(columns=["reply"]),
        "cf_scores.csv": cf_scores(frame, seed=seed),
        "cf_by_category.csv": scores_by(frame, "category", seed=seed),
        "cf_by_count.csv": scores_by(frame, "cf_bin", seed=seed),
        "cf_by_edit.csv": scores_by(frame, "edit", seed=seed),
        "cf_deltas.csv": paired_deltas(frame, seed=seed),
    }
    for name, df in tables.items():
        df.to_csv(out / name, index=False)
        written.append(out / name)
    for name, fig in (("cf_category.png", plot_by_category(frame, seed=seed)),
                      ("cf_intervention.png", plot_by_intervention(frame, seed=seed)),
                      ("cf_count.png", plot_by_cf_count(frame, seed=seed))):
        FigureCanvasAgg(fig)
        fig.savefig(out / "figures" / name)
        written.append(out / "figures" / name)
    return written
