"""All audit tables of a set of episode records, computed once (no I/O, no presentation).

``compute_tables`` is what both ``write_audit`` (files) and ``report_tables`` (DataFrames)
run: the audited episodes table, the summary, accuracy vs n with its isotonic fit, the paired
arm contrasts and the applicable principle tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from countgym.logs import EpisodeRecord

from .audit import TAU_SCALES, audit_episodes
from .contrasts import contrasts_table
from .principles import PRINCIPLE_TABLES, PrincipleOptions, principle_tables
from .r80 import R80_THRESHOLD, accuracy_curve_table
from .stimuli import Resolver, StimulusCache
from .summary import DEFAULT_BY, summarize

CURVE_BY: tuple[str, ...] = ("dataset", "arm", "model")


@dataclass(frozen=True)
class AuditTables:
    """The tables of one audit. ``principles`` holds only the tests that apply."""

    episodes: pd.DataFrame
    summary: pd.DataFrame
    accuracy_by_n: pd.DataFrame
    contrasts: pd.DataFrame
    principles: dict[str, pd.DataFrame] = field(default_factory=dict)

    def as_dict(self) -> dict[str, pd.DataFrame]:
        """``{"episodes", "summary", "accuracy_by_n", "contrasts", *principle tables}``."""
        out = {
            "episodes": self.episodes,
            "summary": self.summary,
            "accuracy_by_n": self.accuracy_by_n,
            "contrasts": self.contrasts,
        }
        out.update({k: self.principles[k] for k in PRINCIPLE_TABLES if k in self.principles})
        return out


def compute_tables(
    records: Sequence[EpisodeRecord],
    *,
    resolve: Resolver | None = None,
    stimuli: StimulusCache | None = None,
    by: str | Sequence[str] = DEFAULT_BY,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    tau_scales: Sequence[float] = TAU_SCALES,
    r80_threshold: float = R80_THRESHOLD,
    principle_options: PrincipleOptions | None = None,
) -> AuditTables:
    """Every table of the audit of ``records`` (resolving each dataset once)."""
    cache = stimuli or StimulusCache(resolve)
    episodes = audit_episodes(records, resolve=cache.resolver, tau_scales=tau_scales)
    summary = summarize(
        episodes,
        by,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        tau_scales=tau_scales,
        r80_threshold=r80_threshold,
    )
    curve = accuracy_curve_table(episodes, CURVE_BY, threshold=r80_threshold)
    contrasts = contrasts_table(
        episodes, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    popts = principle_options or PrincipleOptions(
        n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    principles = principle_tables(records, episodes, stimuli=cache, options=popts)
    return AuditTables(episodes, summary, curve, contrasts, principles)
