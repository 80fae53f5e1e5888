"""Finger tables the audit adds to its standard ones: Table 15 (FSC-147 by count bin) and
Table 21 (hidden reasoning tokens of the single-turn arms; the thinking-off control of direct).

All are computed from the audited episodes table (and, for Table 21, the contrasts and summary
tables), so they need nothing but the logs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .bootstrap import bootstrap_ratio_ci
from .naming import short_dataset

FSC_BINS: tuple[tuple[int, int], ...] = ((8, 15), (16, 25), (26, 40), (41, 60), (61, 80))
"""FSC-147 count bins of the Finger paper (Appendix D, Table 15)."""

SINGLE_TURN_ARMS: tuple[str, ...] = ("direct", "cot", "list")
"""The single-turn arms whose hidden reasoning tokens Table 21 reports."""

FSC_COLUMNS = ["dataset", "model", "arm", "count_bin", "n_images", "em", "em_ci_low", "em_ci_high", "mae"]


def is_fsc(dataset: object) -> bool:
    """An FSC-147 dataset: the ``fsc147`` battery (any subset) or a folder named so."""
    return short_dataset(dataset).lower().replace("-", "").startswith("fsc147")


def count_bin(n: int) -> str | None:
    for lo, hi in FSC_BINS:
        if lo <= n <= hi:
            return f"{lo}–{hi}"
    return None


def fsc_bins_table(episodes: pd.DataFrame, *, n_resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Table 15: exact accuracy (unanswered = wrong, 95 % bootstrap CI over images) and MAE
    (answered items) per FSC-147 dataset, model, arm and count bin. Failed model calls
    (``end == "error"``) are left out."""
    if episodes.empty or "dataset" not in episodes.columns:
        return pd.DataFrame(columns=FSC_COLUMNS)
    ep = episodes[[is_fsc(d) for d in episodes["dataset"]]]
    if "end" in ep.columns:
        ep = ep[ep["end"] != "error"]
    ep = ep[ep["n_true"].notna()]
    if ep.empty:
        return pd.DataFrame(columns=FSC_COLUMNS)
    ep = ep.assign(count_bin=[count_bin(int(n)) for n in ep["n_true"]]).dropna(subset=["count_bin"])
    order = {f"{lo}–{hi}": i for i, (lo, hi) in enumerate(FSC_BINS)}
    rows = []
    for (ds, model, arm, b), g in ep.groupby(["dataset", "model", "arm", "count_bin"], sort=True):
        hit = g["correct"].fillna(False).to_numpy(dtype=float)
        ci = bootstrap_ratio_ci(hit, n_resamples=n_resamples, seed=seed)
        err = pd.to_numeric(g["abs_error"], errors="coerce").dropna()
        rows.append([ds, model, arm, b, int(g["stimulus_id"].nunique()), ci.estimate, ci.low, ci.high,
                     float(err.mean()) if len(err) else float("nan")])  # fmt: skip
    out = pd.DataFrame(rows, columns=FSC_COLUMNS)
    return out.sort_values(["dataset", "model", "arm", "count_bin"], key=lambda c: c.map(order) if c.name == "count_bin" else c,
                           ignore_index=True)  # fmt: skip


REASONING_COLUMNS = ["model", "arm", "datasets", "n_episodes", "reporting_share", "reasoning_tokens_mean",
                     "reasoning_tokens_median", "reasoning_tokens_max"]  # fmt: skip


def _bare(arm: object) -> str:
    return str(arm).split("[", 1)[0]


