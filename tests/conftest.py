"""Shared fixtures: tiny dataset folders in the official manifest format, built per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from countgym.stimulus import Dataset, Stimulus, write_manifest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Batteries built on demand go to a cache; keep the test run's cache out of the user's home.
os.environ.setdefault("COUNTGYM_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "countgym"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Tiny models on 2 shared cores: one torch thread is ~100x faster than oversubscribed threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

TINY_POINTS = {
    "four": [(100.0, 100.0), (300.0, 200.0), (500.0, 600.0), (700.0, 700.0)],
    "two": [(50.0, 60.0), (400.0, 400.0)],
    "row": [(100.0 + 60 * i, 380.0) for i in range(10)],
}


def make_tiny_dataset(root: Path, size: tuple[int, int] = (768, 768)) -> Dataset:
    """Three black-disc images (radius 14) with exact centres."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for sid, pts in TINY_POINTS.items():
        im = Image.new("RGB", size, "white")
        d = ImageDraw.Draw(im)
        for x, y in pts:
            d.ellipse([x - 14, y - 14, x + 14, y + 14], fill="black")
        rel = f"images/{sid}.png"
        im.save(root / rel)
        stims.append(Stimulus(id=sid, n=len(pts), obj="dots", obj_sing="dot", image=rel, points=pts))
    write_manifest(root, stims)
    return Dataset(root)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return make_tiny_dataset(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def wide_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """A 2048 x 1024 image, resized by the env to 1024 x 512."""
    return make_tiny_dataset(tmp_path_factory.mktemp("wide"), size=(2048, 1024))


@pytest.fixture(scope="session")
def tiny_countercount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two CounterCount pairs (four images) drawn by the generator."""
    from countgym.scenes.make import make_dataset

    return make_dataset("countercount", tmp_path_factory.mktemp("cc") / "cc", limit=2, progress=False)


@pytest.fixture(scope="session")
def tiny_countvideo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two CountVideoBench clips of 10 frames at 64 x 36 (fast renderer)."""
    from countgym.scenes.make import make_dataset

    return make_dataset("countvideo", tmp_path_factory.mktemp("cv") / "cv", limit=2, size=(64, 36), progress=False)
