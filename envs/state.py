"""The episode state: the only state of the image tool environment; everything else is derived."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PIL import Image

Point = tuple[float, float]


@dataclass
class EpisodeState:
    """Original image, ordered tags (pixels), erased regions, grid flag, budget and bookkeeping."""

    original: Image.Image
    calls_left: int
    tags: list[Point] = field(default_factory=list)
    erased: list[dict[str, Any]] = field(default_factory=list)
    grid: bool = False
    invalid_in_a_row: int = 0
    tool_calls: int = 0
    tag_calls: int = 0
    awaiting_final: bool = False
    answer: int | None = None
    end: str | None = None
    error: str | None = None
    ended: bool = False
