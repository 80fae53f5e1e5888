"""A video's sampled frames as an observation: the stored files' bytes, decoded only on demand.

A CountVideoBench request carries ten 1920 x 1080 frames. Decoding them (62 MB of pixels) and
encoding them again for the request cost about 90 times more CPU than reading the files and
base64-encoding them, for the same pixels. So an observation's ``frames`` is a ``FrameStack``:
each frame held as the bytes the model is sent (``StoredFrame``: a clean stored JPEG as it is,
``countgym.envs.jpeg_clean``; a PNG as ``countgym.envs.originals.png_as_sent`` accepts it),
with the stack's shape known from the file headers. ``np.asarray(stack)`` (or of one frame)
decodes the pixels, for a policy that reads them (a local model, a plug-in); a backend that
sends data URLs takes ``StoredFrame.url`` and decodes nothing. A frame that cannot be sent as
stored (fitted to ``max_side``, or a file that is not clean) is held as its decoded pixels, which
backends encode losslessly as before.

The stack is immutable (its pixel arrays are read-only), so the environment hands the same
object to every caller without copying it.
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

from countgym.dataurl import data_url
from countgym.envs.jpeg_clean import jpeg_parse
from countgym.envs.originals import png_as_sent


class StoredFrame:
    """One frame held as the image file sent for it (``media_type``, ``data``); ``np.asarray``
    decodes its pixels (uint8 H x W x 3), ``url`` is its base64 data URL."""

    __slots__ = ("data", "media_type", "shape", "_url")

    def __init__(self, data: bytes, media_type: str, size: tuple[int, int]) -> None:
        self.data = data
        self.media_type = media_type
        self.shape = (int(size[1]), int(size[0]), 3)
        self._url: str | None = None

    @property
    def url(self) -> str:
        """``data:<media type>;base64,...`` of the bytes sent (built once)."""
        if self._url is None:
            self._url = data_url(self.media_type, self.data)
        return self._url

    def pixels(self) -> np.ndarray:
        """The decoded pixels (a new read-only uint8 H x W x 3 array)."""
        with Image.open(io.BytesIO(self.data)) as im:
            out = np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
        out.flags.writeable = False
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.pixels()
        return out if dtype is None else out.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredFrame):
            return NotImplemented
        return self.media_type == other.media_type and self.data == other.data

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredFrame({self.media_type}, {self.shape[1]}x{self.shape[0]}, {len(self.data)} bytes)"


Frame = StoredFrame | np.ndarray
"""A frame of a ``FrameStack``: its stored bytes, or its pixels (read-only)."""


class FrameStack:
    """T frames of equal size in time order (T x H x W x 3 uint8 once decoded), immutable.

    Iterating gives the frames (``StoredFrame`` or read-only arrays); ``np.asarray`` gives the
    decoded T x H x W x 3 stack (decoded on each call; keep the result if you need it twice).
    Code written for the array it used to be keeps working: ``copy()`` and any other array
    attribute (``mean``, ``tobytes``, ``astype``, ...) act on a freshly decoded stack.
    """

    __slots__ = ("frames", "shape")
    dtype = np.dtype(np.uint8)
    ndim = 4

    def __init__(self, frames: list[Frame]) -> None:
        if not frames:
            raise ValueError("a frame stack needs at least one frame")
        shapes = {tuple(f.shape) for f in frames}
        if len(shapes) != 1:
            raise ValueError("frames differ in size")
        h, w, c = next(iter(shapes))
        object.__setattr__(self, "frames", tuple(frames))
        object.__setattr__(self, "shape", (len(frames), int(h), int(w), int(c)))

    frames: tuple[Frame, ...]
    shape: tuple[int, int, int, int]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a FrameStack is immutable")

    def copy(self) -> np.ndarray:
        """The decoded stack, the caller's own (as ``ndarray.copy`` gave it)."""
        return np.asarray(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # numpy's and pickle's protocols must see only what is defined
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrameStack, (list(self.frames),))

    def __copy__(self) -> FrameStack:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrameStack:
        return self  # immutable: a copy would only cost memory

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    def __getitem__(self, index: int) -> Frame:
        return self.frames[index]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.empty(self.shape, dtype=np.uint8)
        for k, f in enumerate(self.frames):
            out[k] = np.asarray(f)
        return out if dtype is None else out.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FrameStack):
            return NotImplemented
        return self.shape == other.shape and all(
            (a == b) if isinstance(a, StoredFrame) and isinstance(b, StoredFrame)
            else (not isinstance(a, StoredFrame) and not isinstance(b, StoredFrame) and np.array_equal(a, b))
            for a, b in zip(self.frames, other.frames, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        stored = sum(isinstance(f, StoredFrame) for f in self.frames)
        return f"FrameStack(shape={self.shape}, {stored} of {len(self.frames)} frames as stored)"


def as_sent(data: bytes, identity: tuple[Any, ...] | None = None) -> StoredFrame | None:
    """``data`` as a frame sent as stored (a clean JPEG with its metadata cut out, or a PNG that
    ``png_as_sent`` accepts), or None when it must be decoded and encoded afresh.

    ``identity`` (the file's path, size, modification time, inode and device, as
    ``read_frame_file`` gives it) lets the verdict on a file be reused while the file is
    unchanged: finding a JPEG's end reads every byte of its entropy-coded data, and a paper's
    video cells send each of the battery's 26,000 frames once per model."""
    if identity is not None:
        with _VERDICTS_LOCK:
            verdict = _VERDICTS.get(identity)
        if verdict is not None and len(data) == identity[1]:
            return _from_verdict(data, verdict)
    if data[:2] == b"\xff\xd8":
        parsed = jpeg_parse(data)
        verdict = None if parsed is None else ("image/jpeg", parsed[0], parsed[1])
    elif data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        size = (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
        png = png_as_sent(data, size)
        if png is None:
            verdict = None
        elif png is data:
            verdict = ("image/png", [(0, len(data))], size)
        else:
            return StoredFrame(png, "image/png", size)  # chunks dropped: not kept as spans
    else:
        verdict = None
    if identity is not None and verdict is not None:
        with _VERDICTS_LOCK:
            if len(_VERDICTS) >= VERDICTS_KEPT:
                _VERDICTS.clear()
            _VERDICTS[identity] = verdict
    return None if verdict is None else _from_verdict(data, verdict)


VERDICTS_KEPT = 65536
"""Files whose verdict ``as_sent`` remembers (a few hundred bytes each)."""
_VERDICTS: dict[tuple[Any, ...], tuple[str, list[tuple[int, int]], tuple[int, int]]] = {}
_VERDICTS_LOCK = threading.Lock()


def _from_verdict(data: bytes, verdict: tuple[str, list[tuple[int, int]], tuple[int, int]]) -> StoredFrame:
    media_type, spans, size = verdict
    if len(spans) == 1 and spans[0] == (0, len(data)):
        return StoredFrame(data, media_type, size)
    view = memoryview(data)
    return StoredFrame(b"".join(view[a:b] for a, b in spans), media_type, size)


def read_frame_file(path: Any) -> tuple[bytes, tuple[Any, ...]]:
    """A frame file's bytes and its identity (path, size, modification time, inode, device),
    from one open: the identity is the file's as it was read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read()
    return data, (str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def decode_frame(data: bytes, where: str) -> np.ndarray:
    """The pixels of an image file's bytes as RGB (read-only; decompression-bomb guard on)."""
    from countgym.stimulus import check_image_size

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        im = Image.open(io.BytesIO(data))
    with im:
        check_image_size(im, where)
        out = np.asarray(im.convert("RGB"))
    out.flags.writeable = False
    return out
