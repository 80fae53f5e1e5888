"""Short display names for datasets, arms and models (tables and figures only; CSVs keep the
full names)."""

from __future__ import annotations

from pathlib import PurePath


def short_dataset(name: object) -> str:
    """``/runs/data:common`` -> ``data:common``; battery names pass through."""
    text = str(name)
    base, colon, subset = text.rpartition(":")
    if not colon or "/" in subset or "\\" in subset:
        base, subset = text, ""
    if "/" in base or "\\" in base:
        base = PurePath(base).name or base
    return f"{base}:{subset}" if subset else base


def group_label(*parts: object, sep: str = " · ") -> str:
    """Parts joined for a legend or axis label, empty parts left out."""
    return sep.join(str(p) for p in parts if p is not None and str(p) != "")
