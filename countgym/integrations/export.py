"""Exports of countgym runs and datasets to formats other tools read.

- ``export_inspect(runs, out)``: one Inspect AI ``.eval`` log per cell (dataset x arm x model),
  samples = episodes with the conversation (replies and environment messages), the audit as the
  sample score and the audit means as the task metrics. ``inspect_ai.log.read_eval_log`` and
  ``inspect view`` open them (extra ``inspect``).
- ``export_parquet(runs, out)``: one flat table per run, one row per episode, with a fixed,
  typed Arrow schema (``EPISODE_SCHEMA``) whatever the arm or task (extra ``photos``/``pyarrow``).
- ``export_hf_dataset(dataset, out)``: a dataset folder (manifest + media) as a Hugging Face
  ``datasets`` folder (``data/train-*.parquet`` with ``Image`` features, the count ``n`` and the
  ground-truth ``points``), loadable with ``datasets.load_dataset(out)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from countgym.errors import MissingExtraError, UserError
from countgym.integrations.evalshape import episode_values, sample_id, summary_metrics, task_name
from countgym.logs import EpisodeRecord, find_logs, read_records

SCORER_NAME = "countgym_audit"
"""The scorer name the native Inspect task uses (``countgym.integrations.inspect``)."""

NOT_LOGGED = "(first observation: the stimulus image and the protocol's first message; not stored in countgym logs)"


def load_run(runs: Sequence[str | Path]) -> list[EpisodeRecord]:
    """Every episode record under the given run folders or log files (a clear error if none)."""
    logs = find_logs(runs)
    if not logs:
        raise UserError(f"no episode logs (*.jsonl) found in {' '.join(str(r) for r in runs)}")
    records = read_records(logs)
    if not records:
        raise UserError(f"the logs in {' '.join(str(r) for r in runs)} hold no episodes")
    return records


def _audit_rows(records: list[EpisodeRecord]) -> dict[str, dict[str, Any]]:
    """Audit row per episode id; datasets that cannot be resolved leave the audit columns empty."""
    import warnings

    from countgym.analysis.audit import audit_episodes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = audit_episodes(records, label_arms=False)
    return {str(r["episode_id"]): r for r in df.to_dict(orient="records")}


# --- Inspect ------------------------------------------------------------------------------------
def export_inspect(runs: Sequence[str | Path], out: str | Path, *, images: bool = False) -> list[Path]:
    """Write one ``.eval`` log per (dataset, arm, model) cell of ``runs`` into ``out``.

    Where the dataset resolves, the image task's first turn (system prompt, first message) is
    rebuilt from the logged options; ``images=True`` also embeds every observation image,
    re-rendered from the log (``countgym replay``), as PNG data URLs (larger files).
    """
    try:
        from inspect_ai.log import write_eval_log
    except ImportError:
        raise MissingExtraError("inspect-ai", "inspect") from None
    records = load_run(runs)
    rows = _audit_rows(records)
    cells: dict[tuple[str, str, str], list[EpisodeRecord]] = {}
    for r in records:
        cells.setdefault((r.dataset, r.arm.name, r.model), []).append(r)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for (dataset, arm, model), recs in sorted(cells.items()):
        log = _eval_log(dataset, arm, model, recs, rows, _resolve_quietly(dataset), images)
        # Inspect's own naming, which `inspect view` parses: {created}_{task}_{id}.eval
        task = _slug(log.eval.task.replace("/", "-"))
        path = out / f"{_slug(log.eval.created)}_{task}_{log.eval.task_id}.eval"
        write_eval_log(log, str(path))
        paths.append(path)
    return paths


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in s)[:80]


def _cell_id(dataset: str, arm: str, model: str, recs: list[EpisodeRecord]) -> str:
    """A stable id for one exported cell (same run, same id), as Inspect's ids: 22 characters."""
    import hashlib

    key = json.dumps([dataset, arm, model, sorted(r.episode_id for r in recs)])
    return hashlib.sha256(key.encode()).hexdigest()[:22]


def _resolve_quietly(name: str) -> Any:
    from countgym.scenes import resolve_dataset

    try:
        return resolve_dataset(name)
    except UserError:
        return None


