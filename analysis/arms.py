"""Arm identity: which episodes ran the same arm, and a label that names each arm's cell.

A log record names its arm (``arm.name``, e.g. ``tag``), carries the arm's full option
dictionary (environment options and policy options) and, in logs written since the field
exists, the options of the arm's reference cell (``arm.defaults``): a built-in arm's own
defaults, a plug-in's environment defaults. Two cells of one arm name that differ in an option
(``order=reverse``, ``budget=3``, ``omission=0.3``) are different arms for the analysis:
summarising them together would average an ablation into its baseline.

``arm_labels`` names every cell against its reference, never against the other cells of a
run: plain ``tag`` means exactly the ``tag`` arm's defaults, ``tag[tools=tag+grid+answer;
budget=3]`` is tag with the grid tool at T = 3, whatever else the run holds. A label lists
``key=value`` for every environment option that departs from the reference (in
``OPTION_COLUMNS`` order), then policy options (keys the reference does not have, such as
``thinking`` or ``omission``) whose value is not the same in every cell of the arm name. Tool lists are spelled as the environment
logs them (``tag+grid+answer``). Logs without ``arm.defaults`` fall back on the built-in arms'
documented defaults (``BUILTIN_REFERENCES``) and the environments' defaults (``ENV_DEFAULTS``).
``options_key`` is the exact identity used for pairing (optionally ignoring some keys, e.g.
``order`` to pair the two order arms).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from countgym.logs import EpisodeRecord

OPTION_COLUMNS: tuple[str, ...] = (
    "tools", "budget", "verify", "numbered", "one_point_per_call", "order", "perturb", "prompt",
    "thinking", "question", "cue", "generic", "blur", "blur_radius", "feather", "attention",
    "kind", "max_side", "reward", "tool_cost", "protocol",
)  # fmt: skip
"""Options that can vary between cells, one column each in ``episodes.csv`` and
``summary.csv``: the image tool loop's (tools ... prompt), CounterCount's (question, cue,
generic, blur, blur_radius, feather, thinking, attention, kind), the video task's (prompt,
max_side), the reward, and the image loop's tool protocol (empty: the paper's JSON protocol;
``native``: native tool calls)."""

ABLATION_DEFAULTS: dict[str, Any] = {
    "order": None,
    "perturb": None,
    "verify": True,
    "numbered": True,
}
"""Image-loop ablations and their neutral values."""

TOOL_ORDER: tuple[str, ...] = ("tag", "crop", "erase", "grid", "answer")
"""The environment's tool order (``answer`` is always enabled)."""

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "image": {
        "tools": ["tag", "answer"], "budget": 6, "verify": True, "numbered": True,
        "one_point_per_call": False, "order": None, "perturb": None, "prompt": "tools",
        "reward": "exact", "tool_cost": 0.0,
    },
    "countercount": {"blur_radius": 48.0, "feather": 4.0, "kind": None, "reward": "exact"},
    "video": {"reward": "exact"},
}  # fmt: skip
"""Environment defaults as logged, per task, for logs without ``arm.defaults``. The
CounterCount and video arms name their other options (question, interventions, prompt)."""

BUILTIN_REFERENCES: dict[str, dict[str, Any]] = {
    "direct": {"tools": ["answer"], "budget": 1, "verify": False, "prompt": "direct"},
    "cot": {"tools": ["answer"], "budget": 1, "verify": False, "prompt": "cot"},
    "list": {"tools": ["tag", "answer"], "budget": 2, "verify": False, "prompt": "list"},
    "tag": {"tools": ["tag", "answer"], "budget": 6, "verify": True, "prompt": "tools"},
    "tag+crop": {"tools": ["tag", "crop", "answer"], "budget": 6, "verify": True, "prompt": "tools"},
    "full": {"tools": list(TOOL_ORDER), "budget": 6, "verify": True, "prompt": "tools"},
    "tiles": {"tools": ["tag", "answer"], "budget": 2, "verify": False, "prompt": "tiles"},
    "tag-1": {
        "tools": ["tag", "answer"], "budget": 80, "verify": True, "prompt": "tools",
        "one_point_per_call": True,
    },
}  # fmt: skip
"""The built-in image arms' own options (*Give the Model a Finger*, Section 3 and Appendix B),
over ``ENV_DEFAULTS["image"]``; used only for logs that predate ``arm.defaults`` (a test keeps
this table equal to the arms the runner builds)."""

PROVENANCE_KEYS = frozenset({
    "provider", "api_base", "api_key", "timeout_s", "max_attempts", "max_total_wait_s",
    "backoff_base_s", "backoff_max_s", "input_cost_per_token", "output_cost_per_token",
    "batch_concurrency", "transport",
})  # fmt: skip
"""Options that record where and how a model was called, not what the arm did (the model is
its own column); they never make two runs different arms."""

