"""All audit tables of a set of episode records, computed once (no I/O, no presentation).

``compute_tables`` is what both ``write_audit`` (files) and ``report_tables`` (DataFrames)
run: the audited episodes table, the summary, accuracy vs n with its isotonic fit, the paired
arm contrasts, the counting ranges per model and arm (main battery, and main + XL as one curve),
the capacity profile with the pooled DotArrays + FSC-147 row, and the applicable principle
tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from countgym.errors import UserError
from countgym.logs import EpisodeRecord

from .audit import TAU_SCALES, audit_episodes
from .capacity import CAPACITY_COLUMNS, capacity_table
from .contrasts import contrasts_table
from .principles import (
    PRINCIPLE_TABLES,
    PrincipleInputs,
    PrincipleOptions,
    _check_options,
    principle_tables,
)
from .r80 import (
    R80_THRESHOLD,
    RANGE_TABLE_COLUMNS,
    accuracy_curve_table,
    counting_range_table,
    extended_curve_table,
)
from .selection import mark_selection
from .stimuli import Resolver, StimulusCache
from .summary import DEFAULT_BY, summarize

CURVE_BY: tuple[str, ...] = ("dataset", "arm", "model")


class NoEpisodes(UserError):
    """The records to audit were none."""


@dataclass(frozen=True)
class AuditTables:
    """The tables of one audit. ``principles`` holds only the tests that apply."""

    episodes: pd.DataFrame
    summary: pd.DataFrame
    accuracy_by_n: pd.DataFrame
    contrasts: pd.DataFrame
    principles: dict[str, pd.DataFrame] = field(default_factory=dict)
    counting_range: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=list(RANGE_TABLE_COLUMNS))
    )
    """R80 per model and arm across datasets: ``main`` and, with XL episodes, ``main+xl``."""
    capacity: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(CAPACITY_COLUMNS)))
    """Capacity profile per battery and the pooled DotArrays + FSC-147 row (Table 2)."""

    def as_dict(self) -> dict[str, pd.DataFrame]:
        """``{"episodes", "summary", "accuracy_by_n", "contrasts", "r80" and "capacity" (when
        they have rows), *principle tables}``."""
        out = {
            "episodes": self.episodes,
            "summary": self.summary,
            "accuracy_by_n": self.accuracy_by_n,
            "contrasts": self.contrasts,
        }
        if len(self.counting_range):
            out["r80"] = self.counting_range
        if len(self.capacity):
            out["capacity"] = self.capacity
        out.update({k: self.principles[k] for k in PRINCIPLE_TABLES if k in self.principles})
        return out


def mark_simulated(table: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """``table`` with a ``simulated`` column (any of the row's episodes answered by a simulated
    model) when any episode was; unchanged otherwise. Rows are matched to episodes on the
    grouping columns both tables have."""
    if "simulated" not in episodes.columns or not episodes["simulated"].any() or table.empty:
        return table
    keys = [c for c in ("dataset", "arm", "model", "api_base", "endpoint") if c in table.columns
            and c in episodes.columns]  # fmt: skip
    if not keys:
        return table.assign(simulated=True)
    flags = episodes.groupby(keys, dropna=False)["simulated"].any().rename("simulated").reset_index()
    out = table.drop(columns=["simulated"], errors="ignore").merge(flags, on=keys, how="left")
    out["simulated"] = out["simulated"].fillna(False).astype(bool)
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
    """Every table of the audit of ``records`` (resolving each dataset once).

    ``records`` is iterated once for the episodes table and the principle tests' inputs
    together; a ``source.RecordSource`` is then read again only for the records a later test
    uses. Raises ``NoEpisodes`` when there are no records."""
    cache = stimuli or StimulusCache(resolve)
    popts = principle_options or PrincipleOptions(
        n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    _check_options(popts)
    inputs = PrincipleInputs(cache, popts)
    episodes = audit_episodes(
        inputs.tap(records), resolve=cache.resolver, tau_scales=tau_scales, arm_memo=inputs.arm_memo
    )
    if episodes.empty:
        raise NoEpisodes("no episode records to audit")
    # Rows in episode-id order, not log order (the order episodes finished in, which concurrent
    # runs change): the same episodes give the same tables, to the last bit of every sum.
    episodes = episodes.sort_values("episode_id", kind="stable", ignore_index=True)
    summary = summarize(
        episodes,
        by,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        tau_scales=tau_scales,
        r80_threshold=r80_threshold,
    )
    summary = mark_simulated(summary, episodes)
    summary = mark_selection(summary, episodes, cache)
    curve = accuracy_curve_table(episodes, CURVE_BY, threshold=r80_threshold)
    extended = extended_curve_table(episodes, threshold=r80_threshold)
    if len(extended):
        curve = pd.concat([curve, extended], ignore_index=True)
    contrasts = contrasts_table(
        episodes, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    principles = principle_tables(records, episodes, stimuli=cache, options=popts, inputs=inputs)
    ranges = counting_range_table(
        episodes, threshold=r80_threshold, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    capacity = capacity_table(episodes, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return AuditTables(episodes, summary, curve, contrasts, principles, ranges, capacity)
