"""CounterCount internals for local transformers models (*CounterCount*, Section 4.2, App. C.8).

Two tools over a ``TransformersBackend``'s already loaded model and processor:

- **Region attention**: the attention from the answer-predicting position(s) to the image
  tokens that cover the Mask-BB region, per decoder layer, averaged over heads and divided by
  the number of selected tokens; ``compare_region_attention`` contrasts correct and incorrect
  answers ("correct answers receive 35.2 % more attention").
- **Attention modulation** (``AttentionModulatedBackend``): during generation, attention
  weights to the Mask-BB image tokens are multiplied by ``alpha`` and those to the other image
  tokens by ``beta`` (1 keeps them, 0 masks them out), then renormalised, in the chosen layers.
  ``MODULATION_SWEEP`` is the 12-configuration grid.

Both work by switching the decoder's attention to one eager implementation registered with
transformers' ``AttentionInterface`` while the backend's generation lock is held, and switching
it back afterwards, so a plain backend sharing the same weights is never affected.

Region -> token mapping: each visual token sees one cell of a grid laid over its crop (the
whole image, or one tile of Idefics3/SmolVLM image splitting); a token is selected when the
region covers more than ``min_coverage`` of its cell (default: any overlap). Supported layouts:
Idefics3/SmolVLM (tested with a tiny random model), Qwen2-VL/Qwen2.5-VL/Qwen3-VL and Gemma-3
(from their documented token order; not exercised by the tests).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from countgym.agents.backends.base import BaseChatModel, Message
from countgym.envs.actions import Reply
from countgym.errors import UserError
from countgym.logs import Usage

ATTENTION_NAME = "countgym_region"
"""Name of our attention implementation in transformers' registries."""
_NEG = -1e9  # log(0) stand-in in float32 logits: masks a key without NaNs


# =========================================================================== configurations
@dataclass(frozen=True)
class ModulationConfig:
    """One attention-modulation setting."""

    alpha: float = 2.0
    """Multiplier of the attention weights to Mask-BB image tokens (amplification)."""
    beta: float = 1.0
    """Multiplier of the weights to the other image tokens: 1 = amplification alone, 0 = masked."""
    layers: str = "all"
    """Decoder layers modulated: ``all``, ``early``, ``middle`` or ``late`` (thirds), or ``a:b``."""

    def __post_init__(self) -> None:
        if not self.alpha > 0 or self.beta < 0:
            raise ValueError(f"alpha must be > 0 and beta >= 0, got {self.alpha} and {self.beta}")
        self.layer_set(12)  # validates the spelling

    @property
    def name(self) -> str:
        """Short label, e.g. ``a2-b0-middle``."""
        return f"a{self.alpha:g}-b{self.beta:g}-{self.layers}"

    def layer_set(self, n_layers: int) -> set[int]:
        """The decoder layer indices this setting modulates in a model with ``n_layers``."""
        third = n_layers / 3.0
        spans = {
            "all": (0, n_layers),
            "early": (0, math.ceil(third)),
            "middle": (math.floor(third), math.ceil(2 * third)),
            "late": (math.floor(2 * third), n_layers),
        }
        if self.layers in spans:
            a, b = spans[self.layers]
        elif re.fullmatch(r"\d+:\d+", self.layers):
            a, b = (int(v) for v in self.layers.split(":"))
        else:
            raise ValueError(f"layers must be all, early, middle, late or 'a:b', got {self.layers!r}")
        return set(range(max(0, a), min(n_layers, b)))


MODULATION_SWEEP: tuple[ModulationConfig, ...] = tuple(
    ModulationConfig(alpha, beta, layers)
    for beta in (1.0, 0.0)
    for alpha in (1.5, 2.0, 3.0)
    for layers in ("all", "middle")
)
"""The 12 configurations searched per model (App. C.8.3 reports the two modes: amplification
alone, beta = 1, and amplification with outside masking, beta = 0). The paper does not list the
amplification factors and layer ranges; these three factors x two layer ranges are our grid."""


