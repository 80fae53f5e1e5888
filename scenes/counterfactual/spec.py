"""What a drawn subject is: its names, category, counted attribute and how to draw it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .categories import CATEGORIES
from .draw import RGB, Scene

Palette = dict[str, RGB]
Builder = Callable[[int, Palette], Scene]

OUTLINE: RGB = (44, 38, 36)
LINE = 3.0
"""Outline width in pixels of the 480-px canvas."""



@dataclass(frozen=True)
class Subject:
    """A drawable subject with one counted attribute of strong canonical count."""

    key: str
    """Stable identifier used in stimulus ids ("dog")."""
    name: str
    """Subject name in prompts ("dog", "Japanese flag")."""
    category: str
    attribute: str
    """Singular attribute name ("leg")."""
    attribute_plural: str
    """Plural attribute name ("legs")."""
    canonical: int
    """The canonical (factual) count."""
    cf_counts: tuple[int, ...]
    """The counterfactual counts drawn for this subject (removals and additions)."""
    build: Builder
    """``build(count, palette)`` -> the scene with ``count`` attribute parts."""
    palettes: tuple[Palette, ...]
    """Colour variants; the dataset seed picks one per subject."""

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.key}: unknown category {self.category!r}")
        if self.canonical in self.cf_counts:
            raise ValueError(f"{self.key}: a CF count equals the canonical count")
