"""Stored video frames go as stored: JPEG cleaning, the lazy frame stack, and what a request carries."""

from __future__ import annotations

import base64
import io
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from countgym.agents.backends.base import png_data_url
from countgym.agents.backends.litellm_backend import to_openai_messages
from countgym.agents.backends.openai_direct import request_body
from countgym.agents.video_arm import video_messages
from countgym.envs.frames import FrameStack, StoredFrame, as_sent
from countgym.envs.jpeg_clean import jpeg_as_sent, jpeg_size
from countgym.envs.video_env import CountVideoEnv, VideoSpace, load_frames, stored_frames
from countgym.scenes.video import make_countvideo
from countgym.stimulus import Dataset

METADATA_MARKERS = {0xE1, 0xE2, 0xED, 0xFE}  # APP1 Exif/XMP, APP2 ICC, APP13 IPTC, COM


def _jpeg(seed: int = 0, size: tuple[int, int] = (40, 24), **save: object) -> bytes:
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=92, subsampling=0, **save)
    return buf.getvalue()


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def _markers(data: bytes) -> list[int]:
    """The markers of a JPEG's header segments, up to the first scan."""
    out, pos = [], 2
    while pos + 4 <= len(data):
        marker = data[pos + 1]
        out.append(marker)
        if marker == 0xDA:
            break
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return out


def _decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


# --- jpeg_clean -----------------------------------------------------------------------------------
def test_clean_jpeg_is_sent_as_it_is() -> None:
    data = _jpeg()
    assert jpeg_size(data) == (40, 24)
    assert jpeg_as_sent(data, (40, 24)) is data
    assert jpeg_as_sent(data, (41, 24)) is None  # not the size decoded


def test_metadata_segments_and_trailing_bytes_are_cut_pixels_unchanged() -> None:
    clean = _jpeg(1)
    exif = Image.Exif()
    exif[0x010F] = "SecretCamera"  # Make
    exif[0x0112] = 6  # orientation: what we decode ignores it, so the provider must not see it
    dirty = _jpeg(1, exif=exif.tobytes(), icc_profile=b"\x00" * 300, comment=b"private note")
    xmp = _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta>gps</x:xmpmeta>")
    iptc = _segment(0xED, b"Photoshop 3.0\x00" + b"8BIM" + b"\x00" * 20)
    dirty = dirty[:2] + xmp + iptc + dirty[2:] + b"TRAILING-SECRET"
    assert {0xE1, 0xE2, 0xFE} <= set(_markers(dirty))

    sent = jpeg_as_sent(dirty, (40, 24))
    assert sent is not None
    assert not set(_markers(sent)) & METADATA_MARKERS
    for secret in (b"SecretCamera", b"private note", b"gps", b"Photoshop", b"TRAILING-SECRET", b"Exif"):
        assert secret not in sent
    assert sent.endswith(b"\xff\xd9")
    assert sent[:2] == b"\xff\xd8" and _markers(sent)[0] == 0xE0  # SOI, then the JFIF APP0 kept
    np.testing.assert_array_equal(_decode(sent), _decode(dirty))
    # Only segments were cut: the scan data is the file's own.
    scan = clean[clean.index(b"\xff\xda"):]
    assert sent.endswith(scan) and dirty[:-len(b"TRAILING-SECRET")].endswith(scan)


def test_adobe_app14_is_kept_and_progressive_accepted() -> None:
    data = _jpeg(2, progressive=True)
    adobe = _segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x01")
    with_adobe = data[:2] + adobe + data[2:]
    sent = jpeg_as_sent(with_adobe, (40, 24))
    assert sent == with_adobe and 0xEE in _markers(sent)
    assert jpeg_as_sent(data, (40, 24)) is data


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grey_and_cmyk_are_not_vouched_for(mode: str) -> None:
    buf = io.BytesIO()
    Image.new(mode, (16, 8)).save(buf, format="JPEG")
    assert jpeg_as_sent(buf.getvalue(), (16, 8)) is None


