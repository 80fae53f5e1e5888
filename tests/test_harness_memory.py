"""Memory and CPU per episode: an original lets go of its pixels once its view is encoded (and
draws the same images from the PNG after), large sources are fitted once per file (a cached
fitted copy, same pixels), and the test server reads ``developer`` messages like ``system``."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from countgym.agents.backends.base import png_data_url
from countgym.envs import originals
from countgym.envs.actions import Tag
from countgym.envs.common import fit_long_side
from countgym.envs.image_env import CountImageEnv
from countgym.stimulus import Dataset
from tests.conftest import make_tiny_dataset


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    originals.clear()


def _tagged(ds: Dataset, sid: str, encode_first: bool) -> np.ndarray:
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": sid})
    if encode_first:
        png_data_url(obs["image"])
    obs, *_ = env.step(Tag(points=[(100.0, 100.0), (600.0, 420.0)]))
    return np.asarray(obs["image"])


def test_an_encoded_original_holds_only_its_png_and_draws_the_same_pixels(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    pixels = np.array(obs["image"])
    original = originals.original_of(obs["image"])
    assert original is not None and original.png() is None and original._pixels is not None
    url = png_data_url(obs["image"])
    # The model's first view is now held as its PNG only: no pixels in the episode while it waits.
    assert original._pixels is None and original.png() is not None
    assert base64.b64decode(url.partition(",")[2]) == original.png()
    assert env.state is not None and not isinstance(env.state.original, Image.Image)
    originals._DECODED.clear()  # as when other episodes' views pushed it out
    assert np.array_equal(original.pixels(), pixels)
    with_png = _tagged(ds, "four", encode_first=True)
    originals.clear()
    without = _tagged(ds, "four", encode_first=False)
    assert np.array_equal(with_png, without)
    # A second episode of the same image starts from the same, encoded original.
    again, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    assert np.array_equal(again["image"], pixels)


def test_decoded_views_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    monkeypatch.setattr(originals, "DECODED_BYTES", 768 * 768 * 3 + 1)
    for sid in ds.ids():
        obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": sid})
        png_data_url(obs["image"])
        originals.original_of(obs["image"]).pixels()
    assert len(originals._DECODED) == 1


def test_erase_and_grid_draw_from_the_encoded_original(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    views = []
    for encode in (False, True):
        originals.clear()
        env = CountImageEnv(ds, tools=("tag", "erase", "grid", "crop"))
        obs, _ = env.reset(options={"stimulus_id": "row"})
        if encode:
            png_data_url(obs["image"])
        seq = [{"tool": "grid", "on": True}, {"tool": "erase", "points": [[300, 300]]},
               {"tool": "crop", "box": [0, 0, 500, 500]}]
        views.append([np.asarray(env.step(a)[0]["image"]) for a in seq])
    for a, b in zip(*views, strict=True):
        assert np.array_equal(a, b)


def test_a_large_source_is_fitted_once_and_the_copy_gives_the_same_pixels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "wide", size=(2048, 1024))
    first, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    fitted = list((tmp_path / "derived" / "fitted").glob("*.png"))
    assert len(fitted) == 1
    originals.clear()
    fits: list[int] = []
    real = originals.fit_long_side
    monkeypatch.setattr(originals, "fit_long_side", lambda im, side: fits.append(1) or real(im, side))
    env = CountImageEnv(ds, tools=("tag",))
    again, _ = env.reset(options={"stimulus_id": "four"})
    assert fits == []  # read from the fitted copy, not decoded and resized again
    assert np.array_equal(first["image"], again["image"]) and again["image"].shape == (512, 1024, 3)
    expect = np.asarray(fit_long_side(ds.load_image(ds["four"]), 1024))
    assert np.array_equal(again["image"], expect)
    # The stored size (for coordinates) is the file's, not the copy's.
    assert env._episode.get("stored_size", [2048, 1024]) in ([2048, 1024], (2048, 1024))
    # An edited source gets a new fitted copy.
    img = Image.new("RGB", (2048, 1024), "black")
    img.save(ds.image_path(ds["four"]))
    originals.clear()
    dark, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    assert dark["image"].max() == 0


def test_an_unwritable_cache_still_fits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ro = tmp_path / "ro"
    ro.write_text("a file, not a folder")
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(ro))
    ds = make_tiny_dataset(tmp_path / "wide", size=(2048, 1024))
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})
    assert obs["image"].shape == (512, 1024, 3)


def test_the_test_server_reads_developer_messages_like_system(tmp_path: Path) -> None:
    from countgym.testing.server import model_reply, prompt_kind

    ds = make_tiny_dataset(tmp_path / "d")
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})
    user = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_url(obs["image"])}},
                                        {"type": "text", "text": obs["text"]}]}
    as_system = [{"role": "system", "content": obs["system"]}, user]
    as_developer = [{"role": "developer", "content": obs["system"]}, user]
    assert prompt_kind(as_system) == prompt_kind(as_developer) == "tool"
    assert model_reply(as_developer) == model_reply(as_system)


def test_png_round_trip_of_the_kept_view_is_lossless(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})
    png_data_url(obs["image"])
    png = originals.original_of(obs["image"]).png()
    with Image.open(io.BytesIO(png)) as im:
        assert np.array_equal(np.asarray(im.convert("RGB")), obs["image"])
