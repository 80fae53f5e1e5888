"""PixMo-Count (Deitke et al., 2025): the human-verified test split, as *Give the Model a Finger*
uses it (Appendix D: 20 images per count 2-10, fetched from their URLs, dead links skipped;
count ground truth only).

Expected folder (``root``)::

    data/test-00000-of-00001.parquet   the test split as released on the Hugging Face Hub
                                       (or test.parquet / test.jsonl / test.json / test.csv)
    images/<sha256 of the URL>.<ext>   the downloaded images (``download_pixmo_images``)

The table has one row per (image, label): ``image_url``, ``image_sha256``, ``count``, ``label``
(``points`` are absent in the evaluation splits). ``huggingface-cli download allenai/pixmo-count
--repo-type dataset --local-dir ROOT`` gives the parquet layout; without pyarrow, export the split
as JSONL (``datasets.load_dataset("allenai/pixmo-count", split="test").to_json("ROOT/test.jsonl")``).

Selection (deterministic, ``seed`` 0 = the documented set): rows with a count in 2-10 whose image
is present and decodable; per count, rows ordered by a SHA-256 key of (seed, URL, label); the
first ``per_count`` (20) are taken. The ``common`` subset is the first 10 per count (90 images).
"""

from __future__ import annotations

import hashlib
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from countgym.errors import UserError
from countgym.stimulus import Stimulus, write_manifest

from .common import (
    SUBSETS_KEY,
    build_once,
    derived_cache_root,
    file_digest,
    find_image,
    first_existing,
    missing_files_error,
    noun_forms,
    pick,
    read_table,
    sort_key,
    url_image_stem,
)
from .download import DownloadReport, download_images

PIXMO_DOCS = "https://huggingface.co/datasets/allenai/pixmo-count"
ROOT_ENV = "COUNTGYM_PIXMO_ROOT"
TABLE_PATTERNS: tuple[str, ...] = (
    "data/test-*.parquet", "test-*.parquet", "test.parquet", "test.jsonl", "test.json", "test.csv",
)  # fmt: skip
IMAGE_DIR = "images"
COUNTS: tuple[int, ...] = tuple(range(2, 11))
PER_COUNT = 20
SUBSET_PER_COUNT: dict[str, int] = {"common": 10}
PIXMO_VERSION = 1


@dataclass(frozen=True)
class PixmoRow:
    """One row of the released test split."""

    url: str
    count: int
    label: str
    sha256: str | None = None


def table_files(root: str | Path) -> list[Path]:
    """The test-split table file(s) under ``root``; a ``UserError`` names what is expected."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise missing_files_error("PixMo-Count", root, ["the folder itself"], PIXMO_DOCS)
    found = first_existing(root, TABLE_PATTERNS)
    if not found:
        raise missing_files_error("PixMo-Count", root, [" or ".join(TABLE_PATTERNS)], PIXMO_DOCS)
    return found


def is_pixmo_release(path: Path) -> bool:
    """True when ``path`` holds a table named like the PixMo-Count test split (the Hub layout
    is shared with CountBenchQA; ``resolve`` tells them apart by their columns)."""
    return bool(first_existing(path, TABLE_PATTERNS))


def read_pixmo_table(root: str | Path) -> list[PixmoRow]:
    """The test split's rows (file order); rows without a URL or an integer count are errors."""
    rows: list[PixmoRow] = []
    for path in table_files(root):
        for i, raw in enumerate(read_table(path)):
            url = pick(raw, ("image_url", "url"))
            count = pick(raw, ("count", "n"))
            label = pick(raw, ("label", "object", "obj"))
            if not isinstance(url, str) or count is None or label is None:
                raise UserError(f"{path}: row {i} lacks image_url, count or label (columns: {', '.join(raw)})")
            try:
                n = int(count)
            except (TypeError, ValueError):
                raise UserError(f"{path}: row {i} has a non-integer count {count!r}") from None
            sha = pick(raw, ("image_sha256", "sha256"))
            rows.append(PixmoRow(url, n, str(label), str(sha) if sha else None))
    return rows


def download_pixmo_images(
    root: str | Path,
    *,
    counts: tuple[int, ...] = COUNTS,
    workers: int = 8,
    retries: int = 3,
    timeout: float = 30.0,
    backoff_s: float = 0.5,
    verify_sha256: bool = True,
    progress: bool = True,
) -> DownloadReport:
    """Fetch the test split's images into ``root/images`` (needs a network; resumable).

    Only rows whose count is in ``counts`` are fetched; dead links are skipped and listed in the
    report; ``verify_sha256`` rejects images whose bytes differ from the release's hash.
    """
    rows = [r for r in read_pixmo_table(root) if r.count in counts]
    items = [(r.url, r.sha256 if verify_sha256 else None) for r in rows]
    return download_images(items, Path(root).expanduser() / IMAGE_DIR, workers=workers, retries=retries,
                           timeout=timeout, backoff_s=backoff_s, progress=progress)


