"""Which stimulus an episode's model calls are about, for a simulated model server only.

A simulated model (``countgym run --simulate``) must know each stimulus's ground truth from the
dataset, never from the prompt. The runner opens a ``stimulus_scope`` around each episode; a
backend asks ``simulation_headers(url)`` for the headers of a request and gets the stimulus id
(and repeat) only when ``url`` is the endpoint of a simulated server running in this process
(``register_endpoint``). Requests to any other endpoint carry nothing extra, so a real provider
never sees these headers. The value lives in a ``contextvars.ContextVar``: concurrent episodes
on threads each see their own, and ``complete_batch`` workers copy it along.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from urllib.parse import quote, unquote

STIMULUS_HEADER = "X-Countgym-Stimulus"
"""Request header naming the episode's stimulus: ``<quoted stimulus id>;<repeat>``."""

_EPISODE: ContextVar[tuple[str, int] | None] = ContextVar("countgym_sim_stimulus", default=None)
_ENDPOINTS: set[str] = set()
_LOCK = threading.Lock()


@contextmanager
def stimulus_scope(stimulus_id: str, repeat: int = 0) -> Iterator[None]:
    """The model calls made inside this block belong to ``stimulus_id`` (repeat ``repeat``)."""
    token = _EPISODE.set((stimulus_id, repeat))
    try:
        yield
    finally:
        _EPISODE.reset(token)


def _norm(url: str) -> str:
    return url.rstrip("/").removesuffix("/chat/completions").rstrip("/")


def register_endpoint(base_url: str) -> None:
    """Mark ``base_url`` as a simulated server of this process (its requests get the header)."""
    with _LOCK:
        _ENDPOINTS.add(_norm(base_url))


def unregister_endpoint(base_url: str) -> None:
    """Forget a simulated server (after it stopped)."""
    with _LOCK:
        _ENDPOINTS.discard(_norm(base_url))


def simulation_headers(url: str | None) -> dict[str, str]:
    """``{STIMULUS_HEADER: ...}`` for a request to a registered simulated endpoint inside a
    ``stimulus_scope``; ``{}`` otherwise (every real provider, every call outside an episode)."""
    if not url or not _ENDPOINTS:
        return {}
    current = _EPISODE.get()
    if current is None:
        return {}
    with _LOCK:
        known = _norm(url) in _ENDPOINTS
    if not known:
        return {}
    sid, repeat = current
    return {STIMULUS_HEADER: f"{quote(sid, safe='')};{int(repeat)}"}


def parse_stimulus_header(value: str | None) -> tuple[str, int] | None:
    """``(stimulus_id, repeat)`` from the header's value; None when absent or malformed."""
    if not value:
        return None
    sid, sep, repeat = value.rpartition(";")
    if not sep or not sid:
        return None
    try:
        return unquote(sid), int(repeat)
    except ValueError:
        return None
