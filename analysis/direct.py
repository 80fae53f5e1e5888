"""Tags versus answers (*Give the Model a Finger*, Section 5 (v) and Appendix F, Table 19).

Is the announced number read off the tags, or are the tags drawn to match an estimate?

``tags_vs_direct_table`` pairs each tagging arm's episode with the same model's direct-answer
episode on the same stimulus and repeat (same dataset):

- ``tag_direct_agreement`` = share of pairs whose final tag count equals the direct answer
  (an unanswered direct episode disagrees);
- ``error_spearman_rho`` = Spearman correlation, over pairs with a direct answer, of the
  per-image errors ``n_tags - n`` and ``direct answer - n``.

``departures_table`` looks inside each tagging arm (episodes with at least one tag call and an
announced count):

- ``departure_rate`` = share announcing a count different from their number of tags;
- ``closer_share`` = among departures, share with ``|answer - n| < |n_tags - n|`` (the
  departure moved toward the truth); ``farther_share`` likewise with ``>``; ties are neither.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .correlation import spearman_rho

DIRECT_ARMS: tuple[str, ...] = ("direct",)
"""Arm names whose episodes are the model's own direct answers."""

TAGS_VS_DIRECT_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "arm", "arm_direct", "n_pairs", "tag_direct_agreement", "n_rho",
    "error_spearman_rho",
)  # fmt: skip
DEPARTURE_COLUMNS: tuple[str, ...] = (
    "dataset", "model", "arm", "n_trajectories", "n_departures", "departure_rate",
    "closer_share", "farther_share", "mean_departure",
)  # fmt: skip


def _arm_name(label: str) -> str:
    return str(label).split("[", 1)[0]


def _f(s: pd.Series) -> np.ndarray:
    return s.to_numpy(dtype=float, na_value=np.nan)


def tags_vs_direct_table(
    episodes: pd.DataFrame, *, direct_arms: Sequence[str] = DIRECT_ARMS
) -> pd.DataFrame:
    """Agreement of tag counts with the model's own direct answers, and error correlation."""
    ep = episodes[episodes["n_true"].notna()]
    is_direct = ep["arm"].map(_arm_name).isin(list(direct_arms))
    tagging_arms = set(ep.loc[~is_direct & (ep["tag_calls"] > 0), "arm"])
    rows = []
    key = ["stimulus_id", "repeat"]
    for (ds, model), g in ep.groupby(["dataset", "model"], sort=True):
        d_arms = sorted(set(g.loc[is_direct.loc[g.index], "arm"]))
        t_arms = sorted(set(g["arm"]) & tagging_arms)
        for d in d_arms:
            gd = g[g["arm"] == d].drop_duplicates(key).set_index(key)[["answer"]]
            for t in t_arms:
                gt = g[g["arm"] == t].drop_duplicates(key).set_index(key)[["n_tags", "n_true"]]
                m = gt.join(gd, how="inner")
                if m.empty:
                    continue
                n = _f(m["n_true"])
                tags = _f(m["n_tags"])
                direct = _f(m["answer"])
                ok = ~np.isnan(direct)
                rho = spearman_rho(tags[ok] - n[ok], direct[ok] - n[ok]) if ok.sum() >= 2 else float("nan")
                rows.append([ds, model, t, d, len(m), float((tags == direct).mean()),
                             int(ok.sum()), rho])  # fmt: skip
    return pd.DataFrame(rows, columns=list(TAGS_VS_DIRECT_COLUMNS))


def departures_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Departures of the announced count from the tag count, and how often they move toward the truth."""
    ep = episodes[(episodes["tag_calls"] > 0) & episodes["answer"].notna() & episodes["n_true"].notna()]
    rows = []
    for (ds, model, arm), g in ep.groupby(["dataset", "model", "arm"], sort=True):
        n, a, t = _f(g["n_true"]), _f(g["answer"]), _f(g["n_tags"])
        dep = a != t
        closer = np.abs(a - n) < np.abs(t - n)
        farther = np.abs(a - n) > np.abs(t - n)
        k = int(dep.sum())
        rows.append([
            ds, model, arm, len(g), k, float(dep.mean()),
            float(closer[dep].mean()) if k else float("nan"),
            float(farther[dep].mean()) if k else float("nan"),
            float((a - t)[dep].mean()) if k else float("nan"),
        ])  # fmt: skip
    return pd.DataFrame(rows, columns=list(DEPARTURE_COLUMNS))
