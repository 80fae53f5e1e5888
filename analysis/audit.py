"""Point-level audit of episodes (analysis spec section 2; *Give the Model a Finger*, Section 4
and Appendix E).

Tags are matched to ground-truth points with ``countgym.matching.match_tags`` (the same
Hungarian matcher the environment uses), giving on-target tags, duplicates, phantoms and
omissions, plus the pointing error, cardinality consistency, revision and tau-sensitivity
columns. ``audit_episodes`` turns episode records into one tidy DataFrame row per episode.

Frames: a record's tags are pixels of the image the policy saw (``image_size``); ground-truth
points are pixels of the stored stimulus (``stimulus_size``). Points are scaled into the tag
frame, and tau (with its 15 px floor) and distances are measured there.

Which episodes are audited: those with point ground truth whose arm can point (``arm_points``):
the episode made at least one tag call or ends with tags, or the tool set its log records
offers the model ``tag`` (the enabled ``tools`` include ``tag`` and the first message is not an
answer-only prompt, ``direct`` or ``cot``). The arm's name is never consulted: a ``direct`` arm
logged with ``tools = tag+crop`` still asks for a number only. ``list`` and ``tiles`` point (the
model lists coordinates that become tags; the paper audits them, Section 5.2), video and
CounterCount episodes do not. Auditing an arm that cannot point would score every object as an
omission, which says nothing about pointing: such episodes keep their counting metrics, get
empty point-level columns (on-target ... cardinality consistency, pointing error, the tau
sensitivity) and ``audit_note`` = ``arm cannot point`` (``NO_POINTING``).
"""

from __future__ import annotations

import json
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from countgym.errors import UserError
from countgym.logs import EpisodeRecord
from countgym.matching import match_counts, median_of, tau_for
from countgym.stimulus import Dataset, Stimulus

from .arms import OPTION_COLUMNS, ArmCells, ArmMemo
from .naming import ModelLabels

Resolver = Callable[[str], Dataset]

TAU_SCALES: tuple[float, ...] = (0.75, 1.5)
"""Tau-sensitivity scales of Appendix E (Table 6)."""

AUDIT_LABELS: tuple[str, ...] = ("on_target", "duplicate", "phantom", "omission")

META_KEYS: tuple[str, ...] = ("battery", "subset", "set", "arrangement", "factor", "shape", "color")
"""Stimulus ``meta`` keys copied into the episodes table (NA when a stimulus lacks one)."""

CONTRACT_COLUMNS: tuple[str, ...] = (
    "episode_id", "stimulus_id", "dataset", "arm", "model", "repeat", "n_true", "answer",
    "correct", "abs_error", "n_tags", "on_target", "duplicate", "phantom", "omission", "tau",
    "pointing_error", "cardinality_consistent", "tag_calls", "end",
)  # fmt: skip
"""The columns ``episodes.csv`` promises (``docs/report.md``), in order; extras follow."""


def scale_label(scale: float) -> str:
    """Column suffix for a tau scale: 0.75 -> ``t075``, 1.5 -> ``t150``."""
    return f"t{round(scale * 100):03d}"


def sensitivity_columns(tau_scales: Sequence[float] = TAU_SCALES) -> list[str]:
    """Names of the tau-sensitivity columns, e.g. ``on_target_t075``."""
    return [f"{lab}_{scale_label(s)}" for s in tau_scales for lab in AUDIT_LABELS]


MAX_AUDIT_TAGS = 5000
"""Most final tags of one record the point-level audit matches (the papers' runs end with at
most a few hundred): a record with more is not audited, and says so (``audit_cut``)."""
MAX_MATCH_CELLS = 4_000_000
"""Most tag x object pairs one record's matching may weigh (its distance matrix: 32 MB)."""

GT_CACHE_SIZE = 4096
"""Images whose scaled ground-truth points and tau the audit keeps (least recently used go)."""


