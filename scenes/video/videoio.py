"""Video encoding and decoding through optional packages (PyAV, or imageio with its ffmpeg plugin).

Neither is a core dependency: a missing one raises ``MissingExtraError`` naming the package and
the ``video`` extra (``pip install 'countgym[video]'``, i.e. ``av``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from countgym.errors import MissingExtraError, UserError


def write_mp4(frames: Sequence[np.ndarray], path: Path, fps: int = 30) -> Path:
    """Encode uint8 H x W x 3 frames as H.264 MP4 (PyAV, else imageio)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import av
    except ImportError:
        av = None
    if av is not None:
        h, w = frames[0].shape[:2]
        with av.open(str(path), mode="w") as container:
            stream = container.add_stream("libx264", rate=fps)
            stream.width, stream.height = w - w % 2, h - h % 2
            stream.pix_fmt = "yuv420p"
            for f in frames:
                frame = av.VideoFrame.from_ndarray(
                    np.ascontiguousarray(f[: stream.height, : stream.width]), format="rgb24"
                )
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        return path
    iio = _imageio()
    iio.imwrite(path, np.stack(frames), fps=fps, codec="libx264")
    return path


def read_video_frames(path: Path, n: int = 10) -> tuple[list[np.ndarray], list[int], int]:
    """``n`` frames sampled uniformly (``linspace(0, T-1, n)`` floored) from a video file.

    Returns ``(frames, indices, total_frames)``.
    """
    try:
        import av
    except ImportError:
        av = None
    if av is not None:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    else:
        frames = list(_imageio().imiter(path))
    if not frames:
        raise UserError(f"no frames could be decoded from {path}")
    idx = np.linspace(0, len(frames) - 1, n).astype(int).tolist()
    return [np.asarray(frames[i], dtype=np.uint8) for i in idx], idx, len(frames)


def have_decoder() -> bool:
    """True when PyAV or imageio is importable."""
    for name in ("av", "imageio"):
        try:
            __import__(name)
            return True
        except ImportError:
            continue
    return False


def _imageio():  # noqa: ANN202 - module object
    try:
        import imageio.v3 as iio
    except ImportError:
        raise MissingExtraError("av", "video") from None
    return iio
