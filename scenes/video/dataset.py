"""Writing CountVideoBench dataset folders (the dataset-folder format): sampled frames + ``manifest.jsonl``.

Layout of a folder written by :func:`make_countvideo`::

    manifest.jsonl                      one line per video
    frames/<id>/f<frame>.jpg            the 10 sampled frames (frame = Blender frame number)
    videos/<id>.mp4                     the 150-frame clip, only with ``video=True``

Each manifest line has ``frames`` (relative paths, in time order), ``n``, ``obj`` ("red cubes"),
``obj_sing`` ("red cube"), ``points`` null (objects move across frames), and ``meta`` with
``battery``, ``camera`` (distance, azimuth_deg, polar_deg), ``shape``, ``color``,
``objects_leaving_frame``, ``frame_indices``, the other visibility statistics, the seed, the
object positions and the renderer.

A build is resumable: each video's ``frames/<id>/stimulus.json`` (its manifest entry, the
build parameters and the size and SHA-256 of each of its files) is written last, after its
frames, so a build started again in the same folder with the same parameters keeps the videos
whose record names them and whose files are all still as recorded, and renders the rest. When
a build is interrupted (Ctrl-C, SIGTERM) the worker processes stop and the half-written videos'
files are removed. ``workers`` (default: every core the process may use) render videos in
parallel processes.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from countgym.cpu_slots import cores
from countgym.errors import UserError
from countgym.stimulus import Stimulus, write_manifest

from ..cache import progress_bar, sigterm_as_interrupt
from .geometry import (
    CANDIDATE_CAP,
    FPS,
    READING,
    READINGS,
    RENDERED_FRAMES,
    SAMPLED_FRAMES,
    SceneGeometry,
    generate_geometry,
)
from .specs import VideoSpec, anchor_of, balanced_subset, design, spread, video_seed

GENERATOR_VERSION = 3
"""Bump when any frame or manifest field changes (also renames the on-disk cache).
2: the visibility check redraws camera keys that leave an object out of every rendered frame.
3: the ``base-pan`` reading of Appendix B (object origins at the base, the azimuth offset a pan
about the camera's own up axis); ``reading="appendix-euler"`` still builds version 2."""
READING_VERSIONS = {"base-pan": 3, "appendix-euler": 2}
"""The generator version each reading (``geometry.READINGS``) builds."""
BATTERY = "countvideo"
RENDERERS = ("fast", "blender", "cycles", "eevee", "workbench")
"""``blender`` = ``cycles``; ``eevee`` and ``workbench`` select the other Blender engines."""
FRAME_FORMATS = ("jpg", "png")
JPEG_QUALITY = 92
PNG_COMPRESS_LEVEL = 1  # 1920 x 1080 frames: level 6 costs twice the time for 20 % less space
BUILD_SECONDS_PER_VIDEO = 1.5
"""Measured: about 3 s per 1920 x 1080 video (10 frames kept) with the fast renderer on one
busy core, two workers in parallel; scaled by pixel count for smaller sizes and divided by the
workers beyond two (the build uses every core)."""
DONE_FILE = "stimulus.json"
"""Written into a video's frame folder after its frames: the video is finished."""
SIZES = {"full": (1920, 1080), "half": (960, 540), "quarter": (480, 270)}
"""Named output sizes; the full benchmark is 1920 x 1080."""
_POOL_MIN_VIDEOS = 4


def select_specs(per_level: int | None = None, limit: int | None = None) -> list[VideoSpec]:
    """The videos to build: all 2,600, or ``per_level`` per cardinality (classes balanced),
    then at most ``limit`` spread evenly over them.

    A ``limit`` alone draws from the smallest balanced subset that holds it, so a small limit
    still spans the cardinalities and the classes.
    """
    if per_level is not None:
        specs = balanced_subset(per_level)
    elif limit is not None:
        if limit < 1:
            raise UserError(f"--limit must be a positive integer, got {limit}")
        specs = balanced_subset(min(100, -(-limit // 26)))
    else:
        specs = design()
    return spread(specs, limit) if limit is not None else specs


def make_countvideo(
    out: str | Path,
    *,
    per_level: int | None = None,
    limit: int | None = None,
    renderer: str = "fast",
    seed: int = 0,
    size: tuple[int, int] | str = (1920, 1080),
    progress: bool = True,
    workers: int | None = None,
    frame_format: str = "jpg",
    video: bool = False,
    candidate_cap: int = CANDIDATE_CAP,
    reading: str = READING,
) -> Path:
    """Write CountVideoBench videos (sampled frames + manifest) into ``out``; returns ``out``.

    ``seed`` offsets every video's seed (0 = the benchmark). ``size`` is (width, height) or a
    name in :data:`SIZES`. ``video=True`` renders the whole 150-frame clip and also writes an
    MP4 (needs PyAV for the fast renderer). ``renderer`` is ``fast`` (default, numpy) or a
    Blender engine (``blender``/``cycles``, ``eevee``, ``workbench``; needs the ``blender``
    extra). ``reading`` is how Appendix B's camera offsets and object origins are read
    (``geometry.READINGS``; ``appendix-euler`` rebuilds generator version 2). ``workers``:
    parallel render processes (default: every core the process may use). Videos already
    finished in ``out`` by an earlier build with the same parameters are kept.
    """
    workers = cores() if workers is None else workers
    if not isinstance(workers, int) or workers < 1:
        raise UserError(f"--workers must be a positive integer, got {workers}")
    if renderer not in RENDERERS:
        raise UserError(f"unknown renderer {renderer!r}; choose from {', '.join(RENDERERS)}")
    if frame_format not in FRAME_FORMATS:
        raise UserError(
            f"unknown frame format {frame_format!r}; choose from {', '.join(FRAME_FORMATS)}"
        )
    wh = _size(size)
    if renderer != "fast":
        from .blender import require_bpy

        require_bpy()  # fail before any work, with the extra's name
    specs = select_specs(per_level, limit)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if reading not in READINGS:
        raise UserError(f"unknown reading {reading!r}; choose from {', '.join(READINGS)}")
    tasks = [(s, seed, str(out), renderer, wh, frame_format, video, candidate_cap, reading) for s in specs]
    done = {st.id: st for t in tasks if (st := _finished(t)) is not None}
    todo = [t for t in tasks if t[0].stimulus_id not in done]
    if done and progress:
        print(f"countgym: resuming in {out}: {len(done)} of {len(tasks)} videos already built",
              file=sys.stderr, flush=True)
    bar: dict[str, Any] = {"total": len(todo), "desc": f"scenes {BATTERY}", "enabled": progress}
    try:
        with sigterm_as_interrupt():
            for st in progress_bar(_render_all(todo, workers, renderer), **bar):
                done[st.id] = st
    except BaseException:
        # Finished videos stay (the next build resumes from them); half-written ones go.
        for t in todo:
            if t[0].stimulus_id not in done and _finished(t) is None:
                _remove_video(out, t[0].stimulus_id)
        raise
    write_manifest(out, [done[s.stimulus_id] for s in specs])
    return out


def _render_all(tasks: list[tuple[Any, ...]], workers: int, renderer: str) -> Iterator[Stimulus]:
    """Each task's stimulus as its video finishes, from ``workers`` processes; the processes are
    stopped when the caller stops early (an interruption)."""
    if workers <= 1 or len(tasks) < _POOL_MIN_VIDEOS:
        yield from map(_make_one, tasks)
        return
    # Blender is not fork-safe; numpy-only workers are, and forking starts faster.
    ctx = multiprocessing.get_context("spawn" if renderer != "fast" else None)
    pool = ctx.Pool(min(workers, len(tasks)), initializer=_worker_signals)
    try:
        yield from pool.imap_unordered(_make_one, tasks, chunksize=1)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _worker_signals() -> None:
    """A render worker leaves Ctrl-C to its parent (which stops the pool) and dies on SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _build_params(task: tuple[Any, ...]) -> dict[str, Any]:
    """What a finished video must have been built with to be kept by a later build."""
    _, seed_offset, _, renderer, size, fmt, video, cap, reading = task
    return {"generator_version": GENERATOR_VERSION, "seed_offset": seed_offset, "renderer": renderer,
            "size": list(size), "frame_format": fmt, "video": bool(video), "candidate_cap": cap,
            "reading": reading}


def _finished(task: tuple[Any, ...]) -> Stimulus | None:
    """The stimulus of a video an earlier build finished with the same parameters, else None.

    Nothing of it is taken on trust: its record must name this video (id, count, object, the
    frame files this build writes) and every file must still have the size and SHA-256 recorded
    when it was written (a 0-byte or cut frame, an edited one, one left from another build: the
    video is rendered again). A record without file hashes (an older countgym) is not kept."""
    spec, root, fmt, video = task[0], Path(task[2]), task[5], task[6]
    try:
        saved = json.loads((root / "frames" / spec.stimulus_id / DONE_FILE).read_text())
        if saved.get("params") != _build_params(task):
            return None
        st = Stimulus.model_validate(saved["stimulus"])
        files = saved["files"]
        if not isinstance(files, dict):
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    media = [*_frame_rels(spec, fmt), *([_video_rel(spec)] if video else [])]
    expected = (spec.stimulus_id, spec.n, spec.obj, spec.obj_sing, _frame_rels(spec, fmt),
                _video_rel(spec) if video else None)
    if (st.id, st.n, st.obj, st.obj_sing, st.frames, st.meta.get("video")) != expected:
        return None
    if sorted(files) != sorted(media) or not all(_file_matches(root / rel, files[rel]) for rel in media):
        return None
    return st


def _frame_rels(spec: VideoSpec, fmt: str) -> list[str]:
    return [f"frames/{spec.stimulus_id}/f{f:03d}.{fmt}" for f in SAMPLED_FRAMES]


def _video_rel(spec: VideoSpec) -> str:
    return f"videos/{spec.stimulus_id}.mp4"


def _file_record(path: Path) -> dict[str, Any]:
    """What a finished video records of each of its files: size and SHA-256."""
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _file_matches(path: Path, record: Any) -> bool:
    """Whether ``path`` is a regular, non-empty file with the recorded size and SHA-256."""
    if not isinstance(record, dict) or not isinstance(record.get("bytes"), int) or record["bytes"] <= 0:
        return False
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != record["bytes"]:
            return False
        return _file_record(path) == record
    except OSError:
        return False


def _remove_video(root: Path, stimulus_id: str) -> None:
    shutil.rmtree(root / "frames" / stimulus_id, ignore_errors=True)
    (root / "videos" / f"{stimulus_id}.mp4").unlink(missing_ok=True)


def _size(size: tuple[int, int] | str) -> tuple[int, int]:
    if isinstance(size, str):
        if size in SIZES:
            return SIZES[size]
        w_text, sep, h_text = size.lower().partition("x")
        if not sep:
            raise UserError(f"size must be WIDTHxHEIGHT or one of {', '.join(SIZES)}, got {size!r}")
        size = (int(w_text), int(h_text))
    w, h = int(size[0]), int(size[1])
    if not (16 <= w <= 7680 and 16 <= h <= 4320):
        raise UserError(f"size must be between 16 x 16 and 7680 x 4320, got {w} x {h}")
    return w, h


def video_geometry(
    spec: VideoSpec, seed_offset: int = 0, *, candidate_cap: int = CANDIDATE_CAP, reading: str = READING
) -> SceneGeometry:
    """The geometry of one design video."""
    return generate_geometry(
        spec.n, spec.shape, spec.color, video_seed(spec, seed_offset), candidate_cap=candidate_cap,
        reading=reading,
    )


def stimulus_for(spec: VideoSpec, geom: SceneGeometry, frames: list[str], **meta: Any) -> Stimulus:
    """The manifest entry of one video."""
    vis = geom.visibility(SAMPLED_FRAMES)
    return Stimulus(
        id=spec.stimulus_id,
        n=spec.n,
        obj=spec.obj,
        obj_sing=spec.obj_sing,
        frames=frames,
        points=None,
        meta={
            "battery": BATTERY,
            "set": "main",
            "anchor": anchor_of(spec.n),
            "replicate": spec.replicate,
            "generator_version": READING_VERSIONS[geom.reading],
            "frame_indices": list(SAMPLED_FRAMES),
            "fps": FPS,
            "rendered_frames": [RENDERED_FRAMES[0], RENDERED_FRAMES[-1]],
            **geom.as_meta(),
            **vis,
            **meta,
        },
    )


def _make_one(task: tuple[Any, ...]) -> Stimulus:
    spec, seed_offset, root, renderer, size, fmt, video, cap, reading = task
    root = Path(root)
    geom = video_geometry(spec, seed_offset, candidate_cap=cap, reading=reading)
    folder = root / "frames" / spec.stimulus_id
    folder.mkdir(parents=True, exist_ok=True)
    rels = _frame_rels(spec, fmt)
    meta: dict[str, Any] = {
        "renderer": renderer,
        "render_size": list(size),
        "seed_offset": seed_offset,
    }
    if renderer == "fast":
        from .fast_render import RENDERER_VERSION, render_frames

        frames = RENDERED_FRAMES if video else SAMPLED_FRAMES
        images = render_frames(geom, frames, size)
        by_frame = dict(zip(frames, images, strict=True))
        for f, rel in zip(SAMPLED_FRAMES, rels, strict=True):
            _save(by_frame[f], root / rel, fmt)
        if video:
            from .videoio import write_mp4

            write_mp4(images, root / "videos" / f"{spec.stimulus_id}.mp4", fps=FPS)
        meta["renderer_version"] = RENDERER_VERSION
    else:
        from .blender import render_blender

        engine = {
            "blender": "CYCLES",
            "cycles": "CYCLES",
            "eevee": "BLENDER_EEVEE",
            "workbench": "BLENDER_WORKBENCH",
        }[renderer]
        render_blender(
            geom,
            SAMPLED_FRAMES,
            size,
            root / rels[0].rsplit("/", 1)[0],
            engine=engine,
            fmt=fmt,
            video_path=root / "videos" / f"{spec.stimulus_id}.mp4" if video else None,
            cache_dir=root / ".blender-cache",
        )
        meta["engine"] = engine
    if video:
        meta["video"] = _video_rel(spec)
    stimulus = stimulus_for(spec, geom, rels, **meta)
    files = {rel: _file_record(root / rel) for rel in [*rels, *([meta["video"]] if video else [])]}
    # Written last and atomically: its presence means every file of this video is complete, as
    # ``files`` records it (a resumed build checks each one).
    done = folder / DONE_FILE
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps({"params": _build_params(task), "stimulus": stimulus.model_dump(mode="json"),
                               "files": files}))
    tmp.replace(done)
    return stimulus


def _save(img: np.ndarray, path: Path, fmt: str) -> None:
    im = Image.fromarray(img)
    if fmt == "png":
        im.save(path, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    else:
        im.save(path, format="JPEG", quality=JPEG_QUALITY, subsampling=0)


# --------------------------------------------------------------------------- cache


def _build_tip(per_level: int | None) -> str:
    """The end of a build's opening line: where the smaller set is, or the full battery, in
    both the command line's and Python's syntax."""
    if per_level is None or per_level > 1:
        return (f"for a quick look use {BATTERY}:k1 (one video per cardinality, 26 videos): "
                f"--data {BATTERY}:k1, or gym.make(\"countgym/CountVideo-v0\") (its default)")
    return (f"the full battery (2,600 videos): --data {BATTERY}, or "
            f"gym.make(\"countgym/CountVideo-v0\", dataset=\"{BATTERY}\")")


def build_seconds_per_video(size: tuple[int, int] | str = (1920, 1080), workers: int | None = None) -> float:
    """Estimated wall seconds per video of a build with ``workers`` processes (default: every
    core), from ``BUILD_SECONDS_PER_VIDEO``: what the build prints before it starts and what
    ``countgym list`` shows."""
    w, h = _size(size)
    n_workers = cores() if workers is None else workers
    return BUILD_SECONDS_PER_VIDEO * (w * h) / (1920 * 1080) * 2 / max(1, n_workers)


def cached_countvideo(
    *,
    per_level: int | None = None,
    size: tuple[int, int] | str = (1920, 1080),
    progress: bool = True,
    cache_root: Path | None = None,
    workers: int | None = None,
) -> Path:
    """The folder of a generated CountVideoBench set in the cache, built once, with ``workers``
    processes (default: every core); an interrupted build resumes where it stopped.

    The name records the generator version, the subset and the size, e.g.
    ``countvideo-v1-all-1920x1080`` or ``countvideo-v1-k4-480x270``. Building happens beside
    the target and ends with a rename, so readers see no folder or a complete one.
    """
    if cache_root is None:
        from countgym.scenes import cache_root as _root

        cache_root = _root()
    w, h = _size(size)
    n_workers = cores() if workers is None else workers
    tag = "all" if per_level is None else f"k{per_level}"
    final = cache_root / f"{BATTERY}-v{GENERATOR_VERSION}-{tag}-{w}x{h}"
    from countgym.scenes.cache import build_once

    return build_once(
        final,
        lambda tmp: make_countvideo(tmp, per_level=per_level, size=(w, h), progress=progress, workers=n_workers),
        items=len(select_specs(per_level, None)),
        seconds_per_item=build_seconds_per_video((w, h), n_workers),
        resumable=True,
        tip=_build_tip(per_level),
    )
