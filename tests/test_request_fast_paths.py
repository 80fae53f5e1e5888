"""The shortcuts on a video request's path give what the long way gives.

The simulated server parses a body with its image data URLs cut out and put back
(``loads_body``), reads a JPEG's size from its frame header without Pillow, the direct transport
trusts data URLs it built itself (``Base64DataURL``), and a stored frame's verdict is reused
while its file is unchanged. Each is checked against the long way on inputs that should take
the long way too.
"""

from __future__ import annotations

import base64
import io
import json
import os
import random

import numpy as np
import pytest
from PIL import Image

from countgym.agents.backends.openai_direct import json_safe_data_url, request_body
from countgym.dataurl import Base64DataURL, data_url
from countgym.envs import frames as frames_mod
from countgym.envs.frames import as_sent, read_frame_file
from countgym.envs.jpeg_clean import jpeg_as_sent, jpeg_size
from countgym.errors import UserError
from countgym.stimulus import Dataset, Stimulus, write_manifest
from countgym.testing.server import _jpeg_frame_size, image_size, loads_body


def _jpeg(w: int = 320, h: int = 200, **save: object) -> bytes:
    rng = np.random.default_rng(w * h)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG", **save)
    return buf.getvalue()


def _url(data: bytes, kind: str = "jpeg") -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode()


def _body(urls: list[str], text: str = "How many?", separators: tuple[str, str] = (",", ":")) -> bytes:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls] + [{"type": "text", "text": text}]
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": parts}]}, separators=separators).encode()


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_loads_body_equals_json_loads(separators: tuple[str, str]) -> None:
    urls = [_url(_jpeg(160 + 16 * k, 90)) for k in range(4)] + [_url(b"tiny")]
    raw = _body(urls, text='a text with "url":"data:image/png;base64,AAAA" in it', separators=separators)
    assert loads_body(raw) == json.loads(raw)


def test_loads_body_keeps_escapes_and_odd_keys() -> None:
    big = base64.b64encode(os.urandom(6000)).decode()
    raw_escaped = _body([f"data:image/png;base64,{big}"]).replace(b"+", b"\\u002b")  # an escape inside the URL
    assert loads_body(raw_escaped) == json.loads(raw_escaped)
    odd = json.dumps({"messages": [], 'x"url': f"data:image/png;base64,{big}"}, separators=(",", ":")).encode()
    assert loads_body(odd) == json.loads(odd)  # a key that only ends in url" is parsed as it came
    non_ascii = _body([f"data:image/png;base64,{big}é"])
    assert loads_body(non_ascii) == json.loads(non_ascii)


def test_loads_body_fuzzed_against_json_loads() -> None:
    rng = random.Random(7)
    alphabet = 'ab"\\:,{}[] url data;base64,+/=é\n'
    for _ in range(300):
        urls = ["data:image/png;base64," + "".join(rng.choice(alphabet) for _ in range(rng.choice([5, 5000])))
                for _ in range(rng.randint(1, 3))]
        raw = _body(urls, separators=rng.choice([(",", ":"), (", ", ": ")]))
        cut = raw[: rng.randint(0, len(raw))] if rng.random() < 0.3 else raw
        try:
            expected = json.loads(cut)
        except ValueError:
            with pytest.raises(ValueError):
                loads_body(cut)
            continue
        assert loads_body(cut) == expected


def test_jpeg_frame_size_from_the_header() -> None:
    for data in (_jpeg(), _jpeg(640, 360, progressive=True), _jpeg(50, 70, exif=b"Exif\x00\x00" + b"x" * 20000)):
        with Image.open(io.BytesIO(data)) as im:
            assert _jpeg_frame_size(data) == im.size == image_size(_url(data))
    assert _jpeg_frame_size(_jpeg()[:40]) is None  # the frame header is not in these bytes
    assert _jpeg_frame_size(b"\xff\xd8\xff\xda\x00\x08" + b"\x00" * 20) is None  # a scan before any frame


