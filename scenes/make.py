"""``countgym scenes make``/``download``: write any battery or photo set as a dataset folder.

The command line hands its flags here; which battery takes which flag is the scenes' business.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from countgym.errors import UserError

PHOTO_SETS = ("fsc147", "pixmo", "countbench")
DOWNLOADABLE = ("pixmo", "countbench")
"""Photo sets whose release lists image URLs (``countgym scenes download``)."""


def make_dataset(
    battery: str,
    out: Path,
    *,
    seed: int = 0,
    per_level: int | None = None,
    limit: int | None = None,
    renderer: str | None = None,
    size: Any = None,
    video: bool = False,
    data: str | None = None,
    progress: bool = True,
    workers: int | None = None,
) -> Path:
    """Write ``battery`` into ``out``; a flag the battery does not take is a ``UserError``.
    ``workers``: render processes of the video battery (default: every core)."""
    if battery in PHOTO_SETS:
        from .photos import make_photo_set

        if data is None:
            raise UserError(f"{battery} is built from its official release: pass --data RELEASE_ROOT")
        return make_photo_set(battery, data, out, progress=progress)
    if data is not None:
        raise UserError(f"--data applies to the photo sets ({', '.join(PHOTO_SETS)}), not {battery!r}")
    kwargs: dict[str, Any] = {"seed": seed, "limit": limit, "progress": progress}
    if battery == "countvideo":
        from .video import make_countvideo

        video_kwargs: dict[str, Any] = {**kwargs, "per_level": per_level, "renderer": renderer or "fast"}
        if size:
            video_kwargs["size"] = size
        if video:
            video_kwargs["video"] = True
        return make_countvideo(out, workers=workers, **video_kwargs)
    if size or video or workers is not None:
        raise UserError(f"--size, --video and --workers apply to countvideo, not {battery!r}")
    if battery == "countercount":
        from .counterfactual import make_countercount

        if per_level is not None or renderer is not None:
            raise UserError("--per-level and --renderer do not apply to countercount (--limit counts pairs)")
        return make_countercount(out, **kwargs)
    from .batteries import make_battery

    if per_level is not None:
        kwargs["per_level"] = per_level
    if renderer is not None:
        kwargs["renderer"] = renderer
    try:
        return make_battery(battery, out, **kwargs)
    except TypeError as e:
        raise UserError(f"battery {battery!r} does not take that option: {e}") from None


def download_photos(name: str, data: str, *, progress: bool = True) -> str:
    """Fetch the listed images of a photo release; the summary line to print."""
    from .photos import download_photo_images

    report = download_photo_images(name, data, progress=progress)
    return (
        f"{report.downloaded} downloaded, {report.present} already present, "
        f"{len(report.dead)} dead links skipped, {len(report.failed)} failed (re-run to retry)"
    )
