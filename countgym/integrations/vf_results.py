"""Read ``vf-eval`` results (verifiers) as countgym episode logs, so ``countgym audit`` takes a
``vf-eval -s`` run folder or its ``results.jsonl`` directly.

Each line of ``results.jsonl`` is one rollout. A rollout of ``vf.load_environment("countgym")``
carries its countgym episode record in the ``countgym_record`` column when the state column is
saved (``vf-eval countgym ... -s -C countgym_record``; the column is written by
``countgym.integrations.verifiers``). ``episode_logs`` writes those records as one countgym log
per results file and returns the log paths in place of the results files. Other log files pass
through. No third-party import: the audit reads vf-eval output without verifiers installed.
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
"""Keys every vf-eval results line has (and no countgym log line does)."""


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
    """Whether ``path`` is a vf-eval ``results.jsonl`` (judged by its first line)."""
    first = _first_object(path)
    return first is not None and RESULTS_KEYS <= first.keys() and "schema_version" not in first


def _model_of(path: Path) -> str | None:
    meta = path.parent / "metadata.json"
    try:
        model = json.loads(meta.read_text(encoding="utf-8")).get("model")
    except (OSError, ValueError, AttributeError):
        return None
    return str(model) if model else None


def iter_vf_records(path: Path) -> Iterator[dict[str, Any]]:
    """The countgym episode records (JSON objects) of one vf-eval results file, in order.

    Raises ``UserError`` when no line carries a record (the state column was not saved)."""
    model = _model_of(path)
    found = rollouts = 0
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
            rec = row.get(RECORD_COLUMN)
            if isinstance(rec, str):
                try:
                    rec = json.loads(rec)
                except ValueError:
                    rec = None
            if not isinstance(rec, dict):
                continue
            if model and not rec.get("model"):
                rec = {**rec, "model": model}
            found += 1
            yield rec
    if rollouts and not found:
        raise UserError(
            f"{path}: these vf-eval results hold no countgym episode records; "
            f"run vf-eval with -s -C {RECORD_COLUMN} (the state column countgym writes)"
        )


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