@pytest.mark.parametrize("cut", [3, 20, 200, -2])
def test_truncated_jpeg_is_refused(cut: int) -> None:
    data = _jpeg(3)
    assert jpeg_as_sent(data[:cut], (40, 24)) is None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_jpeg_never_raises_and_what_it_accepts_decodes(data: st.DataObject) -> None:
    base = bytearray(_jpeg(4, (24, 16)))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(base) - 1))
        base[i] = data.draw(st.integers(0, 255))
    blob = bytes(base)
    sent = jpeg_as_sent(blob, (24, 16))
    if sent is not None:
        assert not set(_markers(sent)) & METADATA_MARKERS and sent.endswith(b"\xff\xd9")


# --- the frame stack --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = make_countvideo(tmp_path_factory.mktemp("cv") / "cv", limit=2, size=(64, 36), progress=False, workers=1)
    return Dataset(out)


def test_battery_frames_are_sent_as_their_files(video_dataset: Dataset) -> None:
    stim = video_dataset[video_dataset.ids()[0]]
    stack = stored_frames(video_dataset, stim)
    assert isinstance(stack, FrameStack) and stack.shape == (len(stim.frames or []), 36, 64, 3)
    for frame, rel in zip(stack, stim.frames or [], strict=True):
        assert isinstance(frame, StoredFrame) and frame.media_type == "image/jpeg"
        assert frame.data == video_dataset.media_path(stim, rel).read_bytes()  # the battery's files are clean


def test_model_visible_pixels_are_todays(video_dataset: Dataset) -> None:
    """Decoding what a request carries gives exactly the frames the environment decoded before."""
    env = CountVideoEnv(video_dataset)
    for sid in video_dataset.ids():
        obs, _ = env.reset(options={"stimulus_id": sid})
        today = load_frames(video_dataset, video_dataset[sid])
        wire = to_openai_messages(video_messages(obs["frames"], obs["text"]))
        urls = [p["image_url"]["url"] for p in wire[0]["content"] if p["type"] == "image_url"]
        assert len(urls) == len(today)
        sent = np.stack([_decode(base64.b64decode(u.partition(",")[2])) for u in urls])
        np.testing.assert_array_equal(sent, today)
        np.testing.assert_array_equal(np.asarray(obs["frames"]), today)


def test_reset_and_step_share_one_immutable_stack(video_dataset: Dataset) -> None:
    env = CountVideoEnv(video_dataset)
    obs, _ = env.reset(seed=0)
    frames = obs["frames"]
    assert frames in env.observation_space["frames"] and isinstance(frames, FrameStack)
    end, *_ = env.step("3")
    assert end["frames"] is frames  # no copy of the stack that nothing reads
    assert not np.asarray(frames[0]).flags.writeable  # a frame's pixels cannot be written
    first = np.asarray(frames)
    first[:] = 0  # the decoded stack is the caller's own: the next decode is untouched
    assert np.asarray(frames).any()
    with pytest.raises(AttributeError):
        frames.frames = ()  # type: ignore[misc]


def test_frames_with_metadata_are_cleaned_and_max_side_fits_pixels(tmp_path, video_dataset: Dataset) -> None:
    stim = video_dataset[video_dataset.ids()[0]]
    rel = (stim.frames or [])[0]
    path = video_dataset.media_path(stim, rel)
    original = path.read_bytes()
    dirty = original[:2] + _segment(0xFE, b"owner: someone") + original[2:] + b"tail"
    folder = tmp_path / "ds"
    import shutil

    shutil.copytree(video_dataset.root, folder)
    (folder / rel).write_bytes(dirty)
    ds = Dataset(folder)
    stack = stored_frames(ds, ds[stim.id])
    assert stack[0].data == original  # the cleaned file is the clean one, byte for byte
    fitted = stored_frames(ds, ds[stim.id], max_side=32)
    assert isinstance(fitted[0], np.ndarray) and fitted.shape[1:] == (18, 32, 3)
    np.testing.assert_array_equal(np.asarray(fitted), load_frames(ds, ds[stim.id], 32))


