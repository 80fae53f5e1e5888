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
import re
import warnings
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

from .bootstrap import CI_NOTE, bootstrap_ratios, estimable_interval, join_notes
from .naming import model_labels

OUTCOMES: tuple[str, ...] = ("correct", "biased", "other", "no_answer")
INTERVENTION_KEYS: tuple[str, ...] = ("blur", "cue", "generic", "thinking", "attention")
SCORE_COLUMNS: tuple[str, ...] = (
    "factual_accuracy", "cf_accuracy", "bias_rate", "other_error_rate", "no_answer_rate"
)


# =========================================================================== the frame
BLUR_DEFAULT: tuple[float, float] = (48.0, 4.0)
"""The paper's blur setting (radius 48 px, feathering 4 px; Section 4.1.2, picked by the sweep of
Appendix C.5.3): the one the plain ``blur`` label means."""


def blur_setting(env_options: dict[str, Any]) -> tuple[float, float] | None:
    """(blur radius, feathering) of an episode with the blur intervention on, else None."""
    if not env_options.get("blur"):
        return None
    r, f = env_options.get("blur_radius", BLUR_DEFAULT[0]), env_options.get("feather", BLUR_DEFAULT[1])
    try:
        return float(r), float(f)
    except (TypeError, ValueError):
        return BLUR_DEFAULT


def _num_text(x: float) -> str:
    return f"{x:g}"


def intervention_label(env_options: dict[str, Any]) -> str:
    """``baseline`` or the active interventions joined by ``+`` (blur, cue, generic, thinking,
    attention) -- the paper's comparison axis. A blur setting other than the paper's (radius
    48, feathering 4) is named: ``blur(r=8,f=4)``, so each setting of the blur sweep (Appendix
    C.5.3) is its own level."""
    on = []
    for k in INTERVENTION_KEYS:
        if not env_options.get(k):
            continue
        setting = blur_setting(env_options) if k == "blur" else None
        if setting is not None and setting != BLUR_DEFAULT:
            on.append(f"blur(r={_num_text(setting[0])},f={_num_text(setting[1])})")
        else:
            on.append(k)
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
    # One model name at two endpoints (api_base) is two models, labelled by host.
    for r, model in zip(records, model_labels(records), strict=True):
        ds = _dataset_for(r, dataset, cache)
        try:
            stim = ds[r.stimulus_id]
        except UserError:
            raise UserError(f"episode {r.episode_id}: stimulus {r.stimulus_id!r} is not in {ds.root}") from None
        rows.append({**_row(r, stim), "model": model})
    df = pd.DataFrame(rows, columns=_COLUMNS)
    return _with_outcomes(df)