def reasoning_tokens_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Table 21, left part: hidden reasoning tokens per episode of the single-turn arms, per
    model and arm (pooled over datasets): the share of episodes whose provider reported a
    count, and the mean / median / max over those episodes."""
    if episodes.empty or "reasoning_tokens" not in episodes.columns:
        return pd.DataFrame(columns=REASONING_COLUMNS)
    ep = episodes[[_bare(a) in SINGLE_TURN_ARMS for a in episodes["arm"]]]
    if "end" in ep.columns:
        ep = ep[ep["end"] != "error"]
    rows = []
    for (model, arm), g in ep.groupby(["model", "arm"], sort=True):
        tok = pd.to_numeric(g["reasoning_tokens"], errors="coerce").dropna().to_numpy(dtype=float)
        rows.append([model, arm, ", ".join(sorted({short_dataset(d) for d in g["dataset"]})), len(g),
                     len(tok) / len(g) if len(g) else float("nan"),
                     float(tok.mean()) if len(tok) else float("nan"),
                     float(np.median(tok)) if len(tok) else float("nan"),
                     float(tok.max()) if len(tok) else float("nan")])  # fmt: skip
    return pd.DataFrame(rows, columns=REASONING_COLUMNS)


THINKING_COLUMNS = ["dataset", "model", "arm_on", "arm_off", "n_pairs", "em_on", "em_off", "em_change",
                    "em_change_ci_low", "em_change_ci_high", "r80_on", "r80_off", "reasoning_tokens_on",
                    "reasoning_tokens_off"]  # fmt: skip


def _thinking_off(v: object) -> bool:
    return v is False or str(v).strip().lower() in ("false", "0", "off", "no")


def thinking_off_table(episodes: pd.DataFrame, contrasts: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Table 21, right part: per dataset and model, ``direct`` against its thinking-off variant
    (``thinking = false``) on the same images: EM of each, the paired change off − on with its
    95 % CI (from the contrasts), R80 of each (DotArrays main battery rows of the summary) and
    the mean reasoning tokens per episode of each."""
    if episodes.empty or "thinking" not in episodes.columns:
        return pd.DataFrame(columns=THINKING_COLUMNS)
    direct = episodes[[_bare(a) == "direct" for a in episodes["arm"]]]
    if "end" in direct.columns:
        direct = direct[direct["end"] != "error"]
    rows = []
    for (ds, model), g in direct.groupby(["dataset", "model"], sort=True):
        off_mask = g["thinking"].map(_thinking_off).astype(bool)
        offs = sorted(g.loc[off_mask, "arm"].astype(str).unique())
        ons = sorted(g.loc[~off_mask, "arm"].astype(str).unique())
        if not offs or not ons:
            continue
        on = "direct" if "direct" in ons else ons[0]
        for off in offs:
            row = {"dataset": ds, "model": model, "arm_on": on, "arm_off": off}
            c = contrasts[(contrasts["dataset"] == ds) & (contrasts["model"] == model)
                          & (contrasts["metric"] == "exact_match_score")]  # fmt: skip
            fwd = c[(c["arm_a"].astype(str) == on) & (c["arm_b"].astype(str) == off)]
            rev = c[(c["arm_a"].astype(str) == off) & (c["arm_b"].astype(str) == on)]
            if len(fwd):
                r = fwd.iloc[0]
                row.update(n_pairs=r["n_pairs"], em_on=r["value_a"], em_off=r["value_b"], em_change=r["difference"],
                           em_change_ci_low=r["ci_low"], em_change_ci_high=r["ci_high"])  # fmt: skip
            elif len(rev):
                r = rev.iloc[0]
                row.update(n_pairs=r["n_pairs"], em_on=r["value_b"], em_off=r["value_a"], em_change=-r["difference"],
                           em_change_ci_low=-r["ci_high"], em_change_ci_high=-r["ci_low"])  # fmt: skip
            else:
                for key, arm in (("em_on", on), ("em_off", off)):
                    row[key] = float(g.loc[g["arm"].astype(str) == arm, "correct"].fillna(False).mean())
            for key, arm in (("r80_on", on), ("r80_off", off)):
                s = summary[(summary["dataset"] == ds) & (summary["model"] == model) & (summary["arm"].astype(str) == arm)]
                if "scope" in s.columns:
                    s = s[s["scope"] == "dataset"]
                row[key] = float(s["r80"].iloc[0]) if len(s) and "r80" in s.columns else float("nan")
            for key, arm in (("reasoning_tokens_on", on), ("reasoning_tokens_off", off)):
                tok = pd.to_numeric(g.loc[g["arm"].astype(str) == arm, "reasoning_tokens"], errors="coerce")
                row[key] = float(tok.mean()) if tok.notna().any() else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=THINKING_COLUMNS)
