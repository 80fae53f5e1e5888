"""Bounds on run settings shared by the command line and sweep configs (imports nothing).

A typo such as ``repeats = 1e9`` must be a one-line error, not a run that enumerates a billion
episodes or starts a million threads.
"""

MAX_REPEATS = 1000
"""Largest ``repeats`` (episodes per stimulus in one cell)."""
MAX_BUDGET = 1000
"""Largest tool-call budget T (the papers use 6 and, for tag-1, 80)."""
MAX_CONCURRENCY = 1024
"""Largest ``concurrency`` (episodes in flight per cell)."""