def _default_resolve(name: str) -> Dataset:
    # Imported lazily: scenes is a sibling capability and may pull generators in.
    from countgym.scenes import resolve_dataset

    return resolve_dataset(name)


# --- one image ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TagAudit:
    """Audit of one final tag set against one image's ground-truth points.

    ``sensitivity`` maps each tau scale to its (on_target, duplicate, phantom, omission).
    ``pointing_error`` is the median on-target distance in thousandths of the shorter image
    side (NaN without on-target tags or without a known image size).
    """

    on_target: int
    duplicate: int
    phantom: int
    omission: int
    tau: float
    pointing_error: float
    sensitivity: tuple[tuple[float, tuple[int, int, int, int]], ...] = ()


def scale_points(
    points: np.ndarray | Sequence[Sequence[float]],
    stimulus_size: tuple[int, int] | None,
    image_size: tuple[int, int] | None,
) -> np.ndarray:
    """Ground-truth points moved from the stored image's pixels into the seen image's pixels."""
    p = np.asarray(points, dtype=float).reshape(-1, 2)
    if stimulus_size is None or image_size is None or tuple(stimulus_size) == tuple(image_size):
        return p
    sw, sh = stimulus_size
    iw, ih = image_size
    if sw <= 0 or sh <= 0:
        raise ValueError(f"stimulus_size must be positive, got {stimulus_size!r}")
    return p * np.array([iw / sw, ih / sh])


def points_array(points: Sequence[tuple[float, float]]) -> np.ndarray:
    """Validated points (a record's tags, a stimulus's points: pairs of floats) as an (n, 2)
    float array, read by numpy's iterator reader: half the time of ``np.asarray`` on a list of
    pairs, the same values. Points that do not flatten to two numbers each take
    ``np.asarray`` (and its errors)."""
    try:
        flat = np.fromiter(chain.from_iterable(points), dtype=float)
    except (TypeError, ValueError):
        flat = None
    if flat is not None and flat.size == 2 * len(points):
        return flat.reshape(-1, 2)
    return np.asarray(points, dtype=float).reshape(-1, 2)


def audit_tags(
    tags: np.ndarray | Sequence[Sequence[float]],
    points: np.ndarray | Sequence[Sequence[float]],
    *,
    shorter_side: float | None = None,
    tau: float | None = None,
    tau_scales: Sequence[float] = TAU_SCALES,
) -> TagAudit:
    """Match tags to points (same frame) and count on-target/duplicate/phantom/omission.

    ``tau`` defaults to ``tau_for(points)``; the sensitivity rows use ``tau * scale``, which
    equals ``tau_for(points, scale=scale)``.
    """
    if shorter_side is not None and not shorter_side > 0:
        raise ValueError(f"shorter_side must be positive, got {shorter_side!r}")
    p = np.asarray(points, dtype=float).reshape(-1, 2)
    t = np.asarray(tags, dtype=float).reshape(-1, 2)
    base = tau_for(p) if tau is None else float(tau)
    m, *rest = match_counts(t, p, [base, *(base * s for s in tau_scales)])
    if m.distances and shorter_side:
        pe = 1000.0 * median_of(m.distances) / float(shorter_side)
    else:
        pe = float("nan")
    sens = tuple(
        (float(s), (ms.on_target, ms.duplicate, ms.phantom, ms.omission))
        for s, ms in zip(tau_scales, rest, strict=True)
    )
    return TagAudit(m.on_target, m.duplicate, m.phantom, m.omission, float(base), pe, sens)


# --- episodes -----------------------------------------------------------------------------------


def _too_big(n_tags: int, stim: Stimulus) -> str | None:
    """Why matching a record's tags to a stimulus's points is more work than one record may
    take (``MAX_AUDIT_TAGS``, ``MAX_MATCH_CELLS``), or None."""
    n_points = len(stim.points or ())
    if n_tags > MAX_AUDIT_TAGS:
        return f"{n_tags} tags > {MAX_AUDIT_TAGS}"
    if n_tags * n_points > MAX_MATCH_CELLS:
        return f"{n_tags} tags x {n_points} objects > {MAX_MATCH_CELLS}"
    return None


