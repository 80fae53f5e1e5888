"""One-line notices of slow preparation steps (an import that takes seconds before the first
model call). Libraries stay silent; the command line installs ``hook`` to print them on stderr."""

from __future__ import annotations

from collections.abc import Callable

hook: Callable[[str], None] | None = None
"""Receives each notice; None (the default for library use): notices are dropped."""


def loading(what: str) -> None:
    """Say that ``what`` is being loaded, when someone listens."""
    if hook is not None:
        hook(f"loading {what}")