MAX_SUFFIX = 120
"""Longer variant suffixes are cut (the option columns always carry the full values)."""


def task_name(record: EpisodeRecord) -> str:
    """The task an episode ran (``image`` unless its environment says otherwise)."""
    return str(record.env_options.get("task", record.arm.options.get("task", "image")))


def canonical_tools(tools: Any) -> list[str]:
    """A tool list as the environment enables and logs it (``answer`` always on)."""
    names = tools.replace(",", " ").split() if isinstance(tools, str) else list(tools)
    return [t for t in TOOL_ORDER if t in names or t == "answer"] + [
        t for t in names if t not in TOOL_ORDER
    ]


def _normalised(options: Mapping[str, Any], task: str) -> dict[str, Any]:
    out = dict(options)
    if task == "image" and isinstance(out.get("tools"), list | tuple | str):
        out["tools"] = canonical_tools(out["tools"])
    return out


def reference_options(record: EpisodeRecord) -> dict[str, Any]:
    """The options of the record's reference cell: ``arm.defaults`` when logged, else the
    built-in arm's documented defaults over its environment's defaults."""
    task = task_name(record)
    if record.arm.defaults is not None:
        return _normalised(record.arm.defaults, task)
    ref = dict(ENV_DEFAULTS.get(task, {}))
    if task == "image":
        ref.update(BUILTIN_REFERENCES.get(record.arm.name, {}))
    else:
        # The arm's name fixes the rest (question format, interventions, prompt).
        env = record.env_options or record.arm.options
        ref = {**{k: v for k, v in env.items() if k not in ref}, **ref}
    return _normalised(ref, task)


def _canonical(options: Mapping[str, Any], ignore: Iterable[str] = ()) -> str:
    drop = set(ignore) | PROVENANCE_KEYS
    kept = {k: v for k, v in options.items() if k not in drop}
    return json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))


def options_key(record: EpisodeRecord, ignore: Iterable[str] = ()) -> str:
    """Exact arm identity: arm name plus the canonical JSON of its options minus ``ignore``."""
    return f"{record.arm.name}|{_canonical(record.arm.options, ignore)}"


def format_option(v: Any) -> str:
    """An option value as labels and tables spell it (lists joined by ``+``)."""
    if isinstance(v, list | tuple):
        return "+".join(str(x) for x in v)
    return str(v)


def _option_order(key: str) -> tuple[int, str]:
    return (OPTION_COLUMNS.index(key), key) if key in OPTION_COLUMNS else (len(OPTION_COLUMNS), key)


def _variant_suffix(
    options: Mapping[str, Any], reference: Mapping[str, Any], varying: frozenset[str]
) -> str:
    """``key=value`` for every option departing from the reference, then the policy options
    that vary across the arm name's cells. An option the record does not log is not a
    departure (older logs and hand-made records log fewer keys)."""
    missing = object()
    keys = sorted(
        (
            k for k in options
            if k not in PROVENANCE_KEYS
            and (options[k] != reference.get(k, missing) if k in reference else k in varying)
        ),
        key=_option_order,
    )  # fmt: skip
    parts = [f"{k}={format_option(options[k])}" for k in keys]
    text = ";".join(parts)
    return text if len(text) <= MAX_SUFFIX else text[: MAX_SUFFIX - 1] + "…"


class ArmCells:
    """Arm cells seen so far, one entry per distinct (arm name, options, reference): ``add`` a
    record as it streams past and keep the returned cell number, then ``labels()`` names every
    cell (see ``arm_labels``). Holds one entry per cell, never the records."""

    def __init__(self, memo: ArmMemo | None = None) -> None:
        self._index: dict[str, int] = {}
        self._cells: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self._by_name: dict[str, list[int]] = {}
        self._memo = memo or ArmMemo()

    def __len__(self) -> int:
        return len(self._cells)

    def add(self, rec: EpisodeRecord) -> int:
        """The cell number of ``rec`` (a new number for a cell not seen before)."""
        task, opts, ref, key = self._memo.cell(rec)
        cell = self._index.get(key)
        if cell is None:
            cell = self._index[key] = len(self._cells)
            self._cells.append((rec.arm.name, opts, ref))
            # One group per task: a policy run on several tasks is compared within each task
            # (the tasks' options are not variants of each other).
            self._by_name.setdefault(f"{rec.arm.name}|{task}", []).append(cell)
        return cell

    def labels(self) -> list[str]:
        """One label per cell, in cell-number order."""
        cells = self._cells
        labels = [""] * len(cells)
        for group, members in self._by_name.items():
            name = group.rpartition("|")[0]
            policy_keys = {
                k for c in members for k in cells[c][1] if k not in cells[c][2] and k not in PROVENANCE_KEYS
            }
            varying = frozenset(
                k for k in policy_keys
                if len({json.dumps(cells[c][1][k], default=str, sort_keys=True)
                        if k in cells[c][1] else "<unset>" for c in members}) > 1
            )  # fmt: skip
            taken: set[str] = set()
            for c in members:
                _, opts, ref = cells[c]
                suffix = _variant_suffix(opts, ref, varying)
                label = f"{name}[{suffix}]" if suffix else name
                while label in taken:
                    label += "'"
                taken.add(label)
                labels[c] = label
        return labels


