"""RL rollouts: N episodes of the image tool environment, vectorised, with a batched policy.

``rollout(envs, policy, n_episodes)`` steps a Gymnasium vector env (``SyncVectorEnv``, or
``AsyncVectorEnv(shared_memory=False)``) of ``CountImageEnv`` and returns one ``Trajectory`` per
episode: per-step rewards (the env's reward option: ``exact``, ``neg_abs_error``, ``audit``, a
callable, minus ``tool_cost`` per tool call), the raw reply text, and token ids and
log-probabilities where the policy's backend provides them (``LogProbModel``).

``policy`` is either a zero-argument factory of per-episode policies (the runner's convention:
``reset(first_observation, task)`` then ``act(observation)``) or one stateless policy object
(its ``act_batch(observations)`` is used when present). Per-episode policies that expose
``request(observation)`` / ``record(reply)`` over a shared ``model.complete_batch`` (``ChatPolicy``,
``LogProbPolicy``) are stepped together: one batched generation per step across all live envs.

Unbiased episode sampling: env ``i`` contributes its first ``k_i`` episodes (``sum k_i = N``),
never "the first N to finish", which would favour short episodes. An env past its quota answers
0 without calling the policy until the others are done (its episodes are discarded).

Trainer formats: ``Trajectory.to_records()`` (one dict per step), ``advantages`` (REINFORCE /
GRPO-style group baselines), ``grpo_batch`` (the dict a TRL ``rollout_func`` returns). See
docs/scale-and-rl.md.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from countgym.agents.arms import ChatPolicy
from countgym.agents.backends.base import Message
from countgym.agents.context import KEEP_IMAGES
from countgym.envs.actions import Reply
from countgym.logs import Usage

FILLER_ACTION = '{"tool":"answer","count":0}'
"""What an env past its episode quota is sent: ends its (discarded) episode in one step."""


# --- data ----------------------------------------------------------------------------------------
@dataclass
class Generation:
    """A model reply with what an RL trainer needs: completion token ids and their log-probs."""

    text: str
    """The reply text (any forced ``reply_prefix`` included), as the environment sees it."""
    token_ids: list[int] | None = None
    """Generated token ids (prefix excluded; EOS included when generated)."""
    logprobs: list[float] | None = None
    """Log-probability of each generated token under the sampling distribution."""
    prompt_ids: list[int] | None = None
    """Prompt token ids (padding removed; image placeholder tokens included; prefix included)."""
    prompt: list[Message] | None = None
    """The request messages, to recompute log-probs with gradients (``LogProbModel.sequence_logprobs``)."""
    usage: Usage | None = None
    latency_s: float | None = None
    error: str | None = None


@dataclass
class Step:
    """One environment step of a trajectory."""

    observation: str
    """The message the policy answered (text part of the observation)."""
    reply: str | None
    """The raw reply text (None for typed actions)."""
    action: dict[str, Any] | None
    """The parsed action (None when the reply did not parse)."""
    parse_error: str | None
    reward: float
    """This step's reward: minus ``tool_cost`` for a tool call, plus the episode reward at the end."""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    prompt: list[Message] | None = field(default=None, repr=False)
    """Only with ``rollout(..., keep_prompts=True)``; holds images, never written by ``to_records``."""


