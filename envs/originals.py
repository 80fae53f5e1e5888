"""Decoded stimulus images and their unmarked first view, shared by the episodes that show the
same image (repeats, arms and cells of one process), in a small bounded cache.

An episode starts by decoding its image, fitting it to the long-side limit and rendering the
unmarked view (about 10 ms of CPU for 768 x 768, plus the view's PNG encoding when a model sees
it). Episodes of one stimulus get the same objects instead: the same pixels, decoded once, and
a fresh read-only copy of the same view (Gymnasium wants new observation data on every call),
which ``view_key`` names, so that backends encode each distinct view once. Entries are keyed by
the image file's path, size, modification time and inode, so an edited file is read again.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from countgym.envs.common import fit_long_side
from countgym.envs.render import render_working_image

MAX_ENTRIES = 16
"""Images kept (about 4 MB each at 768 x 768): enough for the stimuli in flight to repeat."""


@dataclass(frozen=True)
class Original:
    """A stimulus image as every episode starts from it."""

    image: Image.Image
    """The RGB image fitted to the long-side limit; shared, so never drawn on (renders copy it)."""
    stored_size: tuple[int, int]
    """The size of the image file's pixels, before fitting."""
    view: np.ndarray
    """The unmarked working image (read-only): the first observation."""
    key: tuple[Any, ...] | None = None
    """What identifies the view's pixels (None: not cached)."""

    def first_view(self) -> np.ndarray:
        """A new read-only copy of the unmarked view, known to ``view_key`` while it lives."""
        out = self.view.copy()
        out.flags.writeable = False
        if self.key is not None:
            with _LOCK:
                _COPIES[id(out)] = self.key
            weakref.finalize(out, _COPIES.pop, id(out), None)
        return out


_CACHE: OrderedDict[tuple[Any, ...], Original] = OrderedDict()
_COPIES: dict[int, tuple[Any, ...]] = {}
_DRAWN: dict[int, tuple[tuple[Any, ...], np.ndarray]] = {}
_LOCK = threading.Lock()


def mark_drawn_over(out: np.ndarray, original: Original) -> np.ndarray:
    """Note that ``out`` (a working image, same size) is ``original``'s unmarked view with marks
    drawn on it, while ``out`` lives: encoders then redo only the rows that differ
    (``drawn_over``). Returns ``out``."""
    if original.key is not None and out.shape == original.view.shape:
        with _LOCK:
            _DRAWN[id(out)] = (original.key, original.view)
        weakref.finalize(out, _DRAWN.pop, id(out), None)
    return out


def drawn_over(array: Any) -> tuple[tuple[Any, ...], np.ndarray] | None:
    """(key, pixels) of the unmarked view ``array`` was drawn over, or None."""
    with _LOCK:
        return _DRAWN.get(id(array))


def view_key(array: Any) -> tuple[Any, ...] | None:
    """The key of the cached view ``array`` is a copy of (None for any other object): equal
    keys mean equal pixels, so an encoding of one serves all."""
    with _LOCK:
        return _COPIES.get(id(array))


def load_original(dataset: Any, stimulus: Any, max_side: int) -> Original:
    """The stimulus's image fitted to ``max_side``, from the cache when its file is unchanged."""
    key: tuple[Any, ...] | None
    try:
        path = dataset.image_path(stimulus)
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino, max_side)
    except (OSError, AttributeError):
        key = None  # no file to key on: load it (a missing file raises its usual error there)
    if key is not None:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
    raw = dataset.load_image(stimulus)
    image = fit_long_side(raw, max_side)
    view = np.asarray(render_working_image(image))
    view.flags.writeable = False
    entry = Original(image=image, stored_size=raw.size, view=view, key=key)
    if key is not None:
        with _LOCK:
            _CACHE[key] = entry
            while len(_CACHE) > MAX_ENTRIES:
                _CACHE.popitem(last=False)
    return entry


def clear() -> None:
    """Forget every cached image."""
    with _LOCK:
        _CACHE.clear()
