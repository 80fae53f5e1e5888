"""Faceting rules of the report's figures, so they read at study scale.

A panel shows at most ``MAX_SERIES`` series (lines, point groups or rows of a forest plot); more
go to further panels, and a figure holds at most ``MAX_PANELS`` panels (more go to further
figure pages). A label longer than ``KEY_AT`` characters is drawn as a short key (``K1``,
``K2``, ...) and spelled out in a key table under the figure.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

MAX_SERIES = 12
"""Series (lines, rows, point groups) per panel at most."""
MAX_PANELS = 24
"""Panels per figure at most (eight rows of three at the report's width)."""
KEY_AT = 24
"""Labels longer than this many characters are drawn as keys."""


def chunks(items: Sequence[T], size: int = MAX_SERIES) -> list[list[T]]:
    """``items`` in consecutive groups of at most ``size`` (one group when empty)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    out = [list(items[i:i + size]) for i in range(0, len(items), size)]
    return out or [[]]


def pages(panels: Sequence[T], size: int = MAX_PANELS) -> list[list[T]]:
    """Panels split into figure pages of at most ``size`` panels."""
    return chunks(panels, size)


@dataclass
class LabelKeys:
    """Short keys for long labels, shared by every panel of one figure: ``short(label)`` is the
    label itself when short enough, else ``K<i>``; ``table`` lists (key, label) in order."""

    prefix: str = "K"
    limit: int = KEY_AT
    _keys: dict[str, str] = field(default_factory=dict)

    def short(self, label: Hashable) -> str:
        text = str(label)
        if len(text) <= self.limit:
            return text
        if text not in self._keys:
            self._keys[text] = f"{self.prefix}{len(self._keys) + 1}"
        return self._keys[text]

    def shorts(self, labels: Iterable[Hashable]) -> list[str]:
        return [self.short(x) for x in labels]

    @property
    def table(self) -> list[tuple[str, str]]:
        return [(k, label) for label, k in self._keys.items()]


def panel_title(*parts: object, limit: int = 60) -> str:
    """A panel title from its facet values (empty parts dropped), shortened in the middle when
    longer than ``limit`` characters so distinct titles stay distinct at both ends."""
    text = " · ".join(str(p) for p in parts if p not in (None, ""))
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return text[:half] + "…" + text[-(limit - 1 - half):]