@dataclass
class Trajectory:
    """One finished episode."""

    env_index: int
    episode_index: int
    """Order of the episode in the rollout's output."""
    stimulus_id: str | None
    steps: list[Step]
    terminated: bool
    truncated: bool
    answer: int | None
    truth: int | None
    """The true count (from the final info; for rewards and statistics, never for the policy)."""
    end: str | None
    stats: dict[str, Any] = field(default_factory=dict)
    """``EpisodeStats`` of the episode (return, length, time, tool calls, tags, answered, correct)."""
    record: dict[str, Any] | None = field(default=None, repr=False)
    """The env's ``EpisodeRecord`` as a dict (the log format), when the env provides it."""

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.steps]

    @property
    def episode_return(self) -> float:
        """Undiscounted sum of the step rewards."""
        return float(sum(self.rewards))

    @property
    def length(self) -> int:
        return len(self.steps)

    def returns_to_go(self, gamma: float = 1.0) -> list[float]:
        """Discounted return from each step on."""
        out, g = [], 0.0
        for r in reversed(self.rewards):
            g = r + gamma * g
            out.append(g)
        return out[::-1]

    def to_records(self, *, gamma: float = 1.0) -> list[dict[str, Any]]:
        """One JSON-ready dict per step (no images): ids, texts, rewards, returns, episode fields."""
        togo = self.returns_to_go(gamma)
        rows = []
        for k, s in enumerate(self.steps):
            rows.append(
                {
                    "episode": self.episode_index,
                    "env": self.env_index,
                    "stimulus_id": self.stimulus_id,
                    "step": k,
                    "observation": s.observation,
                    "completion": s.reply,
                    "action": s.action,
                    "parse_error": s.parse_error,
                    "prompt_ids": s.prompt_ids,
                    "completion_ids": s.token_ids,
                    "logprobs": s.logprobs,
                    "reward": s.reward,
                    "return_to_go": togo[k],
                    "return": self.episode_return,
                    "last": k == len(self.steps) - 1,
                    "end": self.end,
                    "answer": self.answer,
                    "truth": self.truth,
                }
            )
        return rows


def advantages(
    trajectories: Sequence[Trajectory], *, by: str | None = "stimulus_id", scale: bool = False
) -> list[float]:
    """Per-trajectory advantage: return minus the mean return of its group (``by`` a Trajectory
    attribute such as ``stimulus_id``; None: one group). ``scale=True`` also divides by the
    group's standard deviation (GRPO). Groups of one get 0 (no baseline to compare with)."""
    keys = [getattr(t, by) if by else None for t in trajectories]
    rets = np.array([t.episode_return for t in trajectories], dtype=float)
    out = np.zeros(len(trajectories))
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if len(idx) < 2:
            continue
        g = rets[idx]
        a = g - g.mean()
        if scale:
            a = a / (g.std() + 1e-6)
        out[idx] = a
    return out.tolist()


def grpo_batch(trajectories: Sequence[Trajectory]) -> dict[str, list[Any]]:
    """Rows for TRL's ``GRPOTrainer(rollout_func=...)``: one row per model turn, with the
    episode's return as ``env_reward`` (extra keys reach TRL reward functions as kwargs).

    Needs token ids (``LogProbModel``); see docs/scale-and-rl.md for the caveats with VLMs.
    """
    out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_reward", "episode", "step")}
    for t in trajectories:
        for k, s in enumerate(t.steps):
            if s.token_ids is None or s.prompt_ids is None:
                continue  # typed or scripted actions have no tokens to train on
            out["prompt_ids"].append(s.prompt_ids)
            out["completion_ids"].append(s.token_ids)
            out["logprobs"].append(s.logprobs)
            out["env_reward"].append(t.episode_return)
            out["episode"].append(t.episode_index)
            out["step"].append(k)
    if not out["prompt_ids"]:
        raise ValueError("no step carries token ids: roll out with a LogProbModel-backed policy")
    return out


# --- the rollout ---------------------------------------------------------------------------------
def make_vector_env(env_fns: Sequence[Callable[[], gym.Env]], *, asynchronous: bool = False) -> VectorEnv:
    """A vector env of ``env_fns``, each wrapped (once) with ``EpisodeStats``, ``TaskInfo`` and,
    outermost, ``VectorSafeInfo`` (see ``countgym.envs.wrappers``).

    Asynchronous envs send observations through pipes (``shared_memory=False``): the
    ``VectorSafeInfo`` boxes travel that way anyway, and it keeps no per-sub-env slot reserved.
    """
    fns = [_Wrapped(fn) for fn in env_fns]
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    return gym.vector.SyncVectorEnv(fns)


class _Wrapped:
    """A picklable env factory adding the rollout's wrappers (AsyncVectorEnv pickles it)."""

    def __init__(self, fn: Callable[[], gym.Env]) -> None:
        self.fn = fn

    def __call__(self) -> gym.Env:
        from countgym.envs.wrappers import EpisodeStats, TaskInfo, VectorSafeInfo, has_wrapper

        env = self.fn()
        if has_wrapper(env, VectorSafeInfo):
            return env  # already prepared by the caller (it must be outermost)
        if not has_wrapper(env, EpisodeStats):
            env = EpisodeStats(env)
        if not has_wrapper(env, TaskInfo):
            env = TaskInfo(env)
        return VectorSafeInfo(env)


