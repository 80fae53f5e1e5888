"""CountBench (Paiss et al., 2023) and CountBenchQA, as a further photograph set (counts 2-10).

Accepted layouts of ``root`` (first match wins):

1. ``CountBench.json``: the original release, a JSON list of ``{"image_url", "text", "number"}``
   (LAION images: fetch them into ``images/<sha256 of the URL>.<ext>`` with
   ``download_countbench_images``; dead links are skipped).
2. Parquet with embedded images, as on the Hugging Face Hub (``data/test-*.parquet`` for
   ``vikhyatk/CountBenchQA``, ``data/train-*.parquet`` for ``nielsr/countbench``, or any
   ``*.parquet`` in ``root``): columns ``image`` (``{"bytes", "path"}``), ``number``, ``text`` and,
   for CountBenchQA, ``question``. Needs pyarrow.

Object names: from the CountBenchQA question ("How many dogs are ...") when there is one,
else from the caption: the words after the number word, up to a preposition, conjunction,
verb-like word or three words ("three red apples on a table" -> "red apples"); else "objects".
Count ground truth only (no points).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from countgym.errors import UserError
from countgym.stimulus import Stimulus, write_manifest

from .common import (
    build_once,
    derived_cache_root,
    file_digest,
    find_image,
    first_existing,
    missing_files_error,
    noun_forms,
    pick,
    read_table,
    url_image_stem,
)
from .download import MAX_PIXELS, DownloadReport, RejectedImage, check_image_bytes, download_images

COUNTBENCH_DOCS = "https://teaching-clip-to-count.github.io (CountBench.json) or https://huggingface.co/datasets/vikhyatk/CountBenchQA"
ROOT_ENV = "COUNTGYM_COUNTBENCH_ROOT"
JSON_NAME = "CountBench.json"
PARQUET_PATTERNS: tuple[str, ...] = ("data/test-*.parquet", "data/train-*.parquet", "*.parquet")
IMAGE_DIR = "images"
COUNTS: tuple[int, ...] = tuple(range(2, 11))
COUNTBENCH_VERSION = 1

NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_STOP = frozenset(
    "in on at with and or of for from to by near under over above below behind beside between "
    "into onto against along around across while that which who are is was were being sitting "
    "standing lying laying hanging stacked arranged isolated together".split()
)


@dataclass(frozen=True)
class CountBenchItem:
    """One item of the release."""

    number: int
    text: str
    question: str | None = None
    url: str | None = None
    image_bytes: bytes | None = None


def object_name(item: CountBenchItem) -> tuple[str, str, str]:
    """``(plural, singular, source)``; source is ``question``, ``caption`` or ``fallback``."""
    if item.question:
        m = re.search(r"how many (.+?)\s+(?:are|is|can|do|does|were|there)\b", item.question, re.I)
        if m:
            return (*noun_forms(m.group(1)), "question")
    words = re.findall(r"[a-z0-9&'-]+", item.text.lower())
    targets = {str(item.number), *(w for w, n in NUMBER_WORDS.items() if n == item.number)}
    for i, w in enumerate(words):
        if w in targets:
            phrase: list[str] = []
            for nxt in words[i + 1 : i + 4]:
                if nxt in _STOP or nxt.endswith("ing"):
                    break
                phrase.append(nxt)
            if phrase:
                return (*noun_forms(" ".join(phrase)), "caption")
            break
    return "objects", "object", "fallback"


def _locate(root: Path) -> tuple[str, list[Path]]:
    if (root / JSON_NAME).is_file():
        return "json", [root / JSON_NAME]
    parquet = first_existing(root, PARQUET_PATTERNS)
    if parquet:
        return "parquet", parquet
    raise missing_files_error("CountBench", root, [f"{JSON_NAME} or data/test-*.parquet"], COUNTBENCH_DOCS)


def is_countbench_release(path: Path) -> bool:
    """True when ``path`` holds ``CountBench.json`` (parquet layouts are told apart by columns)."""
    return (path / JSON_NAME).is_file()


def read_countbench(root: str | Path) -> list[CountBenchItem]:
    """The items of the release, in file order."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise missing_files_error("CountBench", root, ["the folder itself"], COUNTBENCH_DOCS)
    kind, paths = _locate(root)
    items: list[CountBenchItem] = []
    for path in paths:
        for i, raw in enumerate(read_table(path)):
            number = pick(raw, ("number", "count"))
            try:
                n = int(number)
            except (TypeError, ValueError):
                raise UserError(f"{path}: row {i} has no integer 'number'") from None
            image = raw.get("image")
            data = image.get("bytes") if isinstance(image, dict) else image if isinstance(image, bytes) else None
            url = pick(raw, ("image_url", "url"))
            if kind == "json" and not isinstance(url, str):
                raise UserError(f"{path}: row {i} lacks image_url")
            items.append(CountBenchItem(n, str(pick(raw, ("text", "caption")) or ""),
                                        pick(raw, ("question",)), url, data))
    return items