def test_base64_data_url_skips_only_the_check() -> None:
    data = _jpeg()
    url = data_url("image/jpeg", data)
    assert type(url) is Base64DataURL and url == _url(data)
    assert json_safe_data_url(url) and json_safe_data_url(str(url))
    assert not json_safe_data_url(data_url("image/png", b"x"))  # short: left to the JSON encoder
    with pytest.raises(ValueError):
        data_url('image/png"', data)
    wire = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    assert json.loads(request_body("openai/m", wire, {})) == {"model": "m", "messages": wire}


def test_a_stored_frame_verdict_is_reused_only_for_the_same_file(tmp_path) -> None:
    clean = _jpeg()
    tagged = _jpeg(exif=b"Exif\x00\x00secret-location")
    path = tmp_path / "f.jpg"
    path.write_bytes(tagged)
    frames_mod._VERDICTS.clear()
    data, identity = read_frame_file(path)
    first = as_sent(data, identity)
    again = as_sent(*read_frame_file(path))
    assert first is not None and again is not None
    assert first.data == again.data == jpeg_as_sent(tagged, jpeg_size(tagged) or (0, 0))
    assert b"secret-location" not in again.data
    assert identity in frames_mod._VERDICTS
    # The file rewritten: a new identity, so a new verdict on the new bytes.
    path.write_bytes(clean + b"trailing payload")
    os.utime(path, ns=(1, 1))
    rewritten = as_sent(*read_frame_file(path))
    assert rewritten is not None and rewritten.data == clean


def test_media_path_remembers_only_regular_files(tmp_path) -> None:
    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.png")
    os.mkfifo(tmp_path / "images" / "b.png")
    stims = [Stimulus(id=s, image=f"images/{s}.png", n=1, obj="dots", obj_sing="dot", points=None) for s in "ab"]
    write_manifest(tmp_path, stims)
    ds = Dataset(tmp_path)
    path = ds.image_path(ds["a"])
    assert ds.image_path(ds["a"]) is path  # remembered
    with pytest.raises(UserError, match="not a regular file"):
        ds.image_path(ds["b"])
    with pytest.raises(UserError, match="not a regular file"):
        ds.image_path(ds["b"])  # never remembered
    with pytest.raises(UserError, match="escapes"):
        ds.media_path(ds["a"], "../outside.png")


def test_put_back_refuses_a_prefix_it_did_not_cut() -> None:
    from countgym.testing.server import _put_back

    body = {"messages": [{"image_url": {"url": "tok-0"}}, {"image_url": {"url": "tok-x"}}]}
    assert _put_back(body, "tok-", ["data:a"]) == -1
    body = {"messages": [{"image_url": {"url": "tok-0"}}]}
    assert _put_back(body, "tok-", ["data:a"]) == 1 and body["messages"][0]["image_url"]["url"] == "data:a"


def test_content_hash_is_kept_across_datasets_while_files_are_unchanged(tmp_path, monkeypatch) -> None:
    import hashlib
    from pathlib import Path

    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8), "red").save(tmp_path / "images" / "a.png")
    write_manifest(tmp_path, [Stimulus(id="a", image="images/a.png", n=1, obj="dots", obj_sing="dot", points=None)])
    first = Dataset(tmp_path).content_hash(Dataset(tmp_path)["a"])
    assert first == hashlib.sha256((tmp_path / "images" / "a.png").read_bytes()).hexdigest()
    reads: list[Path] = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self) or real(self))
    ds = Dataset(tmp_path)
    assert ds.content_hash(ds["a"]) == first and not reads  # another dataset, the same file: not read again
    Image.new("RGB", (8, 8), "blue").save(tmp_path / "images" / "a.png")
    os.utime(tmp_path / "images" / "a.png", ns=(5, 5))
    ds = Dataset(tmp_path)
    assert ds.content_hash(ds["a"]) != first and reads  # changed: read and hashed again