def image_env_fns(dataset: Any, n_envs: int, **env_options: Any) -> list[Callable[[], gym.Env]]:
    """``n_envs`` factories of ``CountImageEnv(dataset, **env_options)`` (reward, tool_cost,
    tools, budget, prompt, stimulus_ids, ...)."""
    if n_envs < 1:
        raise ValueError(f"n_envs must be >= 1, got {n_envs}")
    return [_ImageEnvFn(dataset, env_options) for _ in range(n_envs)]


class _ImageEnvFn:
    def __init__(self, dataset: Any, options: dict[str, Any]) -> None:
        self.dataset, self.options = dataset, options

    def __call__(self) -> gym.Env:
        from countgym.envs.image_env import CountImageEnv

        return CountImageEnv(self.dataset, **self.options)


def rollout(
    envs: VectorEnv | Sequence[Callable[[], gym.Env]],
    policy: Any,
    n_episodes: int,
    *,
    seed: int | None = 0,
    asynchronous: bool = False,
    keep_prompts: bool = False,
) -> list[Trajectory]:
    """Run ``n_episodes`` episodes on a vector env (or on env factories) and return them.

    Args:
        envs: a Gymnasium vector env (any autoreset mode) whose sub-envs carry ``TaskInfo`` and,
            outermost, ``VectorSafeInfo`` (``make_vector_env`` builds one), or env factories
            (wrapped like that; the vector env is closed afterwards).
        policy: a zero-argument factory of per-episode policies, or one stateless policy object
            (``act_batch(observations)`` used when present; ``reset`` is called at every
            episode start).
        n_episodes: episodes to return.
        seed: seeds the first reset (sub-env ``i`` gets ``seed + i``); later resets continue
            each sub-env's RNG, so the stimulus sequence is reproducible.
        asynchronous: with env factories, use ``AsyncVectorEnv(shared_memory=False)``.
        keep_prompts: keep each step's request messages (images included) for recomputing
            log-probs with gradients.

    Returns trajectories ordered by env, then by episode within the env.
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    own = not isinstance(envs, VectorEnv)
    venv = envs if isinstance(envs, VectorEnv) else make_vector_env(envs, asynchronous=asynchronous)
    try:
        return _Rollout(venv, _Actor(policy), n_episodes, keep_prompts).run(seed)
    finally:
        if own:
            venv.close()


class _Actor:
    """Acts for several episodes at once: batched where the policies allow it."""

    def __init__(self, policy: Any) -> None:
        # A class has ``act`` too but is a factory of policies.
        self.single = not isinstance(policy, type) and (hasattr(policy, "act") or hasattr(policy, "act_batch"))
        if not self.single and not callable(policy):
            raise TypeError("policy must be a policy object (act / act_batch) or a factory of policies")
        self.policy = policy
        self.slots: dict[int, Any] = {}
        self.failed: dict[int, Reply] = {}
        """Episodes whose policy could not be made or reset: their first step records the error."""

    def start(self, i: int, obs: dict[str, Any], task: Any) -> None:
        self.failed.pop(i, None)
        try:
            p = self.policy if self.single else self.policy()
            if hasattr(p, "reset"):
                p.reset(obs, task)
        except Exception as e:  # noqa: BLE001 - recorded like the runner does, not raised
            self.failed[i] = Reply(text="", error=f"policy reset failed: {type(e).__name__}: {e}")
            return
        self.slots[i] = p

    def act(self, idx: list[int], observations: list[dict[str, Any]]) -> list[Any]:
        if any(i in self.failed for i in idx):
            ok = [j for j, i in enumerate(idx) if i not in self.failed]
            acted = self.act([idx[j] for j in ok], [observations[j] for j in ok]) if ok else []
            merged = [self.failed.get(i) for i in idx]
            for j, a in zip(ok, acted, strict=True):
                merged[j] = a
            return merged
        out: list[Any] = [None] * len(idx)
        if self.single and hasattr(self.policy, "act_batch"):
            return _guard(lambda: list(self.policy.act_batch(observations)), len(idx))
        groups: dict[int, list[int]] = {}
        for j, i in enumerate(idx):
            p = self.slots[i]
            model = getattr(p, "model", None)
            if hasattr(p, "request") and hasattr(p, "record") and hasattr(model, "complete_batch"):
                groups.setdefault(id(model), []).append(j)
            else:
                out[j] = _guard(functools.partial(_act_one, p, observations[j]), 1)[0]
        for js in groups.values():
            ps = [self.slots[idx[j]] for j in js]

            def batch(ps: list[Any] = ps, js: list[int] = js) -> list[Any]:
                reqs = [p.request(observations[j]) for p, j in zip(ps, js, strict=True)]
                replies = ps[0].model.complete_batch(reqs)
                return [p.record(r) for p, r in zip(ps, replies, strict=True)]

            for j, a in zip(js, _guard(batch, len(js)), strict=True):
                out[j] = a
        return out


def _act_one(policy: Any, observation: dict[str, Any]) -> list[Any]:
    """One policy's action, as a one-item batch."""
    return [policy.act(observation)]


