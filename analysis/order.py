"""Order irrelevance (*Give the Model a Finger*, Section 4 and Appendix F; spec section 4).

Definitions (answers compared as values; "no answer" is one value, equal to itself):

- Realised traversal of a trajectory with at least ``min_tags`` (5) final tags: Kendall's
  tau-b between tag index (1, 2, ...) and the tag's vertical position y (image rows grow
  downwards, so reading order gives tau > 0 and reverse order tau < 0). Reported as the mean
  over trajectories.
- For two conditions A and B of one model (A = reading order, B = reverse order; or A = the
  original images, B = their rotated/mirrored copies), per stimulus s with runs in both:

  ``repeat_s`` = mean over the conditions that have >= 2 runs on s of the share of unordered
  pairs of runs within that condition whose answers differ (the repeat control, averaged over
  both conditions);
  ``cross_s`` = share of all (A run, B run) pairs on s whose answers differ (the paper's "four
  pairs of opposite-order runs" with two repeats each); agreement = 1 - cross.

  ``repeat_disagreement`` = mean_s repeat_s, ``cross_disagreement`` = mean_s cross_s,
  ``effect`` = cross_disagreement - repeat_disagreement (the order effect, or the rotation /
  mirror effect): disagreement beyond what repeating the same condition already gives. All
  three average over the same stimuli (those with a repeat pair, when any stimulus has one),
  so they are consistent by construction. The effect's CI is a percentile bootstrap over
  stimuli of ``mean_s (cross_s - repeat_s)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np
import pandas as pd

from countgym.logs import EpisodeRecord

from .bootstrap import bootstrap_mean_ci
from .correlation import kendall_tau_b

MIN_TRAVERSAL_TAGS = 5
ORDERS: tuple[str, str] = ("reading", "reverse")
_NO_ANSWER = object()


def traversal_tau(
    tags: Sequence[Sequence[float]] | np.ndarray, *, min_tags: int = MIN_TRAVERSAL_TAGS
) -> float:
    """Kendall tau-b between tag index and vertical position; NaN below ``min_tags`` tags."""
    t = np.asarray(tags, dtype=float).reshape(-1, 2)
    if len(t) < max(2, min_tags):
        return float("nan")
    if not np.isfinite(t[:, 1]).all():
        return kendall_tau_b(np.arange(len(t)), t[:, 1])  # raises, as it always did
    # ``kendall_tau_b(arange(n), y)`` with the index side known: every index pair is ordered
    # (no ties), so the sum of sign products is the sum of sign(y_j - y_i) over i < j, an
    # integer, and the value is the same float.
    y = t[:, 1]
    if len(y) <= _PAIRS_CACHED:
        i, j = _pairs(len(y))
        s = np.sign(y[j] - y[i])
        total, nonzero = float(s.sum()), int(np.count_nonzero(s))
    else:
        total, nonzero = _sign_sums(y)
    n0 = len(y) * (len(y) - 1) // 2
    denom = np.sqrt(float(n0) * float(nonzero))
    return float(total / denom) if denom > 0 else float("nan")


def _sign_sums(y: np.ndarray) -> tuple[float, int]:
    """(sum, nonzero count) of sign(y_j - y_i) over i < j, in row blocks of about 4 M pairs, so
    memory stays bounded however many tags a record holds (the sum is an integer, exact)."""
    n = len(y)
    block = max(1, 4_000_000 // n)
    total, nonzero = 0.0, 0
    for a in range(0, n - 1, block):
        b = min(a + block, n - 1)
        s = np.triu(np.sign(y[None, a + 1 :] - y[a:b, None]))  # row k is i = a + k, column c is j = a + 1 + c
        total += float(s.sum())
        nonzero += int(np.count_nonzero(s))
    return total, nonzero


_PAIRS_CACHED = 256
"""Tag counts whose index pairs are kept (at most 256 * 255 / 2 pairs each)."""


@lru_cache(maxsize=32)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The index pairs i < j of ``n`` items (``np.triu_indices(n, 1)``), made once per n."""
    return np.triu_indices(n, 1)


