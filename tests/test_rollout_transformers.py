"""Rollouts with local transformers models (tiny random Idefics3, offline): batched generation
across vectorised episodes, per-token log-probs that a policy-gradient loss can recompute."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from countgym.agents.arms import ChatPolicy  # noqa: E402
from countgym.agents.backends.base import image_part, message, text_part  # noqa: E402
from countgym.agents.backends.transformers_backend import TransformersBackend  # noqa: E402
from countgym.rollout import LogProbModel, LogProbPolicy, grpo_batch, image_env_fns, rollout  # noqa: E402
from tests.test_agents_transformers import build_tiny_smolvlm  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The test suite's tiny random SmolVLM (offline: conftest sets HF_HUB_OFFLINE)."""
    return str(build_tiny_smolvlm(tmp_path_factory.mktemp("tiny-smolvlm")))


class SpyBackend:
    """A ``TransformersBackend`` stand-in that records the batch sizes it is asked for."""

    def __init__(self, inner: TransformersBackend) -> None:
        self.inner, self.model, self.sizes = inner, inner.model, []

    def complete(self, messages: list) -> Any:
        return self.complete_batch([messages])[0]

    def complete_batch(self, batch: Sequence[list]) -> list:
        self.sizes.append(len(batch))
        return self.inner.complete_batch(batch)


def test_transformers_backend_batches_across_vectorised_episodes(tiny_model, tiny_dataset) -> None:
    spy = SpyBackend(TransformersBackend(tiny_model, device="cpu", max_new_tokens=4))
    fns = image_env_fns(tiny_dataset, 4, prompt="direct", tools=(), budget=1)
    trajs = rollout(fns, lambda: ChatPolicy(spy), 8, seed=0)
    # Every live episode's turn goes out in one generate call: 8 one-turn episodes, 4 envs.
    assert spy.sizes == [4, 4]
    assert len(trajs) == 8 and all(t.length == 1 and t.steps[0].reply is not None for t in trajs)


def test_logprobs_are_recorded_and_recomputable_with_gradients(tiny_model) -> None:
    m = LogProbModel(tiny_model, device="cpu", max_new_tokens=6, reply_prefix="ANSWER: ")
    rng = np.random.default_rng(0)
    # Different prompt lengths: rows are left padded, which must not change any log-prob.
    reqs = [
        [message("user", image_part(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)), text_part("Count" + " the dots" * k))]
        for k in range(3)
    ]
    torch.manual_seed(0)
    gens = m.complete_batch(reqs)
    for g in gens:
        assert g.text.startswith("ANSWER: ") and 1 <= len(g.token_ids) == len(g.logprobs) <= 6
        assert all(lp <= 0 and np.isfinite(lp) for lp in g.logprobs)
        assert not set(g.token_ids) & m.suppress_ids
        assert g.text == "ANSWER: " + m.tokenizer.decode(g.token_ids, skip_special_tokens=True)
        assert g.usage.prompt_tokens == len(g.prompt_ids) and g.usage.completion_tokens == len(g.token_ids)
    assert len({len(g.prompt_ids) for g in gens}) == 3
    again = m.sequence_logprobs([g.prompt for g in gens], [g.token_ids for g in gens])
    for g, lp in zip(gens, again, strict=True):
        assert lp.requires_grad
        np.testing.assert_allclose(lp.detach().numpy(), g.logprobs, atol=1e-4)
    loss = -sum(lp.sum() for lp in again)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.hf_model.parameters())
    m.hf_model.zero_grad()


def test_control_tokens_are_never_sampled(tiny_model) -> None:
    m = LogProbModel(tiny_model, device="cpu", max_new_tokens=16, temperature=5.0)
    image_token = m.processor.tokenizer.convert_tokens_to_ids("<image>")
    assert image_token in m.suppress_ids and not m.eos_ids & m.suppress_ids
    req = [message("user", text_part("Count the dots."))]
    torch.manual_seed(1)
    gens = m.complete_batch([req] * 8)
    assert all(not set(g.token_ids[:-1]) & (m.suppress_ids | m.eos_ids) for g in gens)


def test_logprob_policy_rollout_feeds_trainer_formats(tiny_model, tiny_dataset) -> None:
    m = LogProbModel(tiny_model, device="cpu", max_new_tokens=5)
    assert isinstance(m.policy(), LogProbPolicy)
    fns = image_env_fns(tiny_dataset, 2, tools=("tag",), budget=2, reward="neg_abs_error")
    torch.manual_seed(0)
    trajs = rollout(fns, m.policy, 4, seed=0, keep_prompts=True)
    steps = [s for t in trajs for s in t.steps]
    assert all(s.token_ids and len(s.token_ids) == len(s.logprobs) and s.prompt_ids for s in steps)
    # Multi-turn: a later turn's prompt holds the earlier reply, so it is longer.
    multi = [t for t in trajs if t.length > 1]
    assert multi and all(len(t.steps[1].prompt_ids) > len(t.steps[0].prompt_ids) for t in multi)
    assert all(s.prompt is not None and s.prompt[-1]["role"] == "user" for s in steps)
    rows = [r for t in trajs for r in t.to_records()]
    assert json.loads(json.dumps(rows)) == rows and all(r["completion_ids"] for r in rows)
    batch = grpo_batch(trajs)
    assert len(batch["prompt_ids"]) == len(steps)
    assert batch["env_reward"] == [t.episode_return for t in trajs for _ in t.steps]
