"""CounterCount internals on a tiny randomly initialised Idefics3 (SmolVLM architecture) model with
a tiny locally trained tokenizer, built and saved by the fixture: fully offline.

The model splits a 480-px image into 2 x 2 tiles plus a global view, each seen by a 2 x 2 grid
of visual tokens (20 image tokens), so the region-to-token mapping has something to map.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from countgym.agents.internals import (
    MODULATION_SWEEP,
    AttentionComparison,
    ModulationConfig,
    RegionAttention,
    compare_region_attention,
    grid_boxes,
    parse_config,
    region_token_mask,
)

# SmolVLM's chat template, trimmed (as in test_agents_transformers).
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


# --------------------------------------------------------------------------- no torch needed
def test_region_token_mask_known_answer() -> None:
    boxes = grid_boxes(2, 2)
    assert np.allclose(boxes, [[0, 0, 0.5, 0.5], [0.5, 0, 1, 0.5], [0, 0.5, 0.5, 1], [0.5, 0.5, 1, 1]])
    region = np.zeros((100, 100), bool)
    region[10:20, 60:90] = True  # inside the top-right cell: 12 % of it
    assert region_token_mask(region, boxes).tolist() == [False, True, False, False]
    assert region_token_mask(region, boxes, min_coverage=0.15).tolist() == [False, False, False, False]
    tile = grid_boxes(2, 2, (0.5, 0.0, 1.0, 0.5))  # a tile's grid: cells of a quarter side
    assert region_token_mask(region, tile).tolist() == [True, True, False, False]


def test_modulation_configs() -> None:
    assert len(MODULATION_SWEEP) == 12 and len({c.name for c in MODULATION_SWEEP}) == 12
    assert {c.beta for c in MODULATION_SWEEP} == {0.0, 1.0}
    cfg = ModulationConfig(2.0, 0.0, "middle")
    assert cfg.name == "a2-b0-middle" and parse_config(cfg.name) == cfg
    assert cfg.layer_set(12) == {4, 5, 6, 7} and ModulationConfig(layers="2:5").layer_set(4) == {2, 3}
    with pytest.raises(ValueError):
        ModulationConfig(layers="most")
    with pytest.raises(ValueError):
        ModulationConfig(alpha=0.0)


def test_compare_region_attention_known_answer() -> None:
    vals = [RegionAttention(np.array(v, float), 3, 20) for v in ([0.2, 0.4], [0.4, 0.6], [0.1, 0.3])]
    cmp = compare_region_attention(vals, [True, True, False])
    assert isinstance(cmp, AttentionComparison)
    assert np.allclose(cmp.correct, [0.3, 0.5]) and np.allclose(cmp.incorrect, [0.1, 0.3])
    assert cmp.relative_gain == pytest.approx(0.4 / 0.2 - 1.0)
    assert (cmp.n_correct, cmp.n_incorrect) == (2, 1)


# --------------------------------------------------------------------------- tiny model
def build_tiny_smolvlm_grid(out: Path) -> Path:
    """A ~0.3 MB Idefics3 with image splitting and a 2 x 2 token grid per crop (no hub access)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    try:
        from transformers import Idefics3ImageProcessorPil as ImageProcessor
    except ImportError:
        from transformers import Idefics3ImageProcessor as ImageProcessor

    specials = ["<pad>", "<|im_start|>", "<end_of_utterance>", "<image>", "<fake_token_around_image>", "<global-img>"]
    specials += [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["How many legs does this dog have? Choose one of the following options: three, four. The dog has 4 legs."] * 5
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<end_of_utterance>", bos_token="<|im_start|>")
    # 64-px resize, 32-px tiles (2 x 2 split + global), 8-px patches, pixel shuffle 2: 4 tokens per crop.
    image_processor = ImageProcessor(size={"longest_edge": 64}, max_image_size={"longest_edge": 32}, do_image_splitting=True)
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=fast, image_seq_len=4, chat_template=CHAT_TEMPLATE)
    cfg = Idefics3Config(
        text_config={
            "model_type": "llama", "vocab_size": len(fast), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 2048, "pad_token_id": fast.pad_token_id,
            "bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id,
        },
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        scale_factor=2,
        image_token_id=fast.convert_tokens_to_ids("<image>"),
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    for pkg in ("torch", "transformers", "tokenizers"):
        pytest.importorskip(pkg)
    import torch

    from countgym.agents.backends.transformers_backend import TransformersBackend

    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    # A tiny model gains nothing from intra-op threads, and on a busy 2-core runner OpenMP
    # spin-waiting makes each forward ~200x slower; one thread keeps these tests fast.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = build_tiny_smolvlm_grid(tmp_path_factory.mktemp("tiny-smolvlm-grid"))
        yield TransformersBackend(str(path), device="cpu", max_new_tokens=5, batch_size=2)
    finally:
        torch.set_num_threads(threads)
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def _image(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (480, 480, 3), dtype=np.uint8)


def _conv(text: str = "How many legs does this dog have?", region: np.ndarray | None = None, seed: int = 0) -> list[dict]:
    from countgym.agents.backends.base import image_part, message, text_part

    parts = [image_part(_image(seed)), text_part(text)]
    if region is not None:
        parts.append({"type": "region", "mask": region})
    return [message("user", *parts)]


def _top_left() -> np.ndarray:
    r = np.zeros((480, 480), bool)
    r[:100, :100] = True
    return r


def test_image_tokens_follow_the_idefics3_layout(backend: Any) -> None:
    from countgym.agents.backends.transformers_backend import to_hf_messages
    from countgym.agents.internals import image_tokens

    inputs = backend._inputs([to_hf_messages(_conv())])
    toks = image_tokens(backend.hf_model, backend.processor, inputs)
    ids = inputs["input_ids"][0].tolist()
    assert len(toks.positions) == 20
    assert all(ids[p] == backend.hf_model.config.image_token_id for p in toks.positions)
    # Tile (row 1, col 2) comes second; its first token sees the top-left quarter of that tile.
    assert np.allclose(toks.boxes[4], [0.5, 0.0, 0.75, 0.25])
    assert np.allclose(toks.boxes[16:], grid_boxes(2, 2))  # the global view comes last
    assert region_token_mask(_top_left(), toks.boxes).sum() == 2


def test_region_attention_per_layer(backend: Any) -> None:
    from countgym.agents.internals import region_attention

    small = region_attention(backend, _conv(), _top_left())
    assert small.per_layer.shape == (3,) and small.n_tokens == 2 and small.n_image_tokens == 20
    full = region_attention(backend, _conv(), np.ones((480, 480), bool))
    assert full.n_tokens == 20
    # Attention is a distribution: all image tokens together get at most all of it.
    assert np.all(full.per_layer > 0) and np.all(full.per_layer * 20 <= 1.0 + 1e-6)
    inline = region_attention(backend, _conv(region=_top_left()))
    assert np.allclose(inline.per_layer, small.per_layer)
    oe = region_attention(backend, _conv(), _top_left(), answer="The dog has 4 legs")
    assert oe.per_layer.shape == (3,) and not np.allclose(oe.per_layer, small.per_layer)


def test_modulation_rescales_attention_exactly(backend: Any) -> None:
    import torch

    from countgym.agents.backends.transformers_backend import to_hf_messages
    from countgym.agents.internals import (
        _STATE,
        AttentionModulatedBackend,
        _decoder_attention,
        image_tokens,
    )

    inputs = backend._inputs([to_hf_messages(_conv())])
    toks = image_tokens(backend.hf_model, backend.processor, inputs)
    last = inputs["input_ids"].shape[1] - 1

    def layer0(config: ModulationConfig | None) -> np.ndarray:
        mod = AttentionModulatedBackend(backend, config or ModulationConfig(1.0, 1.0))
        state = mod._state(inputs, [_top_left() if config else None])
        state.capture_queries = torch.tensor([last])
        with _decoder_attention(backend.hf_model), torch.inference_mode():
            token = _STATE.set(state)
            try:
                backend.hf_model(**inputs)
            finally:
                _STATE.reset(token)
        return state.captured[0][0]

    p = layer0(None)
    target = toks.positions[region_token_mask(_top_left(), toks.boxes)]
    others = np.setdiff1d(toks.positions, target)
    q = layer0(ModulationConfig(3.0, 1.0))
    z = 1.0 + 2.0 * p[target].sum()
    assert np.allclose(q[target], 3.0 * p[target] / z, rtol=1e-4)
    assert np.allclose(q[others], p[others] / z, rtol=1e-4)
    masked = layer0(ModulationConfig(2.0, 0.0))
    assert masked[others].max() < 1e-12 and masked.sum() == pytest.approx(1.0, abs=1e-5)


def test_modulated_generation_and_restored_attention(backend: Any) -> None:
    from countgym.agents.internals import AttentionModulatedBackend

    plain = backend.complete_batch([_conv(), _conv("How many?", seed=1)])
    identity = AttentionModulatedBackend(backend, ModulationConfig(1.0, 1.0))
    same = identity.complete_batch([_conv(region=_top_left()), _conv("How many?", seed=1)])
    assert [r.text for r in same] == [r.text for r in plain] and all(r.error is None for r in same)
    strong = AttentionModulatedBackend(backend, "a50-b0-all")
    r = strong.complete(_conv(region=_top_left()))
    assert r.error is None and r.usage.completion_tokens >= 1
    assert strong.provider_params()["attention"] == "a50-b0-all"
    # The shared model is back on its own attention; plain generation is unchanged.
    assert backend.hf_model.config.get_text_config()._attn_implementation != "countgym_region"
    assert [x.text for x in backend.complete_batch([_conv()])] == [plain[0].text]


def test_attention_arm_runs_through_the_env(backend: Any, tmp_path: Path) -> None:
    from countgym.agents.cf_arm import make_cf_backend, make_cf_policy, parse_cf_arm
    from countgym.agents.internals import AttentionModulatedBackend
    from countgym.envs.cf_env import CounterCountEnv
    from countgym.scenes.counterfactual import make_countercount

    ds = make_countercount(tmp_path / "cf", limit=1, progress=False)
    arm = parse_cf_arm("cf-mcq+attn")
    env = CounterCountEnv(str(ds), **arm.env_options(attention="a2-b0-middle"))
    policy = make_cf_policy(arm, AttentionModulatedBackend(backend, "a2-b0-middle"))
    obs, _ = env.reset(options={"stimulus_id": "dog-3-cf"})
    request = policy.request(obs)
    assert [p["type"] for p in request[0]["content"]] == ["image", "text", "region"]
    _, _, terminated, truncated, info = env.step(policy.act(obs))
    assert terminated and not truncated and info["end"] in ("answer", "invalid")
    assert env.episode_record().env_options["attention"] == "a2-b0-middle"
    built = make_cf_backend(arm, f"hf:{backend.path}", device="cpu", attention="a3-b1-all")
    assert isinstance(built, AttentionModulatedBackend) and built.config == ModulationConfig(3.0, 1.0, "all")
    assert built.backend.hf_model is backend.hf_model and built.backend.max_new_tokens == 128


def test_attention_modulation_on_an_api_model_is_a_user_error() -> None:
    from countgym.agents.internals import AttentionModulatedBackend
    from countgym.errors import UserError

    class ApiLike:
        model = "openai/x"

    with pytest.raises(UserError, match=r"\+attn\) needs a local transformers model"):
        AttentionModulatedBackend(ApiLike())
