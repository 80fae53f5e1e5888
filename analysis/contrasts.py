"""Paired arm contrasts with bootstrap CIs (*Give the Model a Finger*, Section 4; spec section 3).

A contrast compares two arms ``a`` (baseline) and ``b`` of the same model on the same dataset.
Its items are *pairs*: one episode of each arm on the same stimulus and repeat. The difference
is always ``b - a``:

- ``exact_match_score``: mean over pairs of ``[answer_b == n] - [answer_a == n]`` (an
  unanswered item is wrong), i.e. EM_b - EM_a on the paired items;
- ``mean_absolute_error``: mean over the pairs where both arms answered of
  ``|answer_b - n| - |answer_a - n|``, i.e. MAE_b - MAE_a on the commonly answered items.

The percentile bootstrap resamples *images* with replacement (all pairs of one image, its
repeats, move together), with a fresh ``numpy.random.default_rng(seed)`` per contrast; both
metrics share the resampled index sets. A contrast is CI-solid when its interval excludes 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd

from .bootstrap import CI_NOTE, bootstrap_ratios, estimable_interval

BASELINE_ORDER: tuple[str, ...] = (
    "direct", "cot", "list", "tag", "tag-1", "tag+crop", "full", "tiles",
)  # fmt: skip
"""Arm names in baseline order: of two arms, the one listed first is the baseline ``a``."""

CONTRAST_METRICS: tuple[str, ...] = ("exact_match_score", "mean_absolute_error")

CONTRAST_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "arm_a", "arm_b", "metric", "n_pairs", "n_images", "value_a", "value_b",
    "difference", "ci_low", "ci_high", "confidence", "ci_solid", CI_NOTE,
)  # fmt: skip


@dataclass(frozen=True)
class PairedContrast:
    """One paired contrast ``b - a`` of one metric with its percentile bootstrap interval."""

    metric: str
    n_pairs: int
    n_images: int
    value_a: float
    value_b: float
    difference: float
    ci_low: float
    ci_high: float
    confidence: float
    n_resamples: int
    ci_note: str | None = None
    """Why the interval is empty (not estimable: ``bootstrap.ci_reason``); never solid then."""

    uniform: bool = False
    """Every resample gave the same difference (``ci_note`` says so)."""

    @property
    def ci_solid(self) -> bool:
        """True when the interval excludes zero (NaN intervals are not solid), or when every
        resample of at least ``MIN_CI_ITEMS`` images gives the same nonzero difference (every
        image moved the same way: the interval is not shown, the sign is certain)."""
        if self.uniform:
            return bool(self.difference != 0)
        return bool(self.ci_low > 0 or self.ci_high < 0)


# --- validation ---------------------------------------------------------------------------------


def _check_paired(
    y_true: Sequence[int] | np.ndarray,
    answer_a: Sequence[float | None] | np.ndarray,
    answer_b: Sequence[float | None] | np.ndarray,
    image: Sequence[object] | np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    def as_float(v: Sequence[float | None] | np.ndarray, name: str) -> np.ndarray:
        try:
            return np.asarray([np.nan if x is None else x for x in v], dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must hold numbers or None") from None

    y = as_float(y_true, "y_true")
    a = as_float(answer_a, "answer_a")
    b = as_float(answer_b, "answer_b")
    if y.ndim != 1 or a.shape != y.shape or b.shape != y.shape:
        raise ValueError(
            f"y_true, answer_a and answer_b must be 1-D of one length, got {y.shape}, {a.shape}, {b.shape}"
        )
    if np.isnan(y).any():
        raise ValueError("y_true must be known for every pair")
    img = np.arange(len(y)) if image is None else np.asarray(image, dtype=object)
    if img.shape != y.shape:
        raise ValueError(f"image has {len(img)} items but y_true has {len(y)}")
    return y, a, b, img


def _check_options(n_resamples: int, confidence: float) -> None:
    if not isinstance(n_resamples, int | np.integer) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


# --- computation --------------------------------------------------------------------------------


def _ratio(num: np.ndarray, den: np.ndarray) -> float:
    total = den.sum()
    return float(num.sum() / total) if total > 0 else float("nan")


def paired_contrasts(
    y_true: Sequence[int] | np.ndarray,
    answer_a: Sequence[float | None] | np.ndarray,
    answer_b: Sequence[float | None] | np.ndarray,
    *,
    image: Sequence[object] | np.ndarray | None = None,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> tuple[PairedContrast, PairedContrast]:
    """EM and MAE contrasts ``b - a`` over pairs (one per item), resampling ``image`` clusters.

    ``image`` names each pair's image (default: every pair is its own image).
    """
    _check_options(n_resamples, confidence)
    y, a, b, img = _check_paired(y_true, answer_a, answer_b, image)
    em_a, em_b = (a == y).astype(float), (b == y).astype(float)
    both = ~np.isnan(a) & ~np.isnan(b)
    ae_a = np.where(both, np.abs(a - y), 0.0)
    ae_b = np.where(both, np.abs(b - y), 0.0)
    codes, _ = pd.factorize(pd.Series(img, dtype=object))
    n_img = int(codes.max()) + 1 if len(codes) else 0

    def per_image(v: np.ndarray) -> np.ndarray:
        return np.bincount(codes, weights=v, minlength=n_img) if n_img else np.zeros(0)

    num = np.stack([per_image(em_b - em_a), per_image(ae_b - ae_a)])
    den = np.stack([per_image(np.ones(len(y))), per_image(both.astype(float))])
    boot = bootstrap_ratios(num, den, n_resamples=n_resamples, seed=seed)
    out = []
    values = (
        ("exact_match_score", em_a, em_b, np.ones(len(y))),
        ("mean_absolute_error", ae_a, ae_b, both.astype(float)),
    )
    for j, (metric, va, vb, mask) in enumerate(values):
        lo, hi, why = estimable_interval(boot[j], int(np.count_nonzero(den[j])), confidence, unit="images")
        out.append(
            PairedContrast(
                metric=metric,
                n_pairs=int(mask.sum()),
                n_images=int(np.count_nonzero(den[j])),
                value_a=_ratio(va, mask),
                value_b=_ratio(vb, mask),
                difference=_ratio(num[j], den[j]),
                ci_low=lo,
                ci_high=hi,
                confidence=confidence,
                n_resamples=n_resamples,
                ci_note=why,
                uniform=why is not None and why.startswith("no resample of"),
            )
        )
    return out[0], out[1]


def arm_sort_key(label: str, baselines: Sequence[str] = BASELINE_ORDER) -> tuple[int, str]:
    """Baseline-first order of arm labels: by the arm name's place in ``baselines``, then label."""
    name = label.split("[", 1)[0]
    rank = baselines.index(name) if name in baselines else len(baselines)
    return rank, label


