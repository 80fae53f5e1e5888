"""countgym's image tool loop on verifiers 0.4 (``verifiers.v1``: taskset, harness, env).

verifiers 0.4 loads plugins by module name: ``vf-eval countgym`` (or the taskset id
``countgym`` in an ``EnvConfig``) imports the package ``countgym``, whose ``__all__`` then names
the three classes here: ``CountgymTaskset`` (one task per stimulus), ``CountgymEnv`` (one
rollout is one ``CountImageEnv`` episode) and ``CountgymHarness`` (one model call per turn).

    import verifiers.v1 as vf
    from openai import AsyncOpenAI
    from countgym.integrations.verifiers import evaluate_sync, load_environment

    env = load_environment("dotarrays:common", arm="tag", reward="exact")
    # the same as vf.load_environment(vf.resolve_env_config(
    #     {"taskset": {"id": "countgym", "dataset": "dotarrays:common", "arm": "tag"}}))
    episodes = evaluate_sync(env, client=AsyncOpenAI(base_url=...), model="...", num_examples=8)

The episode: the environment's first observation (the paper's system prompt, the image and the
first message) opens the conversation; each model reply is one ``env.step``; the environment's
reply (the re-rendered working image and the protocol message) is the next user turn, with the
two most recent images kept (*Give the Model a Finger*, App. C); the rollout ends exactly when
the episode does. Rewards are countgym's built-in ``exact``, ``neg_abs_error`` and ``audit``
(the chosen one weighted 1, the others 0), metrics ``tool_calls``, ``tags``, ``answered``. The
finished ``EpisodeRecord`` is in the trace's ``info["countgym_record"]``, which ``vf-eval``
saves in ``traces.jsonl``, so ``countgym audit`` reads the run folder directly.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from pydantic import model_validator

from countgym.errors import MissingExtraError
from countgym.integrations import vf_version

if vf_version.installed() is not None and not vf_version.uses_v1():
    raise vf_version.wrong_api(__name__, ">= 0.4")
try:
    import verifiers.v1 as vf
    from verifiers.v1.configs.task import RewardFunctionConfig
    from verifiers.v1.runtimes import ProgramResult, SubprocessConfig
except ImportError:  # pragma: no cover - exercised by the missing-extra message
    raise MissingExtraError("verifiers", "verifiers") from None

from countgym.agents.arms import ARMS, arm_env_options
from countgym.agents.backends.base import image_part, message, text_part
from countgym.agents.backends.litellm_backend import to_openai_messages
from countgym.envs import native_tools as NT
from countgym.envs.actions import Reply
from countgym.envs.image_env import CountImageEnv
from countgym.errors import UserError
from countgym.integrations.selection import limited
from countgym.integrations.vf_turns import REWARDS, episode_outcome, next_turn, prune_images
from countgym.stimulus import Dataset

__all__ = [
    "CountgymEnv", "CountgymEnvConfig", "CountgymHarness", "CountgymTask", "CountgymTaskData",
    "CountgymTaskset", "CountgymTasksetConfig", "REWARDS", "as_client_config", "evaluate",
    "evaluate_sync", "load_environment",
]

TASKSET_ID = "countgym"
"""The plugin id: verifiers imports the module of that name (the package ``countgym``)."""
METRICS: tuple[str, ...] = ("tool_calls", "tags", "answered")
RECORD_KEY = "countgym_record"
"""Where the episode record lives: ``trace.info[RECORD_KEY]``."""


# --- the taskset ------------------------------------------------------------------------------
class CountgymTaskData(vf.TaskData):
    """One stimulus. ``answer`` is the true count (for scoring and display; never sent to the
    model); ``tool_defs`` are the native protocol's tool definitions."""

    stimulus_id: str
    dataset: str
    answer: str
    tool_defs: list[dict[str, Any]] | None = None


class CountgymTaskConfig(vf.TaskConfig):
    """Run-time task knobs: verifiers' own (judges, plugged rewards)."""


