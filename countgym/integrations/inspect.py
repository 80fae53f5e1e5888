"""Inspect AI adapter (extra ``inspect``): every countgym environment as an Inspect task.

``countgym_task(env_id, arm=...)`` builds a ``Task`` whose samples are the environment's stimuli
(id = stimulus id, target = the true count), whose solver drives the environment's own loop
(the protocol text, parser, budget and rendering are countgym's; each model turn is one
``generate`` through Inspect's model API, tool results come back as a user turn carrying the
re-rendered image), and whose scorer is countgym's audit of the finished episode (exact match,
absolute error, on-target / duplicate / phantom / omission, cardinality consistency). The
episode's ``EpisodeRecord`` is kept in the sample's store (``countgym_record``), so a run can also
be read by ``countgym audit`` after ``episode_records(log)``.

From the command line (Inspect finds the tasks through its entry point):

    inspect eval countgym/countgym -T env=countgym/DotArrays-v0 -T arm=tag --model openai/gpt-4o

The context policy of *Give the Model a Finger*, App. C applies to the image tool loop: only the
two most recent images stay in a request (a CountVideoBench question sends all its frames). Harness-driven arms (``list``, ``tiles``) are not model-only loops and are
refused here; run them with ``countgym run``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from countgym.errors import MissingExtraError, UserError

RECORD_KEY = "countgym_record"
"""Where the solver leaves the episode record (JSON) in the sample's store."""

HARNESS_ARMS = frozenset({"list", "tiles"})


def _require_inspect() -> None:
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise MissingExtraError("inspect-ai", "inspect") from None


def _default_arm(env_id: str) -> str:
    if env_id == "countgym/CountVideo-v0":
        return "video-p1"
    if env_id == "countgym/CounterCount-v0":
        return "cf-mcq"
    return "tag"


def env_factory(env_id: str, arm: str, dataset: Any = None, model: str = "inspect") -> Any:
    """A zero-argument factory of the unwrapped countgym environment for ``env_id`` and ``arm``."""
    import gymnasium as gym

    import countgym.registration as reg
    from countgym.agents.registry import cell_env_options

    reg.register_envs()
    if env_id not in gym.registry or not env_id.startswith("countgym/"):
        ids = ", ".join(sorted(k for k in gym.registry if k.startswith("countgym/")))
        raise UserError(f"unknown environment {env_id!r}: use one of {ids}")
    if arm in HARNESS_ARMS:
        raise UserError(f"arm {arm!r} is harness-driven (not a model-only loop); run it with `countgym run`")
    opts = cell_env_options(arm)
    spec = gym.spec(env_id)
    kwargs = dict(spec.kwargs)
    if dataset is not None:
        kwargs["dataset"] = dataset
    if env_id in reg.IMAGE_ENVS or "arm" in _init_params(spec.entry_point):
        opts.setdefault("arm", arm)
    if "model" in _init_params(spec.entry_point):
        opts.setdefault("model", model)
    from countgym.envs.common import resolve_dataset_arg

    kwargs["dataset"], _ = resolve_dataset_arg(kwargs["dataset"])  # resolved once, shared read-only
    cls = gym.envs.registration.load_env_creator(spec.entry_point)
    cls(**{**kwargs, **opts})  # option mistakes surface here, not mid-eval

    def make() -> Any:
        return cls(**{**kwargs, **opts})  # one environment per episode: samples run concurrently

    return make


def _init_params(entry_point: Any) -> set[str]:
    import inspect as pyinspect

    import gymnasium as gym

    cls = gym.envs.registration.load_env_creator(entry_point)
    return set(pyinspect.signature(cls).parameters)


def countgym_task(
    env: str = "countgym/DotArrays-v0",
    *,
    arm: str | None = None,
    dataset: Any = None,
    stimulus_ids: Sequence[str] | None = None,
    limit: int | None = None,
) -> Any:
    """An Inspect ``Task`` for one countgym environment and arm (default: the env's main arm)."""
    _require_inspect()
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample

    arm = arm or _default_arm(env)
    make = env_factory(env, arm, dataset)
    base = make()
    ids = list(stimulus_ids) if stimulus_ids is not None else list(getattr(base, "_pool", base.dataset.ids()))
    if limit is not None:
        ids = ids[: max(0, int(limit))]
    samples = []
    for sid in ids:
        stim = base.dataset[sid]
        samples.append(Sample(id=sid, input=f"countgym stimulus {sid}", target=str(stim.n),
                              metadata={"stimulus_id": sid, "obj": stim.obj}))
    return Task(
        name=f"countgym/{env.split('/', 1)[1]}/{arm}",
        dataset=MemoryDataset(samples, name=base.dataset_name),
        solver=countgym_solver(env, arm, dataset),
        scorer=audit_scorer(env, arm, dataset),
        metadata={"countgym_env": env, "arm": arm},
    )


