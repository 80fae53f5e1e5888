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


def _tagged(ds: Dataset, sid: str, encode_first: bool, points: list[tuple[float, float]]) -> np.ndarray:
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": sid})
    if encode_first:
        png_data_url(obs["image"])
    obs, *_ = env.step(Tag(points=points))
    return np.asarray(obs["image"])


def _noise_dataset(root: Path) -> Dataset:
    """Two photo-like images (noise: no runs of equal bytes)."""
    from countgym.stimulus import Stimulus, write_manifest

    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    stims = []
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)).save(root / f"images/n{i}.png")
        stims.append(Stimulus(id=f"n{i}", n=2, obj="dots", obj_sing="dot", image=f"images/n{i}.png",
                              points=[(100.0, 100.0), (300.0, 200.0)]))
    write_manifest(root, stims)
    return Dataset(root)


def test_a_battery_view_is_held_as_runs_not_pixels(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    original = originals.original_of(obs["image"])
    # A battery file is what the model is sent: held as its PNG, nothing decoded to start.
    assert original is not None and original._pixels is None and original._runs is None
    assert original.png() == ds.image_path(ds["four"]).read_bytes()
    assert env.state is not None and not isinstance(env.state.original, Image.Image)
    first = np.asarray(env.step(Tag(points=[(100.0, 100.0), (600.0, 420.0)]))[0]["image"])
    # The first draw decoded it once; it is now held as runs of equal bytes, not as pixels.
    assert original._pixels is None and original._runs is not None
    held = sum(a.nbytes for a in original._runs[:2])
    assert held < 64 * 1024 < obs["image"].nbytes
    originals._DECODED.clear()
    assert np.array_equal(original.pixels(), obs["image"]) and not original.pixels().flags.writeable
    # The same render as from an image held as pixels (a non-RGB stand-in keeps its PIL image).
    expect = np.array(Image.open(ds.image_path(ds["four"])).convert("RGB"))
    from countgym.envs.render import render_working_image
    ref = np.asarray(render_working_image(Image.fromarray(expect), env.state.tags))
    assert np.array_equal(first, ref)


def test_a_photo_view_is_held_as_its_png_once_encoded_and_draws_the_same_pixels(tmp_path: Path) -> None:
    ds = _noise_dataset(tmp_path / "n")
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "n0"})
    original = originals.original_of(obs["image"])
    # Held as its PNG only from the start: no pixels in the episode while it waits.
    assert original is not None and original._runs is None and original._pixels is None
    assert original.png() is not None and not originals._DECODED
    url = png_data_url(obs["image"])
    assert base64.b64decode(url.partition(",")[2]) == original.png() and not originals._DECODED
    pixels = np.array(obs["image"])  # a policy that reads the pixels decodes them
    with Image.open(ds.image_path(ds["n0"])) as im:
        assert np.array_equal(pixels, np.asarray(im.convert("RGB")))
    assert original._runs is None and original._pixels is None  # noise has no runs to keep
    originals._DECODED.clear()  # as when other episodes' views pushed it out
    assert np.array_equal(original.pixels(), pixels)
    with_png = _tagged(ds, "n0", encode_first=True, points=[(100.0, 100.0), (600.0, 420.0)])
    originals.clear()
    without = _tagged(ds, "n0", encode_first=False, points=[(100.0, 100.0), (600.0, 420.0)])
    assert np.array_equal(with_png, without)
    again, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "n0"})
    assert np.array_equal(again["image"], pixels)


def test_decoded_views_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _noise_dataset(tmp_path / "n")
    monkeypatch.setattr(originals._DECODED, "max_size", 300 * 400 * 3 + 1)
    for sid in ds.ids():
        obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": sid})
        png_data_url(obs["image"])
        originals.original_of(obs["image"]).pixels()
    assert len(originals._DECODED) == 1


@pytest.mark.parametrize("photo", [False, True])
def test_erase_and_grid_draw_from_the_held_original(tmp_path: Path, photo: bool) -> None:
    ds = _noise_dataset(tmp_path / "n") if photo else make_tiny_dataset(tmp_path / "d")
    sid = "n1" if photo else "row"
    views = []
    for encode in (False, True):
        originals.clear()
        env = CountImageEnv(ds, tools=("tag", "erase", "grid", "crop"))
        obs, _ = env.reset(options={"stimulus_id": sid})
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
    ds = _noise_dataset(tmp_path / "n")
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "n1"})
    png_data_url(obs["image"])
    png = originals.original_of(obs["image"]).png()
    with Image.open(io.BytesIO(png)) as im:
        assert np.array_equal(np.asarray(im.convert("RGB")), obs["image"])


def test_runs_never_hold_more_than_the_pixels() -> None:
    """Runs of equal bytes take five bytes a run: a small noisy image is held as its pixels."""
    noise = np.random.default_rng(0).integers(0, 255, (96, 128, 3), dtype=np.uint8)
    assert originals._pack_runs(noise) is None
    flat = np.zeros((96, 128, 3), dtype=np.uint8)
    flat[40:60, 50:80] = (200, 30, 30)
    runs = originals._pack_runs(flat)
    assert runs is not None and runs[0].nbytes + runs[1].nbytes < flat.nbytes
    assert np.array_equal(originals._unpack_runs(*runs), flat)