def test_a_frame_that_cannot_be_cleaned_is_encoded_afresh(tmp_path) -> None:
    rng = np.random.default_rng(5)
    folder = tmp_path / "v"
    folder.mkdir()
    names = []
    for k in range(3):
        buf = io.BytesIO()
        # Grey JPEG: not vouched for, so the frame is decoded and sent as a fresh lossless PNG.
        Image.fromarray(rng.integers(0, 256, size=(8, 12), dtype=np.uint8)).save(buf, format="JPEG")
        (folder / f"f{k}.jpg").write_bytes(buf.getvalue())
        names.append(f"f{k}.jpg")
    line = {"id": "v0", "frames": names, "n": 2, "obj": "dots", "obj_sing": "dot", "meta": {}}
    (folder / "manifest.jsonl").write_text(json.dumps(line) + "\n")
    ds = Dataset(folder)
    stack = stored_frames(ds, ds["v0"])
    assert all(isinstance(f, np.ndarray) for f in stack)
    url = png_data_url(stack[0])
    assert url.startswith("data:image/png;base64,")
    np.testing.assert_array_equal(_decode(base64.b64decode(url.partition(",")[2])), load_frames(ds, ds["v0"])[0])


def test_as_sent_refuses_what_it_does_not_know() -> None:
    assert as_sent(b"GIF89a" + b"\x00" * 40) is None
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="WEBP")
    assert as_sent(buf.getvalue()) is None


def test_video_space_checks_a_stack_by_shape() -> None:
    frame = StoredFrame(_jpeg(6, (20, 10)), "image/jpeg", (20, 10))
    assert FrameStack([frame, frame]) in VideoSpace(max_frames=4, max_side=32)
    assert FrameStack([frame] * 5) not in VideoSpace(max_frames=4, max_side=32)
    assert FrameStack([frame]) not in VideoSpace(max_frames=4, max_side=16)


# --- what a video request carries, byte for byte ------------------------------------------------------
def test_video_request_body_carries_the_stored_bytes(video_dataset: Dataset) -> None:
    env = CountVideoEnv(video_dataset)
    sid = video_dataset.ids()[1]
    obs, _ = env.reset(options={"stimulus_id": sid})
    wire = to_openai_messages(video_messages(obs["frames"], obs["text"]))
    body = request_body("openai/m", wire, {"max_tokens": 1024})
    parsed = json.loads(body)
    content = parsed["messages"][0]["content"]
    stim = video_dataset[sid]
    files = [video_dataset.media_path(stim, rel).read_bytes() for rel in stim.frames or []]
    images = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert images == ["data:image/jpeg;base64," + base64.b64encode(f).decode() for f in files]
    assert content[-1] == {"type": "text", "text": obs["text"]}
    # Nothing else of the files, and no other image data: the body is the JSON of exactly this.
    assert body == json.dumps(parsed, separators=(",", ":")).encode()


def test_stack_survives_copy_and_pickle(video_dataset: Dataset) -> None:
    import copy
    import pickle

    stack = stored_frames(video_dataset, video_dataset[video_dataset.ids()[0]])
    assert copy.deepcopy(stack) is stack
    back = pickle.loads(pickle.dumps(stack))
    assert back == stack and back is not stack
    np.testing.assert_array_equal(np.asarray(back), np.asarray(stack))


def test_test_server_reads_a_jpeg_size_from_its_head() -> None:
    from countgym.testing.server import image_size

    big = _jpeg(7, (400, 300))  # noise: well over the 48 kB head
    assert len(big) > 65536 and image_size("data:image/jpeg;base64," + base64.b64encode(big).decode()) == (400, 300)
    # A metadata segment larger than the head before the frame header: the whole file is read.
    padded = big[:2] + _segment(0xE1, b"x" * 60000) + big[2:]
    assert image_size("data:image/jpeg;base64," + base64.b64encode(padded).decode()) == (400, 300)


def test_code_written_for_the_array_keeps_working(video_dataset: Dataset) -> None:
    stack = stored_frames(video_dataset, video_dataset[video_dataset.ids()[0]])
    pixels = load_frames(video_dataset, video_dataset[video_dataset.ids()[0]])
    copied = stack.copy()
    assert isinstance(copied, np.ndarray) and copied.flags.writeable
    np.testing.assert_array_equal(copied, pixels)
    assert stack.tobytes() == pixels.tobytes() and stack.mean() == pytest.approx(pixels.mean())
    assert stack.nbytes == pixels.nbytes and len(stack) == len(pixels)
    with pytest.raises(AttributeError):
        stack.__array_interface__  # noqa: B018 - never a view of a temporary decode
