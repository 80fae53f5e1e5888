"""The model-backend interface (``ChatModel``), message helpers and the backend factory.

Messages are OpenAI-style chat messages whose ``content`` is a list of parts:
``{"type": "text", "text": str}`` or ``{"type": "image", "image": np.ndarray}`` (uint8 H x W x 3;
or an ``EncodedImage``, the same pixels held as their PNG data URL, which ``np.asarray`` decodes).
Each backend converts these parts to its own wire format, so policies never deal with base64,
processors or provider quirks.
"""

from __future__ import annotations

import base64
import io
import struct
import threading
import weakref
import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from countgym.agents.backends.png_bands import encode_png_over
from countgym.bounded_cache import BoundedCache
from countgym.cpu_slots import cpu_slot
from countgym.dataurl import data_url
from countgym.envs.actions import Reply
from countgym.envs.frames import StoredFrame
from countgym.envs.originals import drawn_over, view_key
from countgym.envs.stored_view import StoredView
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


class EncodedImage:
    """An image held as its lossless PNG data URL instead of its pixels (a 768 x 768 tag render:
    tens of kB instead of 1.7 MB), for backends that send data URLs anyway. ``np.asarray`` gives
    the pixels back (decoded on demand), so code that wants an array still gets one."""

    __slots__ = ("shape", "url")

    def __init__(self, url: str, shape: tuple[int, ...]) -> None:
        self.url = url
        self.shape = shape

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        pixels = decode_data_url(self.url)
        return pixels if dtype is None else pixels.astype(dtype)

    def __repr__(self) -> str:
        return f"EncodedImage(shape={self.shape}, {len(self.url)} characters)"


def encoded_image(image: Any) -> Any:
    """``image`` as an ``EncodedImage`` (a uint8 array encodes once, through ``png_data_url``'s
    caches); anything else is returned as it is."""
    if (isinstance(image, np.ndarray) and image.dtype == np.uint8) or isinstance(image, StoredView):
        return EncodedImage(png_data_url(image), tuple(image.shape))
    return image


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
# Content-addressed by provenance: the encodings of the environments' shared unmarked views
# (``countgym.envs.originals.view_key``), so each distinct view is encoded once per process. A
# view sent as its source file is only base64-encoded, per episode, and kept on the view
# (``StoredView.url``): in a cell that runs each file once, entries for those only pushed out
# others, and left each new URL in memory the cache had not touched lately.
_VIEW_URLS: BoundedCache[tuple[Any, ...], str] = BoundedCache(1024, 64 * 2**20, len)
"""The view encodings kept, at most: entries and characters in all (a paper's CounterCount cells
show the same 214 images one cell after another; a 768 px photo's PNG is about 1 MB)."""
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# PNG colour types by channel count: grey, RGB, RGBA (8 bits per sample).
_COLOUR_TYPE = {1: 0, 3: 2, 4: 6}


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(image: np.ndarray) -> bytes:
    """Lossless PNG bytes of a uint8 image (H x W, H x W x 1, 3 or 4), built for speed.

    Every row uses the PNG "Up" filter (computed by numpy) and the stream is deflated at level 1
    with the run-length strategy: about 3x faster than Pillow's adaptive filtering on tag
    renders and 2x on photos, for payloads within about 20 %. zlib and numpy release the GIL
    here, so concurrent episodes encode in parallel. Decoders see exactly the same pixels
    (``decode_data_url`` round-trips them). Other dtypes and shapes go through Pillow.
    """
    a = np.asarray(image)
    channels = 1 if a.ndim == 2 else (a.shape[2] if a.ndim == 3 else 0)
    if a.dtype != np.uint8 or channels not in _COLOUR_TYPE or a.shape[0] < 1 or a.shape[1] < 1:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(a)).save(buf, format="PNG", compress_level=1)
        return buf.getvalue()
    h, w = a.shape[:2]
    rows = a.reshape(h, w * channels)
    raw = np.empty((h, w * channels + 1), dtype=np.uint8)
    raw[0, 0] = 0  # the first row has no row above: filter "None"
    raw[0, 1:] = rows[0]
    raw[1:, 0] = 2  # filter "Up": each byte minus the byte above, modulo 256
    np.subtract(rows[1:], rows[:-1], out=raw[1:, 1:])
    # memLevel 8 (zlib's default): as small as 9 under Z_RLE on tag renders, about a quarter faster.
    deflate = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    idat = deflate.compress(raw.data) + deflate.flush()
    ihdr = struct.pack(">IIBBBBB", w, h, 8, _COLOUR_TYPE[channels], 0, 0, 0)
    return _PNG_SIGNATURE + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def _encode(image: np.ndarray | StoredView) -> bytes:
    """``encode_png``, or only the changed row bands when ``image`` was drawn over a cached
    unmarked view (``countgym.agents.backends.png_bands``)."""
    over = drawn_over(image)
    if over is not None:
        png = encode_png_over(np.asarray(image), *over)
        if png is not None:
            return png
    view = view_key(image)
    if view is not None:
        # An unmarked view: encoded as its row bands, which the renders drawn over it reuse.
        a = np.asarray(image)
        png = encode_png_over(a, view, a)
        if png is not None:
            return png
    return encode_png(np.asarray(image))