def _eval_log(
    dataset: str, arm: str, model: str, recs: list[EpisodeRecord], rows: dict[str, dict[str, Any]],
    ds: Any = None, images: bool = False,
) -> Any:
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalSample,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    from countgym import __version__

    samples = [_sample(r, rows.get(r.episode_id, {}), EvalSample, ds, images) for r in recs]
    # As the native task (countgym.integrations.inspect) records its scorer: one score entry,
    # the audit's metrics under the audit's names and units.
    scores = [EvalScore(
        name=SCORER_NAME, scorer=SCORER_NAME, scored_samples=len(samples),
        metrics={k: EvalMetric(name=k, value=v)
                 for k, v in summary_metrics([s.scores[SCORER_NAME].value for s in samples]).items()},
    )]  # fmt: skip
    cell = _cell_id(dataset, arm, model, recs)
    spec = EvalSpec(
        eval_id=cell,
        run_id=cell,
        task_id=cell,
        created=min(r.started_at for r in recs),
        task=task_name(recs[0].env, dataset, arm),
        task_version=0,
        dataset=EvalDataset(name=dataset, samples=len(recs), sample_ids=[s.id for s in samples]),
        model=model,
        config=EvalConfig(),
        packages={"countgym": __version__},
        task_args={"arm": arm, "options": recs[0].arm.options},
        metadata={"countgym_env_options": recs[0].env_options, "template_hash": recs[0].template_hash},
    )
    return EvalLog(
        eval=spec,
        status="success",
        results=EvalResults(
            total_samples=len(recs),
            completed_samples=len(recs),
            scores=scores,
        ),
        stats=EvalStats(started_at=min(r.started_at for r in recs), completed_at=max(r.finished_at for r in recs)),
        samples=samples,
    )


def _first_turn(r: EpisodeRecord, ds: Any) -> tuple[str, str] | None:
    """(system prompt, first message) of an image-task episode, rebuilt from its logged options."""
    opts = dict(r.env_options)
    if ds is None or "prompt" not in opts:
        return None  # not the image tool environment, or no dataset to rebuild from
    opts.pop("reward", None)  # a custom reward callable is not needed for the text
    try:
        from countgym.envs.image_env import CountImageEnv

        env = CountImageEnv(ds, stimulus_ids=[r.stimulus_id], **opts)
        obs, _ = env.reset(options={"stimulus_id": r.stimulus_id})
    except (UserError, ValueError, TypeError, KeyError, OSError):
        return None
    return obs.get("system") or "", obs["text"]


def _observation_image(r: EpisodeRecord, ds: Any, k: int) -> Any:
    """Content part with the observation image after ``k`` steps, or None if it cannot be rebuilt."""
    from inspect_ai.model import ContentImage

    from countgym.agents.backends.base import png_data_url
    from countgym.envs.replay import replay_observation

    try:
        return ContentImage(image=png_data_url(replay_observation(r, ds, k)))
    except (UserError, ValueError, TypeError, KeyError, OSError):
        return None


def _sample(r: EpisodeRecord, row: dict[str, Any], cls: Any, ds: Any = None, images: bool = False) -> Any:
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageUser,
        ContentText,
        ModelOutput,
    )
    from inspect_ai.scorer import Score

    def user(text: str, k: int) -> Any:
        img = _observation_image(r, ds, k) if images and ds is not None else None
        return ChatMessageUser(content=[img, ContentText(text=text)] if img is not None else text)

    first = _first_turn(r, ds)
    messages: list[Any] = []
    if first is not None and first[0]:
        messages.append(ChatMessageSystem(content=first[0]))
    messages.append(user(first[1] if first is not None else NOT_LOGGED, 0))
    for k, s in enumerate(r.steps):
        reply = s.reply if s.reply is not None else json.dumps(s.action)
        messages.append(ChatMessageAssistant(content=reply or ""))
        if s.message:
            messages.append(user(s.message, k + 1))
    value = episode_values(row) if row else {"correct": 0.0}
    last = next((m.text for m in reversed(messages) if isinstance(m, ChatMessageAssistant)), "")
    return cls(
        id=sample_id(r.stimulus_id, r.stimulus_hash),
        epoch=r.repeat + 1,
        input=f"countgym stimulus {r.stimulus_id}",
        target=str(r.truth.n) if r.truth else "",
        messages=messages,
        output=ModelOutput.from_content(r.model, last),
        scores={SCORER_NAME: Score(
            value=value,
            answer=None if r.answer is None else str(r.answer),
            explanation=f"end={r.end}" + (f"; error={r.error}" if r.error else ""),
        )},
        metadata={"episode_id": r.episode_id, "end": r.end, "tags": [list(t) for t in r.tags]},
        store={"countgym_record": r.model_dump(mode="json")},
        error=None,
    )


# --- Parquet ------------------------------------------------------------------------------------
def episode_schema() -> Any:
    """The Arrow schema of ``export_parquet``: the same columns and types for every arm and task."""
    import pyarrow as pa

    i64, f64, s = pa.int64(), pa.float64(), pa.string()
    return pa.schema([
        ("episode_id", s), ("stimulus_id", s), ("stimulus_hash", s), ("dataset", s), ("arm", s),
        ("arm_options", s), ("env_options", s), ("model", s), ("seed", i64), ("repeat", i64),
        ("n_true", i64), ("answer", i64), ("correct", pa.bool_()), ("abs_error", f64), ("end", s),
        ("error", s), ("extracted_by", s), ("n_steps", i64), ("tool_calls", i64), ("n_tags", i64),
        ("tags", pa.list_(pa.list_(f64, 2))), ("image_w", i64), ("image_h", i64),
        ("prompt_tokens", i64), ("completion_tokens", i64), ("reasoning_tokens", i64),
        ("cost", f64), ("latency_s", f64), ("countgym_version", s), ("template_hash", s),
        ("started_at", s), ("finished_at", s),
    ])  # fmt: skip


