"""Reading the released CountVideoBench (videos + metadata) into a dataset folder.

The benchmark is downloaded by the user (https://countvideobench.github.io, CC BY 4.0). Expected
layout under the root given to :func:`load_released_countvideo`::

    ROOT/metadata.csv            (or metadata.jsonl / metadata.json: a list of objects)
    ROOT/videos/<name>.mp4       the clips named by the metadata's video column
    ROOT/frames/<name>/*.jpg     optional: frames already extracted (png/jpg), one folder per clip

Metadata columns (case-insensitive; the first present alias is used):

=========  ==========================================================  ========
meaning    accepted names                                              required
=========  ==========================================================  ========
clip       video, video_path, file, filename, path, video_id           yes
count      count, n, gt, ground_truth, answer, cardinality, label      yes
shape      shape, object_shape (cube | sphere)                         yes [*]
colour     color, colour                                               yes [*]
id         id, stimulus_id (default: the clip's file stem)             no
=========  ==========================================================  ========

[*] or one ``class``/``category``/``object`` column such as "red cube" or "red_cubes".

Ten frames are sampled uniformly from each clip (``linspace(0, T-1, 10)`` floored), decoded
with PyAV or imageio when installed (the ``video`` extra). Without a decoder, pre-extracted
frames under ``ROOT/frames/<name>/`` are used (sampled the same way when there are more than
ten). The result is an ordinary dataset folder (manifest + frames), written once to ``out``
(default: the countgym cache) and returned as a ``Dataset``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tqdm import tqdm

from countgym.errors import UserError
from countgym.stimulus import MANIFEST, Dataset, Stimulus, write_manifest

from .specs import COLORS, SHAPES

DOWNLOAD_HINT = "download it from https://countvideobench.github.io and unpack it so that ROOT/metadata.csv and ROOT/videos/ exist"
METADATA_NAMES = ("metadata.csv", "metadata.jsonl", "metadata.json")
_ALIASES = {
    "clip": ("video", "video_path", "file", "filename", "path", "video_id"),
    "n": ("count", "n", "gt", "ground_truth", "answer", "cardinality", "label"),
    "shape": ("shape", "object_shape"),
    "color": ("color", "colour"),
    "id": ("id", "stimulus_id"),
    "class": ("class", "category", "object"),
}
_FRAME_EXT = (".jpg", ".jpeg", ".png")


def load_released_countvideo(
    root: str | Path, *, out: str | Path | None = None, n_frames: int = 10, progress: bool = True
) -> Dataset:
    """The released benchmark at ``root`` as a ``Dataset`` (built into ``out`` once)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise UserError(f"released CountVideoBench: no folder {root}; {DOWNLOAD_HINT}")
    rows = _read_metadata(root)
    items = [_item(root, i, r) for i, r in enumerate(rows)]
    missing = [it["clip_rel"] for it in items if it["video"] is None and it["frames_dir"] is None]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise UserError(
            f"released CountVideoBench at {root}: {len(missing)} of {len(items)} clips missing "
            f"(no video file and no frames folder): {shown}; {DOWNLOAD_HINT}"
        )
    from .videoio import have_decoder

    if not have_decoder():
        need = [it["clip_rel"] for it in items if it["frames_dir"] is None]
        if need:
            raise UserError(
                f"cannot decode {len(need)} clips (e.g. {need[0]}): install the 'video' extra "
                "(pip install 'countgym[video]', which brings PyAV) or put pre-extracted frames "
                "under ROOT/frames/<clip name>/"
            )
    dest = Path(out) if out is not None else _default_out(root)
    if out is None and not (dest / MANIFEST).is_file():
        from countgym.scenes.cache import ensure_cache_root
        from countgym.scenes.cache_marks import mark_build

        ensure_cache_root(dest)  # the cache's root, marked (``cache_marks``)
        dest.mkdir(parents=True, exist_ok=True)
        mark_build(dest)
    if (dest / MANIFEST).is_file():
        return Dataset(dest, name="countvideo-released")
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        raise UserError(f"released CountVideoBench at {root}: duplicate clip ids in the metadata")
    stimuli = [
        _extract(it, dest, n_frames)
        for it in tqdm(
            items, desc="countvideo-released", unit="clip", disable=None if progress else True
        )
    ]
    write_manifest(dest, stimuli)
    return Dataset(dest, name="countvideo-released")


def _default_out(root: Path) -> Path:
    from countgym.scenes import cache_root

    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:10]
    return cache_root() / f"countvideo-released-{key}"


