"""countgym's direct arms as lmms-eval tasks.

``python -m countgym.integrations.lmms_tasks --out DIR --dotarrays D --countvideo V --countercount C``
writes a folder for ``lmms-eval --include_path DIR``: one task YAML per arm, the hooks
(``utils.py``) and the documents (``data/<task>.jsonl``). Tasks:

=================================  ===========================  ==========================
task                               environment                  arm (prompt)
=================================  ===========================  ==========================
``countgym_dotarrays_direct``      ``countgym/DotArrays-v0``    ``direct``
``countgym_countvideo_direct``     ``countgym/CountVideo-v0``   ``video-direct`` (P1)
``countgym_countercount_mcq``      ``countgym/CounterCount-v0`` ``cf-mcq``
``countgym_countercount_oe``       ``countgym/CounterCount-v0`` ``cf-oe``
=================================  ===========================  ==========================

A document holds the stimulus's media files, the question countgym's environment asks on that
arm, an opaque ``doc_id`` (``evalshape.sample_id``) and where to find the stimulus again. The
model sees only the media and the question. ``process_results`` steps a fresh environment on the
stimulus with the model's reply, so the answer is read by countgym's own extraction, and the
aggregations are the audit's ``em`` and ``mae`` (``evalshape.summary_metrics``).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from countgym.errors import UserError
from countgym.integrations.evalshape import episode_values, sample_id, summary_metrics
from countgym.integrations.selection import limited

TASKS: dict[str, tuple[str, str, str]] = {
    "countgym_dotarrays_direct": ("dotarrays", "countgym/DotArrays-v0", "direct"),
    "countgym_countvideo_direct": ("countvideo", "countgym/CountVideo-v0", "video-direct"),
    "countgym_countercount_mcq": ("countercount", "countgym/CounterCount-v0", "cf-mcq"),
    "countgym_countercount_oe": ("countercount", "countgym/CounterCount-v0", "cf-oe"),
}
"""task name -> (dataset option, environment id, arm)."""

PACKAGE_DIR = Path(__file__).with_name("lmms_eval")


# --- documents ------------------------------------------------------------------------------------
def documents(env_id: str, arm: str, dataset: str, limit: int | None = None) -> list[dict[str, Any]]:
    """One document per stimulus (``limit`` K: the K that ``countgym run --limit K`` runs), in
    ``selection.stratified_order``: media paths, the arm's question, the opaque id, the truth."""
    from countgym.integrations.inspect import env_factory

    env = env_factory(env_id, arm, dataset)()
    ds = env.dataset
    pool = list(getattr(env, "_pool", None) or ds.ids())
    ids = limited([ds[sid] for sid in pool], limit)
    docs = []
    for sid in ids:
        stim = ds[sid]
        obs, _ = env.reset(options={"stimulus_id": sid})
        paths = [ds.image_path(stim)] if stim.image else [ds.media_path(stim, f, "frame") for f in stim.frames or []]
        docs.append({
            "doc_id": sample_id(sid, ds.content_hash(stim)),
            "media": [str(p) for p in paths],
            "system": obs.get("system") or "",
            "question": obs.get("text") or "",
            "n": int(stim.n),
            "countgym_env": env_id,
            "countgym_arm": arm,
            "countgym_dataset": dataset,
            "stimulus_id": sid,
        })  # fmt: skip
    return docs


def prepare(out: str | Path, datasets: dict[str, str], *, limit: int | None = None) -> list[str]:
    """Write the ``--include_path`` folder for the datasets given ({"dotarrays": D, ...});
    returns the task names written."""
    out = Path(out)
    (out / "data").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PACKAGE_DIR / "utils.py", out / "utils.py")
    template = (PACKAGE_DIR / "task.yaml").read_text(encoding="utf-8")
    written = []
    for task, (key, env_id, arm) in TASKS.items():
        if key not in datasets:
            continue
        data = out / "data" / f"{task}.jsonl"
        with data.open("w", encoding="utf-8") as f:
            for doc in documents(env_id, arm, datasets[key], limit):
                f.write(json.dumps(doc) + "\n")
        text = template.replace("countgym_TASK", task).replace("DATA_FILE", json.dumps(str(data.resolve())))
        (out / f"{task}.yaml").write_text(text, encoding="utf-8")
        written.append(task)
    return written


# --- hooks (utils.py) -----------------------------------------------------------------------------
def doc_to_visual(doc: dict[str, Any]) -> list[Any]:
    from PIL import Image

    return [Image.open(p).convert("RGB") for p in doc["media"]]


def doc_to_text(doc: dict[str, Any], kwargs: dict[str, Any] | None = None) -> str:
    kwargs = kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{doc['question']}{kwargs.get('post_prompt', '')}"


def doc_to_messages(doc: dict[str, Any], kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chat form (lmms-eval's chat models): the system prompt if the arm has one, then the
    media and the question as one user turn."""
    content: list[dict[str, Any]] = [{"type": "image", "url": img} for img in doc_to_visual(doc)]
    content.append({"type": "text", "text": doc_to_text(doc, kwargs)})
    msgs: list[dict[str, Any]] = []
    if doc.get("system"):
        msgs.append({"role": "system", "content": [{"type": "text", "text": doc["system"]}]})
    msgs.append({"role": "user", "content": content})
    return msgs


@functools.lru_cache(maxsize=16)
def _env_maker(env_id: str, arm: str, dataset: str) -> Any:
    from countgym.integrations.inspect import env_factory

    return env_factory(env_id, arm, dataset, model="lmms-eval")


def score_reply(doc: dict[str, Any], reply: Any) -> dict[str, float]:
    """The audit values of the episode the reply makes (countgym's extraction reads it)."""
    from countgym.analysis.audit import audit_episodes
    from countgym.integrations.inspect import _episode_of_reply

    env = _env_maker(doc["countgym_env"], doc["countgym_arm"], doc["countgym_dataset"])()
    text = reply if isinstance(reply, str) else str(reply or "")
    rec = _episode_of_reply(env, doc["stimulus_id"], text, 0)
    row = audit_episodes([rec], resolve=lambda _name: env.dataset).iloc[0]
    return episode_values(row.to_dict())


def aggregate(items: Sequence[dict[str, Any]], name: str) -> float:
    return summary_metrics(list(items))[name]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m countgym.integrations.lmms_tasks",
                                 description="Write countgym's lmms-eval tasks for `lmms-eval --include_path DIR`.")
    ap.add_argument("--out", required=True, help="the folder to write (tasks, hooks, documents)")
    ap.add_argument("--dotarrays", help="a DotArrays dataset: battery name (dotarrays:common) or folder")
    ap.add_argument("--countvideo", help="a CountVideoBench dataset folder or battery name")
    ap.add_argument("--countercount", help="a CounterCount dataset folder or battery name")
    ap.add_argument("--limit", type=int, default=None,
                    help="K stimuli of each dataset, stratified by count as `countgym run --limit K` picks them")
    args = ap.parse_args(argv)
    given = {k: v for k in ("dotarrays", "countvideo", "countercount") if (v := getattr(args, k))}
    if not given:
        print("error: give at least one of --dotarrays, --countvideo, --countercount", file=sys.stderr)
        return 2
    try:
        tasks = prepare(args.out, given, limit=args.limit)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(tasks)} to {args.out}: lmms-eval --include_path {args.out} --tasks {','.join(tasks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
