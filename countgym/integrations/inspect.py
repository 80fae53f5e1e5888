"""Inspect AI adapter (extra ``inspect``): every countgym environment as an Inspect task.

``countgym_task(env_id, arm=...)`` builds a ``Task`` whose samples are the environment's stimuli.
A sample's ``input`` is the environment's first observation as chat messages (the protocol's
system prompt, the stimulus image or video frames and the question), so any Inspect solver can
answer it; its ``id`` is opaque (``evalshape.sample_id``: a stimulus id such as ``n006`` may
carry its answer) and its ``target`` is the true count. The solver drives the environment's own
loop (the protocol text, parser, budget and rendering are countgym's; each model turn is one
``generate`` through Inspect's model API, tool results come back as a user turn carrying the
re-rendered image). The scorer is countgym's audit of the finished episode; a sample answered by
another solver is scored by stepping the environment with its final reply. The task metrics
carry the audit's names and units (``em``, ``mae``, ``on_target_per100`` ...: per 100
ground-truth objects; see ``evalshape``). The episode's ``EpisodeRecord`` is kept in the
sample's store (``countgym_record``), so a run can also be read by ``countgym audit`` after
``episode_records(log)``.

From the command line (Inspect finds the tasks through its entry point):

    inspect eval countgym/countgym -T env=countgym/DotArrays-v0 -T arm=tag --model openai/gpt-4o

With ``--model openai/<name> --model-base-url URL`` Inspect takes an unknown model name for
OpenAI's newest and talks to ``URL/responses``; a chat-only OpenAI-compatible server answers 404
there, and the solver then switches that model to the chat completions endpoint (once, with a
warning). Any other failed model call fails the sample (Inspect records the error).

The context policy of *Give the Model a Finger*, App. C applies to the image tool loop: only the
two most recent images stay in a request (a CountVideoBench question sends all its frames).
Harness-driven arms (``list``, ``tiles``) are not model-only loops and are refused here; run
them with ``countgym run``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from countgym.errors import MissingExtraError, UserError
from countgym.integrations.evalshape import (
    EPISODE_FIELDS,
    episode_values,
    sample_id,
    summary_metrics,
    task_name,
)

RECORD_KEY = "countgym_record"
"""Where the solver leaves the episode record (JSON) in the sample's store."""

SCORER_NAME = "countgym_audit"
HARNESS_ARMS = frozenset({"list", "tiles"})

logger = logging.getLogger(__name__)


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
    check_inspect_arm(env_id, arm)
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
    entry = spec.entry_point
    assert entry is not None, f"{spec.id} has no entry point"
    cls = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
    cls(**{**kwargs, **opts})  # option mistakes surface here, not mid-eval

    def make() -> Any:
        return cls(**{**kwargs, **opts})  # one environment per episode: samples run concurrently

    return make


def check_inspect_arm(env_id: str, arm: str) -> None:
    """Refuse, as ``countgym run`` does, an arm Inspect cannot run on ``env_id``: an unknown name,
    a scripted or plug-in policy (Inspect's model is the policy), a harness-driven arm, or an
    arm of another task."""
    from countgym.agents.registry import SCRIPTED, arm_families, family_of, model_arms
    from countgym.tasks import task_of_env

    family = family_of(arm)
    if family is None:
        if ":" in arm or arm in SCRIPTED:
            raise UserError(f"arm {arm!r} is a policy, not a model arm: under Inspect the model answers; run a "
                            "policy with `countgym run --agent`")
        for fam in arm_families():
            if fam.check_name is not None:
                fam.check_name(arm)  # a family's own message (cf-mcq+bogus)
        names = ", ".join(sorted(a for a in model_arms() if a not in HARNESS_ARMS))
        raise UserError(f"unknown arm {arm!r}: use one of {names}")
    if arm in HARNESS_ARMS:
        raise UserError(f"arm {arm!r} is harness-driven (not a model-only loop); run it with `countgym run`")
    task = task_of_env(env_id)
    if task not in family.tasks:
        raise UserError(f"arm {arm!r} does not run on {env_id} (the {task} task); its arms run on "
                        f"{', '.join(family.tasks)}")


def _init_params(entry_point: Any) -> set[str]:
    import inspect as pyinspect

    import gymnasium as gym

    cls = gym.envs.registration.load_env_creator(entry_point)
    return set(pyinspect.signature(cls).parameters)


def _stimulus_ids(base: Any) -> list[str]:
    return list(getattr(base, "_pool", None) or base.dataset.ids())


def sample_ids(env: str, arm: str | None = None, dataset: Any = None) -> dict[str, str]:
    """The task's sample ids: {opaque sample id: stimulus id}."""
    base = env_factory(env, arm or _default_arm(env), dataset)()
    return {sample_id(s, base.dataset.content_hash(base.dataset[s])): s for s in _stimulus_ids(base)}


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
    ids = list(stimulus_ids) if stimulus_ids is not None else _stimulus_ids(base)
    if limit is not None:
        ids = ids[: max(0, int(limit))]
    samples, stimuli = [], {}
    for sid in ids:
        stim = base.dataset[sid]
        key = sample_id(sid, base.dataset.content_hash(stim))
        stimuli[key] = sid
        samples.append(Sample(id=key, input=_first_messages(base, stim), target=str(stim.n)))
    return Task(
        name=task_name(env, base.dataset_name, arm),
        dataset=MemoryDataset(samples, name=base.dataset_name),
        solver=countgym_solver(env, arm, dataset, stimuli=stimuli),
        scorer=audit_scorer(env, arm, dataset, stimuli=stimuli),
        metadata={"countgym_env": env, "arm": arm},
    )


