"""A source image that already is the first view's PNG is sent as its own bytes: only a PNG whose
every decoder shows exactly the pixels the episode shows qualifies (8-bit RGB, not interlaced, no
colour management, transparency or unknown chunk, correct CRCs, nothing after IEND); every other
source is encoded as before, and either way the model sees the observation's pixels."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from countgym.agents.backends import base as backend_base
from countgym.agents.backends import png_bands
from countgym.agents.backends.base import decode_data_url, png_data_url
from countgym.envs import originals
from countgym.envs.actions import Tag
from countgym.envs.image_env import CountImageEnv
from countgym.envs.originals import png_as_sent
from tests.conftest import make_tiny_dataset


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    originals.clear()
    png_bands.clear()
    backend_base._VIEW_URLS.clear()


def _png(im: Image.Image, **save: object) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", **save)
    return buf.getvalue()


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out


def _build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body)) for kind, body in chunks
    )


def _with_chunk(data: bytes, kind: bytes, body: bytes) -> bytes:
    """``data`` with a chunk inserted after IHDR (CRC correct)."""
    chunks = _chunks(data)
    return _build([chunks[0], (kind, body), *chunks[1:]])


RGB = Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8))


def test_a_plain_rgb_png_is_sent_as_it_is() -> None:
    for data in (_png(RGB), _png(RGB, compress_level=9)):
        assert png_as_sent(data, (32, 24)) is data
    for data in (_png(RGB, dpi=(300, 300)), _with_chunk(_png(RGB), b"tEXt", b"Comment\x00made here")):
        assert png_as_sent(data, (32, 24)) == _png(RGB)  # its pixel chunks only


def _interlaced(data: bytes) -> bytes:
    chunks = _chunks(data)
    ihdr = chunks[0][1][:12] + b"\x01"
    return _build([(b"IHDR", ihdr), *chunks[1:]])


@pytest.mark.parametrize("case", [
    "gamma", "srgb", "icc", "transparency", "palette", "grey", "rgba", "16-bit", "interlaced", "animated",
    "unknown chunk", "bad crc", "after iend", "truncated", "other size", "jpeg",
])
def test_what_a_decoder_could_show_otherwise_is_not_sent_as_it_is(case: str) -> None:
    plain = _png(RGB)
    data, size = {
        "gamma": (_with_chunk(plain, b"gAMA", struct.pack(">I", 45455)), (32, 24)),
        "srgb": (_with_chunk(plain, b"sRGB", b"\x00"), (32, 24)),
        "icc": (_png(RGB, icc_profile=b"\x00" * 128), (32, 24)),
        "transparency": (_png(RGB, transparency=(0, 0, 0)), (32, 24)),
        "palette": (_png(RGB.convert("P")), (32, 24)),
        "grey": (_png(RGB.convert("L")), (32, 24)),
        "rgba": (_png(RGB.convert("RGBA")), (32, 24)),
        "16-bit": (_png(Image.new("I;16", (32, 24), 300)), (32, 24)),
        "interlaced": (_interlaced(plain), (32, 24)),
        "animated": (_with_chunk(plain, b"acTL", struct.pack(">II", 1, 0)), (32, 24)),
        "unknown chunk": (_with_chunk(plain, b"zzZz", b"?"), (32, 24)),
        "bad crc": (plain[:-5] + bytes([plain[-5] ^ 1]) + plain[-4:], (32, 24)),
        "after iend": (plain + b"\x00", (32, 24)),
        "truncated": (plain[:-6], (32, 24)),
        "other size": (plain, (24, 32)),
        "jpeg": (_jpeg(), (32, 24)),
    }[case]
    assert png_as_sent(data, size) is None


def _jpeg() -> bytes:
    buf = io.BytesIO()
    RGB.save(buf, format="JPEG")
    return buf.getvalue()


def _no_encoding(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the image encodes (``_encode``) a test makes."""
    calls: list[int] = []
    real = backend_base._encode
    monkeypatch.setattr(backend_base, "_encode", lambda image: calls.append(1) or real(image))
    return calls


