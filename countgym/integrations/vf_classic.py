"""countgym's image tool loop as a `verifiers` 0.3 multi-turn environment (extra ``verifiers``).

The classic API (verifiers 0.3.x); ``countgym.integrations.verifiers`` loads this module when
that release is installed and ``vf_v1`` for 0.4 and later.

    import verifiers as vf
    from openai import AsyncOpenAI

    env = vf.load_environment("countgym", dataset="dotarrays:common", arm="tag", reward="exact")
    results = env.evaluate_sync(client=AsyncOpenAI(base_url=...), model="...", num_examples=8)

``vf.load_environment("countgym", ...)`` and ``vf-eval countgym -a '{...}'`` import the module
named after the environment id, ``countgym``, whose ``load_environment`` is this module's. The
client is verifiers' own (``ClientConfig``, a verifiers ``Client``) or an ``openai.AsyncOpenAI``,
which is wrapped in verifiers' chat-completions client. ``vf-eval -s`` writes a run folder whose
``results.jsonl`` ``countgym audit`` reads directly (``countgym.integrations.vf_results``).

Each dataset row names one stimulus (``info["stimulus_id"]``, ``info["dataset"]``) and carries
the true count as ``answer``; the stimulus itself is never in the prompt text. A rollout runs a
real ``CountImageEnv``: its first observation (the paper's system prompt, the image and the first
message) opens the conversation, every model turn is one ``env.step`` and the environment's reply
(the re-rendered working image and the protocol message) is the next user turn, with the two most
recent images kept (*Give the Model a Finger*, App. C). The episode ends exactly when the
environment's does (answer, budget, invalid replies).

The rubric scores with countgym's built-in rewards (``exact``, ``neg_abs_error``, ``audit``): the
chosen ``reward`` has weight 1, the others are reported with weight 0, alongside the tool calls,
tags and end. The finished ``EpisodeRecord`` (the countgym episode log line) is in
``state["countgym_record"]``, so ``countgym audit`` can read rollouts written out as JSONL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from countgym.errors import MissingExtraError
from countgym.integrations import vf_version

if vf_version.uses_v1():
    raise vf_version.wrong_api(__name__, "0.3.x")
try:
    import verifiers as vf
    from datasets import Dataset as HFDataset
    from verifiers.utils.message_utils import normalize_messages
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
from countgym.integrations.vf_turns import (
    REWARDS,
    as_dict,
    episode_outcome,
    next_turn,
    prune_images,
)
from countgym.stimulus import Dataset

__all__ = ["CountgymEnv", "load_environment", "REWARDS"]


def _dataset(dataset: str | Dataset) -> Dataset:
    if isinstance(dataset, Dataset):
        return dataset
    from countgym.scenes import resolve_dataset

    return resolve_dataset(dataset)


def _rows(ds: Dataset, ids: Sequence[str], name: str, native_tools: Sequence[str] | None) -> HFDataset:
    """One row per stimulus: a short text prompt (the image arrives with the first observation),
    the true count as ``answer`` and the stimulus named in ``info`` (with the native protocol,
    also the row's tool definitions, whose descriptions name its objects)."""
    rows = []
    for sid in ids:
        s = ds[sid]
        info: dict[str, Any] = {"stimulus_id": sid, "dataset": name}
        if native_tools is not None:
            info["tool_defs"] = [t["function"] for t in NT.tool_schema(tuple(native_tools), s.obj, s.obj_sing)]
        rows.append({
            "prompt": [{"role": "user", "content": f"Count the {s.obj} in this image."}],
            "answer": str(s.n),
            "info": info,
        })
    return HFDataset.from_list(rows)


def _reply_of(msg: Any) -> Reply:
    """The last assistant message as the ``Reply`` the environment steps with."""
    m = as_dict(msg)
    content = m.get("content") or ""
    if isinstance(content, list):
        content = "\n".join(str(as_dict(p).get("text", "")) for p in content)
    calls = []
    for c in m.get("tool_calls") or []:
        c = as_dict(c)
        fn = c.get("function") or {"name": c.get("name"), "arguments": c.get("arguments")}
        calls.append({"id": str(c.get("id", "")), "type": "function", "function": fn})
    return Reply(text=str(content), tool_calls=calls or None)


def as_client(client: Any) -> Any:
    """An ``openai.AsyncOpenAI`` wrapped in verifiers' chat-completions client (verifiers 0.3
    accepts only its own ``Client`` or a ``ClientConfig``); anything else unchanged."""
    try:
        from openai import AsyncOpenAI
    except ImportError:  # pragma: no cover - openai comes with verifiers
        return client
    if isinstance(client, AsyncOpenAI):
        from verifiers.clients import OpenAIChatCompletionsClient

        return OpenAIChatCompletionsClient(client)
    return client


class CountgymEnv(vf.MultiTurnEnv):
    """A ``vf.MultiTurnEnv`` whose every rollout is one ``CountImageEnv`` episode."""

    async def generate(self, inputs: Any, client: Any, *args: Any, **kwargs: Any) -> Any:
        """verifiers' ``generate`` (behind ``evaluate``/``evaluate_sync``), also taking an
        ``openai.AsyncOpenAI`` client."""
        return await super().generate(inputs, as_client(client), *args, **kwargs)

    def __init__(
        self,
        dataset: Dataset,
        env_options: dict[str, Any],
        *,
        arm: str,
        ids: Sequence[str],
        name: str,
        seed: int = 0,
        reward: str = "exact",
        **kwargs: Any,
    ) -> None:
        if reward not in REWARDS:
            raise UserError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        self.countgym_dataset = dataset
        self.env_options = dict(env_options)
        self.arm, self.seed = arm, seed
        self._envs: dict[str, CountImageEnv] = {}
        self._repeats: dict[str, int] = {}
        self.dataset_label = name
        rubric = vf.Rubric(
            funcs=[_reward_func(r) for r in REWARDS],
            weights=[1.0 if r == reward else 0.0 for r in REWARDS],
        )
        for metric in ("tool_calls", "tags", "answered"):
            rubric.add_metric(_metric_func(metric))
        # Every budgeted call, the re-issues and the last answer: the env ends first.
        turns = int(self.env_options.get("budget", 6)) * 4 + 8
        native = tuple(self.env_options["tools"]) if self.env_options.get("protocol") == "native" else None
        super().__init__(
            dataset=_rows(dataset, ids, name, native),
            eval_dataset=_rows(dataset, ids, name, native),
            rubric=rubric,
            max_turns=turns,
            **kwargs,
        )

    async def setup_state(self, state: Any) -> Any:
        """Reset a fresh ``CountImageEnv`` on the row's stimulus; its first observation becomes
        the prompt (system prompt, image, first message)."""
        info = state.get("info") or {}
        env = CountImageEnv(self.countgym_dataset, arm=self.arm, model=str(state.get("model", "")),
                            **self.env_options)
        env.dataset_name = self.dataset_label  # the name `countgym audit` resolves the dataset by
        sid = str(info["stimulus_id"])
        # Each rollout of a stimulus is one repeat; the trajectory id keeps episode ids unique
        # when several env workers count repeats on their own.
        repeat = self._repeats.get(sid, 0)
        self._repeats[sid] = repeat + 1
        episode_id = f"verifiers/{self.arm}/{sid}/r{repeat}-{str(state['trajectory_id'])[:8]}"
        obs, _ = env.reset(seed=self.seed, options={"stimulus_id": sid, "repeat": repeat, "episode_id": episode_id})
        self._envs[state["trajectory_id"]] = env
        msgs = [message("system", text_part(obs["system"]))] if obs.get("system") else []
        msgs.append(message("user", image_part(obs["image"]), text_part(obs["text"])))
        state["prompt"] = normalize_messages(to_openai_messages(msgs))
        state["countgym_rewards"] = dict.fromkeys(REWARDS, 0.0)
        state["countgym_stats"] = {"tool_calls": 0, "tags": 0, "answered": 0.0}
        return state

    async def get_prompt_messages(self, state: Any) -> Any:
        return normalize_messages(prune_images(list(await super().get_prompt_messages(state))))

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        """Step the environment with the model's last reply; its observation is the next user
        turn, or the episode ends (``final_env_response``)."""
        env = self._envs[state["trajectory_id"]]
        reply = _reply_of(messages[-1])
        obs, _, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            self._finish(state, env)
            state["final_env_response"] = []
            return []
        # Every native tool call gets its result: the executed one the observation, the rest a note.
        return normalize_messages(next_turn(env, obs, reply))

    @vf.cleanup
    async def release_env(self, state: Any) -> None:
        """Record an episode the rollout stopped early (errors, turn cap) and drop its env."""
        env = self._envs.pop(state.get("trajectory_id", ""), None)
        if env is not None and "countgym_record" not in state:
            self._finish(state, env)

    def _finish(self, state: Any, env: CountImageEnv) -> None:
        outcome = episode_outcome(env)
        assert outcome is not None  # the env was reset in setup_state
        state.update(outcome)


def _reward_func(name: str) -> Callable[..., float]:
    def reward(state: Any, **_: Any) -> float:
        return float((state.get("countgym_rewards") or {}).get(name, 0.0))

    reward.__name__ = name
    return reward


def _metric_func(name: str) -> Callable[..., float]:
    def metric(state: Any, **_: Any) -> float:
        return float((state.get("countgym_stats") or {}).get(name, 0))

    metric.__name__ = name
    return metric


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
    """The verifiers environment for ``arm`` (a tool-loop arm: tag, tag+crop, full, tag-1) on
    ``dataset`` (a battery name such as ``dotarrays:common``, a folder, or a ``Dataset``).
    ``protocol="native"`` sends the tools as tool definitions and reads the model's tool calls
    instead of a JSON line. ``ablations`` are the arm's options (verify, numbered, extra_tools,
    budget, order, ...). ``limit`` K keeps the K stimuli ``countgym run --limit K`` runs; rows
    come in ``selection.stratified_order``, so ``num_examples`` (``vf-eval -n``) K takes the
    same stratified K."""
    if arm not in ARMS or not ARMS[arm].tool_loop:
        loop = ", ".join(n for n, a in ARMS.items() if a.tool_loop)
        raise UserError(f"arm {arm!r} is not a tool-loop arm; use one of {loop}")
    options = arm_env_options(arm, protocol=protocol, **ablations)
    options["tools"] = tuple(options["tools"])
    ds = _dataset(dataset)
    ids = limited(ds.stimuli, limit)
    name = dataset if isinstance(dataset, str) else ds.name
    return CountgymEnv(ds, options, arm=arm, ids=ids, name=name, seed=seed, reward=reward)