# =========================================================================== region -> tokens
@dataclass(frozen=True)
class ImageTokens:
    """Where one image's visual tokens sit in the sequence and what part of the image each sees."""

    positions: np.ndarray
    """(T,) sequence positions of the visual tokens."""
    boxes: np.ndarray
    """(T, 4) normalised [0, 1] xyxy image area each token covers."""


def grid_boxes(gh: int, gw: int, crop: Sequence[float] = (0.0, 0.0, 1.0, 1.0)) -> np.ndarray:
    """(gh * gw, 4) normalised boxes of a row-major gh x gw token grid laid over ``crop``."""
    x0, y0, x1, y1 = crop
    r, c = np.divmod(np.arange(gh * gw), gw)
    w, h = (x1 - x0) / gw, (y1 - y0) / gh
    return np.stack([x0 + c * w, y0 + r * h, x0 + (c + 1) * w, y0 + (r + 1) * h], axis=1)


def region_token_mask(region: np.ndarray, boxes: np.ndarray, *, min_coverage: float = 0.0) -> np.ndarray:
    """Tokens whose cell the region covers by more than ``min_coverage`` (fraction of the cell)."""
    region = np.asarray(region, dtype=bool)
    h, w = region.shape
    integral = np.zeros((h + 1, w + 1), dtype=np.int64)
    integral[1:, 1:] = region.cumsum(0).cumsum(1)
    b = np.asarray(boxes, dtype=float)
    xa = np.clip(np.floor(b[:, 0] * w).astype(int), 0, w)
    ya = np.clip(np.floor(b[:, 1] * h).astype(int), 0, h)
    xb = np.clip(np.maximum(np.ceil(b[:, 2] * w).astype(int), xa + 1), 0, w)
    yb = np.clip(np.maximum(np.ceil(b[:, 3] * h).astype(int), ya + 1), 0, h)
    inside = integral[yb, xb] - integral[ya, xb] - integral[yb, xa] + integral[ya, xa]
    area = np.maximum((xb - xa) * (yb - ya), 1)
    return inside / area > min_coverage