def count_tag_calls(record: EpisodeRecord) -> int:
    """Number of steps whose parsed action is a tag call."""
    return sum(1 for s in record.steps if s.action is not None and s.action.get("tool") == "tag")


ANSWER_ONLY_PROMPTS = frozenset({"direct", "cot"})
"""First-message protocols that ask for a number only: whatever tools are enabled, the model is
never told about them (``envs.image_env``)."""

NO_POINTING = "arm cannot point"
"""``audit_note`` of an episode whose arm cannot place points (``arm_points``)."""
NO_POINTS = "no ground-truth points"
"""``audit_note`` of a pointing episode on a stimulus without point ground truth."""
NO_STIMULUS = "stimulus not found"
"""``audit_note`` of an episode whose stimulus could not be found (or is not the one it saw)."""


def _tools_include_tag(record: EpisodeRecord) -> bool:
    for opts in (record.env_options, record.arm.options):
        tools = opts.get("tools")
        if isinstance(tools, str):
            tools = tools.replace(",", " ").split()
        if isinstance(tools, list | tuple | set | frozenset):
            return "tag" in tools
    return False


def arm_points(record: EpisodeRecord) -> bool:
    """Whether an episode's arm can place points, read from its log: it made a tag call or
    ended with tags, or it ran the image task with ``tag`` among the tools its first message
    offered (enabled ``tools``; ``prompt`` not answer-only). The arm's name is not consulted."""
    if count_tag_calls(record) > 0 or record.tags:
        return True
    if task_of(record) != "image":
        return False
    prompt = record.env_options.get("prompt", record.arm.options.get("prompt"))
    return prompt not in ANSWER_ONLY_PROMPTS and _tools_include_tag(record)


