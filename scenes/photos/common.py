"""Shared pieces of the photograph loaders: object names, file naming, release tables, cache.

Object names. The prompts need a plural (``obj``: "How many {obj} ...") and a singular
(``obj_sing``: "Tag each {obj_sing} ..."). ``noun_forms`` derives both from a dataset label with
a light, documented normalisation (docs/photos.md): lower case, whitespace collapsed, an
override table for the irregular and odd labels ("deers" -> "deer", "people" -> "person"),
then English suffix rules on the last word only ("sea shells" -> "sea shell").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from countgym.errors import UserError
from countgym.scenes.cache import (  # noqa: F401 - re-exported for the photo loaders
    DERIVED_CACHE_ENV,
    build_once,
    derived_cache_root,
)
from countgym.stimulus import Dataset, Stimulus

"""Where prepared photo sets and transformed copies go (default ``$COUNTGYM_CACHE/derived``)."""

SUBSETS_KEY = "subsets"
"""Stimulus meta key listing the named subsets (``common``, ``ablation``) a photo belongs to."""

# --------------------------------------------------------------------------- object names

# label as written in a release -> (plural, singular). Checked on the whole label first, then on
# its last word. Labels that are already correct plurals need no entry.
NOUN_OVERRIDES: dict[str, tuple[str, str]] = {
    "deers": ("deer", "deer"),
    "deer": ("deer", "deer"),
    "sheeps": ("sheep", "sheep"),
    "sheep": ("sheep", "sheep"),
    "fishes": ("fish", "fish"),
    "fish": ("fish", "fish"),
    "goldfish": ("goldfish", "goldfish"),
    "people": ("people", "person"),
    "person": ("people", "person"),
    "persons": ("people", "person"),
    "men": ("men", "man"),
    "women": ("women", "woman"),
    "children": ("children", "child"),
    "geese": ("geese", "goose"),
    "mice": ("mice", "mouse"),
    "teeth": ("teeth", "tooth"),
    "feet": ("feet", "foot"),
    "cookies": ("cookies", "cookie"),
    "leaves": ("leaves", "leaf"),
    "knives": ("knives", "knife"),
    "shelves": ("shelves", "shelf"),
    "loaves": ("loaves", "loaf"),
    "wolves": ("wolves", "wolf"),
    "halves": ("halves", "half"),
    "calves": ("calves", "calf"),
    "sunglasses": ("sunglasses", "pair of sunglasses"),
    "jeans": ("jeans", "pair of jeans"),
    "scissors": ("scissors", "pair of scissors"),
    "glasses": ("glasses", "glass"),
    "buses": ("buses", "bus"),
    "skis": ("skis", "ski"),
    "lenses": ("lenses", "lens"),
    "series": ("series", "series"),
    "species": ("species", "species"),
}
_O_ES = frozenset({"potatoes", "tomatoes", "buffaloes", "mangoes", "heroes", "echoes", "volcanoes", "dominoes"})
_INVARIANT_S = ("ss", "us")  # glass, cactus: singular words that end in s


def normalise_label(label: str) -> str:
    """Lower case, underscores to spaces, whitespace collapsed."""
    return re.sub(r"\s+", " ", str(label).replace("_", " ")).strip().lower()


def _singular_word(word: str) -> str:
    if word in _O_ES:
        return word[:-2]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(_INVARIANT_S):
        return word[:-1]
    return word


def _plural_word(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _looks_plural(word: str) -> bool:
    return word.endswith("s") and not word.endswith(_INVARIANT_S)


def noun_forms(label: str) -> tuple[str, str]:
    """``(plural, singular)`` of a dataset label, lightly normalised (see module docstring).

    >>> noun_forms("deers"), noun_forms("sea shells"), noun_forms("strawberries"), noun_forms("dog")
    (('deer', 'deer'), ('sea shells', 'sea shell'), ('strawberries', 'strawberry'), ('dogs', 'dog'))
    """
    text = normalise_label(label)
    if not text:
        return "objects", "object"
    if text in NOUN_OVERRIDES:
        return NOUN_OVERRIDES[text]
    head, _, last = text.rpartition(" ")
    prefix = f"{head} " if head else ""
    if last in NOUN_OVERRIDES:
        plural, singular = NOUN_OVERRIDES[last]
        return prefix + plural, prefix + singular
    if _looks_plural(last):
        return text, prefix + _singular_word(last)
    return prefix + _plural_word(last), text


# --------------------------------------------------------------------------- files and hashing


def url_image_stem(url: str) -> str:
    """The file stem of a downloaded image: SHA-256 of the URL (UTF-8), 64 hex digits."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def find_image(folder: Path, stem: str) -> Path | None:
    """The file ``folder/<stem>.<ext>`` for an image extension, or None."""
    for ext in IMAGE_EXTENSIONS:
        p = folder / f"{stem}{ext}"
        if p.is_file():
            return p
    return None


IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
FORMAT_EXTENSIONS: dict[str, str] = {
    "JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "WEBP": ".webp", "BMP": ".bmp", "TIFF": ".tif", "MPO": ".jpg",
}  # fmt: skip


def sort_key(seed: int, *parts: object) -> str:
    """A deterministic pseudo-random order key (SHA-256 of the seed and the parts)."""
    return hashlib.sha256("|".join([str(seed), *map(str, parts)]).encode("utf-8")).hexdigest()


def slug(text: str, max_len: int = 40) -> str:
    """A short file-name-safe form of a label."""
    s = re.sub(r"[^a-z0-9]+", "-", normalise_label(text)).strip("-")
    return s[:max_len] or "x"


def missing_files_error(what: str, root: Path, missing: Sequence[str], docs: str, hint: str = "") -> UserError:
    """The one-line error for an incomplete release: what is missing and where to get it."""
    names = ", ".join(missing)
    extra = f"; {hint}" if hint else ""
    return UserError(f"{what} release at {root} is missing {names}{extra} (official release: {docs}; see docs/photos.md)")


# --------------------------------------------------------------------------- release tables


def read_table(path: Path) -> list[dict[str, Any]]:
    """Rows of a release table: ``.parquet`` (needs pyarrow), ``.jsonl``, ``.json`` or ``.csv``."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return _read_parquet(path)
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                # column-oriented ({"col": [...]}) or {"data"/"rows": [...]}
                for key in ("data", "rows", "test"):
                    if isinstance(data.get(key), list):
                        return list(data[key])
                cols = {k: v for k, v in data.items() if isinstance(v, list)}
                n = {len(v) for v in cols.values()}
                if cols and len(n) == 1:
                    return [{k: v[i] for k, v in cols.items()} for i in range(n.pop())]
                raise UserError(f"{path}: expected a list of records")
            return list(data)
        if suffix == ".csv":
            import csv

            with path.open(encoding="utf-8", newline="") as f:
                return list(csv.DictReader(f))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    raise UserError(f"unsupported table format {path.name}: use .parquet, .jsonl, .json or .csv")


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(
            f"reading {path.name} needs pyarrow (pip install pyarrow), or export the split as "
            "JSONL: datasets.load_dataset(...).to_json('test.jsonl')"
        ) from None
    try:
        return list(pq.read_table(path).to_pylist())
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a corrupt file
        raise UserError(f"cannot read {path}: {type(e).__name__}: {e}") from None


def first_existing(root: Path, patterns: Sequence[str]) -> list[Path]:
    """The files matching the first pattern (glob, relative to ``root``) that matches any."""
    for pat in patterns:
        hits = sorted(p for p in root.glob(pat) if p.is_file())
        if hits:
            return hits
    return []


def pick(row: dict[str, Any], names: Sequence[str]) -> Any:
    """The first present, non-null value among ``names`` in a row."""
    for n in names:
        if n in row and row[n] is not None and row[n] != "":
            return row[n]
    return None


# --------------------------------------------------------------------------- subsets


def in_subset(stimulus: Stimulus, subset: str) -> bool:
    """True when the stimulus's meta lists ``subset``."""
    subs = stimulus.meta.get(SUBSETS_KEY)
    return isinstance(subs, list) and subset in subs


def has_photo_subsets(stimuli: Iterable[Stimulus]) -> bool:
    """True when the stimuli carry photo subset membership in their meta."""
    return any(SUBSETS_KEY in s.meta for s in stimuli)


class PhotoSubsetDataset(Dataset):
    """A prepared photo folder restricted to one named subset (meta ``subsets``)."""

    def __init__(self, root: str | Path, subset: str, name: str | None = None) -> None:
        super().__init__(root, name or f"{Path(root).name}:{subset}")
        self.subset = subset
        chosen = [s for s in self.stimuli if in_subset(s, subset)]
        if not chosen:
            known = sorted({x for s in self.stimuli for x in s.meta.get(SUBSETS_KEY) or []})
            raise UserError(
                f"subset {subset!r} selects nothing in {self.root}; subsets here: {', '.join(known) or 'none'}"
            )
        self.stimuli = chosen
        self._by_id = {s.id: s for s in chosen}


def round_robin(groups: Sequence[Sequence[Any]]) -> Iterator[Any]:
    """One item from each group in turn, skipping exhausted groups."""
    for t in range(max((len(g) for g in groups), default=0)):
        for g in groups:
            if t < len(g):
                yield g[t]


# --------------------------------------------------------------------------- cache


def file_digest(paths: Iterable[Path], extra: str = "") -> str:
    """A short SHA-256 over file names, sizes and contents (release metadata fingerprints)."""
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(f"|{p.name}|{p.stat().st_size}|".encode())
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:12]
