"""Local vision-language models through transformers (``AutoModelForImageTextToText``).

The model's own chat template formats the conversation (Qwen2.5-VL, Qwen3-VL, SmolVLM,
Gemma-3, ...). Decoding is greedy, or sampling with the checkpoint's own generation parameters
(``decoding="sample"``: CounterCount thinking mode, Section 4.1.4 and App. C.7). ``complete_batch`` pads on the left and generates a whole batch
at once, which is where local inference gets its throughput. Weights are loaded once per
(path, device, dtype) and shared by every backend instance in the process, since the runner
makes one policy per episode.

torch and transformers import lazily; without them the constructor raises ``MissingExtraError``
naming the ``local`` extra. Nothing is downloaded unless ``download=True``.
"""

from __future__ import annotations

import importlib.util
import inspect
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from countgym.agents.backends.base import BaseChatModel, Message
from countgym.envs.actions import Reply
from countgym.errors import MissingExtraError, UserError
from countgym.logs import Usage

_CACHE: dict[tuple[Any, ...], tuple[Any, Any, threading.Lock]] = {}
_CACHE_LOCK = threading.Lock()
_THINK_END = "</think>"


def _require_local() -> None:
    for pkg in ("torch", "transformers"):
        if importlib.util.find_spec(pkg) is None:
            raise MissingExtraError(pkg, "local")


class TransformersBackend(BaseChatModel):
    """A ``ChatModel`` over a local transformers checkpoint.

    Args:
        path: a local folder or, with ``download=True``, a hub id.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ... or ``"auto"`` (GPU when available).
        dtype: ``"auto"`` (the checkpoint's), ``"bfloat16"``, ``"float16"`` or ``"float32"``.
        max_new_tokens: generation cap per reply.
        batch_size: requests per ``generate`` call in ``complete_batch``.
        thinking: False / True pass ``enable_thinking=False`` / ``True`` to templates that know
            it (Qwen3 and the like); None leaves the template's default.
        decoding: "greedy", or "sample": sampling with the checkpoint's generation config
            (temperature, top-p, top-k, ...; the library defaults where it ships none).
        chat_template_kwargs: extra variables for the chat template.
        download: allow fetching from the hub (off: runs never download implicitly).
        trust_remote_code: forwarded to ``from_pretrained``.
    """

    def __init__(
        self,
        path: str,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_new_tokens: int = 1024,
        batch_size: int = 8,
        thinking: bool | None = None,
        decoding: str = "greedy",
        chat_template_kwargs: dict[str, Any] | None = None,
        download: bool = False,
        trust_remote_code: bool = False,
    ) -> None:
        _require_local()
        if batch_size < 1 or max_new_tokens < 1:
            raise ValueError("batch_size and max_new_tokens must be >= 1")
        if decoding not in ("greedy", "sample"):
            raise UserError(f"decoding must be 'greedy' or 'sample', got {decoding!r}")
        self.decoding = decoding
        self.model = f"hf:{path}"
        self.path = path
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.template_kwargs = dict(chat_template_kwargs or {})
        if thinking is not None:
            self.template_kwargs.setdefault("enable_thinking", bool(thinking))
        self.processor, self.hf_model, self._lock = _load(
            path, device, dtype, download, trust_remote_code
        )
        template = str(getattr(self.processor, "chat_template", None) or "")
        # Variables a template never reads would be handed to the processor as options.
        self.template_kwargs = {k: v for k, v in self.template_kwargs.items() if k in template}

    def __repr__(self) -> str:
        return f"TransformersBackend(path={self.path!r}, device={self.hf_model.device})"

    def provider_params(self) -> dict[str, Any]:
        """The generation parameters worth logging."""
        return {
            "model": self.model,
            "device": str(self.hf_model.device),
            "dtype": str(self.hf_model.dtype),
            "max_new_tokens": self.max_new_tokens,
            "decoding": self.decoding,
            **self._sampling_params(),
            **self.template_kwargs,
        }

    def _sampling_params(self) -> dict[str, Any]:
        """The sampling parameters generation uses (the checkpoint's generation config)."""
        if self.decoding != "sample":
            return {}
        cfg = self.hf_model.generation_config
        keys = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
        return {k: getattr(cfg, k, None) for k in keys if getattr(cfg, k, None) is not None}

    def complete(self, messages: list[Message]) -> Reply:
        """One generation (greedy or sampled, as configured)."""
        return self.complete_batch([messages])[0]

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]:
        """Generation for several conversations, ``batch_size`` at a time (left padded)."""
        out: list[Reply] = []
        for i in range(0, len(batch), self.batch_size):
            out.extend(self._generate(batch[i : i + self.batch_size]))
        return out

    def _generate(self, chunk: Sequence[list[Message]]) -> list[Reply]:
        import torch

        start = time.perf_counter()
        try:
            convs = [to_hf_messages(m) for m in chunk]
            with self._lock:  # one generate at a time per model; batching is the parallelism
                inputs = self._inputs(convs)
                with torch.inference_mode():
                    # Sampling takes temperature, top-p, top-k from the model's generation config.
                    generated = self.hf_model.generate(
                        **inputs, max_new_tokens=self.max_new_tokens,
                        do_sample=self.decoding == "sample",
                    )
        except Exception as e:  # OOM, too-long context, a bad image: end this episode, not the run
            msg = " ".join(f"{type(e).__name__}: {e}".split())[:600]
            return [Reply(text="", error=msg, latency_s=time.perf_counter() - start) for _ in chunk]
        latency = time.perf_counter() - start
        prompt_len = inputs["input_ids"].shape[1]
        prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()
        replies = []
        for row, n_prompt in zip(generated[:, prompt_len:].tolist(), prompt_tokens, strict=True):
            ids = self._until_eos(row)
            text, reasoning = self._split_thinking(ids)
            usage = Usage(
                prompt_tokens=int(n_prompt), completion_tokens=len(ids), reasoning_tokens=reasoning
            )
            replies.append(Reply(text=text, usage=usage, cost=None, latency_s=latency))
        return replies

    def _inputs(self, convs: list[list[dict[str, Any]]]) -> Any:
        kwargs: dict[str, Any] = {
            "add_generation_prompt": True,
            "tokenize": True,
            "return_dict": True,
            "return_tensors": "pt",
        }
        # transformers 5 wants processor options in processor_kwargs; 4.x took them directly.
        if "processor_kwargs" in inspect.signature(self.processor.apply_chat_template).parameters:
            kwargs["processor_kwargs"] = {"padding": True}
        else:
            kwargs["padding"] = True
        inputs = self.processor.apply_chat_template(convs, **kwargs, **self.template_kwargs)
        # Cast pixel tensors to the model's dtype (bf16 checkpoints); integer ids stay as they are.
        try:
            return inputs.to(self.hf_model.device, dtype=self.hf_model.dtype)
        except TypeError:  # a tokenizer-only BatchEncoding moves but does not cast
            return inputs.to(self.hf_model.device)

    def _until_eos(self, row: list[int]) -> list[int]:
        eos = self.hf_model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        pad = self.hf_model.generation_config.pad_token_id
        for k, tok in enumerate(row):
            if tok in eos_ids:
                return row[: k + 1]
        return [t for t in row if t != pad] if pad is not None and pad not in eos_ids else row

    def _split_thinking(self, ids: list[int]) -> tuple[str, int | None]:
        """Reply text without a ``<think>`` block, and that block's token count (None if absent)."""
        tok = self.processor.tokenizer
        full = tok.decode(ids, skip_special_tokens=True)
        if _THINK_END not in full:
            return full.strip(), None
        thought, _, answer = full.partition(_THINK_END)
        return answer.strip(), len(tok(thought, add_special_tokens=False)["input_ids"])