def test_a_whole_dataset_pool_is_validated_once(tmp_path, monkeypatch) -> None:
    from countgym.envs.common import stimulus_pool

    (tmp_path / "images").mkdir()
    stims = [Stimulus(id=f"s{i}", image="images/a.png", n=1, obj="dots", obj_sing="dot", points=None) for i in range(5)]
    write_manifest(tmp_path, stims)
    ds = Dataset(tmp_path)
    seen: list[str] = []
    real = Dataset.__getitem__
    monkeypatch.setattr(Dataset, "__getitem__", lambda self, sid: seen.append(sid) or real(self, sid))
    assert stimulus_pool(ds, None) == [s.id for s in stims] and len(seen) == 5
    assert stimulus_pool(ds, None) == [s.id for s in stims] and len(seen) == 5  # not again
    with pytest.raises(UserError):
        stimulus_pool(ds, ["s1", "nope"])  # a chosen subset is always checked


def test_dataset_ids_are_kept_and_handed_out_as_new_lists(tmp_path) -> None:
    (tmp_path / "images").mkdir()
    stims = [Stimulus(id=f"s{i}", image="images/a.png", n=1, obj="dots", obj_sing="dot", points=None) for i in range(4)]
    write_manifest(tmp_path, stims)
    ds = Dataset(tmp_path)
    ids = ds.ids()
    ids.append("mine")  # the caller's list
    assert ds.ids() == ["s0", "s1", "s2", "s3"]
    ds.stimuli = [ds["s2"], ds["s0"]]  # a new selection: the kept ids go with it
    assert ds.ids() == ["s2", "s0"]


def test_a_whole_video_dataset_is_checked_for_frames_once(tmp_path, monkeypatch) -> None:
    from countgym.envs.video_env import CountVideoEnv

    (tmp_path / "frames").mkdir()
    stims = [Stimulus(id=f"v{i}", frames=["frames/a.jpg"], n=1, obj="dots", obj_sing="dot", points=None)
             for i in range(3)]
    write_manifest(tmp_path, [*stims, Stimulus(id="img", image="frames/a.jpg", n=1, obj="dots", obj_sing="dot",
                                               points=None)])
    with pytest.raises(ValueError, match="has no frames"):
        CountVideoEnv(Dataset(tmp_path))  # a stimulus without frames: refused every time
    with pytest.raises(ValueError, match="has no frames"):
        CountVideoEnv(Dataset(tmp_path))
    write_manifest(tmp_path, stims)
    ds = Dataset(tmp_path)
    seen: list[str] = []
    real = Dataset.__getitem__
    monkeypatch.setattr(Dataset, "__getitem__", lambda self, sid: seen.append(sid) or real(self, sid))
    CountVideoEnv(ds)
    checked = len(seen)
    CountVideoEnv(ds)
    assert checked >= 3 and len(seen) == checked  # the second environment reads no stimulus
    CountVideoEnv(ds, stimulus_ids=["v1"])
    assert seen[checked:] == ["v1", "v1"]  # a chosen subset is always checked


def test_preflight_finds_a_remembered_file_gone(tmp_path) -> None:
    from countgym.preflight import check_media

    (tmp_path / "images").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.png")
    write_manifest(tmp_path, [Stimulus(id="a", image="images/a.png", n=1, obj="dots", obj_sing="dot", points=None)])
    ds = Dataset(tmp_path)
    ds.image_path(ds["a"])  # remembered as a regular file
    check_media(ds, [ds["a"]])
    (tmp_path / "images" / "a.png").unlink()
    with pytest.raises(UserError, match="images/a.png is missing"):
        check_media(Dataset(tmp_path), [ds["a"]])
    os.mkfifo(tmp_path / "images" / "a.png")
    with pytest.raises(UserError, match="is not a regular file"):
        check_media(Dataset(tmp_path), [ds["a"]])