def image_tokens(model: Any, processor: Any, inputs: Any, row: int = 0) -> ImageTokens:
    """The visual tokens of the (single) image in batch row ``row`` of processor ``inputs``."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "")
    ids = np.asarray(inputs["input_ids"][row].tolist())
    if kind in ("idefics3", "smolvlm"):
        return _idefics3_tokens(ids, cfg, processor)
    if kind in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        thw = inputs["image_grid_thw"]
        if len(thw) != len(inputs["input_ids"]):
            raise ValueError("region tokens need exactly one image per conversation")
        t, gh, gw = (int(v) for v in thw[row].tolist())
        merge = int(getattr(cfg.vision_config, "spatial_merge_size", 2))
        pos = np.flatnonzero(ids == cfg.image_token_id)
        gh, gw = gh // merge, gw // merge
        return ImageTokens(pos, np.tile(grid_boxes(gh, gw), (t, 1))[: len(pos)])
    if kind == "gemma3":
        tid = getattr(cfg, "image_token_id", None) or cfg.image_token_index
        pos = np.flatnonzero(ids == tid)
        side = int(round(math.sqrt(len(pos))))
        return ImageTokens(pos, grid_boxes(side, side))
    raise UserError(f"no region-to-token layout for model type {kind!r} (supported: {', '.join(REGION_LAYOUTS)})")


def _idefics3_tokens(ids: np.ndarray, cfg: Any, processor: Any) -> ImageTokens:
    """Runs of ``<image>`` tokens, each preceded by ``<row_i_col_j>`` (a tile) or
    ``<global-img>`` (the whole image); within a run a row-major sqrt(len) grid (pixel shuffle)."""
    tok = processor.tokenizer
    image_id = cfg.image_token_id
    is_img = ids == image_id
    starts = np.flatnonzero(is_img & ~np.r_[False, is_img[:-1]])
    runs = []
    for s in starts:
        e = s
        while e < len(ids) and ids[e] == image_id:
            e += 1
        label = tok.convert_ids_to_tokens(int(ids[s - 1])) if s > 0 else ""
        runs.append((s, e, label))
    tiles = [(int(m.group(1)), int(m.group(2))) for _, _, lab in runs if (m := re.fullmatch(r"<row_(\d+)_col_(\d+)>", lab))]
    n_rows = max((r for r, _ in tiles), default=1)
    n_cols = max((c for _, c in tiles), default=1)
    pos, boxes = [], []
    for s, e, label in runs:
        m = re.fullmatch(r"<row_(\d+)_col_(\d+)>", label)
        if m:
            r, c = int(m.group(1)) - 1, int(m.group(2)) - 1
            crop = (c / n_cols, r / n_rows, (c + 1) / n_cols, (r + 1) / n_rows)
        else:
            crop = (0.0, 0.0, 1.0, 1.0)
        side = int(round(math.sqrt(e - s)))
        if side * side != e - s:
            raise ValueError(f"image token run of {e - s} tokens is not a square grid")
        pos.append(np.arange(s, e))
        boxes.append(grid_boxes(side, side, crop))
    if not pos:
        raise ValueError("no image tokens in the prompt")
    return ImageTokens(np.concatenate(pos), np.concatenate(boxes))


# =========================================================================== the attention hook
@dataclass
class _State:
    """What our attention implementation does during one forward/generate call."""

    bias: Any = None
    """(B, K0) float32 additive logit bias over the prompt's key positions, or None."""
    first_query: Any = None
    """(B,) first query position that is modulated (the text after the image)."""
    layers: set[int] | None = None
    capture_queries: Any = None
    """(Q,) query positions whose attention rows are recorded (batch row 0)."""
    captured: dict[int, Any] = field(default_factory=dict)


_STATE: contextvars.ContextVar[_State | None] = contextvars.ContextVar("countgym_region_state", default=None)
_REGISTERED = False


def _attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
               scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, Any]:
    """Eager attention (float32 logits) with the state's bias and row capture."""
    import torch

    st = _STATE.get()
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    logits = torch.matmul(query.float(), key.float().transpose(2, 3)) * scale
    if attention_mask is not None:
        logits = logits + attention_mask[..., : key.shape[-2]].float()
    layer = getattr(module, "layer_idx", None)
    if st is not None and st.bias is not None and layer is not None and (st.layers is None or layer in st.layers):
        n_q, n_k = query.shape[-2], key.shape[-2]
        bias = torch.zeros((logits.shape[0], n_k), dtype=torch.float32, device=logits.device)
        k0 = min(n_k, st.bias.shape[1])
        bias[:, :k0] = st.bias[:, :k0]
        qpos = torch.arange(n_k - n_q, n_k, device=logits.device)
        apply = qpos[None, :] >= st.first_query[:, None]  # (B, Q): queries after the image
        logits = torch.where(apply[:, None, :, None], logits + bias[:, None, None, :], logits)
    probs = torch.softmax(logits, dim=-1)
    if st is not None and st.capture_queries is not None and layer is not None:
        st.captured[layer] = probs[0, :, st.capture_queries, :].mean(dim=0).detach().cpu().numpy()
    if dropout and module.training:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    out = torch.matmul(probs.to(value.dtype), value).transpose(1, 2).contiguous()
    return out, probs.to(query.dtype)


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, _attention)
    # Our name needs a mask creator too, else transformers builds no causal mask for it.
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)
    _REGISTERED = True


