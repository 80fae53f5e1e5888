"""Building a dataset folder in the cache exactly once, safely under concurrency."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from countgym.errors import UserError

CACHE_ENV = "COUNTGYM_CACHE"
DERIVED_CACHE_ENV = "COUNTGYM_DERIVED_CACHE"


def cache_root() -> Path:
    """Where batteries are built on demand: ``$COUNTGYM_CACHE`` or ``~/.cache/countgym``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "countgym"


def derived_cache_root() -> Path:
    """``$COUNTGYM_DERIVED_CACHE``, else ``<countgym cache>/derived``."""
    env = os.environ.get(DERIVED_CACHE_ENV)
    return Path(env).expanduser() if env else cache_root() / "derived"


def build_once(final: Path, build: Callable[[Path], Any]) -> Path:
    """``final`` if it holds a manifest; else build into a temp folder beside it and rename.

    A reader sees no folder or a complete one, and of several processes building at once the
    first rename wins and the others discard their copy.
    """
    if (final / "manifest.jsonl").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "manifest.jsonl").is_file():
                raise UserError(f"cache folder {final} exists but holds no manifest.jsonl; delete it") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