def _guard(fn: Callable[[], list[Any]], n: int) -> list[Any]:
    """A policy's failure ends its episodes with a recorded error (like the runner), not the rollout."""
    try:
        res = fn()
        if len(res) != n:
            raise RuntimeError(f"policy returned {len(res)} actions for {n} observations")
        return res
    except Exception as e:  # noqa: BLE001
        return [Reply(text="", error=f"policy failed: {type(e).__name__}: {e}")] * n


class _Rollout:
    def __init__(self, venv: VectorEnv, actor: _Actor, n_episodes: int, keep_prompts: bool) -> None:
        self.venv, self.actor, self.keep_prompts = venv, actor, keep_prompts
        n = venv.num_envs
        self.n = n
        self.quota = [n_episodes // n + (1 if i < n_episodes % n else 0) for i in range(n)]
        self.started = [0] * n
        self.recording = [False] * n
        self.obs: list[dict[str, Any]] = [{} for _ in range(n)]
        self.steps: list[list[Step]] = [[] for _ in range(n)]
        self.done: dict[int, list[Trajectory]] = {i: [] for i in range(n)}
        self.mode = AutoresetMode(venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))

    def run(self, seed: int | None) -> list[Trajectory]:
        obs, infos = self.venv.reset(seed=seed)
        for i in range(self.n):
            self._begin(i, _obs_at(obs, i), _info_at(infos, i))
        pending_reset = [False] * self.n  # NEXT_STEP: the coming step resets this env
        while any(len(self.done[i]) < self.quota[i] for i in range(self.n)):
            live = [i for i in range(self.n) if self.recording[i] and not pending_reset[i]]
            actions: list[Any] = [FILLER_ACTION] * self.n
            replies = self.actor.act(live, [self.obs[i] for i in live]) if live else []
            for i, a in zip(live, replies, strict=True):
                actions[i] = a
            env_actions = tuple(_env_action(a) for a in actions)
            obs, rewards, term, trunc, infos = self.venv.step(env_actions)
            to_reset = []
            for i in range(self.n):
                info = _info_at(infos, i)
                if pending_reset[i]:
                    pending_reset[i] = False
                    self._begin(i, _obs_at(obs, i), info)
                    continue
                ended = bool(term[i] or trunc[i])
                step_info = info.get("final_info", info) if ended and self.mode == AutoresetMode.SAME_STEP else info
                if self.recording[i]:
                    self._record(i, actions[i], float(rewards[i]), step_info)
                if not ended:
                    self.obs[i] = _obs_at(obs, i)
                    continue
                if self.recording[i]:
                    self._finish(i, bool(term[i]), bool(trunc[i]), step_info)
                if self.mode == AutoresetMode.NEXT_STEP:
                    pending_reset[i] = True
                elif self.mode == AutoresetMode.SAME_STEP:
                    self._begin(i, _obs_at(obs, i), info)
                else:
                    to_reset.append(i)
            if to_reset:
                mask = np.zeros(self.n, dtype=bool)
                mask[to_reset] = True
                obs2, infos2 = self.venv.reset(options={"reset_mask": mask})
                for i in to_reset:
                    self._begin(i, _obs_at(obs2, i), _info_at(infos2, i))
        out = [t for i in range(self.n) for t in self.done[i]]
        for k, t in enumerate(out):
            t.episode_index = k
        return out

    def _begin(self, i: int, obs: dict[str, Any], info: dict[str, Any]) -> None:
        self.obs[i] = obs
        self.steps[i] = []
        self.recording[i] = self.started[i] < self.quota[i]
        self.started[i] += 1
        if not self.recording[i]:
            return
        if "task" not in info:
            raise ValueError(
                "reset info has no 'task': wrap each sub-env with countgym.envs.wrappers.TaskInfo "
                "(rollout does this when given env factories)"
            )
        self.actor.start(i, obs, info["task"])

    def _record(self, i: int, action: Any, reward: float, info: dict[str, Any]) -> None:
        gen = action if isinstance(action, Generation) else None
        if isinstance(action, str):
            reply: str | None = action
        else:
            reply = getattr(action, "text", None)
        self.steps[i].append(
            Step(
                observation=str(self.obs[i].get("text", "")),
                reply=reply,
                action=info.get("action"),
                parse_error=info.get("parse_error"),
                reward=reward,
                token_ids=gen.token_ids if gen else None,
                logprobs=gen.logprobs if gen else None,
                prompt_ids=gen.prompt_ids if gen else None,
                prompt=gen.prompt if gen and self.keep_prompts else None,
            )
        )

    def _finish(self, i: int, terminated: bool, truncated: bool, info: dict[str, Any]) -> None:
        from countgym.envs.wrappers import RECORD_KEY, STATS_KEY

        truth = info.get("truth") or {}
        self.done[i].append(
            Trajectory(
                env_index=i,
                episode_index=-1,
                stimulus_id=info.get("stimulus_id"),
                steps=self.steps[i],
                terminated=terminated,
                truncated=truncated,
                answer=info.get("answer"),
                truth=truth.get("n") if isinstance(truth, dict) else None,
                end=info.get("end"),
                stats=dict(info.get(STATS_KEY) or {}),
                record=_record_dict(info.get(RECORD_KEY)),
            )
        )
        self.steps[i] = []


