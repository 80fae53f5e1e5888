"""A least-recently-used map bounded by its number of entries and by their size in all.

The harness keeps five such caches: originals and decoded views (``countgym.envs.originals``),
the data URLs of shared views (``countgym.agents.backends.base``), the deflated row bands of
views (``countgym.agents.backends.png_bands``) and the tiles arm's upscaled tiles
(``countgym.agents.arms``). Their size in all is kept as entries come, go and change, so an
insert costs the same with one entry kept or a thousand (the originals' cache summed its
entries at every insert: about 0.1-0.3 ms per new image once a few hundred were kept, more than
the rest of a JPEG photo episode's first call).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """Entries by key, the least recently used dropped first beyond ``max_entries`` entries or
    ``max_size`` in all (``size_of`` each: bytes, characters). The newest entry is always kept,
    however large. Thread-safe; ``size_of`` must not use the cache."""

    def __init__(self, max_entries: int, max_size: int, size_of: Callable[[V], int]) -> None:
        self.max_entries = max_entries
        self.max_size = max_size
        self._size_of = size_of
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The entry under ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` as the most recently used, then drop the oldest entries
        while the cache is over either bound."""
        size = self._size_of(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._total -= old[1]
            self._items[key] = (value, size)
            self._total += size
            while len(self._items) > 1 and (len(self._items) > self.max_entries or self._total > self.max_size):
                self._total -= self._items.popitem(last=False)[1][1]

    def resized(self, key: K, value: V) -> None:
        """Count ``value``'s size again when it is still the entry under ``key`` (it let go of
        memory or took more on); its place in the order stays."""
        size = self._size_of(value)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] is value:
                self._items[key] = (value, size)
                self._total += size - hit[1]

    @property
    def size(self) -> int:
        """The size of the kept entries in all, as last counted."""
        return self._total

    def items(self) -> list[tuple[K, V]]:
        """The kept entries, oldest first (a snapshot)."""
        with self._lock:
            return [(k, v) for k, (v, _) in self._items.items()]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._total = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items