_COLUMNS = [
    "episode_id", "stimulus_id", "dataset", "model", "arm", "format", "intervention", "cue",
    "generic", "blur_radius", "feather", "repeat", "kind", "pair_id", "subject", "attribute", "category",
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
    setting = blur_setting(opts)
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
        "blur_radius": setting[0] if setting else float("nan"),
        "feather": setting[1] if setting else float("nan"),
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
    cols = _ScoreColumns(frame)
    rows = []
    for keys, positions in _group_positions(frame, by):
        row: dict[str, Any] = dict(zip(by, keys, strict=True))
        kept = positions[~cols.errored[positions]]
        row["errors"] = len(positions) - len(kept)
        fact = kept[cols.factual[kept]]
        cf = kept[cols.cf[kept]]
        row["n_factual"], row["n_cf"] = len(fact), len(cf)
        stats = {
            "factual_accuracy": cols.correct[fact],
            "cf_accuracy": cols.correct[cf],
            "bias_rate": cols.biased[cf],
            "other_error_rate": cols.other_error[cf],
            "no_answer_rate": cols.unanswered[cf],
        }
        notes: dict[str, str | None] = {}
        for name, x in stats.items():
            unit = "factual items" if name == "factual_accuracy" else "CF items"
            est, lo, hi, why = _rate_ci(x, n_resamples, confidence, _seed(seed, name, keys), unit)
            row[name], row[f"{name}_low"], row[f"{name}_high"] = est, lo, hi
            notes[name] = why
        row.update(cols.judge_counts(kept))
        row[CI_NOTE] = join_notes(notes)
        rows.append(row)
    out = pd.DataFrame(rows)
    if "intervention" in by and len(out):
        # Numbers in order: blur(r=8,...) before blur(r=16,...) (the groups are in text order).
        out = out.sort_values(list(by), key=_natural_key, kind="stable", ignore_index=True)
    return out


class _ScoreColumns:
    """The frame's outcome columns as numpy arrays, read once: a group is then a set of row
    positions, not a copy of every column (a paper's audit scores thousands of groups)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        n = len(frame)
        self.errored = (frame["end"] == "error").to_numpy(dtype=bool) if "end" in frame.columns else np.zeros(n, bool)
        self.factual = (frame["kind"] == "factual").to_numpy(dtype=bool)
        self.cf = (frame["kind"] == "cf").to_numpy(dtype=bool)
        self.correct = frame["correct"].to_numpy(dtype=float)
        self.biased = frame["biased"].to_numpy(dtype=float)
        self.other_error = frame["other_error"].to_numpy(dtype=float)
        self.unanswered = (~frame["answered"]).to_numpy(dtype=float)
        self.needed = needs_judge(frame)
        self.judged = (frame["method"] == "judge").to_numpy(dtype=bool) if "method" in frame.columns else np.zeros(n, bool)
        self.answered = frame["answered"].to_numpy(dtype=bool)

    def judge_counts(self, rows: np.ndarray) -> dict[str, int]:
        """``judge_counts`` of the frame's rows at ``rows``."""
        needed = self.needed[rows]
        return {"n_judge_needed": int(needed.sum()), "n_judged": int((needed & self.judged[rows]).sum()),
                "n_unjudged": int((needed & ~self.answered[rows]).sum())}


def _group_positions(frame: pd.DataFrame, by: Sequence[str]) -> Iterable[tuple[tuple[Any, ...], np.ndarray]]:
    """(keys, row positions) of each group, in the order and with the keys of
    ``frame.groupby(list(by), dropna=False, sort=True)``; one group of every row without ``by``."""
    if not by:
        yield (), np.arange(len(frame))
        return
    positions = pd.Series(np.arange(len(frame)), index=frame.index)
    for keys, part in positions.groupby([frame[c] for c in by], dropna=False, sort=True):
        yield (keys if isinstance(keys, tuple) else (keys,)), part.to_numpy()


def _natural_key(col: pd.Series) -> pd.Series:
    """Sort key of a column: text with its numbers compared as numbers."""
    if col.name != "intervention":
        return col
    return col.map(lambda v: tuple((0, float(t), "") if t[0].isdigit() else (1, 0.0, t)
                                   for t in re.findall(r"\d+(?:\.\d+)?|\D+", str(v))))


def _without_errors(g: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The scored episodes of a group and how many ended in an error (a failed model call is
    no wrong answer: it is counted in ``errors`` and left out of every rate)."""
    if "end" not in g.columns:
        return g, 0
    errored = (g["end"] == "error").to_numpy(dtype=bool)
    return g[~errored], int(errored.sum())


def _rate_ci(
    x: np.ndarray, n_resamples: int, confidence: float, seed: int, unit: str = "items"
) -> tuple[float, float, float, str | None]:
    """(rate, low, high, why the interval is not estimable or None)."""
    if len(x) == 0:
        return float("nan"), float("nan"), float("nan"), None
    samples = bootstrap_ratios(x[None], np.ones_like(x)[None], n_resamples=n_resamples, seed=seed)[0]
    lo, hi, why = estimable_interval(samples, len(x), confidence, unit=unit)
    return float(x.mean()), lo, hi, why


JUDGE_COLUMNS: tuple[str, ...] = ("n_judge_needed", "n_judged", "n_unjudged")
"""Per score row: replies with several numbers (they need the judge, Appendix B.2), how many the
judge resolved, and how many counted as no answer because no judge resolved them."""


def judge_counts(g: pd.DataFrame) -> dict[str, int]:
    """``JUDGE_COLUMNS`` of a group of the frame (``needs_judge``: the rules found several
    incompatible numbers; ``method == "judge"``: the judge read it)."""
    needed = needs_judge(g)
    judged = (g["method"] == "judge").to_numpy(dtype=bool) if "method" in g.columns else np.zeros(len(g), bool)
    answered = g["answered"].to_numpy(dtype=bool) if "answered" in g.columns else np.zeros(len(g), bool)
    return {"n_judge_needed": int(needed.sum()), "n_judged": int((needed & judged).sum()),
            "n_unjudged": int((needed & ~answered).sum())}


def needs_judge(g: pd.DataFrame) -> np.ndarray:
    """Rows whose reply the rules left ambiguous (several incompatible numbers)."""
    if "parse_error" not in g.columns:
        return np.zeros(len(g), dtype=bool)
    pe = g["parse_error"]
    return np.array([isinstance(v, str) and v.startswith("ambiguous") for v in pe.tolist()], dtype=bool) | (
        (g["method"] == "judge").to_numpy(dtype=bool) if "method" in g.columns else False
    )


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
    key: Sequence[str] = ("dataset", "stimulus_id", "repeat"),
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
    dropped = 0

    def unique(part: pd.DataFrame) -> pd.DataFrame:
        nonlocal dropped
        kept = part[~part.duplicated(list(key))]
        dropped += len(part) - len(kept)
        return kept.set_index(list(key))

    groups = df.groupby(list(by), dropna=False, sort=True) if by else [((), df)]
    for keys, g in groups:
        keys = keys if isinstance(keys, tuple) else (keys,)
        base = unique(g[g[factor] == baseline])
        if base.empty:
            continue
        for level in sorted(set(g[factor]) - {baseline}, key=str):
            treat = unique(g[g[factor] == level])
            common = base.index.intersection(treat.index)
            row = {**dict(zip(by, keys, strict=True)), "factor": factor, "level": level, "baseline": baseline, "n_pairs": len(common)}
            notes: dict[str, str | None] = {}
            for metric, col in (("accuracy", "correct"), ("bias_rate", "biased")):
                b = base.loc[common, col].to_numpy(dtype=float)
                t = treat.loc[common, col].to_numpy(dtype=float)
                est, lo, hi, why = _rate_ci(t - b, n_resamples, confidence, _seed(seed, metric + str(level), keys),
                                            "pairs")
                row[f"{metric}_delta"], row[f"{metric}_delta_low"], row[f"{metric}_delta_high"] = est, lo, hi
                notes[f"{metric}_delta"] = why
            row[CI_NOTE] = join_notes(notes)
            rows.append(row)
    if dropped:
        warnings.warn(
            f"{dropped} CounterCount episodes repeat an item ({', '.join(key)}) of their "
            f"{factor} level and were left out of the paired deltas (first kept)",
            stacklevel=2,
        )
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


BLUR_FORMATS = "mcq+oe"
"""``format`` of the blur-sweep rows that pool both question formats (Figure 20 averages them)."""


def blur_sweep_scores(frame: pd.DataFrame, *, seed: int = 0, n_resamples: int = 2000) -> pd.DataFrame:
    """CF accuracy and bias rate per model and blur setting (*CounterCount*, Appendix C.5.3,
    Figure 20): one row per (model, blur_radius, feather, format) and one pooling MCQ and OE
    (``format`` = ``mcq+oe``), over episodes whose only intervention is blur. Empty unless
    some model ran at least two blur settings."""
    cols = ["model", "blur_radius", "feather", "format", "n_cf", "cf_accuracy", "cf_accuracy_low",
            "cf_accuracy_high", "bias_rate", "bias_rate_low", "bias_rate_high"]
    if frame.empty or "blur_radius" not in frame.columns:
        return pd.DataFrame(columns=cols)
    blurred = frame[frame["blur_radius"].notna() & frame["intervention"].astype(str).str.match(r"^blur(\(|$)")]
    settings = blurred.groupby("model")[["blur_radius", "feather"]].apply(lambda g: len(g.drop_duplicates()))
    blurred = blurred[blurred["model"].isin(settings[settings >= 2].index)]
    if blurred.empty:
        return pd.DataFrame(columns=cols)
    kw = {"seed": seed, "n_resamples": n_resamples}
    per_format = cf_scores(blurred, by=["model", "blur_radius", "feather", "format"], **kw)
    pooled = cf_scores(blurred, by=["model", "blur_radius", "feather"], **kw).assign(format=BLUR_FORMATS)
    out = pd.concat([pooled, per_format], ignore_index=True)
    out = out.sort_values(["model", "blur_radius", "feather", "format"], kind="stable", ignore_index=True)
    return out[cols]


def plot_blur_sweep(frame: pd.DataFrame, *, seed: int = 0, max_models: int = 4) -> Any:
    """Figure 20 of *CounterCount* (Appendix C.5.3): CF accuracy and bias rate across blur radii
    (at the feathering most settings share, the paper's 4 px) and across feathering values (at
    the radius most settings share, the paper's 48 px), the mean of MCQ and OE as solid lines
    with 95 % CI bands, each format dashed/dotted; one row per model (at most ``max_models``),
    the unblurred baseline as a thin horizontal line. None without a blur sweep."""
    from matplotlib.figure import Figure

    scores = blur_sweep_scores(frame, seed=seed, n_resamples=1000)
    if scores.empty:
        return None
    every = sorted(scores["model"].astype(str).unique())
    models = every[:max_models]
    fig = Figure(figsize=(12, 3.2 * len(models) + 0.6), dpi=100, layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(models), 2, squeeze=False))
    styles = {BLUR_FORMATS: ("-", 2.0, "mean of MCQ and OE"), "mcq": ("--", 1.0, "MCQ"), "oe": (":", 1.0, "OE")}
    base = cf_scores(frame[frame["intervention"] == "baseline"], by=["model"], n_resamples=1, seed=seed) \
        if (frame["intervention"] == "baseline").any() else pd.DataFrame(columns=["model"])
    for row, model in zip(axes, models, strict=True):
        m = scores[scores["model"].astype(str) == model]
        pooled = m[m["format"] == BLUR_FORMATS]
        feather0 = _most_common(pooled["feather"], BLUR_DEFAULT[1])
        radius0 = _most_common(pooled["blur_radius"], BLUR_DEFAULT[0])
        for ax, (x, fixed, value, xlabel) in zip(row, (
            ("blur_radius", "feather", feather0, "blur radius (px)"),
            ("feather", "blur_radius", radius0, "feathering (px)"),
        ), strict=True):
            part = m[m[fixed] == value]
            for fmt, (ls, lw, fmt_name) in styles.items():
                d = part[part["format"] == fmt].sort_values(x)
                if d.empty:
                    continue
                for col, name in (("cf_accuracy", "CF acc."), ("bias_rate", "bias rate")):
                    xs, ys = d[x].to_numpy(dtype=float), d[col].to_numpy(dtype=float)
                    ax.plot(xs, ys, ls, lw=lw, marker="o" if fmt == BLUR_FORMATS else None, ms=4,
                            color=METRIC_COLOURS[col], label=f"{name}, {fmt_name}")
                    if fmt == BLUR_FORMATS:
                        ax.fill_between(xs, d[f"{col}_low"].to_numpy(dtype=float),
                                        d[f"{col}_high"].to_numpy(dtype=float), color=METRIC_COLOURS[col], alpha=0.15)
            b = base[base["model"].astype(str) == model]
            if len(b):
                for col in ("cf_accuracy", "bias_rate"):
                    ax.axhline(float(b[col].iloc[0]), color=METRIC_COLOURS[col], lw=0.8, alpha=0.6)
            fixed_name = "feathering" if fixed == "feather" else "radius"
            ax.set_title(f"{model}: across {xlabel.split(' (')[0]} ({fixed_name} {value:g} px)", fontsize=9)
            ax.set_xlabel(xlabel)
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel("rate")
    axes[0][1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    shown = f" (first {len(models)} of {len(every)} models; all in cf_blur_sweep.csv)" if len(every) > len(models) else ""
    fig.suptitle("Blur sweep (Figure 20): CF accuracy and bias rate; thin lines = unblurred baseline" + shown,
                 fontsize=10)
    return fig


def _most_common(values: pd.Series, prefer: float) -> float:
    """The value most rows share (``prefer`` when it ties for most)."""
    counts = values.value_counts()
    if counts.empty:
        return prefer
    top = counts[counts == counts.max()].index
    return float(prefer) if prefer in set(top) else float(sorted(top)[0])


def cf_tables(frame: pd.DataFrame, *, seed: int = 0) -> dict[str, pd.DataFrame]:
    """The CounterCount score tables by file name (``cf_scores.csv``, ``cf_by_category.csv``,
    ``cf_by_count.csv``, ``cf_by_edit.csv``, ``cf_deltas.csv`` and ``cf_blur_sweep.csv``, always
    present, empty without a blur sweep). The audit writes them and shows them in its report:
    computed once, they are the same numbers in both."""
    return {
        "cf_scores.csv": cf_scores(frame, seed=seed),
        "cf_by_category.csv": scores_by(frame, "category", seed=seed),
        "cf_by_count.csv": scores_by(frame, "cf_bin", seed=seed),
        "cf_by_edit.csv": scores_by(frame, "edit", seed=seed),
        "cf_deltas.csv": paired_deltas(frame, seed=seed),
        "cf_blur_sweep.csv": blur_sweep_scores(frame, seed=seed),
    }


def write_cf_report(
    frame: pd.DataFrame, out: str | Path, *, seed: int = 0, pooled_figures: bool = True,
    tables: dict[str, pd.DataFrame] | None = None,
) -> list[Path]:
    """Write the CounterCount tables (CSV) and figures (PNG) into ``out``; return the paths.

    ``pooled_figures=False`` leaves out the pooled category, intervention and count figures (the
    audit draws per-model pages of them instead); the blur sweep figure is drawn either way.
    ``tables``: ``cf_tables(frame, seed=seed)`` when the caller has it already."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from countgym.analysis.csvout import write_csv

    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    written = []
    scores = cf_tables(frame, seed=seed) if tables is None else tables
    tables = {"cf_episodes.csv": frame.drop(columns=["reply"]),
              **{k: v for k, v in scores.items() if k != "cf_blur_sweep.csv" or len(v)}}
    for name, df in tables.items():
        write_csv(df, out / name)
        written.append(out / name)
    pooled = (("cf_category.png", plot_by_category), ("cf_intervention.png", plot_by_intervention),
              ("cf_count.png", plot_by_cf_count))
    for name, plot in (*(pooled if pooled_figures else ()), ("cf_blur_sweep.png", plot_blur_sweep)):
        fig = plot(frame, seed=seed)
        if fig is None:
            continue
        FigureCanvasAgg(fig)
        fig.savefig(out / "figures" / name)
        written.append(out / "figures" / name)
    return written