def to_hf_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages with images as PIL images, the form chat templates and processors take."""
    from PIL import Image

    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        parts = []
        for p in content or []:
            if p.get("type") == "image":
                parts.append(
                    {
                        "type": "image",
                        "image": Image.fromarray(np.asarray(p["image"], dtype=np.uint8)),
                    }
                )
            elif p.get("type") == "text":
                parts.append({"type": "text", "text": p["text"]})
            else:
                raise ValueError(f"unknown content part type {p.get('type')!r}")
        out.append({"role": m["role"], "content": parts})
    return out


def _load(
    path: str, device: str, dtype: str, download: bool, trust_remote_code: bool
) -> tuple[Any, Any, threading.Lock]:
    """Processor, model and its generation lock, loaded once per configuration."""
    key = (path, device, dtype, trust_remote_code)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch_dtype: Any = dtype if dtype == "auto" else getattr(torch, dtype, None)
        if torch_dtype is None:
            raise UserError(f"unknown dtype {dtype!r}: use auto, bfloat16, float16 or float32")
        common = {"local_files_only": not download, "trust_remote_code": trust_remote_code}
        try:
            processor = AutoProcessor.from_pretrained(path, **common)
            model: Any = AutoModelForImageTextToText.from_pretrained(path, dtype=torch_dtype, **common)
        except OSError as e:
            raise UserError(
                f"cannot load local model {path!r} ({' '.join(str(e).split())[:200]}); give a folder with "
                "the weights, or download them first (huggingface-cli download ID)"
            ) from None
        model = model.to(device).eval()
        # Batched generation appends new tokens on the right, so prompts must be padded on the left.
        tok = getattr(processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"
            if model.generation_config.pad_token_id is None and tok.pad_token_id is not None:
                model.generation_config.pad_token_id = tok.pad_token_id
        _CACHE[key] = (processor, model, threading.Lock())
        return _CACHE[key]