def countgym_solver(env: str, arm: str, dataset: Any = None) -> Any:
    """An Inspect solver that runs one countgym episode per sample with the task's model."""
    _require_inspect()
    from inspect_ai.model import (
        ChatMessageSystem,
        ChatMessageUser,
        ContentImage,
        ContentText,
        get_model,
    )
    from inspect_ai.solver import Generate, TaskState, solver

    from countgym.agents.backends.base import png_data_url
    from countgym.envs.actions import Reply
    from countgym.envs.templates import OMITTED_IMAGE
    from countgym.logs import Usage

    make = env_factory(env, arm, dataset)

    @solver(name="countgym_loop")
    def _loop() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            model_name = str(get_model())
            env_obj = make()
            obs, _ = env_obj.reset(options={"stimulus_id": str(state.sample_id)})
            state.messages = []
            if obs.get("system"):
                state.messages.append(ChatMessageSystem(content=obs["system"]))
            done = False
            while not done:
                state.messages.append(ChatMessageUser(content=_content(obs)))
                if "frames" not in obs:  # the tool loop's context policy; a video's frames all stay
                    _keep_recent_images(state.messages)
                state = await generate(state)
                out = state.output
                usage = out.usage
                reply = Reply(
                    text=out.completion or "",
                    usage=Usage(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens)
                    if usage is not None else None,
                    latency_s=out.time,
                    error=out.error,
                )
                obs, _, terminated, truncated, _ = env_obj.step(reply)
                done = terminated or truncated
            rec = env_obj.episode_record()
            rec = rec.model_copy(update={"model": model_name, "episode_id": f"inspect/{rec.episode_id}"})
            state.store.set(RECORD_KEY, rec.model_dump(mode="json"))
            return state

        return solve

    def _content(obs: dict[str, Any]) -> list[Any]:
        frames = obs["frames"] if "frames" in obs else [obs["image"]]
        parts: list[Any] = [ContentImage(image=png_data_url(f)) for f in frames]
        if obs.get("text"):
            parts.append(ContentText(text=obs["text"]))
        return parts

    def _keep_recent_images(messages: list[Any], keep: int = 2) -> None:
        seen = 0
        for m in reversed(messages):
            if isinstance(m.content, str):
                continue
            for i in range(len(m.content) - 1, -1, -1):
                if isinstance(m.content[i], ContentImage):
                    seen += 1
                    if seen > keep:
                        m.content[i] = ContentText(text=OMITTED_IMAGE)

    return _loop()


AUDIT_METRICS: tuple[str, ...] = (
    "correct", "abs_error", "on_target", "duplicate", "phantom", "omission", "cardinality_consistent",
)


def audit_scorer(env: str, arm: str, dataset: Any = None) -> Any:
    """An Inspect scorer: countgym's audit of the episode the solver left in the store."""
    _require_inspect()
    from inspect_ai.scorer import Score, Target, mean, scorer, stderr
    from inspect_ai.solver import TaskState

    from countgym.logs import EpisodeRecord

    metrics: dict[str, Any] = {name: [mean(), stderr()] for name in AUDIT_METRICS}
    ds = env_factory(env, arm, dataset)().dataset

    @scorer(metrics=metrics, name="countgym_audit")
    def _audit() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            raw = state.store.get(RECORD_KEY)
            if raw is None:
                return Score(value={"correct": 0.0}, explanation="no countgym episode ran for this sample")
            rec = EpisodeRecord.model_validate(raw)
            return audit_score(rec, ds)

        return score

    return _audit()


def audit_score(record: Any, ds: Any) -> Any:
    """The audit of one episode as an Inspect ``Score`` (metrics as a dict, NaN -> omitted)."""
    from inspect_ai.scorer import Score

    from countgym.analysis.audit import audit_episodes
    from countgym.integrations.export import _finite

    row = audit_episodes([record], resolve=lambda _name: ds).iloc[0]
    value = {k: v for k in AUDIT_METRICS if (v := _finite(row.get(k))) is not None}
    return Score(
        value=value,
        answer=None if record.answer is None else str(record.answer),
        explanation=f"end={record.end}; answer={record.answer}; truth={row['n_true']}",
        metadata={"episode_id": record.episode_id},
    )


def episode_records(log: Any) -> list[Any]:
    """The countgym episode records in an Inspect ``EvalLog`` (from ``countgym_task`` runs)."""
    from countgym.logs import EpisodeRecord

    out = []
    for s in log.samples or []:
        raw = (s.store or {}).get(RECORD_KEY)
        if raw is not None:
            out.append(EpisodeRecord.model_validate(raw))
    return out


# --- Inspect's registry: `inspect eval countgym/countgym -T env=... -T arm=...` --------------------
def _register() -> None:
    try:
        from inspect_ai import task
    except ImportError:
        return

    @task(name="countgym")
    def countgym(env: str = "countgym/DotArrays-v0", arm: str | None = None, dataset: str | None = None,
                 limit: int | None = None) -> Any:
        """One countgym environment and arm as an Inspect task."""
        return countgym_task(env, arm=arm, dataset=dataset, limit=limit)

    globals()["countgym"] = countgym


_register()
