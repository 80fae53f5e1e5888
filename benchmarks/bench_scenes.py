"""Benchmark: write the full DotArrays batteries (362 distinct images) to disk.

Target: under 10 s on 2 cores. ``dotarrays-main`` is the first 216 images of
``dotarrays``, so the 362 are ``dotarrays`` (272) + ``dotarrays-xl`` (30) + ``lattice`` (60).

Run: ``python benchmarks/bench_scenes.py``
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from countgym.scenes import make_battery

BATTERIES = ("dotarrays", "dotarrays-xl", "lattice")


def bench_battery_generation(workers: int = 2, tiny: bool = False) -> dict:
    """Time writing the 362 battery images (PNG + manifests) into a temporary folder (``tiny``:
    only the 30 images of ``dotarrays-xl``)."""
    batteries = BATTERIES[1:2] if tiny else BATTERIES
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        for name in batteries:
            make_battery(name, Path(tmp) / name, progress=False, workers=workers)
        seconds = time.perf_counter() - start
        images = sum(len(list((Path(tmp) / n / "images").iterdir())) for n in batteries)
    return {
        "name": f"DotArrays battery generation ({images} images, {workers} workers)",
        "seconds": round(seconds, 3),
        "target": "< 10 s",
    }


if __name__ == "__main__":
    print(json.dumps(bench_battery_generation()))
