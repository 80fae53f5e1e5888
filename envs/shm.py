"""Shared-memory layouts for countgym's variable-size spaces, so ``AsyncVectorEnv`` works with
its default ``shared_memory=True``.

Gymnasium's ``AsyncVectorEnv`` creates one buffer per observation space, lets each worker write
its observation into its slot, and returns whatever ``read_from_shared_memory`` built once, at
construction (copied when ``copy=True``). A fixed-shape ``Box`` read is a live NumPy view; a
variable-size image or a string is not, so the value returned here is a ``LiveBatch``: a
sequence that decodes each slot when it is read, and becomes a plain tuple when copied.

Each slot holds a 64-byte header (payload length, rank, up to six dimensions) and a payload of at
most ``capacity`` bytes. A value larger than its slot raises ``ValueError`` naming the fix.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
from gymnasium.vector.utils import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

HEADER_INTS = 8
HEADER_BYTES = HEADER_INTS * 8

Encode = Callable[[Any, Any], tuple[tuple[int, ...], np.ndarray]]
Decode = Callable[[Any, tuple[int, ...], np.ndarray], Any]


def encode_array(space: Any, x: Any) -> tuple[tuple[int, ...], np.ndarray]:
    """An array as (shape, raw bytes in the space's dtype)."""
    a = np.ascontiguousarray(np.asarray(x, dtype=space.dtype))
    if a.ndim > HEADER_INTS - 2:
        raise ValueError(f"arrays of rank {a.ndim} do not fit a shared-memory slot header")
    return a.shape, a.reshape(-1).view(np.uint8)


def decode_array(space: Any, shape: tuple[int, ...], payload: np.ndarray) -> np.ndarray:
    """The array back from its shape and bytes (a copy, never a view of the buffer)."""
    return payload.view(space.dtype).reshape(shape).copy()


def encode_text(space: Any, x: Any) -> tuple[tuple[int, ...], np.ndarray]:
    """A string as UTF-8 bytes (any character, unlike Gymnasium's charset indices)."""
    return (), np.frombuffer(str(x).encode("utf-8"), dtype=np.uint8)


def decode_text(space: Any, shape: tuple[int, ...], payload: np.ndarray) -> str:
    return payload.tobytes().decode("utf-8")


class _Slots:
    """``n`` fixed-size byte slots in one shared ``multiprocessing`` array (picklable)."""

    def __init__(self, array: Any, n: int, capacity: int) -> None:
        self.array, self.n, self.capacity = array, n, capacity

    def view(self, i: int) -> np.ndarray:
        size = HEADER_BYTES + self.capacity
        return np.frombuffer(self.array.get_obj(), dtype=np.uint8)[i * size : (i + 1) * size]


class LiveBatch(Sequence[Any]):
    """The batched value of one space in shared memory: decoded from the buffer on every read,
    a plain tuple once copied (``AsyncVectorEnv`` copies observations by default)."""

    def __init__(self, space: Any, slots: _Slots, decode: Decode) -> None:
        self._space, self._slots, self._decode = space, slots, decode

    def __len__(self) -> int:
        return self._slots.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        view = self._slots.view(i % len(self))
        header = view[:HEADER_BYTES].view(np.int64)
        nbytes, ndim = int(header[0]), int(header[1])
        shape = tuple(int(d) for d in header[2 : 2 + ndim])
        return self._decode(self._space, shape, view[HEADER_BYTES : HEADER_BYTES + nbytes])

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[Any, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LiveBatch | tuple | list):
            return tuple(self) == tuple(other)
        return NotImplemented

    # Equal to tuples, so not hashable by identity.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LiveBatch({tuple(self)!r})"


def register_bytes_space(
    cls: type, capacity: Callable[[Any], int], encode: Encode, decode: Decode
) -> None:
    """Register shared-memory create/read/write for the space class ``cls``."""

    # gymnasium types these dispatchers by the buffers of its own spaces; ours are slots.
    @cast(Any, create_shared_memory).register(cls)
    def _create(space: Any, n: int = 1, ctx: Any = None) -> _Slots:
        import multiprocessing as mp

        cap = int(capacity(space))
        array = (ctx or mp).Array(ctypes.c_uint8, n * (HEADER_BYTES + cap))
        return _Slots(array, n, cap)

    @cast(Any, read_from_shared_memory).register(cls)
    def _read(space: Any, shared_memory: _Slots, n: int = 1) -> LiveBatch:
        return LiveBatch(space, shared_memory, decode)

    @write_to_shared_memory.register(cls)
    def _write(space: Any, index: int, value: Any, shared_memory: _Slots) -> None:
        shape, payload = encode(space, value)
        if payload.size > shared_memory.capacity:
            raise ValueError(
                f"an observation of {payload.size} bytes exceeds its {shared_memory.capacity}-byte "
                f"shared-memory slot ({space!r}); use AsyncVectorEnv(..., shared_memory=False)"
            )
        view = shared_memory.view(index)
        header = np.zeros(HEADER_INTS, dtype=np.int64)
        header[0], header[1] = payload.size, len(shape)
        header[2 : 2 + len(shape)] = shape
        view[:HEADER_BYTES] = header.view(np.uint8)
        view[HEADER_BYTES : HEADER_BYTES + payload.size] = payload


def register_text_space(cls: type) -> None:
    """Strings of at most ``space.max_length`` characters as UTF-8 (4 bytes per character)."""
    register_bytes_space(cls, lambda sp: 4 * sp.max_length, encode_text, decode_text)
