"""TRL adapter: train a VLM with ``GRPOTrainer`` on countgym environments (extra ``trl``).

Two routes, both with the stimulus carried in the dataset row (column ``stimulus_id``), never in
the prompt text:

- **Multi-turn tool loop** (the image task of *Give the Model a Finger*): ``environment_factory``
  gives ``GRPOTrainer(environment_factory=...)`` one ``CountImageEnv`` per rollout whose enabled
  tools (tag, crop, erase, grid, answer) are methods the trainer exposes as function tools. A tool
  result carries the re-rendered working image. ``get_reward`` is the environment's reward.
  ``tool_dataset`` makes the rows (one per stimulus); ``use_tool_chat_template`` gives a
  SmolVLM-style processor a chat template that renders tool calls, which TRL requires.
- **Single-step tasks and single-turn arms** (``direct``/``cot`` on images, CountVideoBench,
  CounterCount): ``prompt_dataset`` makes conversational rows with the observation's image(s) in
  an ``images`` column and the env's question as the prompt; TRL generates; ``env_reward`` steps
  the environment with each completion and returns its reward.

Log-probabilities: ``GRPOTrainer`` computes per-token log-probs as the full-vocabulary
softmax of ``logits / temperature``. ``trainer_logprob_model`` builds a ``LogProbModel`` that
records exactly those (``trainer_logprobs=True``) while still never sampling control tokens; see
docs/scale-and-rl.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from countgym.envs.actions import Crop, Erase, Tag
from countgym.errors import MissingExtraError
from countgym.stimulus import Dataset

TOOL_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}"
    "{% if message['role'] == 'system' and tools %}{% endif %}"
    "{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}"
    "{% elif message['content'] %}{{ ':' }}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ ' ' + part['text'] }}{% elif part['type'] == 'image' %}"
    "{{ '<image>' }}{% endif %}{% endfor %}{% else %}{{ ':' }}{% endif %}"
    "{% if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>' + (call['function'] | tojson) + '</tool_call>' }}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
"""SmolVLM's template (images as ``<image>``) plus tool calls as ``<tool_call>{json}</tool_call>``
and ``Tool:`` turns; prefix-preserving, as TRL's multi-turn loop requires."""

RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "Assistant:",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<end_of_utterance>\s*", "content": "text"},
    },
}
"""How TRL parses a reply rendered by ``TOOL_CHAT_TEMPLATE`` back into content and tool calls."""


def _require_trl() -> None:
    try:
        import trl  # noqa: F401
    except ImportError:
        raise MissingExtraError("trl", "trl") from None


def use_tool_chat_template(processor: Any) -> Any:
    """Give a SmolVLM/Idefics3-style processor the tool-calling chat template and response parser.

    TRL's tool loop refuses a template that drops tool calls (SmolVLM's own does). Returns the
    same processor.
    """
    processor.chat_template = TOOL_CHAT_TEMPLATE
    tok = getattr(processor, "tokenizer", processor)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    tok.response_template = RESPONSE_TEMPLATE
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is not None and not isinstance(image_processor, OneRowPerImage):
        processor.image_processor = OneRowPerImage(image_processor)
    return processor


