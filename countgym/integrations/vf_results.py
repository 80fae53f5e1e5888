"""Read ``vf-eval`` results (verifiers) as countgym episode logs, so ``countgym audit`` takes a
``vf-eval`` run folder or its results file directly.

Two formats:

- verifiers 0.4 (``traces.jsonl``): each line is one episode, whose ``traces`` each carry the
  countgym episode record in ``info["countgym_record"]`` (written by
  ``countgym.integrations.vf_v1``); the model is the trace's agent's, else the run's
  ``configs/resolved/eval.json``.
- verifiers 0.3 (``results.jsonl`` of ``vf-eval -s``): each line is one rollout, carrying the
  record in the ``countgym_record`` column when the state column is saved
  (``-C countgym_record``); the model comes from the run's ``metadata.json``.

``episode_logs`` writes those records as one countgym log per results file and returns the log
paths in place of the results files. Other log files pass through. No third-party import: the
audit reads vf-eval output without verifiers installed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from countgym.errors import UserError

RECORD_COLUMN = "countgym_record"
RESULTS_KEYS = frozenset({"example_id", "prompt", "completion"})
"""Keys every vf-eval 0.3 results line has (and no countgym log line does)."""
EPISODE_KEYS = frozenset({"task", "traces"})
"""Keys every vf-eval 0.4 ``traces.jsonl`` line (an episode) has."""


def _first_object(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, ValueError):
        return None
    return None


def is_vf_results(path: Path) -> bool:
    """Whether ``path`` is a vf-eval results file, 0.3's ``results.jsonl`` or 0.4's
    ``traces.jsonl`` (judged by its first line)."""
    first = _first_object(path)
    if first is None or "schema_version" in first:
        return False
    return RESULTS_KEYS <= first.keys() or (EPISODE_KEYS <= first.keys() and isinstance(first["traces"], list))


def _model_of(path: Path) -> str | None:
    """The run's model: 0.3's ``metadata.json`` or 0.4's saved config next to it."""
    configs = path.parent / "configs"
    for meta in (path.parent / "metadata.json", configs / "resolved" / "eval.json", configs / "eval.json"):
        try:
            model = json.loads(meta.read_text(encoding="utf-8")).get("model")
        except (OSError, ValueError, AttributeError):
            continue
        if model:
            return str(model)
    return None


def _as_record(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _row_records(row: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The (record, model) pairs of one results line: a 0.3 rollout's column, or the record of
    each trace of a 0.4 episode with its agent's model."""
    traces = row.get("traces")
    if isinstance(traces, list):
        for t in traces:
            if not isinstance(t, dict):
                continue
            info, agent = t.get("info"), t.get("agent")
            rec = _as_record(info.get(RECORD_COLUMN)) if isinstance(info, dict) else None
            config = agent.get("config") if isinstance(agent, dict) else None
            model = config.get("model") if isinstance(config, dict) else None
            if rec is not None:
                yield rec, str(model) if model else None
        return
    rec = _as_record(row.get(RECORD_COLUMN))
    if rec is not None:
        yield rec, None


def iter_vf_records(path: Path) -> Iterator[dict[str, Any]]:
    """The countgym episode records (JSON objects) of one vf-eval results file, in order.

    Raises ``UserError`` when no line carries a record (0.3: the state column was not saved;
    0.4: the run is not of the countgym taskset)."""
    run_model = _model_of(path)
    found = rollouts = 0
    v1 = False
    taken: dict[tuple[Any, ...], set[int]] = {}
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed run
            if not isinstance(row, dict):
                continue
            rollouts += 1
            v1 = v1 or isinstance(row.get("traces"), list)
            for rec, model in _row_records(row):
                model = model or run_model
                if model and not rec.get("model"):
                    rec = {**rec, "model": model}
                found += 1
                yield _distinct_repeat(rec, taken)
    if rollouts and not found and v1:
        raise UserError(
            f"{path}: these vf-eval traces hold no countgym episode records "
            f"(info[{RECORD_COLUMN!r}]); run the countgym taskset: vf-eval countgym ..."
        )
    if rollouts and not found:
        raise UserError(
            f"{path}: these vf-eval results hold no countgym episode records; "
            f"run vf-eval with -s -C {RECORD_COLUMN} (the state column countgym writes)"
        )


def _distinct_repeat(rec: dict[str, Any], taken: dict[tuple[Any, ...], set[int]]) -> dict[str, Any]:
    """``rec`` with a repeat number no earlier record of its stimulus (and model, arm, dataset)
    in the file has: a rollout re-run by ``vf-eval --resume`` numbers its repeats from 0
    again, and the audit pairs episodes by stimulus and repeat. Unique numbers pass unchanged."""
    arm = rec.get("arm")
    key = (rec.get("dataset"), rec.get("model"), json.dumps(arm, sort_keys=True, default=str),
           rec.get("stimulus_id"))
    used = taken.setdefault(key, set())
    repeat = rec.get("repeat")
    if isinstance(repeat, int) and repeat not in used:
        used.add(repeat)
        return rec
    free = next(k for k in range(len(used) + 1) if k not in used)
    used.add(free)
    return {**rec, "repeat": free}


def episode_logs(logs: Iterable[Path], out_dir: Path) -> list[Path]:
    """``logs`` with every vf-eval results file replaced by a countgym log of its episodes,
    written under ``out_dir`` (named by a hash of the results file's path)."""
    out: list[Path] = []
    for p in logs:
        p = Path(p)
        if not is_vf_results(p):
            out.append(p)
            continue
        key = hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:12]
        target = Path(out_dir) / f"vf-eval-{key}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for rec in iter_vf_records(p):
                f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        tmp.replace(target)
        out.append(target)
    return out