@dataclass(frozen=True)
class Agreement:
    """Repeat-controlled agreement between two conditions over stimuli (see module docstring)."""

    n_stimuli: int
    repeat_disagreement: float
    cross_disagreement: float
    effect: float
    effect_ci_low: float
    effect_ci_high: float

    @property
    def cross_agreement(self) -> float:
        return 1.0 - self.cross_disagreement


def _value(answer: object) -> object:
    """An answer as an int, or the one shared "no answer" value."""
    if answer is None or answer is pd.NA:
        return _NO_ANSWER
    try:
        f = float(answer)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return _NO_ANSWER
    return _NO_ANSWER if np.isnan(f) else int(f)


def _within(answers: Sequence[object]) -> float:
    pairs = list(combinations(answers, 2))
    return float(np.mean([a != b for a, b in pairs])) if pairs else float("nan")


def agreement(
    runs_a: Mapping[str, Sequence[object]],
    runs_b: Mapping[str, Sequence[object]],
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Agreement:
    """Repeat control, cross disagreement and effect of two conditions.

    ``runs_a`` / ``runs_b`` map a stimulus id to the answers of its runs (repeats) under A / B.
    """
    common = sorted(set(runs_a) & set(runs_b))
    rep, cross = [], []
    for s in common:
        a = [_value(v) for v in runs_a[s]]
        b = [_value(v) for v in runs_b[s]]
        within = [w for w in (_within(a), _within(b)) if not np.isnan(w)]
        rep.append(float(np.mean(within)) if within else float("nan"))
        cross.append(float(np.mean([x != y for x in a for y in b])))
    rep_a, cross_a = np.asarray(rep), np.asarray(cross)
    nan = float("nan")
    if len(common) == 0:
        return Agreement(0, nan, nan, nan, nan, nan)
    has_rep = ~np.isnan(rep_a)
    if not has_rep.any():
        return Agreement(len(common), nan, float(cross_a.mean()), nan, nan, nan)
    rep_a, cross_a = rep_a[has_rep], cross_a[has_rep]
    ci = bootstrap_mean_ci(
        cross_a - rep_a, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return Agreement(
        n_stimuli=int(has_rep.sum()),
        repeat_disagreement=float(rep_a.mean()),
        cross_disagreement=float(cross_a.mean()),
        effect=float(cross_a.mean() - rep_a.mean()),
        effect_ci_low=ci.low,
        effect_ci_high=ci.high,
    )


def _runs(g: pd.DataFrame) -> dict[str, list[object]]:
    out: dict[str, list[object]] = {}
    for sid, ans in zip(g["stimulus_id"], g["answer"], strict=True):
        out.setdefault(str(sid), []).append(ans)
    return out


def _em(g: pd.DataFrame) -> float:
    n = g["n_true"].to_numpy(dtype=float, na_value=np.nan)
    a = g["answer"].to_numpy(dtype=float, na_value=np.nan)
    ok = ~np.isnan(n)
    return float((a[ok] == n[ok]).mean()) if ok.any() else float("nan")


# --- tables -------------------------------------------------------------------------------------


def traversal_table(
    records: Sequence[EpisodeRecord],
    episodes: pd.DataFrame,
    *,
    min_tags: int = MIN_TRAVERSAL_TAGS,
    taus: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Realised traversal per (dataset, model, arm): trajectories with >= ``min_tags`` tags and
    the mean / median Kendall tau between tag index and vertical position (``taus``: the
    per-episode values when already computed)."""
    if taus is None:
        taus = {r.episode_id: traversal_tau(r.tags, min_tags=min_tags) for r in records}
    ep = episodes.assign(traversal_tau=episodes["episode_id"].map(taus))
    ep = ep[ep["traversal_tau"].notna()]
    cols = ["dataset", "model", "arm", "n_trajectories", "traversal_tau_mean",
            "traversal_tau_median", "share_top_down"]  # fmt: skip
    rows = []
    for (ds, model, arm), g in ep.groupby(["dataset", "model", "arm"], sort=True):
        t = g["traversal_tau"].to_numpy(dtype=float)
        rows.append([ds, model, arm, len(t), float(t.mean()), float(np.median(t)),
                     float((t > 0).mean())])  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def order_effect_table(
    episodes: pd.DataFrame,
    conditions: pd.DataFrame,
    *,
    orders: tuple[str, str] = ORDERS,
    traversal: dict[str, float] | None = None,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Repeat control, cross-order disagreement and order effect per (dataset, model, arm pair).

    Pairs the arm run with ``order=orders[0]`` with the same arm (all other options equal) run
    with ``order=orders[1]``. ``traversal`` maps episode ids to their traversal tau (optional).
    """
    # The condition's order (read from the log) replaces the episodes table's option column.
    ep = episodes.drop(columns=["order"], errors="ignore").merge(
        conditions[["episode_id", "order", "order_free_key"]], on="episode_id"
    )
    ep = ep[ep["order"].isin(orders)]
    cols = [
        "dataset", "model", "arm_a", "arm_b", "n_stimuli", "exact_match_a", "exact_match_b",
        "traversal_tau_a", "traversal_tau_b", "repeat_disagreement", "cross_agreement",
        "cross_disagreement", "order_effect", "order_effect_ci_low", "order_effect_ci_high",
    ]  # fmt: skip
    rows = []
    for (ds, model, _key), g in ep.groupby(["dataset", "model", "order_free_key"], sort=True):
        ga, gb = g[g["order"] == orders[0]], g[g["order"] == orders[1]]
        if ga.empty or gb.empty:
            continue
        ag = agreement(
            _runs(ga), _runs(gb), n_resamples=n_resamples, confidence=confidence, seed=seed
        )
        if ag.n_stimuli == 0:
            continue

        def tau_mean(x: pd.DataFrame) -> float:
            if traversal is None:
                return float("nan")
            v = x["episode_id"].map(traversal).to_numpy(dtype=float)
            return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")

        rows.append([
            ds, model, ga["arm"].iloc[0], gb["arm"].iloc[0], ag.n_stimuli, _em(ga), _em(gb),
            tau_mean(ga), tau_mean(gb), ag.repeat_disagreement, ag.cross_agreement,
            ag.cross_disagreement, ag.effect, ag.effect_ci_low, ag.effect_ci_high,
        ])  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def transform_table(
    episodes: pd.DataFrame,
    conditions: pd.DataFrame,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """Rotation / mirror consistency per (original dataset, transformed dataset, model, arm,
    transform): the same arm's answers on a stimulus and on its transformed copy, with the
    repeat control (``effect`` = disagreement beyond the repeat disagreement)."""
    ep = episodes.merge(conditions[["episode_id", "transform_of", "transform"]], on="episode_id")
    moved = ep[ep["transform_of"].notna()]
    plain = ep[ep["transform_of"].isna()]
    cols = [
        "dataset", "dataset_transformed", "model", "arm", "transform", "n_stimuli",
        "exact_match_original", "exact_match_transformed", "repeat_disagreement", "agreement",
        "disagreement", "effect", "effect_ci_low", "effect_ci_high",
    ]  # fmt: skip
    rows = []
    keys = ["dataset", "model", "arm", "transform"]
    for (ds_t, model, arm, kind), gt in moved.groupby(keys, sort=True):
        origins = set(gt["transform_of"])
        cand = plain[
            (plain["model"] == model) & (plain["arm"] == arm) & plain["stimulus_id"].isin(origins)
        ]
        b: dict[str, list[object]] = {}
        for sid, ans in zip(gt["transform_of"], gt["answer"], strict=True):
            b.setdefault(str(sid), []).append(ans)
        for ds_o, go in cand.groupby("dataset", sort=True):
            ag = agreement(
                _runs(go), b, n_resamples=n_resamples, confidence=confidence, seed=seed
            )
            if ag.n_stimuli == 0:
                continue
            used = set(go["stimulus_id"]) & set(b)
            rows.append([
                ds_o, ds_t, model, arm, kind, ag.n_stimuli,
                _em(go[go["stimulus_id"].isin(used)]),
                _em(gt[gt["transform_of"].isin(used)]),
                ag.repeat_disagreement, ag.cross_agreement, ag.cross_disagreement, ag.effect,
                ag.effect_ci_low, ag.effect_ci_high,
            ])  # fmt: skip
    return pd.DataFrame(rows, columns=cols)