def use_tool_images(model: Any) -> Any:
    """Let a SmolVLM/Idefics3-style model generate after tool-result images in TRL's tool loop.

    TRL 1.16 adds ``token_type_ids`` to ``generate``'s inputs once tool results carry images;
    Idefics3's ``generate`` refuses a keyword its ``forward`` does not name (``ValueError: ...
    not used by the model``), while its ``forward`` ignores it. For such a model the instance's
    ``generate`` drops that one keyword; a model that names it is left as it is. Returns the model.
    """
    import functools
    import inspect

    if "token_type_ids" in inspect.signature(model.forward).parameters or getattr(model, "_countgym_tool_images", False):
        return model
    generate = model.generate

    @functools.wraps(generate)
    def generate_without_token_types(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("token_type_ids", None)
        return generate(*args, **kwargs)

    model.generate = generate_without_token_types
    model._countgym_tool_images = True
    return model


class OneRowPerImage:
    """An Idefics3/SmolVLM image processor that gives a flat list of images one row each.

    With tool-result images, TRL 1.16's GRPO step processes the images of the whole batch with
    ``image_processor(images=[img, ...])``. Idefics3's processor takes a flat list as ONE sample
    holding every image (``pixel_values`` of shape ``(1, N, C, H, W)``), which TRL cannot split
    per sample (``IndexError`` in ``shuffle_sequence_dict``). Here a flat list of PIL images
    becomes one image per row, ``(N, 1, C, H, W)``: TRL splits that by image count, and the model
    sees the same images in the same order. ``pixel_attention_mask`` is dropped only when it is
    all ones (no image was padded), where the model's default mask is the same. A padded batch
    keeps the processor's own output. Every other call and attribute goes to the wrapped
    processor."""

    def __init__(self, image_processor: Any) -> None:
        self.__dict__["_inner"] = image_processor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_inner"], name, value)

    def __call__(self, images: Any = None, *args: Any, **kwargs: Any) -> Any:
        inner = self.__dict__["_inner"]
        flat = isinstance(images, list) and bool(images) and all(isinstance(i, Image.Image) for i in images)
        if not flat or kwargs.get("return_tensors") != "pt":
            return inner(images, *args, **kwargs)
        out = inner([[i] for i in images], *args, **kwargs)
        mask = out.get("pixel_attention_mask")
        if mask is not None and not bool(mask.all()):
            return inner(images, *args, **kwargs)  # padded images need their mask: as before
        from transformers.feature_extraction_utils import BatchFeature

        return BatchFeature({k: v for k, v in out.items() if k != "pixel_attention_mask"})


# --- the multi-turn tool loop ---------------------------------------------------------------------
class CountingToolEnv:
    """One ``CountImageEnv`` episode driven by TRL's tool loop.

    ``reset(stimulus_id=..., **row)`` starts the episode on the row's stimulus and returns the
    image and the first user message; each tool method applies one action and returns the
    working image (or crop view) with the protocol's message; ``get_reward`` is the episode's
    reward (tool costs included). A model that never calls ``answer`` is scored as the
    environment scores a missing answer. ``answer`` and ``grid`` hand the model's argument to the
    environment, which reads it as on every other path (the count grammar of
    ``countgym.envs.extract.parse_count``; a JSON boolean for ``on``): anything else is an invalid
    reply there. ``records`` holds every finished ``EpisodeRecord``.
    Subclasses made by ``environment_factory`` add only the enabled tools.
    """

    def __init__(self, dataset: str | Dataset, **env_options: Any) -> None:
        from countgym.envs.image_env import CountImageEnv

        env_options.setdefault("arm", "trl-tools")
        # TRL's tool loop is native function calling: the environment's re-issue and budget
        # messages ask for a tool call, not for a JSON line.
        env_options.setdefault("protocol", "native")
        self.env = CountImageEnv(dataset, **env_options)
        self.reward = 0.0
        self.ended = True
        self.records: list[Any] = []
        self._last: list[dict[str, Any]] = []

    def reset(self, stimulus_id: str | None = None, **row: Any) -> list[dict[str, Any]]:
        """Start an episode on ``stimulus_id`` (the dataset row's column); other columns ignored."""
        self._finish()
        options = {"stimulus_id": str(stimulus_id)} if stimulus_id is not None else None
        obs, _ = self.env.reset(seed=row.get("seed"), options=options)
        self.reward, self.ended = 0.0, False
        self._last = [{"type": "image", "image": Image.fromarray(obs["image"])}, {"type": "text", "text": obs["text"]}]
        return list(self._last)

    def get_reward(self) -> float:
        """The episode's reward; an unfinished episode is ended as a missing answer first."""
        if not self.ended:
            self._step('{"tool":"answer"}')  # invalid reply: no count announced
            while not self.ended:
                self._step('{"tool":"answer"}')
        return float(self.reward)

    def _step(self, action: Any) -> list[dict[str, Any]]:
        """Apply one action; the working image (or crop view) and the message, also when it ends."""
        if self.ended:
            return [*self._last[:1], {"type": "text", "text": "The episode has ended."}]
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.reward += float(reward)
        if terminated or truncated:
            self.ended = True
            self._finish()
        # Every result carries the working image, the last one too: TRL 1.16 fails on SmolVLM-style
        # processors when a round of tool calls returns text only (its pixel values are then a list).
        text = obs["text"] or ("Done." if self.ended else "")
        self._last = [{"type": "image", "image": Image.fromarray(obs["image"])}, {"type": "text", "text": text}]
        return list(self._last)

    def _finish(self) -> None:
        st = self.env.state
        if st is not None and st.ended and self.env.stimulus is not None:
            rec = self.env.episode_record()
            if not self.records or self.records[-1].started_at != rec.started_at:
                self.records.append(rec)


def tag(self, points: list[list[int]]) -> list:
    """Draw numbered tags at these points on the working image; numbering continues.

    Args:
        points: [x, y] centres in the normalised frame of the original image, integers in [0, 1000], (0, 0) top-left.
    """
    return self._step(Tag(points=[(float(x), float(y)) for x, y in _pairs(points)]))


def crop(self, box: list[int]) -> list:
    """See an enlarged view of a region of the working image (tags stay visible).

    Args:
        box: [x1, y1, x2, y2] in the normalised frame of the original image, integers in [0, 1000].
    """
    return self._step(Crop(box=_box(box)))


def erase(self, points: list[list[int]]) -> list:
    """Grey out already-counted objects at these points so they cannot be counted twice.

    Args:
        points: [x, y] centres in the normalised frame of the original image, integers in [0, 1000].
    """
    return self._step(Erase(points=[(float(x), float(y)) for x, y in _pairs(points)]))


def grid(self, on: bool) -> list:
    """Overlay a light coordinate grid with 0-1000 tick labels.

    Args:
        on: true to show the grid, false to hide it.
    """
    # The environment reads the value (a JSON boolean only): "false" is an invalid reply, not True.
    return self._step({"tool": "grid", "on": on})


def answer(self, count: int) -> list:
    """Final answer: the number of distinct objects in the image.

    Args:
        count: the number of objects.
    """
    # The environment reads the count with its own grammar (``countgym.envs.extract.parse_count``):
    # 30.7, True, b"12" or "1_2" are an invalid reply there, as on every other path.
    return self._step({"tool": "answer", "count": count})


_TOOL_METHODS: dict[str, Callable[..., Any]] = {
    "tag": tag, "crop": crop, "erase": erase, "grid": grid, "answer": answer,
}


def _box(box: Any) -> tuple[float, float, float, float]:
    vals = [float(v) for v in box]  # model-written: a non-number raises (TRL reports it back)
    if len(vals) != 4 or not all(math.isfinite(v) for v in vals):
        raise ValueError(f"box must be four finite numbers [x1, y1, x2, y2], got {box!r}")
    return vals[0], vals[1], vals[2], vals[3]


def _pairs(points: Any) -> list[tuple[Any, Any]]:
    # Model-written arguments: anything but a list of pairs raises, and TRL returns the error to
    # the model as the tool result (the env itself never sees malformed input).
    out = []
    for p in points:
        x, y = p
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in (x, y)):
            raise ValueError(f"not a point: {p!r}")
        out.append((x, y))
    return out


