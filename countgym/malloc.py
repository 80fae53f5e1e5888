"""Keep glibc's allocator from holding freed image buffers: pin its mmap threshold.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (128 KiB at start) with ``mmap`` and gives
them back on ``free``, but each such free raises the threshold (up to 32 MiB). After the first
few freed images, every 1.7 MB render or encode buffer then comes from the per-thread heaps,
which keep freed memory and fragment: with 64 episodes in flight on as many threads, peak
resident memory grew by about 70 MiB on the harness benchmark for no live data. Setting the
threshold explicitly turns that adjustment off (``mallopt(3)``), as ``MALLOC_MMAP_THRESHOLD_``
would. Elsewhere than glibc, or when the user set that variable, nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number (malloc.h)."""
THRESHOLD_BYTES = 128 * 1024
"""glibc's own starting threshold, kept fixed."""

_LOCK = threading.Lock()
_PINNED: bool | None = None


def pin_mmap_threshold() -> bool:
    """Fix the mmap threshold once per process; True when it is (now or already) fixed."""
    global _PINNED
    with _LOCK:
        if _PINNED is None:
            _PINNED = _pin()
        return _PINNED


def _pin() -> bool:
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to call, or no mallopt (not glibc)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1
