"""Keep glibc's allocator from holding freed image buffers, and from paying for fresh ones.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (128 KiB at start) with ``mmap`` and gives
them back on ``free``, but each such free raises the threshold (up to 32 MiB). After the first
few freed images, every 1.7 MB render or encode buffer then comes from the per-thread heaps,
which keep freed memory and fragment: with 64 episodes in flight on as many threads, peak
resident memory grew by about 70 MiB on the harness benchmark for no live data.

Concurrent cells therefore fix two settings (``mallopt(3)``), which also turns the adjustment
off: at most ``ARENA_MAX`` heaps, shared by all threads (glibc's default is 8 per core), so
freed buffers are reused by whichever thread allocates next instead of idling in another
thread's heap; and a threshold of ``THRESHOLD_BYTES`` (4 MiB, above a 768 x 768 RGBA buffer),
so image buffers come from those heaps. Below the threshold (128 KiB, as an earlier pass had
it) every buffer was a fresh ``mmap``, whose hundreds of page faults per image cost about a
quarter of the harness's CPU per model call. Elsewhere than glibc, or when the user set
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX``, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter numbers (malloc.h)."""
M_ARENA_MAX = -8
M_TRIM_THRESHOLD = -1
THRESHOLD_BYTES = 4 * 1024 * 1024
"""Allocations up to this size come from the heaps (image buffers are 1.7-2.4 MB)."""
ARENA_MAX = 2
"""Heaps shared by all threads."""
TRIM_BYTES = 64 * 1024 * 1024
"""Free memory a heap keeps at its top before giving it back. A video request's ten full-HD JPEG
frames are 2.8 MB of base64, copied a few times on the way out (and, from a simulated server in
the same process, on the way in): at 8 MiB the heaps gave that memory back after each request
and faulted it in again for the next, 0.88x the CPU of a video cell with 64 MiB (measured on
208 episodes), for about 40 MiB more peak memory."""

_LOCK = threading.Lock()
_PINNED: bool | None = None


def pin_mmap_threshold() -> bool:
    """Fix the heap count and mmap threshold once per process; True when they are (now or already) fixed."""
    global _PINNED
    with _LOCK:
        if _PINNED is None:
            _PINNED = _pin()
        return _PINNED


def _pin() -> bool:
    if not sys.platform.startswith("linux") or {"MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX"} & set(os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to call, or no mallopt (not glibc)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((M_ARENA_MAX, ARENA_MAX), (M_TRIM_THRESHOLD, TRIM_BYTES), (M_MMAP_THRESHOLD, THRESHOLD_BYTES))
    return all(mallopt(k, v) == 1 for k, v in settings)
