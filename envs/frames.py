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

import base64
import io
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from PIL import Image

from countgym.envs.jpeg_clean import jpeg_as_sent, jpeg_size
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
            self._url = f"data:{self.media_type};base64," + base64.b64encode(self.data).decode("ascii")
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


def as_sent(data: bytes) -> StoredFrame | None:
    """``data`` as a frame sent as stored (a clean JPEG with its metadata cut out, or a PNG that
    ``png_as_sent`` accepts), or None when it must be decoded and encoded afresh."""
    if data[:2] == b"\xff\xd8":
        size = jpeg_size(data)
        clean = jpeg_as_sent(data, size) if size is not None else None
        return None if clean is None or size is None else StoredFrame(clean, "image/jpeg", size)
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        size = (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
        png = png_as_sent(data, size)
        return None if png is None else StoredFrame(png, "image/png", size)
    return None


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
