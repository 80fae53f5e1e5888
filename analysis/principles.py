"""Principle tests and controls (analysis spec section 4): which apply, computed together.

Each test lives in its own module (``order``, ``perturbation``, ``direct``, ``lattice``) and
returns a DataFrame; ``principle_tables`` runs them all on one set of logs and keeps the
non-empty ones, so a test whose runs are absent (no reverse-order arm, no direct arm, no
perturbed run, no lattice stimulus) is skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from countgym.logs import EpisodeRecord

from .arms import ArmMemo
from .audit import MAX_AUDIT_TAGS, points_array
from .direct import DIRECT_ARMS, departures_table, tags_vs_direct_table
from .lattice import lattice_table
from .order import (
    MIN_TRAVERSAL_TAGS,
    ORDERS,
    order_effect_table,
    transform_table,
    traversal_table,
    traversal_tau,
)
from .perturbation import perturbation_table
from .source import subset
from .stimuli import Resolver, StimulusCache
from .traces import CONDITION_COLUMNS, TRANSFORM_KEY, TRANSFORM_SUFFIXES, condition_row

PRINCIPLE_TABLES: tuple[str, ...] = (
    "traversal", "order_effect", "transform_consistency", "perturbation", "tags_vs_direct",
    "departures", "lattice",
)  # fmt: skip
"""Names of the principle tables, in report order (each is written as ``NAME.csv``)."""


@dataclass(frozen=True)
class PrincipleOptions:
    """Options of the principle tests."""

    min_traversal_tags: int = MIN_TRAVERSAL_TAGS
    """Trajectories with fewer final tags get no realised traversal."""
    orders: tuple[str, str] = ORDERS
    """The two order instructions compared by the order test."""
    transform_key: str = TRANSFORM_KEY
    """Stimulus meta key naming the original of a transformed stimulus."""
    transform_suffixes: Mapping[str, str] | None = None
    """Stimulus-id suffix -> transform kind (default ``traces.TRANSFORM_SUFFIXES``)."""
    direct_arms: Sequence[str] = DIRECT_ARMS
    """Arm names whose answers are the model's direct answers."""
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0


def _check_options(options: PrincipleOptions) -> None:
    if options.min_traversal_tags < 2:
        raise ValueError(f"min_traversal_tags must be >= 2, got {options.min_traversal_tags!r}")
    if len(options.orders) != 2 or options.orders[0] == options.orders[1]:
        raise ValueError(f"orders must be two different orders, got {options.orders!r}")
    if not options.transform_key:
        raise ValueError("transform_key must be a non-empty meta key")


class PrincipleInputs:
    """What the principle tests take from every record, gathered as the records stream by
    (``tap``): the conditions table's rows (first record of an episode id), the realised
    traversal tau (last record of an id) and the positions of the records the lattice test
    can use (tags on a stimulus with ideal cells)."""

    def __init__(self, stimuli: StimulusCache, options: PrincipleOptions) -> None:
        self.stimuli = stimuli
        self.options = options
        self.suffixes = TRANSFORM_SUFFIXES if options.transform_suffixes is None else options.transform_suffixes
        self.rows: list[tuple] = []
        self.seen: set[str] = set()
        self.taus: dict[str, float] = {}
        self.lattice: list[int] = []
        self._lattice_ids: list[str] = []
        self.n = 0
        self.arm_memo = ArmMemo()

    def add(self, rec: EpisodeRecord) -> None:
        """Take one record's share (records in log order)."""
        if rec.episode_id not in self.seen:
            self.seen.add(rec.episode_id)
            self.rows.append(
                condition_row(
                    rec, self.stimuli, transform_key=self.options.transform_key, suffixes=self.suffixes,
                    memo=self.arm_memo,
                )  # fmt: skip
            )
        # A record with more tags than the audit matches (``audit.MAX_AUDIT_TAGS``) is cut here
        # too (the audit names it): no traversal tau, no lattice score.
        cut = len(rec.tags) > MAX_AUDIT_TAGS
        self.taus[rec.episode_id] = (
            float("nan") if cut else traversal_tau(points_array(rec.tags), min_tags=self.options.min_traversal_tags)
        )
        if rec.tags and not cut and self.stimuli.cells(rec) is not None:
            self.lattice.append(self.n)
            self._lattice_ids.append(rec.episode_id)
        self.n += 1

    def lattice_positions(self) -> list[int]:
        """``lattice`` in episode-id order, not log order: the lattice table's sums are then the
        same however the log orders the episodes."""
        return [p for _, p in sorted(zip(self._lattice_ids, self.lattice, strict=True))]

    def tap(self, records: Iterable[EpisodeRecord]) -> Iterator[EpisodeRecord]:
        """``records``, each added on its way through."""
        for rec in records:
            self.add(rec)
            yield rec

    def conditions(self) -> pd.DataFrame:
        """The conditions table (``traces.conditions_table``) of the records added."""
        frame = pd.DataFrame(self.rows, columns=list(CONDITION_COLUMNS))
        return frame.sort_values("episode_id", kind="stable", ignore_index=True)  # not log order


def principle_tables(
    records: Sequence[EpisodeRecord],
    episodes: pd.DataFrame,
    *,
    resolve: Resolver | None = None,
    stimuli: StimulusCache | None = None,
    options: PrincipleOptions | None = None,
    inputs: PrincipleInputs | None = None,
) -> dict[str, pd.DataFrame]:
    """The applicable principle tables of these episodes, keyed by ``PRINCIPLE_TABLES`` names.

    ``episodes`` is ``audit_episodes(records)``; its ``arm`` labels name the arms. ``inputs``:
    the per-record inputs when already gathered (``PrincipleInputs.tap`` over ``records``, with
    the same stimuli and options); records are then read again only for the perturbation
    probe's episodes and the lattice's.
    """
    opts = options or PrincipleOptions()
    _check_options(opts)
    cache = stimuli or StimulusCache(resolve)
    if inputs is None:
        inputs = PrincipleInputs(cache, opts)
        for rec in records:
            inputs.add(rec)
    cond = inputs.conditions()
    boot: dict[str, Any] = {"n_resamples": opts.n_resamples, "confidence": opts.confidence, "seed": opts.seed}
    taus = inputs.taus
    tables = {
        "traversal": traversal_table(
            records, episodes, min_tags=opts.min_traversal_tags, taus=taus
        ),
        "order_effect": order_effect_table(
            episodes, cond, orders=opts.orders, traversal=taus, **boot
        ),
        "transform_consistency": transform_table(episodes, cond, **boot),
        "perturbation": perturbation_table(records, episodes, cond, cache),
        "tags_vs_direct": tags_vs_direct_table(episodes, direct_arms=opts.direct_arms),
        "departures": departures_table(episodes),
        "lattice": lattice_table(subset(records, inputs.lattice_positions()), episodes, cache),
    }
    return {k: v for k, v in tables.items() if not v.empty}