def _read_metadata(root: Path) -> list[dict[str, Any]]:
    for name in METADATA_NAMES:
        path = root / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".csv"):
                with path.open(newline="", encoding="utf-8") as f:
                    rows = list(csv.DictReader(f))
            elif name.endswith(".jsonl"):
                rows = [
                    json.loads(line)
                    for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip()
                ]
            else:
                data = json.loads(path.read_text(encoding="utf-8"))
                rows = data if isinstance(data, list) else data.get("videos", [])
        except (OSError, ValueError, csv.Error) as e:
            raise UserError(f"cannot read {path}: {e}") from None
        if not rows:
            raise UserError(f"{path} lists no videos")
        return [{str(k).strip().lower(): v for k, v in r.items()} for r in rows]
    raise UserError(
        f"released CountVideoBench at {root}: none of {', '.join(METADATA_NAMES)} found; {DOWNLOAD_HINT}"
    )


def _pick(row: dict[str, Any], key: str) -> Any:
    for alias in _ALIASES[key]:
        if alias in row and str(row[alias]).strip() != "":
            return row[alias]
    return None


def _item(root: Path, i: int, row: dict[str, Any]) -> dict[str, Any]:
    where = f"metadata row {i + 1}"
    clip = _pick(row, "clip")
    if clip is None:
        raise UserError(f"{where}: no video column (one of {', '.join(_ALIASES['clip'])})")
    clip = str(clip).strip()
    try:
        n = int(float(_pick(row, "n")))
    except (TypeError, ValueError):
        raise UserError(f"{where}: no integer count (one of {', '.join(_ALIASES['n'])})") from None
    shape, color = _class_of(row, where)
    name = clip if Path(clip).suffix else f"{clip}.mp4"
    rel = name if "/" in name else f"videos/{name}"
    candidates = [root / rel, root / "videos" / Path(clip).name]
    video = next((p for p in candidates if p.is_file()), None)
    stem = Path(clip).stem
    fdir = root / "frames" / stem
    frames_dir = (
        fdir
        if fdir.is_dir() and any(p.suffix.lower() in _FRAME_EXT for p in fdir.iterdir())
        else None
    )
    sid = str(_pick(row, "id") or stem)
    sid = re.sub(r"[^A-Za-z0-9._-]+", "-", sid).strip("-") or f"clip{i}"
    return {
        "id": sid,
        "n": n,
        "shape": shape,
        "color": color,
        "clip_rel": rel,
        "video": video,
        "frames_dir": frames_dir,
        "row": row,
    }


def _class_of(row: dict[str, Any], where: str) -> tuple[str, str]:
    shape, color = _pick(row, "shape"), _pick(row, "color")
    if (shape is None or color is None) and _pick(row, "class") is not None:
        words = re.split(r"[\s_\-]+", str(_pick(row, "class")).lower())
        color = color or next((w for w in words if w in COLORS), None)
        shape = shape or next((s for w in words for s in SHAPES if w.rstrip("s") == s), None)
    shape = str(shape or "").strip().lower().rstrip("s")
    color = str(color or "").strip().lower()
    if shape not in SHAPES or color not in COLORS:
        raise UserError(
            f"{where}: shape/colour must be one of {SHAPES} x {COLORS}, got {shape!r}, {color!r}"
        )
    return shape, color


def _extract(it: dict[str, Any], dest: Path, n_frames: int) -> Stimulus:
    folder = dest / "frames" / it["id"]
    folder.mkdir(parents=True, exist_ok=True)
    rels: list[str] = []
    if it["frames_dir"] is not None:
        files = sorted(p for p in it["frames_dir"].iterdir() if p.suffix.lower() in _FRAME_EXT)
        idx = np.linspace(0, len(files) - 1, min(n_frames, len(files))).astype(int).tolist()
        total = len(files)
        for k, j in enumerate(idx):
            src = files[j]
            rel = f"frames/{it['id']}/f{k:02d}{src.suffix.lower()}"
            shutil.copyfile(src, dest / rel)
            rels.append(rel)
        source = "frames"
    else:
        from .videoio import read_video_frames

        frames, idx, total = read_video_frames(it["video"], n_frames)
        for k, fr in enumerate(frames):
            rel = f"frames/{it['id']}/f{k:02d}.png"
            Image.fromarray(fr).save(dest / rel, format="PNG", compress_level=1)
            rels.append(rel)
        source = "video"
    extra = {
        k: v for k, v in it["row"].items() if isinstance(v, str | int | float) and k not in ("",)
    }
    return Stimulus(
        id=it["id"],
        n=it["n"],
        obj=f"{it['color']} {it['shape']}s",
        obj_sing=f"{it['color']} {it['shape']}",
        frames=rels,
        meta={
            "battery": "countvideo-released",
            "shape": it["shape"],
            "color": it["color"],
            "frame_indices": idx,
            "total_frames": total,
            "source": source,
            "clip": it["clip_rel"],
            "metadata": extra,
        },
    )