def contrasts_table(
    episodes: pd.DataFrame,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    baselines: Sequence[str] = BASELINE_ORDER,
) -> pd.DataFrame:
    """Every paired arm contrast per (dataset, model): one row per contrast and metric.

    Pairs join episodes on ``(stimulus_id, repeat)``; columns are ``CONTRAST_COLUMNS``.
    """
    required = ("dataset", "model", "arm", "stimulus_id", "repeat", "n_true", "answer")
    missing = [c for c in required if c not in episodes.columns]
    if missing:
        raise ValueError(f"episodes lacks the columns {missing!r} (make it with audit_episodes)")
    _check_options(n_resamples, confidence)
    scored = episodes[episodes["n_true"].notna()]
    if "end" in scored.columns:
        # An episode that ended in an error (a failed model call) was never scored: its pair
        # is left out, as the summary leaves it out of accuracy.
        scored = scored[scored["end"] != "error"]
    key = ["stimulus_id", "repeat"]
    rows: list[dict[str, object]] = []
    dropped = 0
    for (dataset, model), g in scored.groupby(["dataset", "model"], sort=True, dropna=False):
        arms = sorted(g["arm"].unique(), key=lambda s: arm_sort_key(str(s), baselines))
        if len(arms) < 2:
            continue
        tables = {}
        for arm, ga in g.groupby("arm", sort=False):
            uniq = ga.drop_duplicates(key)
            dropped += len(ga) - len(uniq)
            tables[arm] = uniq.set_index(key)[["n_true", "answer"]]
        for arm_a, arm_b in combinations(arms, 2):
            m = tables[arm_a].add_suffix("_a").join(tables[arm_b].add_suffix("_b"), how="inner")
            if m.empty:
                continue
            res = paired_contrasts(
                m["n_true_a"].to_numpy(dtype=float),
                m["answer_a"].to_numpy(dtype=float, na_value=np.nan),
                m["answer_b"].to_numpy(dtype=float, na_value=np.nan),
                image=m.index.get_level_values("stimulus_id").to_numpy(dtype=object),
                n_resamples=n_resamples,
                confidence=confidence,
                seed=seed,
            )
            for c in res:
                rows.append(
                    {"dataset": dataset, "model": model, "arm_a": arm_a, "arm_b": arm_b,
                     "metric": c.metric, "n_pairs": c.n_pairs, "n_images": c.n_images,
                     "value_a": c.value_a, "value_b": c.value_b, "difference": c.difference,
                     "ci_low": c.ci_low, "ci_high": c.ci_high, "confidence": c.confidence,
                     "ci_solid": c.ci_solid, CI_NOTE: c.ci_note}
                )  # fmt: skip
    if dropped:
        warnings.warn(
            f"{dropped} episodes repeat an arm's (stimulus, repeat) and were left out of the "
            "contrasts (first kept); give such runs distinct repeats or options",
            stacklevel=2,
        )
    return pd.DataFrame(rows, columns=list(CONTRAST_COLUMNS))


def contrast_labels(contrasts: pd.DataFrame, *, sep: str = " · ") -> list[str]:
    """One label per contrast row: its dataset (short name), its model when the rows hold
    several, then ``b − a`` -- contrasts of different datasets never share a label."""
    from .naming import group_label, short_dataset

    multi_model = contrasts["model"].nunique() > 1 if "model" in contrasts.columns else False
    return [
        group_label(short_dataset(d), m if multi_model else "", f"{b} − {a}", sep=sep)
        for d, m, a, b in zip(
            contrasts["dataset"], contrasts["model"], contrasts["arm_a"], contrasts["arm_b"], strict=True
        )
    ]
