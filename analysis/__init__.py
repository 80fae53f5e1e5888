"""countgym.analysis: from episode logs to tables (metrics, point-level audit, summaries).

Submodules load on first use, so ``import countgym.analysis`` stays cheap::

    from countgym.analysis import load_episodes, report_tables, summarize
    episodes = load_episodes(["runs/"])
    summarize(episodes)
    tables = report_tables(["runs/"])   # every report table as a DataFrame
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # CountVideoBench prediction bias
    "bias_table": "bias",
    "bias_scores": "bias",
    "bias_figures": "bias",
    "top3_share": "bias",
    # CounterCount
    "cf_frame": "cf",
    "cf_scores": "cf",
    "scores_by": "cf",
    "paired_deltas": "cf",
    "judge_ambiguous": "cf",
    "write_cf_report": "cf",
    "cf_tables": "cf",
    # model-assisted extraction (CountVideoBench parser, CounterCount judge)
    "resolve_answers": "extraction",
    "Resolution": "extraction",
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
    "iter_episode_records": "tables",
    "write_audit": "tables",
    # r80
    "CountingRange": "r80",
    "counting_range": "r80",
    "isotonic_nonincreasing": "r80",
    "accuracy_curve_table": "r80",
    "R80_THRESHOLD": "r80",
    # distribution
    "support_size": "distribution",
    "prediction_entropy": "distribution",
    "prediction_perplexity": "distribution",
    # contrasts
    "PairedContrast": "contrasts",
    "paired_contrasts": "contrasts",
    "contrasts_table": "contrasts",
    # correlation
    "kendall_tau_b": "correlation",
    "spearman_rho": "correlation",
    # order
    "Agreement": "order",
    "agreement": "order",
    "traversal_tau": "order",
    "traversal_table": "order",
    "order_effect_table": "order",
    "transform_table": "order",
    # perturbation
    "ProbeOutcome": "perturbation",
    "probe_outcome": "perturbation",
    "perturbation_table": "perturbation",
    # direct
    "tags_vs_direct_table": "direct",
    "departures_table": "direct",
    # lattice
    "offset_stats": "lattice",
    "lattice_table": "lattice",
    # principles
    "PrincipleOptions": "principles",
    "principle_tables": "principles",
    "PRINCIPLE_TABLES": "principles",
    # arms
    "arm_labels": "arms",
    # overlay
    "draw_audit_overlay": "overlay",
    # viewer
    "ViewerOptions": "viewer",
    "ViewerData": "viewer",
    "build_viewer": "viewer",
    # pipeline
    "AuditTables": "pipeline",
    "compute_tables": "pipeline",
    # bundle
    "AuditFiles": "bundle",
    # tables
    "report_tables": "tables",
    "write_audit_files": "tables",
}

__all__ = [
    "Agreement",
    "AuditFiles",
    "AuditTables",
    "BootstrapResult",
    "CONTRACT_COLUMNS",
    "CountingRange",
    "CountingScores",
    "PRINCIPLE_TABLES",
    "PairedContrast",
    "PrincipleOptions",
    "ProbeOutcome",
    "R80_THRESHOLD",
    "TAU_SCALES",
    "TagAudit",
    "ViewerData",
    "ViewerOptions",
    "absolute_error",
    "acc10_score",
    "accuracy_by",
    "accuracy_curve_table",
    "agreement",
    "answered",
    "arm_labels",
    "audit_episodes",
    "audit_tags",
    "bootstrap_mean_ci",
    "bootstrap_ratio_ci",
    "bootstrap_ratios",
    "build_viewer",
    "compute_tables",
    "contrasts_table",
    "count_tag_calls",
    "counting_range",
    "counting_scores",
    "coverage_score",
    "departures_table",
    "draw_audit_overlay",
    "exact_match",
    "exact_match_score",
    "isotonic_nonincreasing",
    "iter_episode_records",
    "kendall_tau_b",
    "lattice_table",
    "load_episodes",
    "mean_absolute_error",
    "mean_signed_error",
    "offset_stats",
    "order_effect_table",
    "paired_contrasts",
    "perturbation_table",
    "prediction_entropy",
    "prediction_perplexity",
    "principle_tables",
    "probe_outcome",
    "read_episode_records",
    "report_tables",
    "root_mean_squared_error",
    "scale_points",
    "signed_error",
    "spearman_rho",
    "summarize",
    "summary_columns",
    "support_size",
    "tags_vs_direct_table",
    "tolerance_10",
    "transform_table",
    "traversal_table",
    "traversal_tau",
    "within_10",
    "write_audit",
    "write_audit_files",
]

if TYPE_CHECKING:
    from .arms import arm_labels
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
    from .bundle import AuditFiles
    from .contrasts import PairedContrast, contrasts_table, paired_contrasts
    from .correlation import kendall_tau_b, spearman_rho
    from .direct import departures_table, tags_vs_direct_table
    from .distribution import prediction_entropy, prediction_perplexity, support_size
    from .lattice import lattice_table, offset_stats
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
    from .order import (
        Agreement,
        agreement,
        order_effect_table,
        transform_table,
        traversal_table,
        traversal_tau,
    )
    from .overlay import draw_audit_overlay
    from .perturbation import ProbeOutcome, perturbation_table, probe_outcome
    from .pipeline import AuditTables, compute_tables
    from .principles import PRINCIPLE_TABLES, PrincipleOptions, principle_tables
    from .r80 import (
        R80_THRESHOLD,
        CountingRange,
        accuracy_curve_table,
        counting_range,
        isotonic_nonincreasing,
    )
    from .summary import accuracy_by, summarize, summary_columns
    from .tables import (
        iter_episode_records,
        load_episodes,
        read_episode_records,
        report_tables,
        write_audit,
        write_audit_files,
    )
    from .viewer import ViewerData, ViewerOptions, build_viewer


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'countgym.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"countgym.analysis.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