def _env_action(a: Any) -> Any:
    """What the env is stepped with: a ``Generation`` becomes a ``Reply`` (text plus accounting)."""
    if isinstance(a, Generation):
        return Reply(text=a.text, usage=a.usage, latency_s=a.latency_s, error=a.error)
    return a


def _obs_at(obs: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s observation from a batched Dict observation (custom spaces batch as tuples)."""
    return {k: v[i] for k, v in obs.items()}


def _info_at(infos: dict[str, Any], i: int) -> dict[str, Any]:
    from countgym.envs.wrappers import unpack_info

    return unpack_info(infos, i)


# --- log-probabilities from a local transformers model -----------------------------------------
class LogProbModel:
    """Sampled generation with per-token log-probabilities on a local VLM (``TransformersBackend``).

    ``complete_batch`` returns ``Generation``s (text, completion ids, their log-probs under the
    sampling distribution, prompt ids, the request). ``sequence_logprobs`` recomputes the same
    log-probs WITH gradients for a policy-gradient loss. Sampling is plain temperature sampling
    (no top-k / top-p), so the recorded log-probs are those of the distribution sampled from.

    Args:
        backend: a ``TransformersBackend`` or a local model path (built with ``backend_options``).
        max_new_tokens: completion cap per turn.
        temperature: sampling temperature; ``do_sample=False`` decodes greedily (log-probs are
            then those of the temperature-scaled distribution at the greedy tokens).
        reply_prefix: text forced at the start of every reply (e.g. ``"ANSWER: "``); it is part
            of the prompt, so its tokens get no log-probs.
        trainer_logprobs: record (and recompute) log-probs under the full-vocabulary
            temperature-scaled softmax, the distribution a trainer such as TRL's ``GRPOTrainer``
            computes for the same tokens. Sampling still never draws control tokens, so the
            sampling distribution is this one renormalised over the allowed tokens; the default
            (False) records log-probs under that renormalised distribution, which are higher by
            ``-log(1 - p_control)`` per token (about 0.1 nats on the tiny test model).
    """

    def __init__(
        self,
        backend: Any,
        *,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        do_sample: bool = True,
        reply_prefix: str = "",
        trainer_logprobs: bool = False,
        **backend_options: Any,
    ) -> None:
        if isinstance(backend, str):
            from countgym.agents.backends.transformers_backend import TransformersBackend

            backend = TransformersBackend(backend, max_new_tokens=max_new_tokens, **backend_options)
        elif backend_options:
            raise TypeError("backend options are for a model path; configure the backend instance directly")
        if max_new_tokens < 1 or temperature <= 0:
            raise ValueError("max_new_tokens must be >= 1 and temperature > 0")
        self.backend = backend
        self.model = f"{backend.model}#logprobs"
        self.hf_model = backend.hf_model
        self.processor = backend.processor
        self.tokenizer = backend.processor.tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = float(temperature)
        self.do_sample = do_sample
        self.reply_prefix = reply_prefix
        self.trainer_logprobs = bool(trainer_logprobs)
        eos = self.hf_model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        pad = self.hf_model.generation_config.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.pad_token_id or 0)
        self.suppress_ids = _special_ids(self.processor, self.hf_model) - self.eos_ids

    def policy(self, **kwargs: Any) -> LogProbPolicy:
        """A fresh per-episode policy over this model (use ``model.policy`` as the factory)."""
        return LogProbPolicy(self, **kwargs)

    def complete(self, messages: list[Message]) -> Generation:
        return self.complete_batch([messages])[0]

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Generation]:
        """Sample one reply per request, ``backend.batch_size`` requests per ``generate``."""
        out: list[Generation] = []
        size = self.backend.batch_size
        for i in range(0, len(batch), size):
            out.extend(self._generate(list(batch[i : i + size])))
        return out

    def _generate(self, chunk: list[list[Message]]) -> list[Generation]:
        import torch

        start = time.perf_counter()
        try:
            with self.backend._lock:  # one generate at a time per shared model
                inputs = self._prompt_inputs(chunk)
                with torch.no_grad():
                    gen = self.hf_model.generate(
                        **inputs,
                        max_new_tokens=self.max_new_tokens,
                        do_sample=self.do_sample,
                        temperature=self.temperature if self.do_sample else None,
                        top_k=None,
                        top_p=None,
                        # A sampled <image> (or other control token) would be read back as an
                        # image slot on the next turn and break the prompt; they are never replies.
                        suppress_tokens=sorted(self.suppress_ids) or None,
                        output_logits=True,
                        return_dict_in_generate=True,
                    )
        except Exception as e:  # noqa: BLE001 - OOM, too-long context: end these episodes
            msg = " ".join(f"{type(e).__name__}: {e}".split())[:600]
            return [Generation(text="", error=msg, latency_s=time.perf_counter() - start) for _ in chunk]
        latency = time.perf_counter() - start
        p_len = inputs["input_ids"].shape[1]
        new = gen.sequences[:, p_len:]
        lp = self._token_logprobs(torch.stack(gen.logits, dim=1), new)
        results = []
        for b, messages in enumerate(chunk):
            ids = new[b].tolist()
            n = next((k + 1 for k, t in enumerate(ids) if t in self.eos_ids), len(ids))
            ids = ids[:n]
            prompt_ids = inputs["input_ids"][b][inputs["attention_mask"][b].bool()].tolist()
            text = self.reply_prefix + self.tokenizer.decode(ids, skip_special_tokens=True)
            results.append(
                Generation(
                    text=text,
                    token_ids=ids,
                    logprobs=lp[b, :n].tolist(),
                    prompt_ids=prompt_ids,
                    prompt=messages,
                    usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=n),
                    latency_s=latency,
                )
            )
        return results

    def sequence_logprobs(self, prompts: Sequence[list[Message]], completions: Sequence[Sequence[int]]) -> list[Any]:
        """Log-probs of ``completions`` (token ids) after ``prompts``, one 1-D tensor each, with
        gradients (call in train mode for dropout; the tiny test model has none)."""
        import torch

        if len(prompts) != len(completions):
            raise ValueError("prompts and completions differ in length")
        inputs = self._prompt_inputs(list(prompts))
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        p_len = ids.shape[1]
        width = max(1, max(len(c) for c in completions))
        comp = torch.full((len(completions), width), self.pad_id, dtype=ids.dtype, device=ids.device)
        cmask = torch.zeros_like(comp, dtype=mask.dtype)
        for b, c in enumerate(completions):
            if len(c):
                comp[b, : len(c)] = torch.tensor(list(c), dtype=ids.dtype)
                cmask[b, : len(c)] = 1
        full_mask = torch.cat([mask, cmask], dim=1)
        extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        out = self.hf_model(
            input_ids=torch.cat([ids, comp], dim=1),
            attention_mask=full_mask,
            # generate() derives positions from the mask under left padding; pass the same
            # explicitly, since not every model's forward derives them itself.
            position_ids=(full_mask.long().cumsum(-1) - 1).clamp(min=0),
            **extra,
        )
        lp = self._token_logprobs(out.logits[:, p_len - 1 : p_len - 1 + width], comp)
        return [lp[b, : len(c)] for b, c in enumerate(completions)]

    def _token_logprobs(self, logits: Any, tokens: Any) -> Any:
        """Log-probs of ``tokens`` under the sampling distribution: temperature-scaled logits
        with the suppressed tokens removed (``output_logits`` are the raw, unprocessed ones);
        with ``trainer_logprobs`` nothing is removed (the trainer's full-vocabulary softmax)."""
        import torch

        logits = logits.float() / self.temperature
        if self.suppress_ids and not self.trainer_logprobs:
            idx = torch.tensor(sorted(self.suppress_ids), device=logits.device)
            logits = logits.index_fill(-1, idx, float("-inf"))
        return torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

    def _prompt_inputs(self, chunk: list[list[Message]]) -> Any:
        """Chat-template inputs (left padded) with the reply prefix appended to every row."""
        import torch

        from countgym.agents.backends.transformers_backend import to_hf_messages

        # The backend's own input builder: same template, padding side and dtype handling as
        # evaluation runs, so a trained policy is evaluated on exactly the prompts it saw.
        inputs = self.backend._inputs([to_hf_messages(m) for m in chunk])
        if self.reply_prefix:
            pre = self.tokenizer(self.reply_prefix, add_special_tokens=False)["input_ids"]
            ids = inputs["input_ids"]
            pre_t = torch.tensor(pre, dtype=ids.dtype, device=ids.device).expand(ids.shape[0], -1)
            inputs["input_ids"] = torch.cat([ids, pre_t], dim=1)
            inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(pre_t)], dim=1)
        return inputs


