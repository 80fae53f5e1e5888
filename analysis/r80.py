"""Counting range R80 (*Give the Model a Finger*, Section 4; analysis spec section 3).

R80 is the largest count n up to which a non-increasing (isotonic) fit of exact accuracy
against n stays at or above 80 %. The fit is the weighted least-squares non-increasing
sequence through the per-level accuracies, weighted by the number of images per level (what
``scipy.optimize.isotonic_regression(y, weights=w, increasing=False)`` returns). Because the
fit is non-increasing, the levels at or above the threshold form a prefix, and R80 is its last
level. R80 is *right-censored* when the fit is still at or above the threshold at the largest
tested n, and undefined (NaN) when the fit is below it already at the smallest tested n.

Accuracy per level is the mean over images of each image's exact-match rate (the mean over its
repeats), so an image with two repeats weighs as much as one with a single run. The bootstrap
CI resamples images with replacement within each level (the design fixes the number of images
per level), finds each resampled curve's R80 (``r80_index_direct``: the same answer as refitting,
from cumulative sums in O(L)), and takes percentiles over the tested levels; a
resample with no level above the threshold sits below every level, and a bound that falls
there is reported as NaN.

Which episodes make the curve (*Give the Model a Finger*, Section 4, Section 5.1 and Appendix D):
R80 is fitted on the DotArrays **main battery** only (``meta.set == "main"``). A run over the
full ``dotarrays`` battery (272 images) reports R80 over its 216 main images; the factor sets
(heterogeneous, distractor, dense, small) are never pooled into the curve (``curve_rows``).
Episodes without a ``set`` (custom datasets) form the curve as they are; a group holding only
other sets (a factor set, the XL extension alone, photographs) has no R80. When a model and arm
have both main and XL (``set == "xl"``) episodes, ``counting_range_table`` also fits the
**extended** R80 over n = 1-200 as one curve, with the same image-resampling CI, so an interval
may start at a main-battery level (the paper's [50, 200]). Table 7 (``counting_range_table``)
holds image-task arms only, and its curves never pool a mirrored or rotated copy of the battery
(``dotarrays:ablation+mirror``) with the original: each transform is a curve of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .bootstrap import canonical_values

R80_THRESHOLD = 0.8
MAIN_SET = "main"
"""``meta.set`` of the DotArrays main battery, the only set R80 is fitted on."""
EXTENSION_SET = "xl"
"""``meta.set`` of the extension battery (n = 80-200), fitted together with the main battery."""
_TOL = 1e-9  # pooled means such as (0.9 + 0.7) / 2 must count as reaching 0.8
_CHUNK_ENTRIES = 4_000_000  # bound on the (resamples x levels x levels) work array


@dataclass(frozen=True)
class CountingRange:
    """R80 of one accuracy-vs-n curve, with its bootstrap interval and the fitted curve.

    ``r80`` is NaN when the fit is below the threshold at the smallest level; ``censored`` is
    True when it is at or above the threshold at the largest level (R80 = the largest n).
    """

    r80: float
    ci_low: float
    ci_high: float
    censored: bool
    confidence: float
    n_resamples: int
    levels: tuple[int, ...]
    accuracy: tuple[float, ...]
    fit: tuple[float, ...]
    n_images: tuple[int, ...]
    ci_note: str | None = None
    """Why the interval is empty (not estimable), e.g. one image per count level."""


# --- validation ---------------------------------------------------------------------------------


def _check_range_args(threshold: float, n_resamples: int, confidence: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold!r}")
    if not isinstance(n_resamples, int | np.integer) or n_resamples < 0:
        raise ValueError(f"n_resamples must be a non-negative integer, got {n_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def _check_curve(
    n_true: Sequence[int] | np.ndarray, correct: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(n_true, dtype=float)
    c = np.asarray(correct, dtype=float)
    if n.ndim != 1 or c.shape != n.shape:
        raise ValueError(
            f"n_true and correct must be 1-D of one length, got shapes {n.shape} and {c.shape}"
        )
    if not np.isfinite(n).all() or (n < 0).any() or (n != np.round(n)).any():
        raise ValueError("n_true must hold non-negative integer counts")
    if not np.isfinite(c).all() or (c < 0).any() or (c > 1).any():
        raise ValueError("correct must hold values in [0, 1] (True/False or per-image rates)")
    return n.astype(np.int64), c


# --- the isotonic fit ---------------------------------------------------------------------------


def isotonic_nonincreasing(y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Weighted least-squares non-increasing fit of each row of ``y`` (shape ``(..., L)``).

    Uses the min-max formula ``f_i = min_{j<=i} max_{k>=i} mean_w(y[j..k])``, which equals the
    pool-adjacent-violators solution and vectorises over rows (the bootstrap fits thousands of
    curves at once). ``weights`` (shape ``(L,)``, positive) default to 1.
    """
    y = np.asarray(y, dtype=float)
    single = y.ndim == 1
    y2 = np.atleast_2d(y)
    n_levels = y2.shape[-1]
    w = np.ones(n_levels) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (n_levels,) or not (w > 0).all():
        raise ValueError(f"weights must be {n_levels} positive numbers, got {w!r}")
    if n_levels == 0:
        return y.copy()
    cw = np.concatenate([[0.0], np.cumsum(w)])
    # den[j, k] = sum of w over j..k (only j <= k is used)
    den = cw[None, 1:] - cw[:-1, None]
    upper = np.triu(np.ones((n_levels, n_levels), dtype=bool))
    den = np.where(upper, den, 1.0)
    out = np.empty_like(y2)
    rows = max(1, _CHUNK_ENTRIES // (n_levels * n_levels))
    for start in range(0, len(y2), rows):
        yb = y2[start : start + rows]
        cwy = np.concatenate([np.zeros((len(yb), 1)), np.cumsum(yb * w, axis=1)], axis=1)
        avg = (cwy[:, None, 1:] - cwy[:, :-1, None]) / den  # avg[b, j, k]
        avg = np.where(upper, avg, -np.inf)
        # max over k >= i: reverse cumulative max along k; then min over j <= i.
        m = np.maximum.accumulate(avg[:, :, ::-1], axis=2)[:, :, ::-1]
        m = np.where(upper, m, np.inf)
        out[start : start + rows] = m.min(axis=1)
    return out[0] if single else out


def r80_index(fit: np.ndarray, threshold: float = R80_THRESHOLD) -> np.ndarray:
    """Index of the last level whose (non-increasing) fit is >= threshold, -1 if none; per row."""
    ok = np.asarray(fit) >= threshold - _TOL
    # A non-increasing fit passes on a prefix, so the count of passing levels locates its end.
    return ok.sum(axis=-1) - 1


def r80_index_direct(
    y: np.ndarray, weights: np.ndarray, threshold: float = R80_THRESHOLD
) -> np.ndarray:
    """``r80_index(isotonic_nonincreasing(y, weights))`` without fitting, in O(L) per row.

    With ``S(m) = sum_{l<=m} w_l (y_l - threshold)`` and ``S(-1) = 0``, the min-max formula
    gives ``fit_i >= threshold`` iff ``max_{k>=i} S(k) >= max_{m<i} S(m)``.
    """
    y2 = np.atleast_2d(np.asarray(y, dtype=float))
    w = np.asarray(weights, dtype=float)
    s = np.cumsum((y2 - threshold) * w, axis=1)
    before = np.maximum.accumulate(
        np.concatenate([np.zeros((len(s), 1)), s[:, :-1]], axis=1), axis=1
    )
    after = np.maximum.accumulate(s[:, ::-1], axis=1)[:, ::-1]
    ok = after >= before - _TOL * max(1.0, float(w.sum()))
    idx = np.cumprod(ok, axis=1).sum(axis=1) - 1
    return idx[0] if np.ndim(y) == 1 else idx


# --- one curve ----------------------------------------------------------------------------------


def _image_rates(
    n: np.ndarray, c: np.ndarray, image: np.ndarray | None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sorted levels and, per level, the exact-match rate of each image."""
    frame = pd.DataFrame({"n": n, "c": c, "img": np.arange(len(n)) if image is None else image})
    per_image = frame.groupby(["n", "img"], sort=True)["c"].mean()
    levels = per_image.index.get_level_values(0).to_numpy()
    values = per_image.to_numpy()
    uniq, starts = np.unique(levels, return_index=True)
    return uniq, np.split(values, starts[1:])


def _resampled_means(r: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The means of ``n_resamples`` resamples (with replacement) of ``r``.

    The indices are drawn a block of rows at a time (about ``_CHUNK_ENTRIES`` each) and
    averaged as they come: numpy draws bounded integers below 2**32 from one running 32-bit
    stream whatever the block sizes, so the means are those of the single index matrix one
    call would draw, in bounded memory."""
    r = canonical_values(r)  # the means do not depend on the images' order
    m = len(r)
    out = np.empty(n_resamples)
    rows = max(1, _CHUNK_ENTRIES // m)
    for start in range(0, n_resamples, rows):
        stop = min(n_resamples, start + rows)
        out[start:stop] = r[rng.integers(0, m, size=(stop - start, m))].mean(axis=1)
    return out


def _r80_ci_reason(sizes: np.ndarray, b_idx: np.ndarray, lo: float, hi: float) -> str | None:
    """Why R80's interval is not estimable (the images resampled within each level cannot move
    it), or None."""
    from .bootstrap import MIN_CI_ITEMS, ci_reason

    if int(sizes.max()) < 2:
        return "one image per count level: resampling within levels cannot move R80"
    if int(sizes.sum()) < MIN_CI_ITEMS:
        return ci_reason(None, int(sizes.sum()), unit="images")
    b = np.asarray(b_idx)
    if len(b) and (b == b[0]).all():
        return f"every resample gives the same R80 ({lo:g})" if not np.isnan(lo) else "no resample reaches 80 %"
    return ci_reason(None, int(sizes.sum()), lo, hi, unit="images")


def counting_range(
    n_true: Sequence[int] | np.ndarray,
    correct: Sequence[float] | np.ndarray,
    *,
    image: Sequence[object] | np.ndarray | None = None,
    threshold: float = R80_THRESHOLD,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> CountingRange:
    """R80 of items with true counts ``n_true`` and exact-match outcomes ``correct``.

    ``image`` names each item's image (repeats of one image share it); default: every item is
    its own image. ``n_resamples=0`` skips the bootstrap (NaN interval).
    """
    _check_range_args(threshold, n_resamples, confidence)
    n, c = _check_curve(n_true, correct)
    if image is not None and len(image) != len(n):
        raise ValueError(f"image has {len(image)} items but n_true has {len(n)}")
    if len(n) == 0:
        nan = float("nan")
        return CountingRange(nan, nan, nan, False, confidence, n_resamples, (), (), (), ())
    levels, rates = _image_rates(n, c, None if image is None else np.asarray(image, dtype=object))
    sizes = np.array([len(r) for r in rates])
    acc = np.array([r.mean() for r in rates])
    fit = isotonic_nonincreasing(acc, sizes)
    idx = int(r80_index(fit, threshold))
    r80 = float(levels[idx]) if idx >= 0 else float("nan")
    censored = bool(idx == len(levels) - 1)
    lo = hi = float("nan")
    note: str | None = None
    if n_resamples > 0:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        boot = np.empty((n_resamples, len(levels)))
        for j, r in enumerate(rates):
            boot[:, j] = _resampled_means(r, n_resamples, rng)
        b_idx = r80_index_direct(boot, sizes, threshold)
        alpha = (1.0 - confidence) / 2.0
        q_lo, q_hi = np.quantile(b_idx, [alpha, 1.0 - alpha], method="inverted_cdf")
        lo = float(levels[int(q_lo)]) if q_lo >= 0 else float("nan")
        hi = float(levels[int(q_hi)]) if q_hi >= 0 else float("nan")
        note = _r80_ci_reason(sizes, b_idx, lo, hi)
        if note:
            lo = hi = float("nan")
    return CountingRange(
        r80=r80,
        ci_low=lo,
        ci_high=hi,
        censored=censored,
        confidence=confidence,
        n_resamples=n_resamples,
        levels=tuple(int(v) for v in levels),
        accuracy=tuple(float(v) for v in acc),
        fit=tuple(float(v) for v in fit),
        n_images=tuple(int(v) for v in sizes),
        ci_note=note,
    )


# --- episodes tables ----------------------------------------------------------------------------


def _sets(g: pd.DataFrame) -> np.ndarray:
    """Each episode's ``set`` as a string, or None when unknown."""
    if "set" not in g.columns:
        return np.full(len(g), None, dtype=object)
    return np.array([v if isinstance(v, str) and v else None for v in g["set"].tolist()], dtype=object)


def curve_rows(g: pd.DataFrame) -> pd.DataFrame:
    """The episodes an R80 curve is fitted on: the main battery when the group has it, every
    episode when no episode names its set, and none when it holds only other sets.

    R80 is the counting range of *Give the Model a Finger* (image counting): episodes of the
    single-step tasks (a ``task`` column other than ``image``) are never fitted."""
    if "task" in g.columns:
        g = g[g["task"].fillna("image") == "image"]
    sets = _sets(g)
    main = sets == MAIN_SET
    if main.any():
        return g[main]
    if all(v is None for v in sets):
        return g
    return g.iloc[:0]


def _scored(g: pd.DataFrame) -> pd.DataFrame:
    """Rows with a known true count; exact match as float (unanswered = wrong)."""
    n = g["n_true"].to_numpy(dtype=float, na_value=np.nan)
    answer = g["answer"].to_numpy(dtype=float, na_value=np.nan)
    keep = ~np.isnan(n)
    out = pd.DataFrame(
        {
            "n": n[keep].astype(np.int64),
            "c": (answer[keep] == n[keep]).astype(float),
            "img": (
                g["stimulus_id"].to_numpy(dtype=object)[keep]
                if "stimulus_id" in g
                else np.arange(len(g))[keep]
            ),
        }
    )
    return out


def range_for_group(
    g: pd.DataFrame,
    *,
    threshold: float = R80_THRESHOLD,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> CountingRange:
    """R80 of one group of episodes (columns ``n_true``, ``answer``, optional ``stimulus_id``)."""
    s = _scored(g)
    return counting_range(
        s["n"].to_numpy(),
        s["c"].to_numpy(),
        image=s["img"].to_numpy(),
        threshold=threshold,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
    )


def accuracy_curve_table(
    episodes: pd.DataFrame,
    by: Sequence[str] = ("dataset", "arm", "model"),
    *,
    threshold: float = R80_THRESHOLD,
    main_only: bool = True,
) -> pd.DataFrame:
    """One row per group and level n of its R80 curve (``curve_rows``: the main battery):
    images, exact accuracy (image-weighted) and the isotonic fit (``main_only=False``: every
    episode of the group)."""
    keys = list(by)
    rows = []
    for key, g in episodes.groupby(keys, sort=True, dropna=False):
        vals = key if isinstance(key, tuple) else (key,)
        cr = range_for_group(curve_rows(g) if main_only else g, threshold=threshold, n_resamples=0)
        for lev, acc, fit, k in zip(cr.levels, cr.accuracy, cr.fit, cr.n_images, strict=True):
            rows.append(
                {**dict(zip(keys, vals, strict=True)), "n_true": lev, "n_images": k,
                 "exact_match_score": acc, "isotonic_fit": fit}
            )  # fmt: skip
    return pd.DataFrame(
        rows, columns=[*keys, "n_true", "n_images", "exact_match_score", "isotonic_fit"]
    )


EXTENDED_DATASET = "main+xl"
"""``dataset`` of the extended curves in the accuracy-vs-n table (main and XL as one curve)."""


def dataset_transform(name: Any) -> str | None:
    """The transform a dataset name applies (``dotarrays:ablation+mirror`` -> ``mirror``), or
    None for an untransformed dataset."""
    from countgym.scenes.transforms import split_transform

    return split_transform(str(name))[1]


def curve_name(base: str, transform: str | None) -> str:
    """``main`` / ``main+xl`` for the untransformed battery; ``main (mirror)`` etc. for a
    transformed copy, a curve of its own."""
    return base if transform is None else f"{base} ({transform})"


def _image_rows(episodes: pd.DataFrame) -> pd.DataFrame:
    """The image-task episodes (R80 is a counting range of the image task only)."""
    if "task" not in episodes.columns:
        return episodes
    return episodes[episodes["task"].fillna("image").astype(str) == "image"]


def _extended_curves(episodes: pd.DataFrame) -> list[tuple[tuple[Any, Any], str, pd.DataFrame]]:
    """Per (model, arm) with main-battery image episodes: ``main``, and ``main+xl`` when XL
    episodes exist, over the untransformed battery; mirrored or rotated copies (a dataset name
    ending ``+mirror``, ``+rot180``, ...) get curves of their own (``main (mirror)``)."""
    if episodes.empty or "set" not in episodes.columns:
        return []
    episodes = _image_rows(episodes)
    if episodes.empty:
        return []
    transforms = {d: dataset_transform(d) for d in episodes["dataset"].unique()}
    kind = episodes["dataset"].map(transforms).fillna("")
    out = []
    for key, g in episodes.groupby(["model", "arm"], sort=True, dropna=False):
        gk = kind.loc[g.index]
        for t in sorted(set(gk), key=lambda v: (v != "", v)):
            part = g[gk == t]
            transform = t or None
            gs = _sets(part)
            main = part[gs == MAIN_SET]
            if main.empty:
                continue
            out.append((key, curve_name("main", transform), main))
            xl = part[gs == EXTENSION_SET]
            if not xl.empty:
                out.append((key, curve_name("main+xl", transform), pd.concat([main, xl])))
    return out


def extended_curve_table(episodes: pd.DataFrame, *, threshold: float = R80_THRESHOLD) -> pd.DataFrame:
    """``accuracy_curve_table`` rows of every extended (main + XL) curve, ``dataset`` =
    ``EXTENDED_DATASET``."""
    frames = [
        accuracy_curve_table(
            c.assign(dataset=EXTENDED_DATASET), threshold=threshold, main_only=False
        )
        for _, name, c in _extended_curves(episodes)
        if name == EXTENDED_DATASET
    ]
    cols = ["dataset", "arm", "model", "n_true", "n_images", "exact_match_score", "isotonic_fit"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


RANGE_TABLE_COLUMNS: tuple[str, ...] = (
    "model", "arm", "curve", "datasets", "n_images", "n_levels", "n_min", "n_max", "r80",
    "r80_ci_low", "r80_ci_high", "r80_censored", "ci_note",
)  # fmt: skip


def counting_range_table(
    episodes: pd.DataFrame,
    *,
    threshold: float = R80_THRESHOLD,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """R80 per model and arm across datasets (the paper's Table 7): the ``main`` curve (main
    battery only), and the ``main+xl`` curve (n = 1-200 as one curve) when the model and arm
    also ran the extension battery. Images are pooled by stimulus id, so the same main image
    run under two dataset names counts once (as repeats). Image-task arms only (never video or
    CounterCount); the curves use the untransformed battery, and each transformed copy in the
    folder (``+mirror``, ``+rot180``) has rows of its own (``main (mirror)``)."""
    rows = []
    for (model, arm), name, c in _extended_curves(episodes):
        cr = range_for_group(
            c, threshold=threshold, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
        rows.append(
            {"model": model, "arm": arm, "curve": name,
             "datasets": ";".join(sorted({str(d) for d in c["dataset"]})),
             "n_images": int(sum(cr.n_images)), "n_levels": len(cr.levels),
             "n_min": min(cr.levels) if cr.levels else None,
             "n_max": max(cr.levels) if cr.levels else None, "r80": cr.r80,
             "r80_ci_low": cr.ci_low, "r80_ci_high": cr.ci_high, "r80_censored": cr.censored,
             "ci_note": cr.ci_note}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=list(RANGE_TABLE_COLUMNS))
