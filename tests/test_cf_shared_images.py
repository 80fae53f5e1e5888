"""CounterCount episodes of one stimulus and setting share the image shown.

A paper's CounterCount cells show the same images once per model: the environment decodes (and,
under the blur intervention, blurs) each image once per process, and the backend encodes it
once. What is shown and sent must stay ``shown_image``'s pixels, blurred or not.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from countgym.agents.backends import base as backend_base
from countgym.agents.backends.base import png_data_url
from countgym.envs import originals
from countgym.envs.cf_env import CounterCountEnv, shown_image
from countgym.stimulus import Dataset


def _sent_pixels(url: str) -> np.ndarray:
    with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize("blur", [False, True])
def test_shown_and_sent_pixels_are_shown_image(tiny_countercount: Path, blur: bool) -> None:
    ds = Dataset(tiny_countercount)
    originals._CACHE.clear()
    backend_base._VIEW_URLS.clear()
    env = CounterCountEnv(ds, blur=blur)
    for _ in range(2):  # the second pass is served from the shared images
        for sid in ds.ids():
            obs, _ = env.reset(options={"stimulus_id": sid})
            expected = np.asarray(shown_image(ds.load_image(ds[sid]), ds[sid], blur=blur)[0])
            assert np.array_equal(obs["image"], expected)
            assert np.array_equal(_sent_pixels(png_data_url(obs["image"])), expected)
            _, _, done, _, _ = env.step("ANSWER: 3")
            assert done


def test_blur_is_drawn_once_per_stimulus_and_setting(tiny_countercount: Path, monkeypatch) -> None:
    import countgym.scenes.counterfactual as cf_scenes

    calls: list[int] = []
    real = cf_scenes.blur_outside

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cf_scenes, "blur_outside", counting)
    ds = Dataset(tiny_countercount)
    originals._CACHE.clear()
    sids = ds.ids()
    for radius in (48.0, 48.0, 24.0):  # a second env of the same setting reuses; another radius does not
        env = CounterCountEnv(ds, blur=True, blur_radius=radius)
        for sid in sids:
            env.reset(options={"stimulus_id": sid})
    assert len(calls) == 2 * len({(ds[s].image, tuple(ds[s].meta.get("bbox") or ())) for s in sids})


def test_kept_originals_hold_files_not_pixels(tiny_countercount: Path) -> None:
    """A stimulus shown blurred keeps its unblurred original as its PNG file, not 0.7 MB of pixels."""
    ds = Dataset(tiny_countercount)
    originals._CACHE.clear()
    env = CounterCountEnv(ds, blur=True)
    for sid in ds.ids():
        env.reset(options={"stimulus_id": sid})
    base = [e for k, e in originals._CACHE.items() if len(k) == 5]
    assert base and all(e.png() is not None and e.held_bytes() == len(e.png() or b"") for e in base)
