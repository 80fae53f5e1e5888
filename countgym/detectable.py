"""What a study can detect: the 95 % CI half-width each headline contrast of the three papers
reaches at the size it ran, next to the effect the paper reports.

A rehearsal (``countgym rehearse``) runs the papers' configs against the simulated model and
audits them; the audit's CIs are those a real run of the same design would get at the same
size, up to the spread of the real model's answers. Half a CI's width is the smallest effect the
design tells from zero (an effect of that size has its interval touching zero), so researchers
read this table to size their runs before paying: a reported effect well above the half-width is
within reach of the design, one below it is not.

The half-widths are read from the audit folders' own tables (``contrasts.csv``, ``summary.csv``,
``countercount/cf_scores.csv`` and ``cf_deltas.csv``); each row gives the median over the models
that ran it, and the range. Two rows combine two intervals: an R80 difference and an EM
difference between two models take the root sum of squares of the two half-widths (independent
intervals; a paired bootstrap would be no wider when the two arms' errors go together).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Headline:
    """One headline contrast of a paper and where its interval is read."""

    paper: str
    """``finger``, ``countercount`` or ``countvideo`` (the rehearsal's audit folder)."""
    name: str
    reported: str
    """The effect the paper reports (its own words and numbers)."""
    read: Callable[[Path], list[float]]
    """Half-widths (one per model) from the paper's audit folder; empty when not measured."""
    unit: str = "pp"
    note: str = ""


@dataclass(frozen=True)
class Detectable:
    """A headline contrast's half-width at the size rehearsed."""

    headline: Headline
    half_widths: tuple[float, ...]
    """One per model that ran it; NaN where its audit gave no interval (too few items)."""

    @property
    def finite(self) -> tuple[float, ...]:
        return tuple(x for x in self.half_widths if math.isfinite(x))

    @property
    def median(self) -> float | None:
        return float(np.median(self.finite)) if self.finite else None


def read_csv_or_none(path: Path) -> Any:
    """The CSV at ``path`` as a DataFrame, or None when it is missing or unreadable."""
    import pandas as pd

    if not path.is_file():
        return None
    try:
        return pd.read_csv(path)
    except (ValueError, OSError):
        return None


def _half(low: Any, high: Any, scale: float = 1.0) -> list[float]:
    """Half-widths of the intervals (NaN where a row has no interval: too few items)."""
    lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return [float(x) for x in (hi - lo) / 2 * scale]


def _pick_dataset(frame: Any, datasets: Sequence[str]) -> Any:
    """The rows of the first of ``datasets`` present in ``frame`` (the paper's subset first)."""
    if frame is None or "dataset" not in frame.columns:
        return None
    for name in datasets:
        rows = frame[frame["dataset"].astype(str) == name]
        if len(rows):
            return rows
    return None


def arm_em(arm_a: str, arm_b: str, datasets: Sequence[str]) -> Callable[[Path], list[float]]:
    """Paired EM contrast ``arm_b - arm_a`` (percentage points), from ``contrasts.csv``."""

    def read(audit: Path) -> list[float]:
        rows = _pick_dataset(read_csv_or_none(audit / "contrasts.csv"), datasets)
        if rows is None:
            return []
        rows = rows[(rows["metric"] == "exact_match_score") & (rows["arm_a"] == arm_a) & (rows["arm_b"] == arm_b)]
        return _half(rows["ci_low"], rows["ci_high"], 100.0)

    return read


def r80_difference(arm_a: str, arm_b: str, datasets: Sequence[str]) -> Callable[[Path], list[float]]:
    """R80 of ``arm_b`` minus ``arm_a`` per model (in dots), from ``summary.csv``'s R80 CIs."""

    def read(audit: Path) -> list[float]:
        rows = _pick_dataset(read_csv_or_none(audit / "summary.csv"), datasets)
        if rows is None or not {"r80_ci_low", "r80_ci_high", "arm", "model"} <= set(rows.columns):
            return []
        out = []
        for _, g in rows.groupby("model", sort=True):
            a, b = g[g["arm"] == arm_a], g[g["arm"] == arm_b]
            ha, hb = _half(a["r80_ci_low"], a["r80_ci_high"]), _half(b["r80_ci_low"], b["r80_ci_high"])
            if ha and hb:
                out.append(math.hypot(ha[0], hb[0]))  # NaN when either has no interval
        return out

    return read


def cf_bias(fmt: str) -> Callable[[Path], list[float]]:
    """CounterCount bias rate (baseline question, ``fmt``) per model, from ``cf_scores.csv``."""

    def read(audit: Path) -> list[float]:
        s = read_csv_or_none(audit / "countercount" / "cf_scores.csv")
        if s is None or not {"format", "intervention", "bias_rate_low", "bias_rate_high"} <= set(s.columns):
            return []
        rows = s[(s["format"].astype(str) == fmt) & (s["intervention"].astype(str) == "baseline")]
        return _half(rows["bias_rate_low"], rows["bias_rate_high"], 100.0)

    return read


def cf_delta(level: str, fmt: str) -> Callable[[Path], list[float]]:
    """Paired change of the bias rate (intervention ``level`` minus baseline; the paper's blur
    setting, not the sweep's), from ``cf_deltas.csv``."""

    def read(audit: Path) -> list[float]:
        d = read_csv_or_none(audit / "countercount" / "cf_deltas.csv")
        need = {"format", "level", "bias_rate_delta_low", "bias_rate_delta_high"}
        if d is None or not need <= set(d.columns):
            return []
        rows = d[(d["format"].astype(str) == fmt) & (d["level"].astype(str) == level)]
        return _half(rows["bias_rate_delta_low"], rows["bias_rate_delta_high"], 100.0)

    return read


def video_em(arm: str, *, between_models: bool = False) -> Callable[[Path], list[float]]:
    """CountVideoBench EM of ``arm`` per model (percent), from ``summary.csv``; or, with
    ``between_models``, the EM difference between two models (root sum of squares of theirs)."""

    def read(audit: Path) -> list[float]:
        s = read_csv_or_none(audit / "summary.csv")
        if s is None or not {"arm", "em_ci_low", "em_ci_high"} <= set(s.columns):
            return []
        rows = s[s["arm"].astype(str) == arm]
        halves = _half(rows["em_ci_low"], rows["em_ci_high"], 100.0)
        if not between_models:
            return halves
        return [math.hypot(a, b) for i, a in enumerate(halves) for b in halves[i + 1:]]

    return read


DOTS = ("dotarrays:common", "dotarrays", "dotarrays-main")
MAIN = ("dotarrays-main", "dotarrays")

HEADLINES: tuple[Headline, ...] = (
    Headline("finger", "Table 1/3: tag - direct, EM, DotArrays",
             "Flash-Lite +14.0 pp [+4, +26]; GPT-5 mini -30.0 pp", arm_em("direct", "tag", DOTS)),
    Headline("finger", "Table 1/3: tag+crop - direct, EM, DotArrays",
             "Flash-Lite 36.0 -> 58.0 % (+22.0 pp)", arm_em("direct", "tag+crop", DOTS)),
    Headline("finger", "Table 1/3: cot - direct, EM, FSC-147",
             "Flash-Lite +18.0 pp [+7, +29]", arm_em("direct", "cot", ("fsc147:common", "fsc147"))),
    Headline("finger", "Table 1/3: tag - direct, EM, PixMo-Count",
             "Qwen3-VL-32B +13.3 pp [+4, +22]", arm_em("direct", "tag", ("pixmo:common", "pixmo"))),
    Headline("finger", "Table 24: tag - list, EM, DotArrays",
             "GPT-5 mini -22.0 pp; Qwen3-VL-8B +12.0 pp", arm_em("list", "tag", DOTS)),
    Headline("finger", "R80: tag+crop - direct, DotArrays main",
             "Flash-Lite 7 -> 20 (+13 dots)", r80_difference("direct", "tag+crop", MAIN), unit="dots"),
    Headline("finger", "R80: cot - direct, DotArrays main + XL",
             "Gemini 3.7 Flash 80 vs 150 (-70 dots)", r80_difference("direct", "cot", ("dotarrays-xl", *MAIN)),
             unit="dots"),
    Headline("countercount", "bias rate, MCQ (baseline)",
             "39.1 % of CF predictions canonical (mean of 16 models)", cf_bias("mcq")),
    Headline("countercount", "bias rate, open-ended (baseline)", "39.3 %", cf_bias("oe")),
    Headline("countercount", "blur - baseline, bias rate, MCQ", "-4.8 pp (mean of 16 models)", cf_delta("blur", "mcq")),
    Headline("countercount", "cue - baseline, bias rate, MCQ", "-4.8 pp (mean of 16 models)", cf_delta("cue", "mcq")),
    Headline("countercount", "thinking - baseline, bias rate, MCQ", "-3.2 pp (4 models)", cf_delta("thinking", "mcq")),
    Headline("countercount", "generic names - baseline, bias rate, MCQ", "almost no change",
             cf_delta("generic", "mcq")),
    Headline("countvideo", "EM per model (P1)", "best 27.6 %; five of sixteen below 10 %", video_em("video-p1")),
    Headline("countvideo", "EM difference between two models (P1)",
             "top three within 1.9 pp (27.6, 26.8, 25.7 %)", video_em("video-p1", between_models=True)),
)
"""The headline contrasts of the three papers (numbers from the papers' text)."""


def detectable(audit_dirs: Sequence[Path], headlines: Sequence[Headline] = HEADLINES) -> list[Detectable]:
    """Each headline's half-widths from the audit folder of its paper (``<paper>-audit``)."""
    by_paper = {d.name.removesuffix("-audit"): d for d in audit_dirs}
    out = []
    for h in headlines:
        d = by_paper.get(h.paper)
        out.append(Detectable(h, tuple(h.read(d)) if d is not None else ()))
    return out


def detectable_rows(results: Sequence[Detectable]) -> list[list[str]]:
    """Table rows: paper, contrast, the paper's effect, median half-width [range] and models."""
    rows = []
    for r in results:
        h = r.headline
        digits = 0 if h.unit == "dots" else 1
        if not r.half_widths:
            reach = "- (not run here)"
        elif r.median is None:
            reach = "no interval (too few items)"
        else:
            lo, hi = min(r.finite), max(r.finite)
            spread = "" if len(r.finite) == 1 else f" [{lo:.{digits}f}-{hi:.{digits}f}]"
            reach = f"+/-{r.median:.{digits}f} {h.unit}{spread}"
        rows.append([h.paper, h.name, h.reported, reach, str(len(r.half_widths))])
    return rows


def print_detectable(audit_dirs: Sequence[Path], *, scale: str = "full") -> None:
    """Print the half-width table of ``detectable``."""
    rows = detectable_rows(detectable(audit_dirs))
    head = ["paper", "headline contrast", "paper reports", "95 % CI half-width here", "n"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"\nwhat this design can detect ({scale} scale, simulated model): the 95 % CI half-width of each "
          "headline contrast, median over the models that ran it [range]; an effect smaller than it cannot be "
          "told from zero at this size. n: intervals (models, or model pairs for the EM difference):")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