class CountgymTask(vf.Task[CountgymTaskData, vf.State, CountgymTaskConfig]):
    """Scores a finished episode with countgym's rewards; ``CountgymEnv.run`` leaves them in
    ``trace.info`` before the rollout closes. The chosen reward's weight is set per task."""

    @vf.reward
    async def exact(self, trace: Any) -> float:
        return _score(trace, "exact")

    @vf.reward(weight=0.0)
    async def neg_abs_error(self, trace: Any) -> float:
        return _score(trace, "neg_abs_error")

    @vf.reward(weight=0.0)
    async def audit(self, trace: Any) -> float:
        return _score(trace, "audit")

    @vf.metric
    async def tool_calls(self, trace: Any) -> float:
        return _stat(trace, "tool_calls")

    @vf.metric
    async def tags(self, trace: Any) -> float:
        return _stat(trace, "tags")

    @vf.metric
    async def answered(self, trace: Any) -> float:
        return _stat(trace, "answered")


def _score(trace: Any, name: str) -> float:
    return float((trace.info.get("countgym_rewards") or {}).get(name, 0.0))


def _stat(trace: Any, name: str) -> float:
    return float((trace.info.get("countgym_stats") or {}).get(name, 0.0))


class CountgymTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which stimuli, which arm and reward."""

    id: str = TASKSET_ID
    dataset: str = "dotarrays"
    """A battery name (``dotarrays:common``), a dataset folder, or a built battery's path."""
    arm: str = "tag"
    """A tool-loop arm: tag, tag+crop, full, tag-1."""
    reward: str = "exact"
    """The reward with weight 1 (exact, neg_abs_error, audit); the others are reported."""
    limit: int | None = None
    """K stimuli stratified by true count, as ``countgym run --limit K`` picks them; tasks come
    in ``stratified_order``, so ``vf-eval -n K`` takes the same K (see ``integrations.selection``)."""
    seed: int = 0
    protocol: str = "json"
    """``json`` (a JSON line per action) or ``native`` (tool definitions and tool calls)."""
    options: dict[str, Any] = {}
    """The arm's ablations (verify, numbered, extra_tools, budget, order, perturb)."""

    @model_validator(mode="after")
    def _check(self) -> CountgymTasksetConfig:
        """A bad arm, option, reward or dataset name is a validation error (``vf-eval`` shows
        it as one), checked without building or reading the dataset."""
        try:
            check_settings(self.dataset, self.arm, self.reward, self.protocol, self.options)
        except UserError as e:
            raise ValueError(str(e)) from None
        return self


def check_settings(dataset: str, arm: str, reward: str, protocol: str, options: dict[str, Any]) -> None:
    """Raise a one-line ``UserError`` for settings no episode can run with."""
    from countgym.scenes.batteries import check_dataset_name

    if reward not in REWARDS:
        raise UserError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
    env_options(arm, protocol, dict(options))
    check_dataset_name(dataset)


class CountgymTaskset(vf.Taskset[CountgymTask, CountgymTasksetConfig]):
    """One task per stimulus of ``config.dataset``."""

    def __init__(self, config: CountgymTasksetConfig) -> None:
        super().__init__(config)
        self.env_options = env_options(config.arm, config.protocol, dict(config.options))
        self.countgym_dataset = _dataset(config.dataset)

    def load(self) -> list[CountgymTask]:
        cfg, ds = self.config, self.countgym_dataset
        ids = limited(ds.stimuli, cfg.limit)
        native = self.env_options["tools"] if self.env_options.get("protocol") == "native" else None
        weights = {r: RewardFunctionConfig(weight=1.0 if r == cfg.reward else 0.0) for r in REWARDS}
        task_config = cfg.task.model_copy(update={"rewards": {**weights, **cfg.task.rewards}})
        tasks = []
        for sid in ids:
            s = ds[sid]
            tools = ([t["function"] for t in NT.tool_schema(tuple(native), s.obj, s.obj_sing)]
                     if native is not None else None)
            data = CountgymTaskData(
                id=sid, name=sid, prompt=f"Count the {s.obj} in this image.",
                stimulus_id=sid, dataset=cfg.dataset, answer=str(s.n), tool_defs=tools,
            )
            tasks.append(CountgymTask(data, task_config))
        return tasks


def env_options(arm: str, protocol: str, ablations: dict[str, Any]) -> dict[str, Any]:
    """The ``CountImageEnv`` options of a tool-loop arm (a ``UserError`` for any other)."""
    if arm not in ARMS or not ARMS[arm].tool_loop:
        loop = ", ".join(n for n, a in ARMS.items() if a.tool_loop)
        raise UserError(f"arm {arm!r} is not a tool-loop arm; use one of {loop}")
    options = arm_env_options(arm, protocol=protocol, **ablations)
    options["tools"] = tuple(options["tools"])
    return options


def _dataset(dataset: str) -> Dataset:
    from countgym.scenes import resolve_dataset

    return resolve_dataset(dataset)


