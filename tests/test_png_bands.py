"""Band-wise PNG encoding of views drawn over a cached unmarked view: the pixels decode exactly
(the "Up" filter's dependence on the row above included), unchanged bands are never deflated
again, the zlib checksum is combined correctly, and only tag renders of the image env use it."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from countgym.agents.backends import png_bands
from countgym.agents.backends.base import decode_data_url, png_data_url
from countgym.agents.backends.png_bands import BAND_ROWS, adler32_combine, encode_png_over
from countgym.envs.actions import Crop, Tag
from countgym.envs.image_env import CountImageEnv
from countgym.envs.originals import drawn_over


def _decode(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as im:
        im.load()
        return np.asarray(im)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    png_bands.clear()


def test_adler32_combine_matches_zlib() -> None:
    rng = np.random.default_rng(0)
    for n1, n2 in [(0, 0), (0, 5), (5, 0), (1, 1), (70_000, 3), (3, 140_000), (65_521, 65_521)]:
        a, b = rng.bytes(n1), rng.bytes(n2)
        assert adler32_combine(zlib.adler32(a), zlib.adler32(b), n2) == zlib.adler32(a + b)
    ff = b"\xff" * 200_000  # sums near the modulus on both halves
    assert adler32_combine(zlib.adler32(ff), zlib.adler32(ff), len(ff)) == zlib.adler32(ff + ff)


@pytest.mark.parametrize("shape", [(64, 40, 3), (37, 23, 3), (50, 40), (48, 16, 1), (33, 8, 4), (1, 5, 3)])
@pytest.mark.parametrize("rows", [[], [0], [BAND_ROWS - 1], [BAND_ROWS], [-1], [3, BAND_ROWS + 2, -2]])
def test_changed_rows_decode_exactly(shape: tuple[int, ...], rows: list[int]) -> None:
    """A change in the last row of a band also changes the next band's first filtered row: a
    band re-used there would decode to wrong pixels from that row on."""
    rng = np.random.default_rng(len(shape) * 100 + len(rows))
    view = rng.integers(0, 256, shape, dtype=np.uint8)
    image = view.copy()
    for r in rows:
        if -shape[0] <= r < shape[0]:
            image[r] = rng.integers(0, 256, image[r].shape, dtype=np.uint8)
    png = encode_png_over(image, ("view", shape), view)
    assert png is not None
    assert np.array_equal(_decode(png).reshape(image.shape), image)
    # The view's own bands (cached by the first call) decode to the view.
    assert np.array_equal(_decode(encode_png_over(view, ("view", shape), view)).reshape(view.shape), view)


def test_only_changed_bands_are_deflated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    view = np.full((10 * BAND_ROWS, 32, 3), 255, np.uint8)
    png_bands.encode_png_over(view, "k", view)  # caches the view's 10 bands
    deflated: list[int] = []
    real = png_bands._band
    monkeypatch.setattr(png_bands, "_band", lambda rows, a, b, *rest: deflated.append(a) or real(rows, a, b, *rest))
    image = view.copy()
    image[BAND_ROWS * 3 + 5] = 0  # inside band 3
    image[BAND_ROWS * 7 - 1] = 0  # last row of band 6: bands 6 and 7
    png = png_bands.encode_png_over(image, "k", view)
    assert sorted(deflated) == [BAND_ROWS * 3, BAND_ROWS * 6, BAND_ROWS * 7]
    assert np.array_equal(_decode(png), image)


def test_other_shapes_and_dtypes_are_left_to_the_whole_image_encoder() -> None:
    view = np.zeros((20, 20, 3), np.uint8)
    assert encode_png_over(np.zeros((20, 21, 3), np.uint8), "k", view) is None
    assert encode_png_over(np.zeros((20, 20, 3), np.float32), "k", view.astype(np.float32)) is None


def test_tag_renders_are_encoded_over_their_view_and_crops_are_not(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag", "crop"))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    assert drawn_over(obs["image"]) is None  # the unmarked view itself
    obs, *_ = env.step(Tag(points=[(130.0, 130.0), (390.0, 260.0)]))
    over = drawn_over(obs["image"])
    assert over is not None and over[1].shape == obs["image"].shape
    assert not np.array_equal(over[1], obs["image"])
    assert np.array_equal(decode_data_url(png_data_url(obs["image"])), obs["image"])
    obs, *_ = env.step(Crop(box=(0, 0, 500, 500)))
    assert drawn_over(obs["image"]) is None
    assert np.array_equal(decode_data_url(png_data_url(obs["image"])), obs["image"])
