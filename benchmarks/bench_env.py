"""Env step vs PNG encode: a tag step (10 new tags on 768 x 768, observation ready) against one
PNG encode of that same image, the unavoidable work of sending it to a model (aim <= 1.5x)."""

from __future__ import annotations

import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw


def _dataset(root: Path):
    from countgym.stimulus import Dataset, Stimulus, write_manifest

    rng = np.random.default_rng(0)
    pts = rng.uniform(30, 738, (60, 2))
    im = Image.new("RGB", (768, 768), "white")
    d = ImageDraw.Draw(im)
    for x, y in pts:
        d.ellipse([x - 14, y - 14, x + 14, y + 14], fill="black")
    (root / "images").mkdir(parents=True, exist_ok=True)
    im.save(root / "images/a.png")
    write_manifest(root, [Stimulus(id="a", n=60, obj="dots", obj_sing="dot", image="images/a.png", points=[tuple(p) for p in pts])])
    return Dataset(root)


def bench_env_step(repeats: int = 30) -> dict:
    """Median tag-step time (10 new tags each, up to 60 tags) over median PNG encode time."""
    from countgym.envs.image_env import CountImageEnv

    with tempfile.TemporaryDirectory() as tmp:
        env = CountImageEnv(_dataset(Path(tmp)), tools=("tag",), budget=6)
        rng = np.random.default_rng(1)
        steps, encodes = [], []
        for _ in range(repeats):
            obs, _ = env.reset(seed=0, options={"stimulus_id": "a"})
            for _k in range(5):
                pts = rng.uniform(0, 1000, (10, 2)).round().tolist()
                t0 = time.perf_counter()
                obs, *_ = env.step({"tool": "tag", "points": pts})
                steps.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                Image.fromarray(obs["image"]).save(io.BytesIO(), format="PNG")
                encodes.append(time.perf_counter() - t0)
    step, enc = statistics.median(steps), statistics.median(encodes)
    return {
        "name": "env tag step / PNG encode (768x768, 10 new tags)",
        "value": f"{step / enc:.2f}x ({step * 1e3:.1f} ms vs {enc * 1e3:.1f} ms)",
        "target": "<= 1.5x",
        "ok": step / enc <= 1.5,
    }


if __name__ == "__main__":
    print(bench_env_step())