@contextlib.contextmanager
def _decoder_attention(model: Any) -> Iterator[None]:
    """Route the language model's attention through ``_attention`` for the duration."""
    _register()
    cfg = model.config
    text_key = "text_config" if "text_config" in getattr(cfg, "sub_configs", {}) else None
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    before = text_cfg._attn_implementation
    model.set_attn_implementation({text_key: ATTENTION_NAME} if text_key else ATTENTION_NAME)
    try:
        yield
    finally:
        model.set_attn_implementation({text_key: before} if text_key else before)


def _n_layers(model: Any) -> int:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.num_hidden_layers)


def _split_regions(messages: Sequence[Message]) -> tuple[list[Message], np.ndarray | None]:
    """The messages without ``{"type": "region"}`` parts, and the (last) region mask."""
    region = None
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            keep = []
            for p in content:
                if p.get("type") == "region":
                    region = np.asarray(p["mask"], dtype=bool)
                else:
                    keep.append(p)
            m = {**m, "content": keep}
        out.append(m)
    return out, region


# =========================================================================== region attention
@dataclass(frozen=True)
class RegionAttention:
    """Attention of the answer position(s) to the Mask-BB tokens, per decoder layer."""

    per_layer: np.ndarray
    """(L,) head-averaged attention to the selected tokens divided by their number."""
    n_tokens: int
    """Selected (Mask-BB) visual tokens."""
    n_image_tokens: int

    @property
    def mean(self) -> float:
        """Average over layers."""
        return float(self.per_layer.mean())


def region_attention(
    backend: Any, messages: Sequence[Message], region: np.ndarray | None = None, *,
    answer: str | None = None, min_coverage: float = 0.0,
) -> RegionAttention:
    """Last-token attention to the Mask-BB tokens for one conversation (one image).

    ``region`` is the Mask-BB in the image's pixel frame (or a ``region`` part of the message).
    Without ``answer`` the query is the last prompt position (it predicts the answer: MCQ);
    with it, the answer's tokens are appended and the rows predicting them are averaged (OE,
    App. C.8.1).
    """
    import torch

    from countgym.agents.backends.transformers_backend import to_hf_messages

    msgs, inline = _split_regions(messages)
    region = inline if region is None else np.asarray(region, dtype=bool)
    if region is None:
        raise ValueError("region_attention needs a region mask")
    model = backend.hf_model
    inputs = backend._inputs([to_hf_messages(msgs)])
    n_prompt = int(inputs["input_ids"].shape[1])
    queries = [n_prompt - 1]
    if answer:
        extra = backend.processor.tokenizer(answer, add_special_tokens=False)["input_ids"]
        if extra:
            ext = torch.tensor([extra], dtype=inputs["input_ids"].dtype, device=inputs["input_ids"].device)
            inputs["input_ids"] = torch.cat([inputs["input_ids"], ext], dim=1)
            inputs["attention_mask"] = torch.cat([inputs["attention_mask"], torch.ones_like(ext)], dim=1)
            queries = list(range(n_prompt - 1, n_prompt - 1 + len(extra)))
    toks = image_tokens(model, backend.processor, inputs)
    sel = region_token_mask(region, toks.boxes, min_coverage=min_coverage)
    targets = toks.positions[sel]
    state = _State(capture_queries=torch.tensor(queries, device=model.device))
    with backend._lock, _decoder_attention(model), torch.inference_mode():
        token = _STATE.set(state)
        try:
            model(**inputs)
        finally:
            _STATE.reset(token)
    per_layer = np.array([
        float(state.captured[i][:, targets].sum(axis=1).mean() / max(len(targets), 1)) if len(targets) else 0.0
        for i in sorted(state.captured)
    ])
    return RegionAttention(per_layer, int(sel.sum()), len(toks.positions))


@dataclass(frozen=True)
class AttentionComparison:
    """Region attention of correct vs incorrect answers."""

    correct: np.ndarray
    """(L,) mean per layer over correctly answered items."""
    incorrect: np.ndarray
    n_correct: int
    n_incorrect: int

    @property
    def relative_gain(self) -> float:
        """How much more attention correct answers give, averaged over layers (0.352 = 35.2 %)."""
        inc = float(self.incorrect.mean())
        return float(self.correct.mean()) / inc - 1.0 if inc > 0 else float("nan")


