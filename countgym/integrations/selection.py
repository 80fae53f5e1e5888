"""Which stimuli a limit K selects in the evaluation frameworks, and in which order they come.

``countgym run --limit K`` runs ``countgym.cells.limited_ids(stimuli, K)``: K stimuli
stratified by true count. The frameworks' own limits take the first K rows of what an adapter
hands them (``vf-eval -n K``, lmms-eval's ``--limit K``), so the adapters hand over the stimuli
in ``stratified_order``: each stimulus at the first limit that selects it. Wherever
``limited_ids`` nests (the selection for K is part of the one for K + 1), the first K rows are
then exactly ``countgym run --limit K``'s stimuli; a limit the adapter receives itself
(``--env.taskset.limit``, ``load_environment(limit=K)``, the lmms task writer's ``--limit``)
is ``limited_ids`` in any case (``limited``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from countgym.cells import limited_ids


def stratified_order(stimuli: Sequence[Any]) -> list[str]:
    """Every stimulus id, each at the first limit K that ``limited_ids`` selects it (manifest
    order among those that K adds), so the first rows cover the range of counts."""
    ids = [s.id for s in stimuli]
    order: list[str] = []
    seen: set[str] = set()
    for k in range(1, len(ids)):
        if len(order) == len(ids):
            break
        for sid in limited_ids(stimuli, k):
            if sid not in seen:
                seen.add(sid)
                order.append(sid)
    order.extend(sid for sid in ids if sid not in seen)
    return order


def limited(stimuli: Sequence[Any], limit: int | None) -> list[str]:
    """``limited_ids(stimuli, limit)`` (all when ``limit`` is None) in ``stratified_order``."""
    if limit is not None and limit < 0:
        from countgym.errors import UserError

        raise UserError(f"limit must be a non-negative number of stimuli, got {limit}")
    chosen = set(limited_ids(stimuli, limit)) if limit else None
    return [sid for sid in stratified_order(stimuli) if chosen is None or sid in chosen]
