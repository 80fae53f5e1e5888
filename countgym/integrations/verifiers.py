"""countgym's image tool loop as a `verifiers` environment (extra ``verifiers``).

The adapter follows the installed verifiers: 0.4 and later (``verifiers.v1``: taskset, harness,
env; ``vf-eval countgym``) get ``countgym.integrations.vf_v1``, 0.3.x (the classic
``MultiTurnEnv`` and ``vf.load_environment("countgym")``) ``countgym.integrations.vf_classic``.
Both run the same episodes, score them with countgym's rewards and keep each episode's
``EpisodeRecord`` for ``countgym audit``. See docs/verifiers.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from countgym.errors import MissingExtraError
from countgym.integrations import vf_version

try:
    import verifiers  # noqa: F401 - importable at all (0.4's package root is light)
except ImportError:
    raise MissingExtraError("verifiers", "verifiers") from None

_impl = importlib.import_module(
    "countgym.integrations.vf_v1" if vf_version.uses_v1() else "countgym.integrations.vf_classic"
)

API = "v1" if vf_version.uses_v1() else "classic"
"""Which verifiers API the adapter runs on: ``v1`` (0.4 and later) or ``classic`` (0.3)."""
REWARDS: tuple[str, ...] = _impl.REWARDS
load_environment = _impl.load_environment
CountgymEnv: Any = _impl.CountgymEnv

__all__ = ["API", "CountgymEnv", "REWARDS", "load_environment"]


def __getattr__(name: str) -> Any:
    """The rest of the chosen adapter (``evaluate_sync`` and the plugin classes of 0.4,
    ``as_client`` of 0.3)."""
    try:
        return getattr(_impl, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