def arm_labels(records: Iterable[EpisodeRecord]) -> list[str]:
    """One label per record: the arm name, plus ``[key=value;...]`` for every option in which
    its cell departs from the arm's reference (see the module docstring).

    A cell's label depends on its own options and reference, and on which policy options vary
    across the cells of its arm name; never on how many episodes each cell has.
    """
    arm_cells = ArmCells()
    numbers = [arm_cells.add(rec) for rec in records]
    labels = arm_cells.labels()
    return [labels[c] for c in numbers]


def option_values(record: EpisodeRecord) -> dict[str, Any]:
    """The ``OPTION_COLUMNS`` values of one record (environment options over arm options;
    lists spelled ``a+b``; None where the option does not apply or is off)."""
    task = task_name(record)
    merged = {**_normalised(record.arm.options, task), **_normalised(record.env_options, task)}
    out: dict[str, Any] = {}
    for k in OPTION_COLUMNS:
        v = merged.get(k)
        out[k] = format_option(v) if isinstance(v, list | tuple) else v
    return out


MEMO_SIZE = 1024
"""Distinct option sets an ``ArmMemo`` remembers before it starts afresh."""


class ArmMemo:
    """The arm-derived values of records (``ArmCells`` key parts, ``option_values``,
    ``options_key``), computed once per distinct option set: a run's records repeat a few
    option sets thousands of times.

    A record's option set is the JSON text of its arm name, arm options, arm defaults and
    environment options (keys in their logged order): two records with the same text get
    the same values, since every value here is a function of those four. Records whose
    options JSON cannot write are computed afresh each time."""

    def __init__(self) -> None:
        self._cells: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {}
        self._values: dict[str, dict[str, Any]] = {}
        self._keys: dict[tuple[str, tuple[str, ...]], str] = {}
        self._last: EpisodeRecord | None = None
        self._last_text: str | None = None

    def _text(self, rec: EpisodeRecord) -> str | None:
        # The same record object asked again (cell, then option values) reuses its text.
        if rec is self._last:
            return self._last_text
        arm = rec.arm
        try:
            text = json.dumps([arm.name, arm.options, arm.defaults, rec.env_options], default=str)
        except (TypeError, ValueError, RecursionError):
            text = None
        self._last, self._last_text = rec, text
        return text

    def _remember(self, table: dict, key: Any, value: Any) -> Any:
        if len(table) >= MEMO_SIZE:
            table.clear()
        table[key] = value
        return value

    def cell(self, rec: EpisodeRecord) -> tuple[str, dict[str, Any], dict[str, Any], str]:
        """(task, normalised options, reference options, cell key) of ``ArmCells.add``."""
        text = self._text(rec)
        hit = self._cells.get(text) if text is not None else None
        if hit is not None:
            return hit
        task = task_name(rec)
        opts = _normalised(rec.arm.options, task)
        ref = reference_options(rec)
        value = (task, opts, ref, f"{rec.arm.name}|{_canonical(opts)}|{_canonical(ref)}")
        return value if text is None else self._remember(self._cells, text, value)

    def option_values(self, rec: EpisodeRecord) -> dict[str, Any]:
        """``option_values(rec)`` (a fresh dict)."""
        text = self._text(rec)
        hit = self._values.get(text) if text is not None else None
        if hit is None:
            hit = option_values(rec)
            if text is not None:
                self._remember(self._values, text, hit)
        return dict(hit)

    def options_key(self, rec: EpisodeRecord, ignore: Iterable[str] = ()) -> str:
        """``options_key(rec, ignore)``."""
        text = self._text(rec)
        if text is None:
            return options_key(rec, ignore)
        k = (text, tuple(ignore))
        hit = self._keys.get(k)
        return hit if hit is not None else self._remember(self._keys, k, options_key(rec, k[1]))
