"""Which stimuli a limit K selects in the evaluation frameworks, and in which order they come.

``countgym run --limit K`` runs ``countgym.cells.limited_ids(stimuli, K)``: K stimuli
stratified by true count. The frameworks' own limits take the first K rows of what an adapter
hands them (``vf-eval -n K``, lmms-eval's ``--limit K``), so the adapters hand over the stimuli
in ``stratified_order``: each stimulus at the first limit that selects it. Wherever
``limited_ids`` nests (the selection for K is part of the one for K + 1), the first K rows are
then exactly ``countgym run --limit K``'s stimuli (selections nest: ``limited_ids`` takes a prefix
of this order); a limit the adapter receives itself
(``--env.taskset.limit``, ``load_environment(limit=K)``, the lmms task writer's ``--limit``)
is ``limited_ids`` in any case (``limited``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from countgym.cells import limited_ids
from countgym.cells import stratified_order as _stratified_units


def stratified_order(stimuli: Sequence[Any]) -> list[str]:
    """Every stimulus id in the order ``limited_ids`` takes them (``countgym.cells``: the count
    levels interleaved, a pair's images together), so the first K rows are ``countgym run
    --limit K``'s stimuli and the first rows cover the range of counts."""
    return [sid for unit in _stratified_units(stimuli) for sid in unit]


def limited(stimuli: Sequence[Any], limit: int | None) -> list[str]:
    """``limited_ids(stimuli, limit)`` (all when ``limit`` is None) in ``stratified_order``."""
    if limit is not None and limit < 0:
        from countgym.errors import UserError

        raise UserError(f"limit must be a non-negative number of stimuli, got {limit}")
    chosen = set(limited_ids(stimuli, limit)) if limit else None
    return [sid for sid in stratified_order(stimuli) if chosen is None or sid in chosen]
