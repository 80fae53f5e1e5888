"""Arm identity: which episodes ran the same arm, and a readable label for each arm variant.

A log record names its arm (``arm.name``, e.g. ``tag``) and carries the arm's full option
dictionary (environment options and policy options). Two cells of the same arm that differ in
an option (``order=reverse``, ``perturb=remove``, ``omission=0.3``) are different arms for the
analysis: summarising them together would average an ablation into its baseline.

``arm_labels`` names every arm variant by the ablations it switches on (``order``,
``perturb``, ``verify=False``, ``numbered=False``) and the other options in which it departs
from its arm name's reference variant (fewest ablations, then the most episodes): ``tag``,
``tag[order=reverse]``, ``noisy-pointer[omission=0.3]`` (parts joined by ``;``, then a count
of the reference's options the variant leaves unset). A lone variant without ablations keeps
the bare arm name. ``options_key`` is the exact identity used for pairing
(optionally ignoring some keys, e.g. ``order`` to pair the two order arms).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from countgym.logs import EpisodeRecord

ABLATION_DEFAULTS: dict[str, Any] = {
    "order": None,
    "perturb": None,
    "verify": True,
    "numbered": True,
}
"""Environment ablations and their neutral values; a reference arm variant has them all neutral."""


PROVENANCE_KEYS = frozenset({
    "provider", "api_base", "api_key", "timeout_s", "max_attempts", "max_total_wait_s",
    "backoff_base_s", "backoff_max_s", "input_cost_per_token", "output_cost_per_token",
    "batch_concurrency",
})  # fmt: skip
"""Options that record where and how a model was called, not what the arm did (the model is
its own column); they never make two runs different arms."""


def _neutral(options: Mapping[str, Any], key: str) -> Any:
    """The value of an ablation key that counts as 'off' for a run: single-call arms (``prompt``
    direct, cot, list, tiles) never show the verification prompt, so no verification is their
    default, not an ablation. Read from the log, so analysis needs no agent code."""
    if key == "verify" and options.get("prompt", "tools") != "tools":
        return False
    return ABLATION_DEFAULTS[key]


def _canonical(options: Mapping[str, Any], ignore: Iterable[str] = ()) -> str:
    drop = set(ignore) | PROVENANCE_KEYS
    kept = {k: v for k, v in options.items() if k not in drop}
    return json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))


def options_key(record: EpisodeRecord, ignore: Iterable[str] = ()) -> str:
    """Exact arm identity: arm name plus the canonical JSON of its options minus ``ignore``."""
    return f"{record.arm.name}|{_canonical(record.arm.options, ignore)}"


def _ablations_on(options: Mapping[str, Any]) -> int:
    return sum(1 for k in ABLATION_DEFAULTS if options.get(k, _neutral(options, k)) != _neutral(options, k))


def _format_value(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "+".join(str(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return str(v)
    return str(v)


MAX_SUFFIX = 48
"""Longer variant suffixes are cut (labels are for reading; ``options_key`` is the identity)."""


def _variant_suffix(options: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
    """The ablations switched on (always named), then ``key=value`` for other options that
    differ from the reference, then how many of the reference's options this variant leaves
    unset; joined by ``;``."""
    parts = [
        f"{k}={_format_value(options[k])}"
        for k in ABLATION_DEFAULTS
        if k in options and options[k] != _neutral(options, k)
    ]
    missing = object()
    parts += [
        f"{k}={_format_value(options[k])}"
        for k in sorted(options)
        if k not in ABLATION_DEFAULTS and k not in PROVENANCE_KEYS and options[k] != reference.get(k, missing)
    ]
    dropped = sum(
        1 for k in reference if k not in options and k not in ABLATION_DEFAULTS and k not in PROVENANCE_KEYS
    )
    if dropped:
        parts.append(f"{dropped} option{'s' if dropped > 1 else ''} unset")
    text = ";".join(parts)
    return text if len(text) <= MAX_SUFFIX else text[: MAX_SUFFIX - 1] + "…"


def arm_labels(records: Sequence[EpisodeRecord]) -> list[str]:
    """One label per record: the arm name, plus ``[key=value,...]`` for non-reference variants.

    Labels depend only on the set of option dictionaries seen per arm name, not on record
    order beyond tie-breaking by first appearance.
    """
    # Options are compared within one task only: a policy run on several tasks has one
    # reference per task (the tasks' options are not ablations of each other).
    by_name: dict[str, dict[str, Mapping[str, Any]]] = {}
    counts: Counter[str] = Counter()
    for rec in records:
        key = _canonical(rec.arm.options)
        group = f"{rec.arm.name}|{_task(rec)}"
        by_name.setdefault(group, {}).setdefault(key, rec.arm.options)
        counts[f"{group}|{key}"] += 1

    labels: dict[str, str] = {}
    for group, variants in by_name.items():
        name = group.rpartition("|")[0]
        first_seen = {k: i for i, k in enumerate(variants)}
        ref_key = min(
            variants,
            key=lambda k: (_ablations_on(variants[k]), -counts[f"{group}|{k}"], first_seen[k]),
        )
        reference = variants[ref_key]
        taken: set[str] = set()
        for key, opts in variants.items():
            suffix = _variant_suffix(opts, reference)
            label = f"{name}[{suffix}]" if suffix else name
            while label in taken:
                label += "'"
            taken.add(label)
            labels[f"{group}|{key}"] = label
    return [labels[f"{r.arm.name}|{_task(r)}|{_canonical(r.arm.options)}"] for r in records]


def _task(record: EpisodeRecord) -> str:
    return str(record.env_options.get("task", "image"))