def compare_region_attention(values: Sequence[RegionAttention], correct: Sequence[bool]) -> AttentionComparison:
    """Per-layer means of correct and incorrect items (Figure 10)."""
    if len(values) != len(correct):
        raise ValueError(f"{len(values)} attention results but {len(correct)} correctness flags")
    ok = np.asarray(correct, dtype=bool)
    mat = np.stack([v.per_layer for v in values]) if values else np.zeros((0, 0))

    def mean(rows: np.ndarray) -> np.ndarray:
        return rows.mean(axis=0) if len(rows) else np.full(mat.shape[1], np.nan)

    return AttentionComparison(mean(mat[ok]), mean(mat[~ok]), int(ok.sum()), int((~ok).sum()))


# =========================================================================== modulation
REGION_LAYOUTS = ("idefics3", "smolvlm", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3")
"""Model types whose image tokens can be mapped back to image regions."""


class AttentionModulatedBackend(BaseChatModel):
    """A ``TransformersBackend`` whose generation reweights attention to the Mask-BB tokens.

    Requests carry the region as a ``{"type": "region", "mask": bool (H, W)}`` content part
    (``CFPolicy`` adds it when ``accepts_region`` is true); a request without one is generated
    unmodulated. Generation is greedy with the wrapped backend's settings.
    """

    accepts_region = True

    def __init__(self, backend: Any, config: ModulationConfig | str | None = None, *,
                 min_coverage: float = 0.0, **backend_options: Any) -> None:
        if isinstance(backend, str):
            from countgym.agents.backends.transformers_backend import TransformersBackend

            backend = TransformersBackend(backend, **backend_options)
        if not hasattr(backend, "hf_model"):
            raise UserError("attention modulation (+attn) needs a local transformers model: --model hf:/path")
        kind = getattr(getattr(backend.hf_model, "config", None), "model_type", "")
        if kind not in REGION_LAYOUTS:
            # Fail before any episode rather than once per episode.
            raise UserError(f"no region-to-token layout for model type {kind!r} (supported: {', '.join(REGION_LAYOUTS)})")
        self.backend = backend
        self.config = parse_config(config) if isinstance(config, str) else (config or ModulationConfig())
        self.min_coverage = min_coverage
        self.model = f"{backend.model}+attn[{self.config.name}]"

    def provider_params(self) -> dict[str, Any]:
        """The wrapped backend's parameters plus the modulation setting."""
        params = dict(getattr(self.backend, "provider_params", dict)())
        params.update(model=self.model, attention=self.config.name, min_coverage=self.min_coverage)
        return params

    def complete(self, messages: list[Message]) -> Reply:
        """One modulated greedy generation."""
        return self.complete_batch([messages])[0]

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]:
        """Modulated generation, ``batch_size`` conversations at a time (left padded)."""
        out: list[Reply] = []
        size = getattr(self.backend, "batch_size", 1)
        for i in range(0, len(batch), size):
            out.extend(self._generate(batch[i : i + size]))
        return out

    def _generate(self, chunk: Sequence[list[Message]]) -> list[Reply]:
        import torch

        from countgym.agents.backends.transformers_backend import to_hf_messages

        be, model = self.backend, self.backend.hf_model
        start = time.perf_counter()
        try:
            split = [_split_regions(m) for m in chunk]
            inputs = be._inputs([to_hf_messages(m) for m, _ in split])
            state = self._state(inputs, [r for _, r in split])
            with be._lock, _decoder_attention(model), torch.inference_mode():
                token = _STATE.set(state)
                try:
                    generated = model.generate(**inputs, max_new_tokens=be.max_new_tokens, do_sample=False)
                finally:
                    _STATE.reset(token)
        except Exception as e:  # one failed request ends its episode, not the run
            msg = " ".join(f"{type(e).__name__}: {e}".split())[:600]
            return [Reply(text="", error=msg, latency_s=time.perf_counter() - start) for _ in chunk]
        latency = time.perf_counter() - start
        n_prompt = inputs["input_ids"].shape[1]
        replies = []
        for row, n_real in zip(generated[:, n_prompt:].tolist(), inputs["attention_mask"].sum(dim=1).tolist(), strict=True):
            ids = be._until_eos(row)
            text, reasoning = be._split_thinking(ids)
            usage = Usage(prompt_tokens=int(n_real), completion_tokens=len(ids), reasoning_tokens=reasoning)
            replies.append(Reply(text=text, usage=usage, cost=None, latency_s=latency))
        return replies

    def _state(self, inputs: Any, regions: Sequence[np.ndarray | None]) -> _State:
        import torch

        model = self.backend.hf_model
        n_rows, n_keys = inputs["input_ids"].shape
        bias = np.zeros((n_rows, n_keys), dtype=np.float32)
        first = np.full(n_rows, n_keys, dtype=np.int64)  # rows without a region: nothing modulated
        log_a = math.log(self.config.alpha)
        log_b = math.log(self.config.beta) if self.config.beta > 0 else _NEG
        for r, region in enumerate(regions):
            if region is None:
                continue
            toks = image_tokens(model, self.backend.processor, inputs, r)
            sel = region_token_mask(region, toks.boxes, min_coverage=self.min_coverage)
            bias[r, toks.positions[sel]] = log_a
            bias[r, toks.positions[~sel]] = log_b
            first[r] = int(toks.positions.max()) + 1
        return _State(
            bias=torch.from_numpy(bias).to(model.device),
            first_query=torch.from_numpy(first).to(model.device),
            layers=self.config.layer_set(_n_layers(model)),
        )


