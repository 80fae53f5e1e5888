"""A policy written outside countgym, plugged in with --agent outside_policy:CentreTagger."""

from __future__ import annotations

import time
from typing import Any


class CentreTagger:
    """Tags the image centre and a corner, then answers 2; optionally sleeps per act()."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = float(delay)
        self.calls = 0

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        self.calls = 0

    def act(self, observation: dict[str, Any]) -> str:
        if self.delay:
            time.sleep(self.delay)
        self.calls += 1
        if self.calls == 1:
            return 'Looking.\n{"tool":"tag","points":[[500,500],[130,130]]}'
        return '{"tool":"answer","count":2}'


class Crashes:
    """Raises inside act(): the episode must be recorded with an error, the run goes on."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        pass

    def act(self, observation: dict[str, Any]) -> str:
        raise ValueError("boom")


class Costly:
    """Answers 2 at a recorded cost of $0.10 per call (for spend-cap tests)."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        pass

    def act(self, observation: dict[str, Any]) -> Any:
        from countgym.envs.actions import Reply

        return Reply(text='{"tool":"answer","count":2}', cost=0.10)
