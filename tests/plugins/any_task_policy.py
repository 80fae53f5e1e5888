"""A policy written outside countgym that runs on any task: it answers 7 (text on the image tool
loop, a typed answer on the single-step tasks), optionally after sleeping."""

from __future__ import annotations

import time
from typing import Any

from countgym.envs.actions import Answer


class AnswerSeven:
    """No ``tasks`` attribute: every environment accepts it."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = float(delay)
        self.single_step = False

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        self.single_step = task.budget == 0 and tuple(task.tools) == ("answer",)

    def act(self, observation: dict[str, Any]) -> Any:
        if self.delay:
            time.sleep(self.delay)
        if self.single_step:
            return Answer(count=7)
        return 'Counting.\n{"tool": "answer", "count": 7}'


class VideoOnly(AnswerSeven):
    """Declares the one task it runs on."""

    tasks = ("video",)
