"""The model-backend interface (``ChatModel``), message helpers and the backend factory.

Messages are OpenAI-style chat messages whose ``content`` is a list of parts:
``{"type": "text", "text": str}`` or ``{"type": "image", "image": np.ndarray}`` (uint8 H x W x 3).
Each backend converts these parts to its own wire format, so policies never deal with base64,
processors or provider quirks.
"""

from __future__ import annotations

import base64
import io
import threading
import weakref
import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from countgym.envs.actions import Reply
from countgym.logs import Usage

Message = dict[str, Any]

# Providers litellm routes by model prefix; anything with a "/" that is not a local spec also
# goes to litellm (it knows far more providers than we could list).
LITELLM_PREFIXES: tuple[str, ...] = (
    "openai/",
    "gemini/",
    "anthropic/",
    "openrouter/",
    "hosted_vllm/",
    "vertex_ai/",
    "azure/",
    "bedrock/",
    "groq/",
    "xai/",
    "together_ai/",
    "mistral/",
    "ollama/",
    "ollama_chat/",
    "deepseek/",
    "fireworks_ai/",
)
LOCAL_PREFIXES: tuple[str, ...] = ("hf:", "local:")


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: one request in, one ``Reply`` out; never raises on provider faults."""

    model: str

    def complete(self, messages: list[Message]) -> Reply: ...

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]: ...


class BaseChatModel:
    """Shared defaults for backends: sequential ``complete_batch``."""

    model: str = ""

    def complete(self, messages: list[Message]) -> Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]:
        """Answer several independent requests; the default runs them one after another."""
        return [self.complete(m) for m in batch]


# --- message helpers ----------------------------------------------------------------------------
def text_part(text: str) -> dict[str, Any]:
    """A text content part."""
    return {"type": "text", "text": text}


def image_part(image: np.ndarray) -> dict[str, Any]:
    """An image content part (uint8 H x W x 3)."""
    return {"type": "image", "image": image}


def message(role: str, *parts: dict[str, Any]) -> Message:
    """A chat message from content parts."""
    return {"role": role, "content": list(parts)}


def message_text(msg: Message) -> str:
    """All text of a message, parts joined by newlines (string contents pass through)."""
    content = msg.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def sum_usage(usages: Sequence[Usage | None]) -> Usage | None:
    """Field-wise sum of several calls' usage; a field is null when every call left it null."""
    known = [u for u in usages if u is not None]
    if not known:
        return None

    def total(field: str) -> int | None:
        vals = [getattr(u, field) for u in known if getattr(u, field) is not None]
        return sum(vals) if vals else None

    return Usage(
        prompt_tokens=total("prompt_tokens"),
        completion_tokens=total("completion_tokens"),
        reasoning_tokens=total("reasoning_tokens"),
    )


def sum_cost(costs: Sequence[float | None]) -> float | None:
    """Total cost, or null when any call's cost is unknown (a partial sum would under-report)."""
    if not costs or any(c is None for c in costs):
        return None
    return float(sum(c for c in costs if c is not None))


# --- image encoding -----------------------------------------------------------------------------
# The context policy re-sends the previous image on every turn; caching its encoding per array
# object halves the PNG work per call, which matters at high concurrency on a few cores. Entries
# die with their array (weakref finalizer), so finished episodes hold no pixels here.
_PNG_CACHE: dict[int, str] = {}
_PNG_LOCK = threading.Lock()


def png_data_url(image: np.ndarray) -> str:
    """The image as a base64 PNG data URL (lossless; cached per live array object).

    The cache assumes arrays are not mutated in place after being sent, which holds for
    observations (the environment returns a fresh array each step).
    """
    key = id(image)
    with _PNG_LOCK:
        hit = _PNG_CACHE.get(key)
    if hit is not None:
        return hit
    buf = io.BytesIO()
    # Level 1 with the RLE strategy: ~45 % faster than Pillow's default, and on flat stimuli and
    # tag renders about as small (the time left is Pillow's row filtering, not zlib).
    Image.fromarray(np.ascontiguousarray(image)).save(
        buf, format="PNG", compress_level=1, compress_type=zlib.Z_RLE
    )
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    try:
        weakref.finalize(image, _PNG_CACHE.pop, key, None)
    except TypeError:  # objects without weakref support are simply not cached
        return url
    with _PNG_LOCK:
        _PNG_CACHE[key] = url
    return url


def decode_data_url(url: str) -> np.ndarray:
    """Decode a base64 image data URL into a uint8 RGB array."""
    _, _, payload = url.partition(",")
    with Image.open(io.BytesIO(base64.b64decode(payload))) as im:
        return np.asarray(im.convert("RGB"))


# --- factory ------------------------------------------------------------------------------------
