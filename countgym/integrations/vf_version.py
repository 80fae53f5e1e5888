"""Which verifiers API is installed, read from the package metadata without importing it.

verifiers 0.3.x has the classic API (``MultiTurnEnv``, ``Rubric``, ``load_environment(id)``),
adapted by ``vf_classic``; 0.4 replaced it with the taskset/harness stack of ``verifiers.v1``,
adapted by ``vf_v1``. ``countgym.integrations.verifiers`` picks one by this version.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

V1_FROM = (0, 4)
"""The first release whose API is ``verifiers.v1``."""


def installed() -> tuple[int, int] | None:
    """The installed verifiers release as (major, minor), or None when it is not installed."""
    try:
        text = version("verifiers")
    except PackageNotFoundError:
        return None
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def uses_v1() -> bool:
    """Whether the installed verifiers has the 0.4 (``verifiers.v1``) API."""
    found = installed()
    return found is not None and found >= V1_FROM


def wrong_api(module: str, wanted: str) -> ImportError:
    """The import error of an adapter module whose verifiers API is not the installed one
    (``name`` is ``verifiers``, so it reads as that optional dependency being absent)."""
    return ImportError(
        f"{module} adapts verifiers {wanted}; the installed verifiers is "
        f"{'.'.join(map(str, installed() or ()))}: use countgym.integrations.verifiers",
        name="verifiers",
    )
