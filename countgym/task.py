"""What a policy may know about an episode: shared by the environments (which build it) and the
agents (which receive it), so neither layer imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Task:
    """What a policy may know about an episode (never ground truth)."""

    obj: str
    obj_sing: str
    image_size: tuple[int, int]
    """(width, height) of the image shown at reset."""
    tools: tuple[str, ...]
    budget: int
    options: dict[str, Any] = field(default_factory=dict)
    """The environment options of the arm (verify, numbered, order, prompt, ...)."""