def environment_factory(dataset: str | Dataset, **env_options: Any) -> Callable[[], CountingToolEnv]:
    """A ``GRPOTrainer(environment_factory=...)`` for the image tool loop.

    ``env_options`` are ``CountImageEnv``'s (``tools``, ``budget``, ``reward``, ``tool_cost`` ...);
    only the enabled tools (plus ``answer``) become methods, so only they reach the prompt's tool
    schema. The dataset is resolved once and shared by every instance.
    """
    from countgym.envs.actions import canonical_tools
    from countgym.envs.common import resolve_dataset_arg

    ds, _ = resolve_dataset_arg(dataset)
    tools = canonical_tools(env_options.get("tools", ("tag",)))
    env_options["tools"] = tuple(tools)
    cls = type("CountImageToolEnv", (CountingToolEnv,), {t: _TOOL_METHODS[t] for t in tools})

    def make() -> CountingToolEnv:
        return cls(ds, **env_options)

    return make


def tool_dataset(dataset: str | Dataset, stimulus_ids: Sequence[str] | None = None, *, repeats: int = 1) -> Any:
    """A ``datasets.Dataset`` for the tool loop: an empty user turn (``reset`` adds the image and
    the first message) and the ``stimulus_id`` column, one row per stimulus and repeat."""
    from countgym.envs.common import resolve_dataset_arg

    _require_trl()
    from datasets import Dataset as HFDataset

    ds, _ = resolve_dataset_arg(dataset)
    ids = list(stimulus_ids) if stimulus_ids is not None else ds.ids()
    rows = [{"prompt": [{"role": "user", "content": ""}], "stimulus_id": i} for i in ids for _ in range(repeats)]
    return HFDataset.from_list(rows)


