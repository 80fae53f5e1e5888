"""countgym.analysis: from episode logs to tables (metrics, point-level audit, summaries).

Submodules load on first use, so ``import countgym.analysis`` stays cheap::

    from countgym.analysis import load_episodes, summarize
    episodes = load_episodes(["runs/"])
    summarize(episodes)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # metrics
    "exact_match": "metrics",
    "within_10": "metrics",
    "absolute_error": "metrics",
    "signed_error": "metrics",
    "tolerance_10": "metrics",
    "answered": "metrics",
    "exact_match_score": "metrics",
    "acc10_score": "metrics",
    "coverage_score": "metrics",
    "mean_absolute_error": "metrics",
    "root_mean_squared_error": "metrics",
    "mean_signed_error": "metrics",
    "counting_scores": "metrics",
    "CountingScores": "metrics",
    # bootstrap
    "BootstrapResult": "bootstrap",
    "bootstrap_ratio_ci": "bootstrap",
    "bootstrap_mean_ci": "bootstrap",
    "bootstrap_ratios": "bootstrap",
    # audit
    "TagAudit": "audit",
    "audit_tags": "audit",
    "audit_episodes": "audit",
    "scale_points": "audit",
    "count_tag_calls": "audit",
    "CONTRACT_COLUMNS": "audit",
    "TAU_SCALES": "audit",
    # summary
    "summarize": "summary",
    "accuracy_by": "summary",
    "summary_columns": "summary",
    # tables
    "load_episodes": "tables",
    "read_episode_records": "tables",
    "write_audit": "tables",
}

__all__ = [
    "BootstrapResult",
    "CONTRACT_COLUMNS",
    "CountingScores",
    "TAU_SCALES",
    "TagAudit",
    "absolute_error",
    "acc10_score",
    "accuracy_by",
    "answered",
    "audit_episodes",
    "audit_tags",
    "bootstrap_mean_ci",
    "bootstrap_ratio_ci",
    "bootstrap_ratios",
    "count_tag_calls",
    "counting_scores",
    "coverage_score",
    "exact_match",
    "exact_match_score",
    "load_episodes",
    "mean_absolute_error",
    "mean_signed_error",
    "read_episode_records",
    "root_mean_squared_error",
    "scale_points",
    "signed_error",
    "summarize",
    "summary_columns",
    "tolerance_10",
    "within_10",
    "write_audit",
]

if TYPE_CHECKING:
    from .audit import (
        CONTRACT_COLUMNS,
        TAU_SCALES,
        TagAudit,
        audit_episodes,
        audit_tags,
        count_tag_calls,
        scale_points,
    )
    from .bootstrap import (
        BootstrapResult,
        bootstrap_mean_ci,
        bootstrap_ratio_ci,
        bootstrap_ratios,
    )
    from .metrics import (
        CountingScores,
        absolute_error,
        acc10_score,
        answered,
        counting_scores,
        coverage_score,
        exact_match,
        exact_match_score,
        mean_absolute_error,
        mean_signed_error,
        root_mean_squared_error,
        signed_error,
        tolerance_10,
        within_10,
    )
    from .summary import accuracy_by, summarize, summary_columns
    from .tables import load_episodes, read_episode_records, write_audit


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'countgym.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"countgym.analysis.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
