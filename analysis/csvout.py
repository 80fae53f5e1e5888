"""Writing audit tables as CSV that a spreadsheet cannot run.

Ids, labels, options and error texts come from logs and manifests, so a cell can start with
``=``, ``+``, ``-``, ``@``, a tab or a line break, which spreadsheets read as a formula
(CSV injection). Every table the audit writes goes through ``write_csv``: such a text cell (and
column name) gets a leading ``'``, the usual escape, which spreadsheets show as text. Numbers
are written as numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
"""First characters (after any spaces) that make a spreadsheet cell a formula; the full-width
forms are read as formulas by some spreadsheets too."""


def safe_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` when it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.lstrip(" ").startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every text cell and column name that could run as a formula escaped."""
    out = df.rename(columns=lambda c: safe_cell(c) if isinstance(c, str) else c)
    for i, dtype in enumerate(out.dtypes):
        if dtype == np.dtype(object) or isinstance(dtype, pd.StringDtype | pd.CategoricalDtype):
            col = out.iloc[:, i]
            if isinstance(dtype, pd.CategoricalDtype):
                col = col.astype(object)
            out.isetitem(i, col.map(safe_cell))
    return out


def write_csv(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a table atomically (temp file, then rename), formula-like text escaped."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    csv_safe(df).to_csv(tmp, index=False)
    tmp.replace(path)
    return path
