"""Stimulus access for the principle tests, plots and viewer: datasets resolved once, quietly.

``audit_episodes`` already warns about datasets it cannot resolve and stimuli it cannot find;
the later stages use this cache, which returns ``None`` for those instead of warning again.
Ground-truth points and lattice cells are returned in the frame of the tags (the pixels of
the image the policy saw), with tau computed there, exactly as the audit does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from countgym.errors import UserError
from countgym.logs import EpisodeRecord
from countgym.matching import tau_for
from countgym.stimulus import Dataset, Stimulus

from .audit import scale_points

Resolver = Callable[[str], Dataset]


def default_resolver() -> Resolver:
    """``countgym.scenes.resolve_dataset``, imported lazily."""
    from countgym.scenes import resolve_dataset

    return resolve_dataset


def cached_resolver(resolve: Resolver | None = None) -> Resolver:
    """A resolver that resolves each dataset name once (and re-raises the same error after)."""
    inner = resolve or default_resolver()
    cache: dict[str, Dataset | UserError] = {}

    def get(name: str) -> Dataset:
        if name not in cache:
            try:
                cache[name] = inner(name)
            except UserError as e:
                cache[name] = e
        value = cache[name]
        if isinstance(value, UserError):
            raise value
        return value

    return get


class StimulusCache:
    """Stimuli, datasets and tag-frame ground truth of episode records; ``None`` when unknown."""

    def __init__(self, resolve: Resolver | None = None) -> None:
        self._resolve = cached_resolver(resolve)
        self._datasets: dict[str, Dataset | None] = {}
        self._gt: dict[tuple[str, str, Any], tuple[np.ndarray, float] | None] = {}

    @property
    def resolver(self) -> Resolver:
        """The cached resolver (raises ``UserError`` for unknown datasets, like the original)."""
        return self._resolve

    def dataset(self, name: str) -> Dataset | None:
        """The dataset called ``name``, or None when it cannot be resolved (resolved once:
        silencing warnings costs more than a stimulus lookup, so it is paid once per name)."""
        if name not in self._datasets:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._datasets[name] = self._resolve(name)
            except UserError:
                self._datasets[name] = None
        return self._datasets[name]

    def stimulus(self, record: EpisodeRecord) -> Stimulus | None:
        """The record's stimulus, or None (unknown dataset or id, or a different true count)."""
        ds = self.dataset(record.dataset)
        if ds is None:
            return None
        try:
            stim = ds[record.stimulus_id]
        except UserError:
            return None
        if record.truth is not None and stim.n != record.truth.n:
            return None
        return stim

    def truth_points(self, record: EpisodeRecord) -> tuple[np.ndarray, float] | None:
        """Ground-truth points in the tag frame and their tau, or None without point truth."""
        key = (record.dataset, record.stimulus_id, record.image_size)
        if key not in self._gt:
            stim = self.stimulus(record)
            if stim is None or stim.points is None:
                self._gt[key] = None
            else:
                pts = scale_points(stim.points, record.stimulus_size, record.image_size)
                self._gt[key] = (pts, tau_for(pts))
        return self._gt[key]

    def cells(self, record: EpisodeRecord) -> np.ndarray | None:
        """Ideal lattice cell centres (meta ``cells``) in the tag frame, one per object, or None."""
        stim = self.stimulus(record)
        if stim is None or stim.points is None:
            return None
        cells = stim.meta.get("cells")
        if not isinstance(cells, list) or len(cells) != len(stim.points):
            return None
        try:
            arr = np.asarray(cells, dtype=float).reshape(-1, 2)
        except (TypeError, ValueError):
            return None
        return scale_points(arr, record.stimulus_size, record.image_size)
