"""At most as many CPU-heavy sections at once as the process may use cores.

A concurrent cell runs its episodes on up to 64 threads, but rendering, decoding and PNG encoding
can only use as many cores as the process has, and the interpreter lock lets one thread run
Python code at a time. Letting every thread start such work at once only adds lock hand-offs,
and each started section holds its image buffers (a few MB at 768 x 768) until it finishes: on a
busy 2-core machine 64 overlapping renders and encodes held over 100 MB more at the peak. So
environment resets and steps, and image encodes, take one of ``SLOTS`` slots; waiting threads
hold no buffers yet, and the model calls (network waits) never take a slot. A thread already in
a slot re-enters freely (an encode inside a step takes no second slot, so slots cannot
deadlock).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def cores() -> int:
    """The cores this process may use (its CPU affinity; the CPU count elsewhere than Linux)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_cores = cores
SLOTS = cores()
"""CPU-heavy sections running at once (the cores this process may use)."""
_SEMAPHORE = threading.BoundedSemaphore(SLOTS)
_HELD = threading.local()


@contextmanager
def cpu_slot() -> Iterator[None]:
    """Run the block in one of the process's CPU slots (re-entrant per thread)."""
    if getattr(_HELD, "depth", 0):
        _HELD.depth += 1
        try:
            yield
        finally:
            _HELD.depth -= 1
        return
    with _SEMAPHORE:
        _HELD.depth = 1
        try:
            yield
        finally:
            _HELD.depth = 0
