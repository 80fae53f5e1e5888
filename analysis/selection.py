"""Which stimuli a summary row holds: all of its dataset, the first K of the dataset's
stratified order (what ``--limit K`` runs), or a set that is no such prefix (a log written under
an older ``--limit`` rule, or edited). ``countgym.cells.selection_text`` words it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .stimuli import StimulusCache


def mark_selection(table: pd.DataFrame, episodes: pd.DataFrame, stimuli: StimulusCache) -> pd.DataFrame:
    """``table`` with a ``selection`` column (``all 272``, ``first 6 of the stratified order (of
    272)``, ``9 stimuli`` when the dataset cannot be read), matched on the grouping columns
    both tables have; unchanged when the episodes have no stimulus ids or datasets."""
    from countgym.cells import selection_text, stratified_order

    if table.empty or not {"dataset", "stimulus_id"} <= set(episodes.columns) or "dataset" not in table.columns:
        return table
    keys = [c for c in ("dataset", "arm", "model") if c in table.columns and c in episodes.columns]
    orders: dict[str, Any] = {}

    def words(name: Any, ids: pd.Series) -> str:
        held = {str(i) for i in ids.dropna()}
        key = str(name)
        if key not in orders:
            ds = stimuli.dataset(key)
            orders[key] = stratified_order(ds.stimuli) if ds is not None else None
        order = orders[key]
        return selection_text(held, order) if order is not None else f"{len(held)} stimuli"

    rows = [{**dict(zip(keys, k if isinstance(k, tuple) else (k,), strict=True)),
             "selection": words(k[0] if isinstance(k, tuple) else k, g["stimulus_id"])}
            for k, g in episodes.groupby(keys, dropna=False, sort=False)]
    sel = pd.DataFrame(rows, columns=[*keys, "selection"])
    out = table.drop(columns=["selection"], errors="ignore")
    return out.merge(sel, on=keys, how="left")
