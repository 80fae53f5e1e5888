"""The transformers backend on a tiny randomly initialised Idefics3 (SmolVLM architecture) model
with a tiny locally trained tokenizer, built and saved by the fixture: fully offline."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from countgym.agents.arms import ChatPolicy, act_many  # noqa: E402
from countgym.agents.backends.base import image_part, message, text_part  # noqa: E402
from countgym.agents.backends.factory import make_backend  # noqa: E402
from countgym.agents.backends.tiny import build_tiny_smolvlm  # noqa: E402
from countgym.agents.backends.transformers_backend import TransformersBackend  # noqa: E402
from countgym.agents.base import Task  # noqa: E402
from countgym.envs import templates as T  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"  # prove nothing reaches for the hub
    try:
        yield str(build_tiny_smolvlm(tmp_path_factory.mktemp("tiny-smolvlm")))
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def image(k: int = 0) -> np.ndarray:
    rng = np.random.default_rng(k)
    return rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)


def conv_short() -> list[dict]:
    return [message("user", image_part(image(0)), text_part(T.DIRECT.format(obj="dots")))]


def conv_long() -> list[dict]:
    return [
        message("system", text_part(T.system_prompt("dots", "dot", ("tag",), 6))),
        message("user", image_part(image(1)), text_part(T.FIRST_USER.format(obj="dots"))),
        message("assistant", text_part('{"tool":"tag","points":[[1,2]]}')),
        message("user", text_part(T.OMITTED_IMAGE), image_part(image(2)), text_part("Continue.")),
    ]


def test_complete_returns_text_and_usage(tiny_model: str) -> None:
    be = TransformersBackend(tiny_model, device="cpu", max_new_tokens=6)
    r = be.complete(conv_short())
    assert r.error is None and isinstance(r.text, str)
    assert r.usage is not None and r.usage.prompt_tokens > 10
    assert 1 <= r.usage.completion_tokens <= 6
    assert r.cost is None and r.latency_s is not None and r.latency_s > 0
    assert be.provider_params()["decoding"] == "greedy"


def test_batch_equals_one_by_one_with_left_padding(tiny_model: str) -> None:
    be = TransformersBackend(tiny_model, device="cpu", max_new_tokens=6, batch_size=2)
    single = [be.complete(c) for c in (conv_short(), conv_long())]
    batched = be.complete_batch([conv_short(), conv_long(), conv_short()])
    assert [r.text for r in batched] == [single[0].text, single[1].text, single[0].text]
    # Prompt tokens count real tokens, not the padding added to the shorter conversation.
    assert [r.usage.prompt_tokens for r in batched[:2]] == [r.usage.prompt_tokens for r in single]
    assert single[1].usage.prompt_tokens > single[0].usage.prompt_tokens


def test_weights_load_once_and_factory_routes(tiny_model: str) -> None:
    a = TransformersBackend(tiny_model, device="cpu")
    b = make_backend(f"hf:{tiny_model}", device="cpu")
    assert isinstance(b, TransformersBackend) and b.hf_model is a.hf_model
    assert make_backend(f"local:{tiny_model}", device="cpu").hf_model is a.hf_model


def test_chat_policy_batches_through_act_many(tiny_model: str) -> None:
    be = TransformersBackend(tiny_model, device="cpu", max_new_tokens=4)
    task = Task(obj="dots", obj_sing="dot", image_size=(64, 48), tools=("tag",), budget=6)
    obs = {
        "image": image(3),
        "text": T.FIRST_USER.format(obj="dots"),
        "system": T.system_prompt("dots", "dot", ("tag",), 6),
    }
    policies = [ChatPolicy(be), ChatPolicy(be)]
    for p in policies:
        p.reset(obs, task)
    replies = act_many(policies, [obs, obs])
    assert replies[0].text == replies[1].text and replies[0].usage.completion_tokens >= 1


def test_missing_model_folder_is_a_user_error(tmp_path: Path) -> None:
    from countgym.errors import UserError

    with pytest.raises(UserError, match="cannot load local model"):
        TransformersBackend(str(tmp_path / "nothing-here"), device="cpu")


def test_thinking_mode_samples_with_the_checkpoints_generation_config(tiny_model: str) -> None:
    """CounterCount 4.1.4 / C.7: thinking mode samples with the model's default parameters."""
    import torch

    from countgym.agents.cf_arm import make_cf_backend

    greedy = make_cf_backend("cf-mcq", f"hf:{tiny_model}", device="cpu", max_new_tokens=12)
    sampled = make_cf_backend("cf-mcq+think", f"hf:{tiny_model}", device="cpu", max_new_tokens=12)
    assert greedy.provider_params()["decoding"] == "greedy" and "temperature" not in greedy.provider_params()
    p = sampled.provider_params()
    cfg = sampled.hf_model.generation_config
    assert p["decoding"] == "sample" and p["max_new_tokens"] == 12
    assert p.get("temperature") == cfg.temperature and p.get("top_k") == cfg.top_k
    texts = set()
    for seed in range(6):
        torch.manual_seed(seed)
        texts.add(sampled.complete(conv_short()).text)
    assert len(texts) > 1  # sampled, not greedy
    assert len({greedy.complete(conv_short()).text for _ in range(3)}) == 1
