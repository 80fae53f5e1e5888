"""A stimulus's unmarked view as a first observation: an image the environment holds, decoded only
when something reads its pixels.

An image episode's first observation is the stimulus image with nothing drawn on it. For a source
file that is already what a model is sent (a clean 8-bit RGB PNG within the long-side limit,
``countgym.envs.originals.png_as_sent``, or a clean JPEG, ``countgym.envs.jpeg_clean``),
decoding it only to encode it again costs about 20 times more CPU than reading the file and
base64-encoding it, for the same pixels. So the first
observation's ``image`` is a ``StoredView`` of the shared ``Original``: a backend that sends data
URLs sends the file's image data (``countgym.agents.backends.base.png_data_url``) and decodes
nothing; ``np.asarray(view)`` (or indexing it, or any array attribute) decodes the pixels, once
per view, for a policy that reads them (a local model, a plug-in). The pixels are exactly those of
the array the observation used to be, and they are read-only.

Every stimulus read from a file gets a ``StoredView`` as its first observation, whatever the
file's format (a view that is not sendable as stored is encoded by backends as before), so the
type of ``obs["image"]`` does not depend on the file. Observations after a tool call are arrays.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np


class StoredView:
    """The unmarked view of an ``Original`` (uint8 H x W x 3 once decoded), immutable.

    ``np.asarray(view)`` gives the pixels (read-only; decoded on first use and kept by the view),
    ``view.copy()`` a writeable copy, ``view[y, x]`` and any other array attribute or operator act
    on the pixels. ``shape``, ``dtype``, ``ndim``, ``size`` and ``nbytes`` cost nothing. Two views
    are equal (``==``, a bool) when they show the same pixels.
    """

    __slots__ = ("original", "shape", "_pixels", "url", "__weakref__")
    dtype = np.dtype(np.uint8)
    ndim = 3

    def __init__(self, original: Any) -> None:
        w, h = original.size
        object.__setattr__(self, "original", original)
        object.__setattr__(self, "shape", (int(h), int(w), 3))
        object.__setattr__(self, "_pixels", None)
        object.__setattr__(self, "url", None)

    original: Any
    """The ``countgym.envs.originals.Original`` this is the unmarked view of."""
    shape: tuple[int, int, int]
    url: str | None
    """The data URL a backend sent this view as (``countgym.agents.backends.base.png_data_url``,
    kept for the episode's later turns), or None before it is sent."""

    def remember_url(self, url: str) -> None:
        """Keep ``url``, the data URL of exactly these pixels (``png_data_url`` only)."""
        object.__setattr__(self, "url", url)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a StoredView is immutable")

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1] * 3

    @property
    def nbytes(self) -> int:
        return self.size

    @property
    def key(self) -> tuple[Any, ...] | None:
        """What identifies the pixels (``view_key``): equal keys are equal pixels."""
        return self.original.key

    def pixels(self) -> np.ndarray:
        """The decoded pixels (read-only; decoded once per view)."""
        pixels = self._pixels
        if pixels is None:
            pixels = self.original.pixels()
            object.__setattr__(self, "_pixels", pixels)
        return pixels

    def copy(self) -> np.ndarray:
        """The pixels as a new writeable array, the caller's own (as ``ndarray.copy`` gave it)."""
        return np.array(self.pixels())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.pixels()
        if copy:
            out = out.copy()
        return out if dtype is None else out.astype(dtype)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        # Explicit strides: Pillow's ``fromarray`` then takes ``tobytes()`` (this object has no
        # buffer of its own); NumPy reads the pixels this view keeps alive.
        pixels = self.pixels()
        return {**pixels.__array_interface__, "strides": pixels.strides}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # numpy's and pickle's protocols must see only what is defined
            raise AttributeError(name)
        return getattr(self.pixels(), name)

    def __getitem__(self, index: Any) -> Any:
        return self.pixels()[index]

    def __len__(self) -> int:
        return self.shape[0]

    def __neg__(self) -> np.ndarray:
        return -self.pixels()

    def __invert__(self) -> np.ndarray:
        return ~self.pixels()

    def __iter__(self) -> Any:
        return iter(self.pixels())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredView):
            return NotImplemented
        if other.original is self.original or (self.key is not None and self.key == other.key):
            return True
        return self.shape == other.shape and bool(np.array_equal(self.pixels(), other.pixels()))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (np.array, (self.pixels(),))  # pickled as its pixels (a process has no Original)

    def __copy__(self) -> StoredView:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> StoredView:
        return self  # immutable: a copy would only cost memory

    def __repr__(self) -> str:
        h, w, _ = self.shape
        return f"StoredView({w}x{h}, {'decoded' if self._pixels is not None else 'not decoded'})"


def _binary(op: Any, reflected: bool = False) -> Any:
    def method(self: StoredView, other: Any) -> Any:
        pixels = self.pixels()
        return op(other, pixels) if reflected else op(pixels, other)
    return method


# Arithmetic and comparisons act on the pixels, as they did on the array this replaced (``==``
# compares whole views; use ``np.asarray(view) == x`` for an element-wise result).
for _name, _op in {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                   "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
                   "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_,
                   "or": operator.or_, "xor": operator.xor}.items():
    setattr(StoredView, f"__{_name}__", _binary(_op))
    setattr(StoredView, f"__r{_name}__", _binary(_op, reflected=True))
for _name, _op in {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}.items():
    setattr(StoredView, f"__{_name}__", _binary(_op))