# --- the harness: one model call per segment, in process ---------------------------------------
class CountgymHarnessConfig(vf.HarnessConfig):
    id: str = TASKSET_ID


class CountgymHarness(vf.Harness[CountgymHarnessConfig]):
    """Sends the conversation so far (the two most recent images kept, earlier ones replaced by
    a note) to the rollout's interception endpoint once and returns: each model reply is one
    segment, so the env steps once per reply. No program runs; every call goes through the
    interception server, which records it on the trace."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: Any, **_: Any) -> ProgramResult:
        from openai import APIError, AsyncOpenAI

        msgs: list[dict[str, Any]] = []
        if data.system_prompt:
            msgs.append({"role": "system", "content": data.system_prompt})
        prompt = data.prompt
        if isinstance(prompt, str):
            msgs.append({"role": "user", "content": prompt})
        elif prompt:
            msgs.extend(_wire(m) for m in prompt)
        body: dict[str, Any] = {"model": ctx.model, "messages": prune_images(msgs)}
        tools = getattr(data, "tool_defs", None)
        if tools:
            body["tools"] = [{"type": "function", "function": t} for t in tools]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            await client.chat.completions.create(**body)
        except APIError as e:
            return ProgramResult(exit_code=1, stdout="", stderr=f"model call failed: {e}")
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")


def _wire(m: Any) -> dict[str, Any]:
    """A verifiers message as an OpenAI chat message (tool calls in the nested wire shape)."""
    d: dict[str, Any] = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
    calls = d.get("tool_calls")
    if calls:
        d["tool_calls"] = [
            {"id": c.get("id", ""), "type": "function",
             "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
            for c in calls
        ]
    d.pop("provider_state", None)
    d.pop("reasoning_content", None)
    return d


# --- the env: one rollout is one CountImageEnv episode -----------------------------------------
class CountgymEnvConfig(vf.EnvConfig):
    """The one seat, ``agent`` (``--env.agent.*``): countgym's harness in the local process
    runtime (the harness runs no program, so no sandbox is needed)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())


class CountgymEnv(vf.Env[CountgymEnvConfig]):
    """Each episode resets a fresh ``CountImageEnv`` on the task's stimulus and relays: the
    observation is the user turn, the model's reply the action, until the episode ends."""

    def __init__(self, config: CountgymEnvConfig) -> None:
        super().__init__(config)
        taskset = self.taskset
        if not isinstance(taskset, CountgymTaskset):
            raise UserError(f"the countgym env runs the countgym taskset, not {config.taskset.id!r}")
        self.countgym_dataset = taskset.countgym_dataset
        self.env_options = taskset.env_options
        self.arm, self.seed = taskset.config.arm, taskset.config.seed
        self._repeats: dict[str, int] = {}

    def max_turns(self) -> int:
        """Every budgeted call, the re-issues and the last answer: the env ends first."""
        return int(self.env_options.get("budget", 6)) * 4 + 8

    async def run(self, task: Any, agents: Any) -> None:
        data = task.data
        agent = agents.agent
        env = CountImageEnv(self.countgym_dataset, arm=self.arm, model=str(agent.ctx.model),
                            **self.env_options)
        env.dataset_name = data.dataset  # the name `countgym audit` resolves the dataset by
        sid = str(data.stimulus_id)
        repeat = self._repeats.get(sid, 0)
        self._repeats[sid] = repeat + 1
        # The task's prompt is left out: the environment's first observation opens the exchange.
        async with agent.interaction(task.with_data(prompt=None)) as chat:
            trace = chat.trace
            episode_id = f"verifiers/{self.arm}/{sid}/r{repeat}-{trace.id[:8]}"
            try:
                obs, _ = env.reset(seed=self.seed, options={"stimulus_id": sid, "repeat": repeat,
                                                            "episode_id": episode_id})
                first = [message("system", text_part(obs["system"]))] if obs.get("system") else []
                first.append(message("user", image_part(obs["image"]), text_part(obs["text"])))
                turn: list[dict[str, Any]] = to_openai_messages(first)
                for _ in range(self.max_turns()):
                    segment = await chat.turn(turn)
                    if segment.terminated:
                        break
                    reply = reply_of(segment.messages)
                    obs, _, terminated, truncated, _ = env.step(reply)
                    if terminated or truncated:
                        break
                    turn = next_turn(env, obs, reply)
            finally:
                if env.state is not None and env.state.end is None:
                    # The rollout stopped first (a failed model call, a limit): the episode
                    # ends as a failed call, so the audit counts it as an error.
                    env.step(Reply(text="", error=rollout_error(trace)))
                finish(trace, env)