def download_countbench_images(root: str | Path, **options: Any) -> DownloadReport:
    """Fetch the images of ``CountBench.json`` into ``root/images`` (options of ``download_images``)."""
    items = [(it.url, None) for it in read_countbench(root) if it.url and it.image_bytes is None]
    return download_images(items, Path(root).expanduser() / IMAGE_DIR, **options)


def stimulus_id(item: CountBenchItem, index: int) -> str:
    """``countbench-`` + 12 hex digits of SHA-256(URL or caption | number | index)."""
    key = f"{item.url or item.text}|{item.number}|{index}"
    return "countbench-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def prepare_countbench(root: str | Path, out: str | Path, *, progress: bool = True) -> Path:
    """Write every item with a count in 2-10 and an available image into ``out``; return ``out``."""
    root = Path(root).expanduser()
    items = read_countbench(root)
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    stimuli: list[Stimulus] = []
    for i, item in enumerate(tqdm(items, desc="scenes countbench", unit="img", disable=None if progress else True)):
        if item.number not in COUNTS:
            continue
        sid = stimulus_id(item, i)
        rel = _write_image(root, item, out, sid)
        if rel is None:
            continue
        obj, obj_sing, source = object_name(item)
        meta: dict[str, Any] = {"battery": "countbench", "caption": item.text, "obj_source": source, "index": i}
        if item.question:
            meta["question"] = item.question
        if item.url:
            meta["url"] = item.url
        stimuli.append(Stimulus(id=sid, n=item.number, obj=obj, obj_sing=obj_sing, image=rel, meta=meta))
    if not stimuli:
        raise missing_files_error(
            "CountBench", root, [f"images (embedded, or downloaded into {IMAGE_DIR}/)"], COUNTBENCH_DOCS,
            hint="fetch them with download_countbench_images(ROOT)",
        )
    stimuli.sort(key=lambda s: (s.n, s.meta["index"]))
    write_manifest(out, stimuli)
    return out


def _write_image(root: Path, item: CountBenchItem, out: Path, sid: str) -> str | None:
    if item.image_bytes is not None:
        try:
            ext = check_image_bytes(item.image_bytes, None, max_pixels=MAX_PIXELS)
        except RejectedImage:
            return None
        rel = f"images/{sid}{ext}"
        (out / rel).write_bytes(item.image_bytes)
        return rel
    if item.url:
        src = find_image(root / IMAGE_DIR, url_image_stem(item.url))
        if src is None:
            return None
        try:
            check_image_bytes(src.read_bytes(), None, max_pixels=MAX_PIXELS)
        except RejectedImage:
            return None
        rel = f"images/{sid}{src.suffix.lower()}"
        shutil.copyfile(src, out / rel)
        return rel
    return None


def cached_countbench(root: str | Path, *, progress: bool = False) -> Path:
    """The prepared set in the derived-data cache (rebuilt when the release or image list changes)."""
    root = Path(root).expanduser()
    _, paths = _locate(root)
    names = sorted(p.name for p in (root / IMAGE_DIR).iterdir()) if (root / IMAGE_DIR).is_dir() else []
    fp = file_digest(paths, extra=f"{root.resolve()}|v{COUNTBENCH_VERSION}|{json.dumps(names)}")
    final = derived_cache_root() / "photos" / f"countbench-v{COUNTBENCH_VERSION}-{fp}"
    return build_once(final, lambda tmp: prepare_countbench(root, tmp, progress=progress))


def table_columns(path: Path) -> set[str]:
    """Column names of a parquet/JSONL table (first row), for telling releases apart."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            return set()
        return set(pq.read_schema(path).names)
    try:
        with path.open(encoding="utf-8") as f:
            if path.suffix == ".jsonl":
                first = next((line for line in f if line.strip()), "{}")
                return set(json.loads(first))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return set()
    return set()


__all__ = [
    "COUNTBENCH_DOCS",
    "ROOT_ENV",
    "CountBenchItem",
    "cached_countbench",
    "download_countbench_images",
    "is_countbench_release",
    "object_name",
    "prepare_countbench",
    "read_countbench",
    "stimulus_id",
]