def _meta_value(v: Any) -> Any:
    """Meta values as CSV-friendly scalars (lists joined by ';', dicts as JSON)."""
    if isinstance(v, list | tuple):
        return ";".join(str(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


class _StimulusLookup:
    """Resolves (dataset, stimulus_id) to a Stimulus, one resolve per dataset, warning once."""

    def __init__(self, resolve: Resolver) -> None:
        self._resolve = resolve
        self._datasets: dict[str, Dataset | None] = {}
        self.missing: dict[str, int] = {}

    def get(self, dataset: str, stimulus_id: str) -> Stimulus | None:
        if dataset not in self._datasets:
            try:
                self._datasets[dataset] = self._resolve(dataset)
            except UserError as e:
                warnings.warn(
                    f"dataset {dataset!r} could not be resolved ({e}); its episodes get no audit",
                    stacklevel=3,
                )
                self._datasets[dataset] = None
        ds = self._datasets[dataset]
        if ds is None:
            return None
        try:
            return ds[stimulus_id]
        except UserError:
            self.missing[dataset] = self.missing.get(dataset, 0) + 1
            return None


_BASE_EXTRA_COLUMNS = (
    "seed", "answered", "acc10", "signed_error", "revised", "n_steps", "audited", "image_w",
    "image_h", "extracted_by", "task", "audit_cut", "reasoning_tokens", "simulated", "audit_note",
)  # fmt: skip


def _check_audit_args(tau_scales: Sequence[float], meta_keys: Sequence[str]) -> None:
    for s in tau_scales:
        if not s > 0:
            raise ValueError(f"tau_scales must be positive, got {tuple(tau_scales)!r}")
    taken = {*CONTRACT_COLUMNS, *_BASE_EXTRA_COLUMNS, *OPTION_COLUMNS, *sensitivity_columns(tau_scales)}
    clash = [k for k in meta_keys if k in taken]
    if clash or len(set(meta_keys)) != len(meta_keys):
        raise ValueError(
            f"meta_keys must be distinct and not name built-in columns, got {tuple(meta_keys)!r}"
        )


def task_of(rec: EpisodeRecord) -> str:
    """The task an episode belongs to, as its environment logged it (``image`` for the tool
    loop, which logs no ``task`` option)."""
    return str(rec.env_options.get("task") or "image")


def extracted_by(rec: EpisodeRecord) -> str | None:
    """How a single-step episode's answer was read (``rule``, ``parser``, ``judge``, ``typed``,
    ``none``); logs written before the field existed are derived from the episode's end. Null
    for the image tool loop, whose answers are actions."""
    if rec.extracted_by is not None:
        return rec.extracted_by
    if rec.env_options.get("task") not in ("video", "countercount") or rec.end == "error":
        return None
    return "rule" if rec.answer is not None else "none"


def reasoning_tokens(rec: EpisodeRecord) -> int | None:
    """Hidden reasoning tokens of an episode: the sum over its steps of the provider-reported
    ``usage.reasoning_tokens`` (Finger, Table 21); None when no step reported any."""
    total = None
    for s in rec.steps:
        r = s.usage.reasoning_tokens if s.usage is not None else None
        if r is not None:
            total = r if total is None else total + r
    return total


def audit_episodes(
    records: Iterable[EpisodeRecord],
    *,
    resolve: Resolver | None = None,
    tau_scales: Sequence[float] = TAU_SCALES,
    meta_keys: Sequence[str] = META_KEYS,
    label_arms: bool = True,
    arm_memo: ArmMemo | None = None,
) -> pd.DataFrame:
    """One row per episode: counting metrics plus the point-level audit.

    Columns: ``CONTRACT_COLUMNS`` first, then ``seed, answered, acc10, signed_error, revised,
    n_steps, audited, image_w, image_h, extracted_by, task, reasoning_tokens`` (the steps'
    reported reasoning tokens summed, NA when none was reported), ``simulated`` (a simulated
    model answered), ``audit_note`` (why an episode has no point-level audit: ``NO_POINTING``,
    ``NO_POINTS``, ``NO_STIMULUS`` or the ``audit_cut`` reason; empty when audited), one
    column per option that can vary
    between cells (``arms.OPTION_COLUMNS``: tools as ``tag+grid+answer``, budget, verify, ...,
    empty where an option does not apply), the tau-sensitivity columns and ``meta_keys``.
    ``resolve`` maps a record's ``dataset`` to a ``Dataset`` (default
    ``countgym.scenes.resolve_dataset``); each dataset is resolved once. Duplicate episode ids
    are skipped with a warning. With ``label_arms`` (default) the ``arm`` column tells apart
    variants of one arm name that differ in their options (``tag`` vs ``tag[order=reverse]``,
    see ``arms.arm_labels``); otherwise it is the bare arm name. ``arm_memo``: the memo of
    arm-derived values to use (one shared with a pass over the same records saves its work).
    """
    _check_audit_args(tau_scales, meta_keys)
    lookup = _StimulusLookup(resolve or _default_resolve)
    sens_cols = sensitivity_columns(tau_scales)
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
            *CONTRACT_COLUMNS, *_BASE_EXTRA_COLUMNS, *OPTION_COLUMNS, *sens_cols, *meta_keys,
        )
    }  # fmt: skip
    # Ground truth in the tag frame and its tau, shared by every arm/repeat on one image; a
    # bounded cache, so memory does not grow with the number of images.
    gt_cache: OrderedDict[tuple[str, str, tuple[int, int] | None], tuple[np.ndarray, float]] = (
        OrderedDict()
    )
    mismatched = 0
    # Records stream through once: each becomes one row of plain values (no record is kept).
    # Arm labels depend on every cell of the run, so rows keep a cell number until the end.
    seen: set[str] = set()
    n_dup = 0
    first_dup = ""
    arm_memo = ArmMemo() if arm_memo is None else arm_memo  # values once per distinct option set
    arm_cells = ArmCells(arm_memo)
    cell_of_row: list[int] = []
    # One model name served at two endpoints (api_base) is two models: labelled by host.
    model_cells = ModelLabels()
    model_of_row: list[int] = []
    cut: list[str] = []

    for rec in records:
        if rec.episode_id in seen:
            n_dup += 1
            first_dup = first_dup or rec.episode_id
            continue
        seen.add(rec.episode_id)
        if label_arms:
            cell_of_row.append(arm_cells.add(rec))
        model_of_row.append(model_cells.add(rec.model, rec.arm.options))
        arm = rec.arm.name
        stim = lookup.get(rec.dataset, rec.stimulus_id)
        n_true = rec.truth.n if rec.truth is not None else (stim.n if stim is not None else None)
        if stim is not None and rec.truth is not None and stim.n != rec.truth.n:
            mismatched += 1
            stim = None  # the dataset's stimulus is not the one this episode saw

        tag_calls = count_tag_calls(rec)
        n_tags = len(rec.tags)
        answer = rec.answer
        frame = rec.image_size or rec.stimulus_size
        audit: TagAudit | None = None
        points = tag_calls > 0 or n_tags > 0 or arm_points(rec)
        too_big = _too_big(n_tags, stim) if points and stim is not None and stim.points is not None else None
        if too_big:
            cut.append(rec.episode_id)
        note = (
            NO_POINTING if not points else NO_STIMULUS if stim is None
            else NO_POINTS if stim.points is None else too_big
        )  # fmt: skip
        if points and not too_big and stim is not None and stim.points is not None:
            key = (rec.dataset, rec.stimulus_id, rec.image_size)
            if key in gt_cache:
                gt_cache.move_to_end(key)
            else:
                pts = scale_points(points_array(stim.points), rec.stimulus_size, rec.image_size)
                gt_cache[key] = (pts, tau_for(pts))
                if len(gt_cache) > GT_CACHE_SIZE:
                    gt_cache.popitem(last=False)
            pts, tau = gt_cache[key]
            audit = audit_tags(
                points_array(rec.tags),
                pts,
                shorter_side=float(min(frame)) if frame else None,
                tau=tau,
                tau_scales=tau_scales,
            )

        if n_true is None:
            correct = acc10 = pd.NA
            abs_err = signed = float("nan")
        elif answer is None:
            correct = acc10 = False
            abs_err = signed = float("nan")
        else:
            signed = float(answer - n_true)
            abs_err = abs(signed)
            correct = answer == n_true
            acc10 = abs_err <= n_true // 10

        c = cols
        c["episode_id"].append(rec.episode_id)
        c["stimulus_id"].append(rec.stimulus_id)
        c["dataset"].append(rec.dataset)
        c["arm"].append(arm)
        c["model"].append(rec.model)
        c["repeat"].append(rec.repeat)
        c["n_true"].append(n_true)
        c["answer"].append(answer)
        c["correct"].append(correct)
        c["abs_error"].append(abs_err)
        c["n_tags"].append(n_tags)
        if audit is None:
            for lab in AUDIT_LABELS:
                c[lab].append(pd.NA)
            c["tau"].append(float("nan"))
            c["pointing_error"].append(float("nan"))
            for col in sens_cols:
                c[col].append(pd.NA)
        else:
            c["on_target"].append(audit.on_target)
            c["duplicate"].append(audit.duplicate)
            c["phantom"].append(audit.phantom)
            c["omission"].append(audit.omission)
            c["tau"].append(audit.tau)
            c["pointing_error"].append(audit.pointing_error)
            for scale, counts in audit.sensitivity:
                sfx = scale_label(scale)
                for lab, v in zip(AUDIT_LABELS, counts, strict=True):
                    c[f"{lab}_{sfx}"].append(v)
        # Cardinality consistency only means something once the policy has tagged; no
        # announced count is inconsistent.
        c["cardinality_consistent"].append(answer == n_tags if tag_calls > 0 else pd.NA)
        c["tag_calls"].append(tag_calls)
        c["end"].append(rec.end)
        c["seed"].append(rec.seed)
        c["answered"].append(answer is not None)
        c["acc10"].append(acc10)
        c["signed_error"].append(signed)
        c["revised"].append(tag_calls >= 2 if points else pd.NA)
        c["n_steps"].append(len(rec.steps))
        c["audited"].append(audit is not None)
        c["image_w"].append(frame[0] if frame else None)
        c["image_h"].append(frame[1] if frame else None)
        c["extracted_by"].append(extracted_by(rec))
        c["task"].append(task_of(rec))
        c["audit_cut"].append(too_big)
        c["reasoning_tokens"].append(reasoning_tokens(rec))
        c["simulated"].append(rec.simulated is not None)
        c["audit_note"].append(note)
        for k, v in arm_memo.option_values(rec).items():
            c[k].append(v)
        meta = stim.meta if stim is not None else {}
        for k in meta_keys:
            c[k].append(_meta_value(meta[k]) if k in meta else pd.NA)

    if cut:
        shown = ", ".join(repr(e) for e in cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
        warnings.warn(
            f"{len(cut)} episodes not point-audited, too large to match (over {MAX_AUDIT_TAGS} tags or "
            f"{MAX_MATCH_CELLS:,} tag x object pairs): {shown}; see the audit_cut column of episodes.csv",
            stacklevel=2,
        )
    if n_dup:
        warnings.warn(
            f"{n_dup} duplicate episode ids skipped (first kept), e.g. {first_dup!r}", stacklevel=2
        )
    if label_arms:
        labels = arm_cells.labels()
        cols["arm"] = [labels[c] for c in cell_of_row]
    model_names = model_cells.labels()
    cols["model"] = [model_names[c] for c in model_of_row]
    for ds, n_missing in lookup.missing.items():
        warnings.warn(
            f"{n_missing} stimulus ids not found in dataset {ds!r}; those episodes get no audit",
            stacklevel=2,
        )
    if mismatched:
        warnings.warn(
            f"{mismatched} episodes have truth.n different from their dataset stimulus's n; "
            "those episodes get no audit",
            stacklevel=2,
        )
    return _to_frame(cols, sens_cols, meta_keys)


_DTYPES: dict[str, str] = {
    "repeat": "int64",
    "n_true": "Int64",
    "answer": "Int64",
    "correct": "boolean",
    "abs_error": "float64",
    "n_tags": "int64",
    "on_target": "Int64",
    "duplicate": "Int64",
    "phantom": "Int64",
    "omission": "Int64",
    "tau": "float64",
    "pointing_error": "float64",
    "cardinality_consistent": "boolean",
    "tag_calls": "int64",
    "seed": "int64",
    "answered": "bool",
    "acc10": "boolean",
    "signed_error": "float64",
    "revised": "boolean",
    "n_steps": "int64",
    "audited": "bool",
    "image_w": "Int64",
    "image_h": "Int64",
    "reasoning_tokens": "Int64",
    "simulated": "bool",
}


def _to_frame(
    cols: dict[str, list[Any]], sens_cols: list[str], meta_keys: Sequence[str]
) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for name, values in cols.items():
        if name in _DTYPES:
            data[name] = pd.array(values, dtype=_DTYPES[name])
        elif name in sens_cols:
            data[name] = pd.array(values, dtype="Int64")
        elif name in meta_keys or name in OPTION_COLUMNS:
            data[name] = pd.Series(values, dtype=object).infer_objects()
        else:
            data[name] = values
    return pd.DataFrame(data)
