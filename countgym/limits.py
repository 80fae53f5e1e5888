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
MAX_CONFIG_DEPTH = 32
"""Deepest nesting of lists and tables in a config or an option value (real ones use 3 or 4)."""


def nesting_message(limit: int = MAX_CONFIG_DEPTH) -> str:
    """The one-line reason for a value nested past ``limit`` levels."""
    return f"nested more than {limit} levels deep (lists and tables inside each other)"


def config_depth_problem(obj: object, limit: int = MAX_CONFIG_DEPTH) -> str | None:
    """Why ``obj`` (parsed config data) is nested too deeply, or None; iterative, so a value
    nested past Python's recursion limit is measured without a ``RecursionError``."""
    stack: list[tuple[object, int]] = [(obj, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: list[object] = list(value.values())
        elif isinstance(value, list | tuple):
            children = list(value)
        else:
            continue
        if depth >= limit:
            return nesting_message(limit)
        stack.extend((c, depth + 1) for c in children)
    return None
