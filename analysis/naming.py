"""Short display names for datasets, arms and models (tables and figures only; CSVs keep the
full names)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit


def short_dataset(name: object) -> str:
    """``/runs/data:common`` -> ``data:common``; battery names pass through."""
    text = str(name)
    base, colon, subset = text.rpartition(":")
    if not colon or "/" in subset or "\\" in subset:
        base, subset = text, ""
    if "/" in base or "\\" in base:
        base = PurePath(base).name or base
    return f"{base}:{subset}" if subset else base


def group_label(*parts: object, sep: str = " · ") -> str:
    """Parts joined for a legend or axis label, empty parts left out."""
    return sep.join(str(p) for p in parts if p is not None and str(p) != "")


# --- endpoints --------------------------------------------------------------------------------

ENDPOINT_KEYS: tuple[str, ...] = ("api_base", "base_url")
"""Arm options that name the server a model was called at (also read under ``provider``)."""


def endpoint_of(options: Mapping[str, Any]) -> str | None:
    """The endpoint an arm's options name: ``api_base`` (or ``base_url``), at the top level or
    in the logged ``provider`` block; None when the model was called at its provider's default."""
    for where in (options, options.get("provider")):
        if isinstance(where, Mapping):
            for k in ENDPOINT_KEYS:
                v = where.get(k)
                if isinstance(v, str) and v.strip():
                    return v.strip()
    return None


def endpoint_identity(url: str) -> tuple[str, str]:
    """``(identity, host label)`` of an endpoint URL: the identity is scheme, host, port and
    path (no userinfo, query or fragment), the label ``host[:port]`` only, so neither can carry
    a credential. A URL without ``//`` is read as ``host[:port][/path]``."""
    text = url if "//" in url else "//" + url
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return "?", "?"
    label = f"{host}:{port}" if port is not None else host
    label = label or "?"
    return f"{parts.scheme.lower()}://{label}{parts.path.rstrip('/')}", label


class ModelLabels:
    """Model labels that keep apart one model name served at several endpoints.

    ``add(model, options)`` returns a cell number; ``labels()`` names each cell: the plain model
    name when the name was seen at one endpoint only, else ``name @host[:port]`` (``name`` alone
    for the provider's default endpoint; ``#2``, ``#3`` appended when two endpoints share a host
    and port but differ in path)."""

    def __init__(self) -> None:
        self._index: dict[tuple[str, str | None], int] = {}
        self._cells: list[tuple[str, str | None, str]] = []
        self._seen: dict[tuple[str, str | None], int] = {}

    def add(self, model: str, options: Mapping[str, Any]) -> int:
        """The cell number of a record's (model name, endpoint)."""
        url = endpoint_of(options)
        cell = self._seen.get((model, url))
        if cell is not None:
            return cell
        ident, host = endpoint_identity(url) if url is not None else (None, "")
        key = (model, ident)
        cell = self._index.get(key)
        if cell is None:
            cell = self._index[key] = len(self._cells)
            self._cells.append((model, ident, host))
        self._seen[(model, url)] = cell
        return cell

    def labels(self) -> list[str]:
        """One label per cell, in cell-number order."""
        by_model: dict[str, list[int]] = {}
        for i, (model, _, _) in enumerate(self._cells):
            by_model.setdefault(model, []).append(i)
        out = [""] * len(self._cells)
        for model, members in by_model.items():
            if len(members) == 1:
                out[members[0]] = model
                continue
            seen: dict[str, int] = {}
            for i in sorted(members, key=lambda c: str(self._cells[c][1])):
                host = self._cells[i][2]
                label = f"{model} @{host}" if self._cells[i][1] is not None else model
                seen[label] = seen.get(label, 0) + 1
                out[i] = label if seen[label] == 1 else f"{label}#{seen[label]}"
        return out


def model_labels(records: Iterable[Any]) -> list[str]:
    """One model label per episode record (see ``ModelLabels``)."""
    cells = ModelLabels()
    numbers = [cells.add(r.model, r.arm.options) for r in records]
    labels = cells.labels()
    return [labels[c] for c in numbers]


# --- distinct short text ----------------------------------------------------------------------

ELLIPSIS = "…"
_SEPARATORS = ";[](),/@ |:"
"""Characters that end a word of a label (an option, a path part, a host)."""


def middle_cut(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``…`` (the start, which
    names the arm or model, and the end, which names its last option, both stay)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def distinct_cuts(values: Sequence[str], width: int) -> list[str]:
    """Each value cut to at most ``width`` characters so that different values stay different
    texts: the middle is dropped (``middle_cut``), keeping the longest common prefix and
    suffix out of the kept part first, so the cut falls where the values agree. Values that
    still collide get a ``~k`` ending (``k`` the value's place among the distinct values)."""
    uniq = list(dict.fromkeys(values))
    long = [v for v in uniq if len(v) > width]
    out: dict[str, str] = {v: v for v in uniq if len(v) <= width}
    if long:
        prefix = os.path.commonprefix(long)
        suffix = os.path.commonprefix([v[::-1] for v in long])[::-1]
        # Whole words around the difference: ``budget=3``, not ``3``.
        prefix = prefix[: max((prefix.rfind(c) + 1 for c in _SEPARATORS), default=0)]
        cut = [i for i in (suffix.find(c) for c in _SEPARATORS) if i >= 0]
        suffix = suffix[min(cut) :] if cut else ""
        for v in long:
            out[v] = _cut_shared(v, width, len(prefix), len(suffix))
    taken: dict[str, list[str]] = {}
    for v in uniq:
        taken.setdefault(out[v], []).append(v)
    index = {v: k for k, v in enumerate(uniq, 1)}
    for members in taken.values():
        if len(members) > 1:
            for v in members:
                tag = f"~{index[v]}"
                out[v] = middle_cut(v, width - len(tag)) + tag if len(v) + len(tag) > width else v + tag
    return [out[v] for v in values]


def _cut_shared(v: str, width: int, prefix: int, suffix: int) -> str:
    """``v`` cut to ``width`` keeping the part that differs from the other long values
    (``v[prefix:len(v) - suffix]``) whole, and as much as fits of the shared prefix (from its
    start) and shared suffix (from its end), each cut marked by ``…``."""
    suffix = min(suffix, len(v) - prefix)
    differs = v[prefix : len(v) - suffix]
    if not differs or len(differs) + 2 > width:
        return middle_cut(v, width)
    best: tuple[int, int, int] | None = None
    for hk in range(prefix, -1, -1):
        head_len = prefix if hk == prefix else hk + 1
        room = width - len(differs) - head_len
        if room < 0:
            continue
        tk = suffix if room >= suffix else max(0, room - 1)
        if suffix and tk < suffix and room < 1:
            continue
        cand = (hk + tk, hk, tk)
        if best is None or cand > best:
            best = cand
    if best is None:
        return middle_cut(v, width)
    _, hk, tk = best
    head = v[:prefix] if hk == prefix else v[:hk] + ELLIPSIS
    tail = v[len(v) - suffix :] if tk == suffix else ELLIPSIS + (v[len(v) - tk :] if tk else "")
    return head + differs + tail