def test_the_first_view_of_a_battery_image_is_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    encodes = _no_encoding(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    url = png_data_url(obs["image"])
    assert base64.b64decode(url.partition(",")[2]) == ds.image_path(ds["four"]).read_bytes()
    assert encodes == [] and np.array_equal(decode_data_url(url), obs["image"])
    # The tag view is encoded over the view (its bands made now), and decodes exactly.
    obs2, *_ = env.step(Tag(points=[(130.0, 130.0), (390.0, 260.0)]))
    assert np.array_equal(decode_data_url(png_data_url(obs2["image"])), obs2["image"])
    assert encodes == [1]


def test_a_source_with_colour_management_is_encoded_and_shows_the_same_pixels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    path = ds.image_path(ds["four"])
    path.write_bytes(_with_chunk(path.read_bytes(), b"gAMA", struct.pack(">I", 45455)))
    encodes = _no_encoding(monkeypatch)
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    url = png_data_url(obs["image"])
    assert b"gAMA" not in base64.b64decode(url.partition(",")[2]) and encodes == [1]
    assert np.array_equal(decode_data_url(url), obs["image"])


def test_a_clean_jpeg_source_is_sent_as_stored_without_its_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    path = ds.image_path(ds["four"])
    exif = Image.Exif()
    exif[0x010E] = "ground truth: 4 dots"  # ImageDescription
    with Image.open(path) as im:
        # The manifest's name stays; Pillow reads the bytes. Metadata a user's photo carries.
        im.convert("RGB").save(path, format="JPEG", quality=90, exif=exif, comment=b"sk-live-TOKEN")
    stored = path.read_bytes()
    encodes = _no_encoding(monkeypatch)
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    url = png_data_url(obs["image"])
    sent = base64.b64decode(url.partition(",")[2])
    assert url.startswith("data:image/jpeg;base64,") and encodes == []
    assert b"ground truth" not in sent and b"sk-live" not in sent and b"Exif" not in sent
    assert stored.endswith(sent[-4096:])  # the image data itself, untouched
    with Image.open(path) as im:
        assert np.array_equal(decode_data_url(url), np.asarray(im.convert("RGB")))
    assert np.array_equal(decode_data_url(url), obs["image"])


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_a_jpeg_the_clean_cut_cannot_vouch_for_is_encoded_losslessly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    path = ds.image_path(ds["four"])
    with Image.open(path) as im:
        im.convert(mode).save(path, format="JPEG")
    encodes = _no_encoding(monkeypatch)
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    url = png_data_url(obs["image"])
    assert url.startswith("data:image/png;base64,") and encodes == [1]
    assert np.array_equal(decode_data_url(url), obs["image"])


def test_a_large_source_is_sent_as_its_fitted_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "wide", size=(2048, 1024))
    encodes = _no_encoding(monkeypatch)
    for _ in range(2):  # fitted now, then read from the derived cache
        originals.clear()
        backend_base._VIEW_URLS.clear()
        obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
        url = png_data_url(obs["image"])
        (copy,) = (tmp_path / "derived" / "fitted").glob("*.png")
        assert base64.b64decode(url.partition(",")[2]) == copy.read_bytes()
        assert np.array_equal(decode_data_url(url), obs["image"]) and obs["image"].shape == (512, 1024, 3)
    assert encodes == []


def test_a_file_changed_after_loading_is_not_what_is_sent(tmp_path: Path) -> None:
    """The bytes sent are the bytes the pixels were decoded from, read once."""
    ds = make_tiny_dataset(tmp_path / "d")
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    path = ds.image_path(ds["four"])
    Image.new("RGB", (768, 768), "black").save(path)
    assert np.array_equal(decode_data_url(png_data_url(obs["image"])), obs["image"])


def test_pnginfo_text_is_no_obstacle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    path = ds.image_path(ds["two"])
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "a scene generator")
    with Image.open(path) as im:
        im.convert("RGB").save(path, pnginfo=info)
    encodes = _no_encoding(monkeypatch)
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})
    url = png_data_url(obs["image"])
    sent = base64.b64decode(url.partition(",")[2])
    assert encodes == [] and b"a scene generator" not in sent
    assert [c for c in _chunks(sent)] == [c for c in _chunks(path.read_bytes()) if c[0] != b"tEXt"]


def test_damaged_files_never_raise_and_are_sent_only_when_whole() -> None:
    """Fuzzed: truncated, overwritten, re-lengthed and padded PNGs give None, never an
    exception; the rare accepted one decodes to an RGB image of the stated size."""
    import random

    plain = _png(RGB)
    rng = random.Random(0)
    for _ in range(3000):
        d = bytearray(plain)
        kind = rng.randrange(4)
        if kind == 0:
            d = d[: rng.randrange(len(d))]
        elif kind == 1:
            for _ in range(rng.randrange(1, 5)):
                d[rng.randrange(len(d))] = rng.randrange(256)
        elif kind == 2:
            d[8:12] = rng.randbytes(4)
        else:
            d += rng.randbytes(rng.randrange(1, 20))
        sent = png_as_sent(bytes(d), (32, 24))
        if sent is not None:
            with Image.open(io.BytesIO(sent)) as im:
                im.load()
                assert im.mode == "RGB" and im.size == (32, 24)