def parse_config(text: str) -> ModulationConfig:
    """``a2-b0-middle`` (as ``ModulationConfig.name`` writes it) -> ``ModulationConfig``."""
    m = re.fullmatch(r"a([\d.]+)-b([\d.]+)-(\w+|\d+:\d+)", text.strip())
    if not m:
        raise ValueError(f"modulation config must look like 'a2-b0-middle', got {text!r}")
    return ModulationConfig(float(m.group(1)), float(m.group(2)), m.group(3))


def sweep_modulation(
    backend: Any, dataset: Any = "countercount", *, configs: Sequence[ModulationConfig] = MODULATION_SWEEP,
    question: str = "mcq", stimulus_ids: Sequence[str] | None = None,
) -> Any:
    """CF accuracy and bias rate of each configuration (plus the unmodulated baseline) on the
    CF items of ``dataset``: the per-model selection of App. C.8.3. Returns a DataFrame."""
    import pandas as pd

    from countgym.agents.backends.base import image_part, message, text_part
    from countgym.envs.cf_env import CounterCountEnv

    env = CounterCountEnv(dataset, stimulus_ids=stimulus_ids, kind="cf", question=question, expose_region=True)  # type: ignore[arg-type]
    rows = []
    for cfg in (None, *configs):
        model = backend if cfg is None else AttentionModulatedBackend(backend, cfg)
        outcomes = []
        for sid in env._pool:
            obs, _ = env.reset(options={"stimulus_id": sid})
            # The CounterCount arm's request; the region travels only to the modulated backend.
            parts = [image_part(obs["image"]), text_part(str(obs["text"]))]
            if cfg is not None:
                parts.append({"type": "region", "mask": obs["region"]})
            *_, info = env.step(model.complete([message("user", *parts)]))
            outcomes.append(info["outcome"])
        n = len(outcomes)
        rows.append({
            "config": "baseline" if cfg is None else cfg.name,
            "n": n,
            "cf_accuracy": outcomes.count("correct") / n,
            "bias_rate": outcomes.count("biased") / n,
        })
    return pd.DataFrame(rows)
