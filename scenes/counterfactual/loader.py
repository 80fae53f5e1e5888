"""Loader for the released CounterCount data from a user-given root (layout: docs/countercount.md).

The root holds one metadata file listing the CF edits, one record per pair, and the images and
masks it names (paths relative to the root). The loader reads it into an in-memory ``Dataset``
with two stimuli per pair (``{pair_id}-factual`` and ``{pair_id}-cf``, as the generator writes),
without writing anything unless ``write_manifest=True``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from countgym.errors import UserError
from countgym.scenes.counterfactual.categories import canonical_category
from countgym.stimulus import MANIFEST, Dataset, Stimulus
from countgym.stimulus import write_manifest as _write_manifest

METADATA_NAMES: tuple[str, ...] = ("metadata.jsonl", "metadata.json", "metadata.csv")
RELEASE_NAME = "countercount-release"

# Accepted spellings of each field (the paper calls the counts ordinary/anomalous).
ALIASES: dict[str, tuple[str, ...]] = {
    "pair_id": ("pair_id", "id"),
    "subject": ("subject", "object"),
    "attribute": ("attribute", "anomaly", "part"),
    "category": ("category",),
    "canonical_count": ("canonical_count", "factual_count", "ordinary_count", "c_o"),
    "cf_count": ("cf_count", "anomalous_count", "counterfactual_count", "c_a"),
    "factual_image": ("factual_image", "factual"),
    "cf_image": ("cf_image", "counterfactual_image", "cf"),
    "mask": ("mask", "cf_mask"),
    "bbox": ("bbox", "box", "cf_bbox"),
}
OPTIONAL: dict[str, tuple[str, ...]] = {
    "attribute_plural": ("attribute_plural", "attributes"),
    "name": ("name",),
    "factual_mask": ("factual_mask",),
}


class CounterCountRelease(Dataset):
    """A ``Dataset`` over the released files, built from the metadata instead of a manifest."""

    def __init__(self, root: Path, stimuli: list[Stimulus], name: str = RELEASE_NAME) -> None:
        # Dataset.__init__ reads manifest.jsonl; the release has none, so set its state here.
        self.root = Path(root)
        self.name = name
        self.stimuli = stimuli
        self._by_id = {s.id: s for s in stimuli}
        if len(self._by_id) != len(stimuli):
            raise UserError(f"{root}: duplicate pair ids in the CounterCount metadata")
        self._hashes: dict[str, str] = {}


def load_countercount(root: str | Path, *, write_manifest: bool = False) -> Dataset:
    """The released CounterCount data under ``root`` as a ``Dataset``.

    Raises ``UserError`` naming what is missing (the root, the metadata file, a field of a given
    record, an image or mask file). ``write_manifest=True`` also writes ``root/manifest.jsonl``
    so the folder then opens like any dataset folder.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise UserError(f"CounterCount root {root} does not exist: download the release and pass its folder")
    if (root / MANIFEST).is_file() and not write_manifest:
        return Dataset(root)
    meta_path = next((root / n for n in METADATA_NAMES if (root / n).is_file()), None)
    if meta_path is None:
        raise UserError(
            f"no CounterCount metadata in {root}: expected one of {', '.join(METADATA_NAMES)} "
            "(see docs/countercount.md for the layout)"
        )
    stimuli: list[Stimulus] = []
    for where, raw in _records(meta_path):
        stimuli.extend(_pair(root, where, raw))
    if not stimuli:
        raise UserError(f"{meta_path} lists no pairs")
    if write_manifest:
        _write_manifest(root, stimuli)
        return Dataset(root)
    return CounterCountRelease(root, stimuli)


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as f:
                for i, row in enumerate(csv.DictReader(f), 2):
                    yield f"{path.name}:{i}", dict(row)
        elif path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        yield f"{path.name}:{i}", _object(json.loads(line), f"{path.name}:{i}")
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
            items = data.get("pairs", data) if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise UserError(f"{path}: expected a list of pair records (or {{\"pairs\": [...]}})")
            for i, item in enumerate(items):
                yield f"{path.name}[{i}]", _object(item, f"{path.name}[{i}]")
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: invalid JSON ({e.msg} at line {e.lineno})") from None


def _object(x: Any, where: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise UserError(f"{where}: expected a JSON object per pair")
    return x


def _field(raw: dict[str, Any], names: tuple[str, ...]) -> Any:
    for n in names:
        if raw.get(n) not in (None, ""):
            return raw[n]
    return None


def _pair(root: Path, where: str, raw: dict[str, Any]) -> list[Stimulus]:
    rec = {k: _field(raw, names) for k, names in ALIASES.items()}
    missing = [k for k, v in rec.items() if v is None]
    if missing:
        raise UserError(f"{where}: missing field(s) {', '.join(missing)} (see docs/countercount.md)")
    opt = {k: _field(raw, names) for k, names in OPTIONAL.items()}
    pid = str(rec["pair_id"])
    try:
        c_o, c_a = int(rec["canonical_count"]), int(rec["cf_count"])
    except (TypeError, ValueError):
        raise UserError(f"{where}: counts must be integers, got {rec['canonical_count']!r} and {rec['cf_count']!r}") from None
    if c_o < 0 or c_a < 0 or c_o == c_a:
        raise UserError(f"{where}: canonical_count and cf_count must be distinct counts >= 0, got {c_o} and {c_a}")
    bbox = _bbox(rec["bbox"], where)
    for key in ("factual_image", "cf_image", "mask"):
        _check_file(root, str(rec[key]), where, key)
    if opt["factual_mask"] is not None:
        _check_file(root, str(opt["factual_mask"]), where, "factual_mask")
    attribute = str(rec["attribute"])
    plural = str(opt["attribute_plural"] or attribute + "s")
    out = []
    for kind, count, image, mask in (
        ("factual", c_o, rec["factual_image"], opt["factual_mask"] or rec["mask"]),
        ("cf", c_a, rec["cf_image"], rec["mask"]),
    ):
        meta = {
            "battery": RELEASE_NAME,
            "subject": str(opt["name"] or rec["subject"]),
            "attribute": attribute,
            "category": canonical_category(str(rec["category"])) or str(rec["category"]).strip(),
            "canonical_count": c_o,
            "cf_count": c_a,
            "kind": kind,
            "pair_id": pid,
            "edit": "removal" if c_a < c_o else "addition",
            "bbox": bbox,
            "mask": str(mask),
        }
        out.append(Stimulus(id=f"{pid}-{kind}", n=count, obj=plural, obj_sing=attribute, image=str(image), meta=meta))
    return out


def _bbox(v: Any, where: str) -> list[float]:
    if isinstance(v, str):
        v = v.strip().strip("[]()")
        parts: list[Any] = [p for p in v.replace(";", ",").replace(" ", ",").split(",") if p]
    else:
        parts = list(v) if isinstance(v, list | tuple) else []
    try:
        box = [float(p) for p in parts]
    except (TypeError, ValueError):
        box = []
    if len(box) != 4 or box[2] <= box[0] or box[3] <= box[1]:
        raise UserError(f"{where}: bbox must be pixel [x1, y1, x2, y2] with x2 > x1 and y2 > y1, got {v!r}")
    return box


def _check_file(root: Path, rel: str, where: str, key: str) -> None:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents:
        raise UserError(f"{where}: {key} path {rel!r} leaves the dataset root")
    if not path.is_file():
        raise UserError(f"{where}: missing {key} file {root / rel}")


__all__ = ["CounterCountRelease", "load_countercount"]
