"""Built-in policy names -> classes (scripted policies; model arms are added by ``arms``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from countgym.agents.scripted import BlobCounter, NoisyPointer, Oracle

BUILTIN_POLICIES: dict[str, Callable[..., Any]] = {
    "oracle": Oracle,
    "noisy-pointer": NoisyPointer,
    "blob-counter": BlobCounter,
}
SCRIPTED = frozenset(BUILTIN_POLICIES)