def reply_of(messages: Sequence[Any]) -> Reply:
    """The segment's last assistant message as the ``Reply`` the environment steps with."""
    msg = next((m for m in reversed(messages) if getattr(m, "role", None) == "assistant"), None)
    if msg is None:
        return Reply(text="")
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in msg.tool_calls or []
    ]
    return Reply(text=str(msg.content or ""), tool_calls=calls or None)


def rollout_error(trace: Any) -> str:
    """Why a rollout stopped before its episode ended: its last error, else its stop reason."""
    if trace.errors:
        e = trace.errors[-1]
        return f"{e.type}: {' '.join(str(e.message).split())[:300]}"
    return f"the rollout stopped before the episode ended ({trace.stop_condition or 'turn limit'})"


def finish(trace: Any, env: CountImageEnv) -> None:
    """Leave the episode's record, rewards and counts on the trace (scored when it closes)."""
    outcome = episode_outcome(env)
    if outcome is not None:  # None: the reset itself failed
        trace.info.update(outcome)


# --- loading and evaluating from Python ----------------------------------------------------------
def load_environment(
    dataset: str | Dataset = "dotarrays",
    *,
    arm: str = "tag",
    reward: str = "exact",
    limit: int | None = None,
    seed: int = 0,
    protocol: str = "json",
    **ablations: Any,
) -> CountgymEnv:
    """The verifiers 0.4 env for ``arm`` on ``dataset`` (a battery name such as
    ``dotarrays:common``, a folder, or a ``Dataset`` read from a folder): what
    ``vf.load_environment`` builds for the taskset id ``countgym`` with these settings."""
    if isinstance(dataset, Dataset):
        dataset = str(dataset.root)
    check_settings(dataset, arm, reward, protocol, ablations)  # one line, before verifiers' checks
    config = vf.resolve_env_config({"taskset": {
        "id": TASKSET_ID, "dataset": dataset, "arm": arm, "reward": reward, "limit": limit,
        "seed": seed, "protocol": protocol, "options": ablations,
    }})
    env = vf.load_environment(config)
    assert isinstance(env, CountgymEnv)
    return env


def as_client_config(client: Any) -> Any:
    """verifiers' client config for ``client``: an ``openai.AsyncOpenAI`` (its base URL and
    key; the key is handed over in an environment variable of this process, as verifiers
    reads keys), a ``ClientConfig``, or a base URL string."""
    if isinstance(client, str):
        return vf.EvalClientConfig(base_url=client, api_key_var="OPENAI_API_KEY")
    from openai import AsyncOpenAI

    if isinstance(client, AsyncOpenAI):
        key = str(client.api_key or "")
        var = "COUNTGYM_VF_KEY_" + hashlib.sha256(key.encode()).hexdigest()[:12].upper()
        os.environ[var] = key
        return vf.EvalClientConfig(base_url=str(client.base_url), api_key_var=var)
    if isinstance(client, vf.BaseClientConfig):
        return client
    raise UserError(f"client must be an openai.AsyncOpenAI, a verifiers ClientConfig or a base "
                    f"URL, got {type(client).__name__}")


async def evaluate(
    env: CountgymEnv,
    *,
    client: Any,
    model: str,
    num_examples: int | None = None,
    rollouts_per_example: int = 1,
    max_concurrent: int | None = 32,
) -> list[Any]:
    """Run ``rollouts_per_example`` episodes on each of the first ``num_examples`` tasks, as
    ``vf-eval`` does in process, and return verifiers' ``Episode`` objects (one trace each)."""
    ctx = vf.ModelContext(model=model, client=as_client_config(client))
    taskset = env.taskset.take(num_examples) if num_examples else env.taskset
    tasks = list(taskset)
    gate = asyncio.Semaphore(max_concurrent) if max_concurrent else None
    async with env.serving():
        slots = [slot for task in tasks for slot in env.slots(task, rollouts_per_example)]
        return list(await asyncio.gather(*(env.run_slot(slot, ctx, gate) for slot in slots)))


def evaluate_sync(env: CountgymEnv, **kwargs: Any) -> list[Any]:
    """``evaluate`` from synchronous code."""
    return asyncio.run(evaluate(env, **kwargs))