def decode_error(path: Path) -> str | None:
    """Why an image file cannot be used (None when it decodes in full).

    ``Image.verify()`` checks only the container, so a truncated JPEG download passes it and
    then fails in every episode; the whole image is decoded here instead (bomb guard on).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                im.load()
        return None
    except Exception as e:  # noqa: BLE001 - any failure means the image is unusable
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def stimulus_id(row: PixmoRow) -> str:
    """Manifest id of a row: ``pixmo-`` + 12 hex digits of SHA-256(URL | label)."""
    return "pixmo-" + hashlib.sha256(f"{row.url}|{row.label}".encode()).hexdigest()[:12]


def prepare_pixmo(
    root: str | Path, out: str | Path, *, per_count: int = PER_COUNT, seed: int = 0, progress: bool = True
) -> Path:
    """Write the paper's PixMo-Count set (manifest + copied images) into ``out``; return ``out``.

    Each stimulus: id ``pixmo-<hash>``, ``n`` = count, ``obj``/``obj_sing`` from the label
    (``noun_forms``), no points; meta ``battery``, ``set``, ``label``, ``url``, ``rank``,
    ``subsets``. A count with fewer present images than ``per_count`` gives what it has (warning).
    """
    if per_count < 1:
        raise ValueError(f"per_count must be >= 1, got {per_count}")
    root = Path(root).expanduser()
    rows = read_pixmo_table(root)
    images = root / IMAGE_DIR
    if not images.is_dir() or not any(images.iterdir()):
        raise missing_files_error(
            "PixMo-Count", root, [f"{IMAGE_DIR}/ (the downloaded images)"], PIXMO_DOCS,
            hint="fetch them with download_pixmo_images(ROOT) or 'countgym scenes download pixmo --data ROOT'",
        )
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    stimuli: list[Stimulus] = []
    seen: set[str] = set()
    broken: dict[str, str] = {}  # file name -> why it cannot be decoded
    for n in tqdm(COUNTS, desc="scenes pixmo", unit="count", disable=None if progress else True):
        cands = sorted((r for r in rows if r.count == n), key=lambda r: sort_key(seed, r.url, r.label))
        taken = 0
        for row in cands:
            if taken == per_count:
                break
            sid = stimulus_id(row)
            src = find_image(images, url_image_stem(row.url))
            if sid in seen or src is None:
                continue
            reason = decode_error(src)
            if reason is not None:
                broken[src.name] = reason
                continue
            seen.add(sid)
            rel = f"images/{sid}{src.suffix.lower()}"
            shutil.copyfile(src, out / rel)
            obj, obj_sing = noun_forms(row.label)
            stimuli.append(Stimulus(
                id=sid, n=n, obj=obj, obj_sing=obj_sing, image=rel, points=None,
                meta={"battery": "pixmo", "set": "test", "label": row.label, "url": row.url, "rank": taken,
                      SUBSETS_KEY: [s for s, k in SUBSET_PER_COUNT.items() if taken < k]},
            ))  # fmt: skip
            taken += 1
        if taken < per_count:
            warnings.warn(f"PixMo-Count count {n}: {taken} images present, {per_count} wanted", stacklevel=2)
    if broken:
        listed = [f"{IMAGE_DIR}/{name} ({why})" for name, why in broken.items()]
        shown = "; ".join(listed[:3]) + (f"; ... ({len(listed) - 3} more)" if len(listed) > 3 else "")
        warnings.warn(
            f"PixMo-Count: skipped {len(broken)} undecodable image(s), as for dead links: {shown};"
            " delete them and download again to restore them",
            stacklevel=2,
        )
    if not stimuli:
        raise missing_files_error("PixMo-Count", root, [f"readable images in {IMAGE_DIR}/ for counts 2-10"], PIXMO_DOCS)
    write_manifest(out, stimuli)
    return out


def cached_pixmo(root: str | Path, *, progress: bool = False) -> Path:
    """The prepared set in the derived-data cache; rebuilt when the table or the image list changes."""
    root = Path(root).expanduser()
    tables = table_files(root)
    # Size and mtime too: an image downloaded again under the same name must rebuild the set.
    names = sorted(
        f"{p.name}:{st.st_size}:{st.st_mtime_ns}"
        for p in ((root / IMAGE_DIR).iterdir() if (root / IMAGE_DIR).is_dir() else [])
        for st in [p.stat()]
    )
    fp = file_digest(tables, extra=f"{root.resolve()}|v{PIXMO_VERSION}|{PER_COUNT}|{'/'.join(names)}")
    final = derived_cache_root() / "photos" / f"pixmo-v{PIXMO_VERSION}-{fp}"
    return build_once(final, lambda tmp: prepare_pixmo(root, tmp, progress=progress))


__all__ = [
    "COUNTS",
    "PER_COUNT",
    "PIXMO_DOCS",
    "ROOT_ENV",
    "SUBSET_PER_COUNT",
    "PixmoRow",
    "cached_pixmo",
    "download_pixmo_images",
    "is_pixmo_release",
    "prepare_pixmo",
    "read_pixmo_table",
    "stimulus_id",
    "table_files",
]