def _sum(values: Iterable[Any]) -> Any:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def episode_row(r: EpisodeRecord) -> dict[str, Any]:
    """One record as a flat row of ``episode_schema`` (options as JSON text, sums over steps)."""
    n = r.truth.n if r.truth else None
    usage = [s.usage for s in r.steps if s.usage is not None]
    return {
        "episode_id": r.episode_id, "stimulus_id": r.stimulus_id, "stimulus_hash": r.stimulus_hash,
        "dataset": r.dataset, "arm": r.arm.name, "arm_options": json.dumps(r.arm.options, sort_keys=True),
        "env_options": json.dumps(r.env_options, sort_keys=True, default=str), "model": r.model,
        "seed": r.seed, "repeat": r.repeat, "n_true": n, "answer": r.answer,
        "correct": None if n is None else r.answer == n,
        "abs_error": None if n is None or r.answer is None else float(abs(r.answer - n)),
        "end": r.end, "error": r.error, "extracted_by": r.extracted_by, "n_steps": len(r.steps),
        "tool_calls": sum(1 for s in r.steps if s.action and s.action.get("tool") != "answer"),
        "n_tags": len(r.tags), "tags": [[float(x), float(y)] for x, y in r.tags],
        "image_w": r.image_size[0] if r.image_size else None, "image_h": r.image_size[1] if r.image_size else None,
        "prompt_tokens": _sum(u.prompt_tokens for u in usage), "completion_tokens": _sum(u.completion_tokens for u in usage),
        "reasoning_tokens": _sum(u.reasoning_tokens for u in usage), "cost": _sum(s.cost for s in r.steps),
        "latency_s": _sum(s.latency_s for s in r.steps), "countgym_version": r.countgym_version,
        "template_hash": r.template_hash, "started_at": r.started_at, "finished_at": r.finished_at,
    }  # fmt: skip


def export_parquet(runs: Sequence[str | Path], out: str | Path) -> Path:
    """Write every episode of ``runs`` as one Parquet table (``episode_schema``) to ``out``."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtraError("pyarrow", "inspect") from None
    records = load_run(runs)
    table = pa.Table.from_pylist([episode_row(r) for r in records], schema=episode_schema())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return out


# --- Hugging Face datasets ----------------------------------------------------------------------
def _inside(root: Path, rel: str, sid: str) -> Path:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise UserError(f"stimulus {sid!r}: frame path escapes the dataset folder")
    return path


def export_hf_dataset(dataset: Any, out: str | Path) -> Path:
    """Write a countgym dataset (folder or battery name) as a ``datasets``-loadable folder: one
    row per stimulus with ``id``, ``image`` (or ``frames``), ``n``, ``points``, ``obj``,
    ``obj_sing`` and ``meta`` (JSON text)."""
    try:
        import datasets
    except ImportError:
        raise MissingExtraError("datasets", "inspect") from None
    from countgym.envs.common import resolve_dataset_arg

    ds, name = resolve_dataset_arg(dataset)
    stims = list(ds)
    if not stims:
        raise UserError(f"dataset {name!r} holds no stimuli")
    video = any(s.frames for s in stims)
    rows = []
    for s in stims:
        row: dict[str, Any] = {
            "id": s.id, "n": s.n, "obj": s.obj, "obj_sing": s.obj_sing,
            "points": None if s.points is None else [[float(x), float(y)] for x, y in s.points],
            "meta": json.dumps(s.meta, sort_keys=True, default=str),
        }  # fmt: skip
        if video:
            row["frames"] = [str(_inside(ds.root, f, s.id)) for f in (s.frames or [])]
        else:
            row["image"] = str(ds.image_path(s))
        rows.append(row)
    media = {"frames": datasets.Sequence(datasets.Image())} if video else {"image": datasets.Image()}
    features = datasets.Features({
        "id": datasets.Value("string"), "n": datasets.Value("int64"), "obj": datasets.Value("string"),
        "obj_sing": datasets.Value("string"), "points": datasets.Sequence(datasets.Sequence(datasets.Value("float64"))),
        "meta": datasets.Value("string"), **media,
    })  # fmt: skip
    hf = datasets.Dataset.from_list(rows, features=features)
    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    hf.to_parquet(str(out / "data" / "train-00000-of-00001.parquet"), batch_size=64)
    (out / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*.parquet\n---\n"
        f"# {name}\n\nExported by countgym {__import__('countgym').__version__}: {len(rows)} stimuli, "
        "true count `n`, ground-truth centres `points` (pixels of the stored image), `meta` as JSON.\n",
        encoding="utf-8",
    )
    return out
