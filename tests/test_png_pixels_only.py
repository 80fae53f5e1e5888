"""Only pixels leave the machine: for every kind of extra a user's PNG can carry (text chunks with a
label, a token or a location, a second stream hidden after the pixels' zlib stream, data after
IEND, a huge text chunk, a decompression bomb), the request body the provider receives (captured
by the test server) holds an image of IHDR, IDAT and IEND only, of exactly the observation's
pixels, and stays the size of the pixels."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from countgym.agents.backends import base as backend_base
from countgym.agents.backends import png_bands
from countgym.agents.backends.base import image_part, message, text_part
from countgym.agents.backends.litellm_backend import LiteLLMBackend
from countgym.envs import originals
from countgym.envs.image_env import CountImageEnv
from countgym.envs.originals import png_as_sent
from countgym.testing.server import TestServer
from tests.conftest import make_tiny_dataset

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")

LABEL = b"ground truth: 4 dots"
TOKEN = b"sk-live-TOKEN-0123456789abcdef"
GPS = b"GPS 51.5074 N, 0.1278 W"
HIDDEN = b"HIDDEN-SECOND-STREAM " * 50
BOMB_MB = 64
"""What the bomb's stream inflates to beyond the pixels (the issue's was 200 MB; the check stops
at the pixels' size either way, and building a bigger one only slows the test)."""
SIDE = 320


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    originals.clear()
    png_bands.clear()
    backend_base._VIEW_URLS.clear()


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos + 8 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]))
        pos += 12 + n
    return out


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(_chunk(k, b) for k, b in chunks)


def _rows(im: Image.Image) -> bytes:
    """The image's scanlines, each with filter byte 0 (what IDAT inflates to)."""
    a = np.asarray(im.convert("RGB"))
    return b"".join(b"\x00" + row.tobytes() for row in a)


def _variant(plain: bytes, im: Image.Image, case: str) -> bytes:
    chunks = _chunks(plain)
    ihdr, rest = chunks[0], chunks[1:]
    if case == "text":
        extra = [(b"tEXt", b"label\x00" + LABEL), (b"iTXt", b"token\x00\x00\x00\x00\x00" + TOKEN),
                 (b"zTXt", b"gps\x00\x00" + zlib.compress(GPS)), (b"tIME", b"\x07\xea\x0c\x04\x17\x00\x00"),
                 (b"pHYs", struct.pack(">IIB", 2835, 2835, 1))]
        return _build([ihdr, *extra[:3], *rest[:-1], *extra[3:], rest[-1]])
    if case == "hidden stream":
        stream = zlib.compress(_rows(im)) + zlib.compress(HIDDEN)
        return _build([ihdr, (b"IDAT", stream), (b"IEND", b"")])
    if case == "after iend":
        return plain + HIDDEN
    if case == "huge text":
        return _build([ihdr, (b"tEXt", b"notes\x00" + b"x" * (8 * 2**20)), *rest])
    if case == "bomb":
        z = zlib.compressobj(9)
        stream = z.compress(_rows(im))
        zeros = bytes(2**20)
        for _ in range(BOMB_MB):  # megabytes more inside the pixels' own stream
            stream += z.compress(zeros)
        stream += z.flush()
        return _build([ihdr, (b"IDAT", stream), (b"IEND", b"")])
    if case == "padded stream":
        # Empty stored blocks before the pixels' data: a valid stream, 1 MB longer than the pixels.
        raw = zlib.compress(_rows(im))
        pad = b"\x00\x00\x00\xff\xff" * (2**20 // 5)
        deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
        body = deflate.compress(_rows(im)) + deflate.flush()
        return _build([ihdr, (b"IDAT", raw[:2] + pad + body + raw[-4:]), (b"IEND", b"")])
    raise AssertionError(case)


def _encodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = backend_base._encode
    monkeypatch.setattr(backend_base, "_encode", lambda image: calls.append(1) or real(image))
    return calls


def _sent_png(srv: TestServer, obs_image: np.ndarray) -> tuple[bytes, int]:
    """The PNG the provider received for ``obs_image``, and the request body's size."""
    be = LiteLLMBackend("openai/blob", api_base=srv.base_url, transport="direct", seed=0)
    be.complete([message("user", image_part(obs_image), text_part("How many dots?"))])
    body = srv.last_request or {}
    urls = [p["image_url"]["url"] for m in body["messages"] for p in m["content"]
            if isinstance(m["content"], list) and p.get("type") == "image_url"]
    assert len(urls) == 1
    return base64.b64decode(urls[0].partition(",")[2]), len(json.dumps(body))


CASES = ["text", "hidden stream", "after iend", "huge text", "bomb", "padded stream"]


@pytest.mark.parametrize("case", CASES)
def test_the_provider_receives_only_the_pixels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    ds = make_tiny_dataset(tmp_path / "d", size=(SIDE, SIDE))
    path = ds.image_path(ds["four"])
    plain = path.read_bytes()
    with Image.open(path) as im:
        im.load()
        path.write_bytes(_variant(plain, im, case))
    encodes = _encodes(monkeypatch)
    obs, _ = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})
    with TestServer() as srv:
        png, body_size = _sent_png(srv, obs["image"])
    assert [k for k, _ in _chunks(png)] == [b"IHDR", *[b"IDAT"] * (len(_chunks(png)) - 2), b"IEND"]
    for secret in (LABEL, TOKEN, GPS, HIDDEN[:21], b"tEXt", b"notes"):
        assert secret not in png
    with Image.open(io.BytesIO(png)) as im:
        assert np.array_equal(np.asarray(im.convert("RGB")), obs["image"])
    idat = b"".join(b for k, b in _chunks(png) if k == b"IDAT")
    inflater = zlib.decompressobj()
    assert len(inflater.decompress(idat)) == SIDE * (1 + 3 * SIDE) and inflater.eof and not inflater.unused_data
    assert body_size < len(plain) * 4 / 3 + 4096  # the size of the pixels, not of what came with them
    if case in ("text", "huge text"):
        # Dropped without re-encoding: the pixel chunks are the file's own.
        assert encodes == [] and png == _build([c for c in _chunks(plain)])
    else:
        assert encodes == [1]


