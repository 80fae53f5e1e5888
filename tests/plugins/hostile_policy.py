"""Policies whose replies are hostile to the log writer (plugged in with --agent hostile_policy:...)."""

from __future__ import annotations

import time
from typing import Any

LONE = "\ud800"
"""A lone surrogate: a plug-in or a JSON ``\\ud800`` escape over HTTP can produce one; UTF-8 cannot encode it."""


class LoneSurrogate:
    """Replies with a lone surrogate around a valid answer (counts: 2 for every task's grammar)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = float(delay)

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        pass

    def act(self, observation: dict[str, Any]) -> str:
        if self.delay:
            time.sleep(self.delay)
        return f'{LONE} ANSWER: 2 {LONE}\n{{"tool":"answer","count":2}} (B) {LONE}'
