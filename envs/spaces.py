"""Observation and action spaces that honestly contain every observation and reply.

Images vary in size (datasets differ, crops change the size), so the image space is a custom
``Space`` of uint8 H x W x 3 arrays with both sides in [1, max_side]; Gymnasium batches custom
spaces as tuples. The text space accepts any string up to ``max_length`` characters (model
replies and prompts are not alphanumeric).

Both spaces bring their own shared-memory layout (``countgym.envs.shm``), so
``AsyncVectorEnv`` works with its default ``shared_memory=True``. Gymnasium's own ``Text`` layout
would be wrong twice over: it maps characters outside the charset to nothing and decodes the
buffer once, at construction, so every later message reads back as the first one.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

from countgym.envs import shm
from countgym.envs.stored_view import StoredView

MAX_SIDE = 1024
CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class ImageSpace(spaces.Space[np.ndarray]):
    """uint8 RGB images of any size with 1 <= height, width <= ``max_side``: arrays, or a first
    observation's ``StoredView`` (``countgym.envs.stored_view``, decoded when read)."""

    def __init__(self, max_side: int = MAX_SIDE, seed: int | np.random.Generator | None = None):
        self.max_side = int(max_side)
        super().__init__(shape=None, dtype=np.uint8, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        h, w = self.np_random.integers(1, min(self.max_side, 64) + 1, size=2)
        return self.np_random.integers(0, 256, size=(int(h), int(w), 3), dtype=np.uint8)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray | StoredView)
            and x.dtype == np.uint8
            and x.ndim == 3
            and x.shape[2] == 3
            and 1 <= x.shape[0] <= self.max_side
            and 1 <= x.shape[1] <= self.max_side
        )

    def __repr__(self) -> str:
        return f"ImageSpace(max_side={self.max_side})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageSpace) and other.max_side == self.max_side


class MessageSpace(spaces.Text):
    """Any string of at most ``max_length`` characters (samples use a printable charset).

    ``accepts`` lists the non-string action types a ``step`` takes as well (``Reply``, the typed
    tool actions), so ``action_space.contains`` agrees with what ``step`` accepts.
    """

    def __init__(
        self,
        max_length: int = 65536,
        seed: int | np.random.Generator | None = None,
        *,
        accepts: tuple[type, ...] = (),
    ):
        super().__init__(max_length=max_length, min_length=0, charset=CHARSET, seed=seed)
        self.accepts = tuple(accepts)

    def contains(self, x: Any) -> bool:
        if self.accepts and isinstance(x, self.accepts):
            return True
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"MessageSpace(max_length={self.max_length})"


def refuse_flattening(cls: type[spaces.Space[Any]], what: str) -> None:
    """Make Gymnasium's flattening (``flatten_space``, ``flatdim``, ``flatten``, ``unflatten``,
    and so ``FlattenObservation``) refuse ``cls`` with a message that says why and what to do,
    instead of "Unknown space"."""

    def refuse(space: Any, *_: Any, **__: Any) -> Any:
        raise NotImplementedError(
            f"{space!r} cannot be flattened: {what}, so no fixed-length vector holds them. "
            "Use the observation's arrays as "
            "they are, or resize them to one fixed size in a wrapper of your own before flattening."
        )

    for fn in (spaces.flatten_space, spaces.flatdim, spaces.flatten, spaces.unflatten):
        fn.register(cls)(refuse)


refuse_flattening(ImageSpace, "its images vary in size (datasets differ, crop views change it)")
shm.register_bytes_space(ImageSpace, lambda sp: sp.max_side * sp.max_side * 3, shm.encode_array, shm.decode_array)
shm.register_text_space(MessageSpace)