def _special_ids(processor: Any, hf_model: Any) -> set[int]:
    """Control tokens a reply must not contain: special and added-special tokens, image tokens."""
    tok = processor.tokenizer
    ids = set(tok.all_special_ids)
    ids |= {i for i, t in getattr(tok, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
    for owner, attr in ((processor, "image_token_id"), (hf_model.config, "image_token_id"), (hf_model.config, "image_token_index")):
        v = getattr(owner, attr, None)
        if isinstance(v, int):
            ids.add(v)
    return {int(i) for i in ids if i is not None}


class LogProbPolicy(ChatPolicy):
    """``ChatPolicy`` over a ``LogProbModel``: the same conversation and context policy, but each
    reply is a ``Generation`` carrying token ids and log-probs (the rollout records them)."""

    def __init__(self, model: LogProbModel, *, keep_images: int = KEEP_IMAGES) -> None:
        super().__init__(model, keep_images=keep_images)  # type: ignore[arg-type]

    def act(self, observation: dict[str, Any]) -> Generation:  # type: ignore[override]
        return cast(Generation, self.record(self.model.complete(self.request(observation))))



def _record_dict(record: Any) -> dict[str, Any] | None:
    """The episode record as a JSON-able dict (environments hand over ``EpisodeRecord`` objects)."""
    if record is None or isinstance(record, dict):
        return record
    return record.model_dump(mode="json")
