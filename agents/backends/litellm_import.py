"""Importing litellm once, offline and quietly: shared by the litellm backend and the reasoning
rules (which read litellm's model map), so neither imports the other."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from countgym import notices
from countgym.errors import MissingExtraError
from countgym.termtext import terminal_safe

_LITELLM: Any = None
_LITELLM_LOCK = threading.Lock()
LOADING = "litellm, the hosted-model client (a few seconds, once per process)"
"""The notice given just before litellm is imported (``countgym.notices``; the command line
prints it, since the import costs seconds of CPU before the first model call)."""


class _OncePerMessage(logging.Filter):
    """Passes each distinct warning (or info, debug) message once per process; errors always.
    Every message it passes is made terminal-safe (it can quote a provider's reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: let litellm's handler deal with it
            return True
        safe = terminal_safe(text)
        if safe != text:
            record.msg, record.args = safe, ()
        if record.levelno > logging.WARNING:
            return True
        if text in self.seen:
            return False
        if len(self.seen) < 10_000:
            self.seen.add(text)
        return True


def load_litellm() -> Any:
    """Import litellm once, offline, quietly."""
    global _LITELLM
    with _LITELLM_LOCK:
        if _LITELLM is None:
            if "litellm" not in sys.modules:
                notices.loading(LOADING)
            # Without this, importing litellm fetches its model-cost map over the network.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                import litellm
            except ImportError:
                raise MissingExtraError("litellm", "api") from None
            litellm.suppress_debug_info = True
            # litellm warns on every call it drops a parameter from (``reasoning_effort`` for a
            # model without reasoning: one line per model call between the progress bar's
            # updates); once per distinct message is enough.
            logging.getLogger("LiteLLM").addFilter(_OncePerMessage())
            litellm.telemetry = False
            # httpx, as the synchronous path uses: the same URL and auth handling (aiohttp, the
            # async default, rejects an api_base with credentials in it next to the bearer key).
            litellm.disable_aiohttp_transport = True
            _LITELLM = litellm
    return _LITELLM