# --- single-step tasks and single-turn arms --------------------------------------------------------
def prompt_dataset(env: Any, stimulus_ids: Sequence[str] | None = None, *, repeats: int = 1) -> Any:
    """Conversational rows for TRL's own generation: the first observation's question as the
    user turn, its image (or video frames) in ``images``, and ``stimulus_id``.

    ``env`` is a single-step environment (``CountVideoEnv``, ``CounterCountEnv``) or a
    ``CountImageEnv`` with a single-turn prompt (``direct``, ``cot``).
    """
    _require_trl()
    from datasets import Dataset as HFDataset

    base = getattr(env, "unwrapped", env)
    ids = list(stimulus_ids) if stimulus_ids is not None else list(getattr(base, "_pool", base.dataset.ids()))
    rows: list[dict[str, Any]] = []
    for sid in ids:
        obs, _ = env.reset(options={"stimulus_id": sid})
        frames = obs["frames"] if "frames" in obs else obs["image"][None]
        images = [Image.fromarray(np.asarray(f)) for f in frames]
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": obs["text"]}]
        row = {"prompt": [{"role": "user", "content": content}], "images": images, "stimulus_id": sid}
        rows.extend(dict(row) for _ in range(repeats))
    return HFDataset.from_list(rows)


def env_reward(env_fn: Callable[[], Any]) -> Callable[..., list[float]]:
    """A TRL reward function: each completion is the action of a fresh episode on its row's
    stimulus; the reward is the environment's. Multi-turn image arms need the tool loop
    (``environment_factory``); a completion they do not end is scored as unanswered."""
    env = env_fn()

    def countgym_reward(completions: list[Any], stimulus_id: list[str], **_: Any) -> list[float]:
        out = []
        for text, sid in zip(completions, stimulus_id, strict=True):
            env.reset(options={"stimulus_id": str(sid)})
            _, r, terminated, truncated, _ = env.step(completion_text(text))
            total = float(r)
            while not (terminated or truncated):  # a multi-turn env: the one reply did not end it
                _, r, terminated, truncated, _ = env.step('{"tool":"answer"}')
                total += float(r)
            out.append(total)
        return out

    return countgym_reward


def completion_text(completion: Any) -> str:
    """The reply text of a TRL completion (a string, or a list of assistant messages)."""
    if isinstance(completion, str):
        return completion
    parts = []
    for m in completion:
        c = m.get("content") if isinstance(m, dict) else m
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(parts)


def trainer_logprob_model(backend: Any, **kwargs: Any) -> Any:
    """A ``LogProbModel`` whose recorded log-probs are the ones ``GRPOTrainer`` computes for the
    same tokens (full-vocabulary softmax of ``logits / temperature``)."""
    from countgym.rollout import LogProbModel

    return LogProbModel(backend, trainer_logprobs=True, **kwargs)


def rollout_func(model: str | Any, **logprob_options: Any) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
    """A ``GRPOTrainer(rollout_func=...)`` for single-turn arms: one completion per prompt (TRL
    hands each prompt over once per generation), sampled by countgym's ``LogProbModel`` from the
    trainer's current weights, with the log-probs the trainer computes (``trainer_logprobs``).

    ``model`` is the local model folder the trainer was built from (for its processor and chat
    template); ``logprob_options`` go to ``LogProbModel`` (``max_new_tokens``, ``temperature``,
    ``reply_prefix`` ...). Score with ``env_reward``: the row's ``stimulus_id`` reaches it as usual.
    Multi-turn arms need ``environment_factory`` (one row per model turn would not line up with
    the prompts).
    """
    state: dict[str, Any] = {}

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if "lpm" not in state:
            state["lpm"] = trainer_logprob_model(model, **logprob_options)
        lpm = state["lpm"]
        live = trainer.accelerator.unwrap_model(trainer.model)
        lpm.hf_model = lpm.backend.hf_model = live  # sample from the weights being trained
        was_training = live.training
        live.eval()
        try:
            gens = lpm.complete_batch([_countgym_messages(p) for p in prompts])
        finally:
            live.train(was_training)
        bad = [g.error for g in gens if g.token_ids is None]
        if bad:
            raise RuntimeError(f"generation failed: {bad[0]}")
        return {
            "prompt_ids": [g.prompt_ids for g in gens],
            "completion_ids": [g.token_ids for g in gens],
            "logprobs": [g.logprobs for g in gens],
        }

    return rollout


def _countgym_messages(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL's conversational prompt (PIL images in parts) as countgym backend messages."""
    out = []
    for m in prompt:
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": [{"type": "text", "text": content}]})
            continue
        parts = []
        for p in content or []:
            if p.get("type") == "image":
                parts.append({"type": "image", "image": np.asarray(p["image"].convert("RGB"))})
            elif p.get("type") == "text":
                parts.append({"type": "text", "text": p.get("text", "")})
        out.append({"role": m["role"], "content": parts})
    return out