def test_chunks_no_decoder_draws_with_are_dropped_without_reencoding() -> None:
    im = Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    plain = buf.getvalue()
    assert png_as_sent(plain, (32, 24)) is plain
    chunks = _chunks(plain)
    for kind, body in [(b"tEXt", b"k\x00v"), (b"pHYs", struct.pack(">IIB", 1, 1, 0)), (b"PLTE", b"\x00" * 3)]:
        data = _build([chunks[0], (kind, body), *chunks[1:]])
        assert png_as_sent(data, (32, 24)) == plain
    # IDAT split over several chunks, a text chunk between them: not a valid PNG.
    idat = chunks[1][1]
    split = _build([chunks[0], (b"IDAT", idat[:10]), (b"tEXt", b"k\x00v"), (b"IDAT", idat[10:]), chunks[-1]])
    assert png_as_sent(split, (32, 24)) is None
    ok = _build([chunks[0], (b"IDAT", idat[:10]), (b"IDAT", b""), (b"IDAT", idat[10:]), chunks[-1]])
    assert png_as_sent(ok, (32, 24)) is ok
    # A stream cut short, or one that ends before the last IDAT's bytes: no.
    assert png_as_sent(_build([chunks[0], (b"IDAT", idat[:-6]), chunks[-1]]), (32, 24)) is None
    assert png_as_sent(_build([chunks[0], (b"IDAT", idat), (b"IDAT", b"\x00"), chunks[-1]]), (32, 24)) is None


def test_a_compressed_text_bomb_is_never_inflated_and_a_decoder_that_would_is_one_clear_error(tmp_path: Path) -> None:
    from countgym.errors import UserError

    ds = make_tiny_dataset(tmp_path / "d", size=(SIDE, SIDE))
    path = ds.image_path(ds["four"])
    plain = path.read_bytes()
    chunks = _chunks(plain)
    bomb = (b"zTXt", b"notes\x00\x00" + zlib.compress(b"x" * (8 * 2**20)))
    path.write_bytes(_build([chunks[0], bomb, *chunks[1:]]))
    # The episode cuts the text chunk out unread: only the pixels are held, sent and drawn from.
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    assert originals.original_of(obs["image"]).png() == plain
    with Image.open(io.BytesIO(plain)) as im:
        assert np.array_equal(np.asarray(obs["image"]), np.asarray(im.convert("RGB")))
    env.step({"tool": "tag", "points": [[100, 100]]})
    # Reading the whole file (as replay and the audit's viewer do) is one clear error.
    with pytest.raises(UserError, match="cannot read image"):
        ds.read_image(ds["four"])