def _first_messages(env: Any, stim: Any) -> list[Any]:
    """The first observation as Inspect messages: the system prompt (if the protocol has one),
    then the stimulus media (as files, read by Inspect when the sample starts) and the question."""
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ContentImage, ContentText

    obs, _ = env.reset(options={"stimulus_id": stim.id})
    ds = env.dataset
    paths = [ds.image_path(stim)] if stim.image else [ds.media_path(stim, f, "frame") for f in stim.frames or []]
    parts: list[Any] = [ContentImage(image=str(p)) for p in paths]
    if obs.get("text"):
        parts.append(ContentText(text=obs["text"]))
    out: list[Any] = [ChatMessageSystem(content=obs["system"])] if obs.get("system") else []
    return [*out, ChatMessageUser(content=parts)]


def _responses_endpoint_missing(ex: BaseException) -> bool:
    """A 404 from an OpenAI-compatible server that has no Responses API."""
    status = getattr(ex, "status_code", None)
    request = getattr(getattr(ex, "response", None), "request", None)
    path = str(getattr(getattr(request, "url", None), "path", "") or "")
    return status == 404 and path.rstrip("/").endswith("/responses")


def _use_chat_completions(model: Any) -> bool:
    """Switch an OpenAI-provider model from the Responses API to chat completions (for servers
    that have only ``/chat/completions``); False if the model has no such switch. Samples run
    concurrently: one that failed after another already switched just retries."""
    api = getattr(model, "api", None)
    if api is None or not isinstance(getattr(api, "responses_api", None), bool):
        return False
    if api.responses_api:
        api.responses_api = False
        logger.warning(
            "countgym: %s has no /responses endpoint (Inspect uses OpenAI's Responses API for this "
            "model name); using its /chat/completions endpoint. Pass -M responses_api=false to say so "
            "up front.",
            getattr(api, "base_url", None) or "the server",
        )
    return True


async def _generate(state: Any, generate: Any) -> Any:
    from inspect_ai.model import get_model

    try:
        return await generate(state)
    except Exception as ex:  # noqa: BLE001 - re-raised unless it is the missing /responses
        if _responses_endpoint_missing(ex) and _use_chat_completions(get_model()):
            return await generate(state)
        raise


def countgym_solver(env: str, arm: str, dataset: Any = None, *, stimuli: dict[str, str] | None = None) -> Any:
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
    lookup = stimuli if stimuli is not None else sample_ids(env, arm, dataset)

    @solver(name="countgym_loop")
    def _loop() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            model_name = str(get_model())
            env_obj = make()
            sid = lookup.get(str(state.sample_id))
            if sid is None:
                raise UserError(f"sample {state.sample_id!r} is not a stimulus of this countgym task")
            obs, _ = env_obj.reset(options={"stimulus_id": sid, "repeat": max(0, state.epoch - 1)})
            state.messages = []
            if obs.get("system"):
                state.messages.append(ChatMessageSystem(content=obs["system"]))
            done = False
            while not done:
                state.messages.append(ChatMessageUser(content=_content(obs)))
                if "frames" not in obs:  # the tool loop's context policy; a video's frames all stay
                    _keep_recent_images(state.messages)
                state = await _generate(state, generate)
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
            rec = rec.model_copy(update={"model": model_name, "env": env,
                                         "episode_id": f"inspect/{rec.episode_id}"})
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


AUDIT_METRICS: tuple[str, ...] = EPISODE_FIELDS
"""The per-sample score values (one episode each); the task metrics are ``SUMMARY_METRICS``."""


def countgym_metrics() -> Any:
    """The Inspect metric that reports ``SUMMARY_METRICS`` (the audit's names and units)."""
    from inspect_ai.scorer import metric

    @metric(name="countgym")
    def _summary() -> Any:
        def compute(scores: list[Any]) -> dict[str, float]:
            vals = [s.score.value for s in scores if isinstance(s.score.value, dict)]
            return summary_metrics(vals)

        return compute

    return _summary()


def audit_scorer(env: str, arm: str, dataset: Any = None, *, stimuli: dict[str, str] | None = None) -> Any:
    """An Inspect scorer: countgym's audit of the episode the solver left in the store; a
    sample another solver answered is scored by stepping the environment with its final reply."""
    _require_inspect()
    from inspect_ai.scorer import Score, Target, scorer
    from inspect_ai.solver import TaskState

    from countgym.logs import EpisodeRecord

    make = env_factory(env, arm, dataset)
    ds = make().dataset
    lookup = stimuli if stimuli is not None else sample_ids(env, arm, dataset)

    @scorer(metrics=[countgym_metrics()], name=SCORER_NAME)
    def _audit() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            raw = state.store.get(RECORD_KEY)
            if raw is not None:
                rec = EpisodeRecord.model_validate(raw)
            else:
                sid = lookup.get(str(state.sample_id))
                if sid is None:
                    return Score(value={"correct": 0.0}, explanation="not a stimulus of this task")
                rec = _episode_of_reply(make(), sid, state.output.completion or "", max(0, state.epoch - 1))
            return audit_score(rec, ds)

        return score

    return _audit()


def _episode_of_reply(env: Any, sid: str, text: str, repeat: int) -> Any:
    """The episode of one final reply (another solver's): the reply is the first action; a
    multi-turn environment it does not end is ended as a missing answer."""
    env.reset(options={"stimulus_id": sid, "repeat": repeat})
    _, _, terminated, truncated, _ = env.step(text)
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = env.step('{"tool":"answer"}')
    return env.episode_record()


def audit_score(record: Any, ds: Any) -> Any:
    """The audit of one episode as an Inspect ``Score`` (``evalshape.episode_values``)."""
    from inspect_ai.scorer import Score

    from countgym.analysis.audit import audit_episodes

    row = audit_episodes([record], resolve=lambda _name: ds).iloc[0]
    return Score(
        value=episode_values(row.to_dict()),
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
