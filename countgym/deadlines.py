"""The episode clock: network calls of one episode share a total deadline.

The runner opens an ``episode_scope`` around each episode; a backend reads ``episode_elapsed``
and ends a call (with a transient error) once its own per-episode budget is spent, so a slow or
trickling server cannot hold an episode, and the run, beyond that budget. The clock lives in a
``contextvars.ContextVar``, so concurrent episodes on threads each see their own; a backend that
fans a call out to worker threads copies the context into them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_EPISODE_START: ContextVar[float | None] = ContextVar("countgym_episode_start", default=None)


@contextmanager
def episode_scope() -> Iterator[None]:
    """Start the episode clock for the calls made inside this block (nested scopes restart it)."""
    token = _EPISODE_START.set(time.monotonic())
    try:
        yield
    finally:
        _EPISODE_START.reset(token)


def episode_elapsed() -> float | None:
    """Seconds since the current episode started, or None outside an episode scope."""
    start = _EPISODE_START.get()
    return None if start is None else time.monotonic() - start