def png_data_url(image: np.ndarray | StoredView | EncodedImage | StoredFrame) -> str:
    """The image as a base64 PNG data URL (lossless, ``encode_png``; cached per live array object,
    and per distinct unmarked view of a stimulus; a view drawn over one re-encodes only its
    changed row bands; an unmarked view whose source file is already what a model is sent is that
    file's image data, a PNG (``countgym.envs.originals.png_as_sent``) or a clean JPEG,
    ``countgym.envs.jpeg_clean``). A video frame held as its stored file
    (``countgym.envs.frames.StoredFrame``: a clean JPEG or PNG, metadata cut out) is sent as those
    bytes, not re-encoded: the name says PNG for what this function makes, not for what it passes on.

    The cache assumes arrays are not mutated in place after being sent, which holds for
    observations (the environment returns a fresh array each step).
    """
    if isinstance(image, EncodedImage | StoredFrame):
        return image.url
    if isinstance(image, StoredView):
        return image.url or _view_url(image)
    key = id(image)
    with _PNG_LOCK:
        hit = _PNG_CACHE.get(key)
    if hit is not None:
        return hit
    with cpu_slot():  # at most one encode per core (``countgym.cpu_slots``)
        url = data_url("image/png", _encode(image))
    try:
        weakref.finalize(image, _PNG_CACHE.pop, key, None)
    except TypeError:  # objects without weakref support are simply not cached
        return url
    with _PNG_LOCK:
        _PNG_CACHE[key] = url
    return url


def _view_url(image: StoredView) -> str:
    """``png_data_url`` of an unmarked view: its source file's image data when that is what a
    model is sent, else its encoding, from the cache of view encodings (``_VIEW_URLS``); kept on
    the view for the episode's later turns (no per-object cache entry, no finaliser)."""
    original = image.original
    if original.sent is not None:
        # Already what a model is sent: sent as it is (base64 only, no cache entry to keep).
        sent = data_url(original.sent_type, original.sent)
        image.remember_url(sent)
        return sent
    view = image.key
    url = _VIEW_URLS.get(view) if view is not None else None
    png: bytes | None = None
    if url is None:
        with cpu_slot():
            png = _encode(image)
            url = data_url("image/png", png)
        if view is not None:
            _VIEW_URLS.put(view, url)
    if view is not None and original.png() is None:
        # The shared original now holds this PNG instead of its pixels while episodes wait.
        original.keep_encoded(png if png is not None else base64.b64decode(url.partition(",")[2]))
    image.remember_url(url)
    return url


def decode_data_url(url: str) -> np.ndarray:
    """Decode a base64 image data URL into a uint8 RGB array."""
    _, _, payload = url.partition(",")
    with Image.open(io.BytesIO(base64.b64decode(payload))) as im:
        return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


# --- factory ------------------------------------------------------------------------------------
