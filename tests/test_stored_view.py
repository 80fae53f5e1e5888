"""A first observation whose source file is already what the model is sent decodes nothing: the
episode reads the file, the backend sends its pixel chunks, and the pixels are decoded only when a
policy reads them, exactly the pixels the observation's array used to hold. The file's pixel
stream is inflated to check it once per file, then recorded in the derived cache; an edited file
is checked again."""

from __future__ import annotations

import base64
import copy
import errno
import io
import os
import pickle
import re
import struct
import threading
import zlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image, ImageFile

from countgym.agents.backends import base as backend_base
from countgym.agents.backends.base import encoded_image, png_data_url
from countgym.envs import originals
from countgym.envs.cf_env import CounterCountEnv
from countgym.envs.image_env import MAX_LONG_SIDE, CountImageEnv
from countgym.envs.stored_view import StoredView
from countgym.stimulus import Dataset, Stimulus, write_manifest
from tests.conftest import make_tiny_dataset


@pytest.fixture(autouse=True)
def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    originals.clear()
    backend_base._VIEW_URLS.clear()


def _photos(root: Path, n: int = 2, side: int = 96) -> Dataset:
    """Noisy photo-like PNGs saved with Pillow's defaults."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    stims = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (side, side + 8 * i, 3), dtype=np.uint8)).save(root / f"images/p{i}.png")
        stims.append(Stimulus(id=f"p{i}", n=2, obj="dots", obj_sing="dot", image=f"images/p{i}.png",
                              points=[(10.0, 10.0), (50.0, 40.0)]))
    write_manifest(root, stims)
    return Dataset(root)


def _file_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of Pillow pixel decodes and of pixel-stream checks."""
    counts = {"decode": 0, "inflate": 0}
    load, check = ImageFile.ImageFile.load, originals._one_stream_of_pixels

    def counted_load(self: ImageFile.ImageFile) -> object:
        counts["decode"] += bool(self.tile)  # pixels still to decode
        return load(self)

    def counted_check(*args: object) -> bool:
        counts["inflate"] += 1
        return check(*args)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted_load)
    monkeypatch.setattr(originals, "_one_stream_of_pixels", counted_check)
    return counts


def _first_call(env: CountImageEnv, sid: str) -> tuple[dict, str]:
    obs, _ = env.reset(options={"stimulus_id": sid})
    return obs, png_data_url(obs["image"])


def test_a_first_call_decodes_nothing_and_sends_the_file_pixels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _photos(tmp_path / "p")
    counts = _counting(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    obs, url = _first_call(env, "p0")
    assert isinstance(obs["image"], StoredView) and counts == {"decode": 0, "inflate": 1}
    path = ds.image_path(ds["p0"])
    assert base64.b64decode(url.partition(",")[2]) == path.read_bytes()  # the file, as stored
    # What the model sees is what the observation shows, decoded only now.
    assert np.array_equal(np.asarray(obs["image"]), _file_pixels(path))
    assert counts["decode"] == 2  # the view's pixels, then the reference read here


def test_a_jpeg_photo_first_call_decodes_nothing_and_sends_its_image_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _photos(tmp_path / "p")
    path = ds.image_path(ds["p1"])
    with Image.open(path) as im:
        im.save(path, format="JPEG", quality=92)  # the manifest's name stays; Pillow reads the bytes
    counts = _counting(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    obs, url = _first_call(env, "p1")
    assert counts == {"decode": 0, "inflate": 0} and url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.partition(",")[2]) == path.read_bytes()  # nothing to cut here
    assert np.array_equal(np.asarray(obs["image"]), _file_pixels(path))
    obs, *_ = env.step({"tool": "tag", "points": [[100, 100]]})  # draws on the same pixels
    assert isinstance(obs["image"], np.ndarray) and obs["image"].shape == _file_pixels(path).shape


def test_the_stream_check_is_once_per_file_and_again_after_an_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _photos(tmp_path / "p")
    counts = _counting(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    _first_call(env, "p0")
    assert counts["inflate"] == 1 and len(list((tmp_path / "derived" / "sent").glob("[!.]*"))) == 1
    originals.clear()  # as a new process: only the derived cache remembers
    backend_base._VIEW_URLS.clear()
    _, url = _first_call(env, "p0")
    assert counts == {"decode": 0, "inflate": 1}
    # The file is edited: a second zlib stream hidden after the pixels'. Same modification time.
    path = ds.image_path(ds["p0"])
    data, st = path.read_bytes(), path.stat()
    pixels = _file_pixels(path)
    rows = b"".join(b"\x00" + r.tobytes() for r in pixels)
    idat = zlib.compress(rows) + zlib.compress(b"HIDDEN " * 40)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path.write_bytes(data[:33] + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    originals.clear()
    backend_base._VIEW_URLS.clear()
    obs, url = _first_call(env, "p0")
    sent = base64.b64decode(url.partition(",")[2])
    assert counts["inflate"] == 2 and b"HIDDEN" not in zlib.decompressobj().decompress(
        b"".join(sent[p + 8 : p + 8 + struct.unpack_from(">I", sent, p)[0]] for p in _idat_positions(sent)))
    with Image.open(io.BytesIO(sent)) as im:
        assert np.array_equal(np.asarray(im.convert("RGB")), pixels)
    assert np.array_equal(np.asarray(obs["image"]), pixels)


def _idat_positions(png: bytes) -> list[int]:
    out, pos = [], 8
    while pos + 8 <= len(png):
        (n,) = struct.unpack_from(">I", png, pos)
        if png[pos + 4 : pos + 8] == b"IDAT":
            out.append(pos)
        pos += 12 + n
    return out


def test_an_unwritable_derived_cache_only_means_checking_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _photos(tmp_path / "p")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache would go")
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(blocker))
    counts = _counting(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    for _ in range(2):
        originals.clear()
        backend_base._VIEW_URLS.clear()
        obs, url = _first_call(env, "p1")
        assert base64.b64decode(url.partition(",")[2]) == ds.image_path(ds["p1"]).read_bytes()
    assert counts == {"decode": 0, "inflate": 2}


def test_a_corrupt_pixel_stream_is_still_one_clear_error(tmp_path: Path) -> None:
    from countgym.errors import UserError

    ds = _photos(tmp_path / "p")
    path = ds.image_path(ds["p0"])
    data = bytearray(path.read_bytes())
    pos = _idat_positions(bytes(data))[0]
    data[pos + 8 + 40 : pos + 8 + 60] = b"\xff" * 20  # the stream, not the structure
    body = bytes(data[pos + 8 : pos + 8 + struct.unpack_from(">I", data, pos)[0]])
    data[pos + 8 + len(body) : pos + 12 + len(body)] = struct.pack(">I", zlib.crc32(b"IDAT" + body))
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="cannot read image"):
        CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "p0"})


def test_the_view_reads_as_the_array_it_replaced(tmp_path: Path) -> None:
    ds = _photos(tmp_path / "p")
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "p1"})
    view, ref = obs["image"], _file_pixels(ds.image_path(ds["p1"]))
    assert view.shape == ref.shape and view.dtype == np.uint8 and view.ndim == 3 and len(view) == ref.shape[0]
    assert view.nbytes == ref.nbytes and view.size == ref.size and view._pixels is None  # free to ask
    assert obs in env.observation_space
    a = np.asarray(view)
    assert np.array_equal(a, ref) and not a.flags.writeable and np.shares_memory(np.asarray(view), a)
    own = view.copy()
    own[0, 0] = 7  # the caller's own
    assert np.array_equal(np.asarray(view), ref)
    assert tuple(view[3, 4]) == tuple(ref[3, 4]) and np.array_equal(view[:, :10], ref[:, :10])
    assert np.array_equal(np.asarray(Image.fromarray(view)), ref)  # Pillow reads it too
    assert np.allclose(view / 255.0, ref / 255.0) and np.array_equal(view + 0, ref + 0)
    assert np.array_equal(255 - view, 255 - ref) and np.array_equal(view > 100, ref > 100)
    assert view.mean() == ref.mean() and view.astype(np.float32).dtype == np.float32
    assert np.array_equal(pickle.loads(pickle.dumps(view)), ref)
    assert copy.deepcopy(view) is view and copy.copy(view) is view
    with pytest.raises(AttributeError):
        view.shape = (1, 1, 3)
    again, _ = env.reset(options={"stimulus_id": "p1"})
    other, _ = env.reset(options={"stimulus_id": "p0"})
    assert again["image"] == view and again["image"] is not view and other["image"] != view
    assert encoded_image(view).url == png_data_url(view)


def test_every_file_backed_first_view_is_a_view_and_a_drawn_one_an_array(tmp_path: Path) -> None:
    """The type does not depend on the file: a source that is not sendable as stored (a grey
    PNG here) is a view as well, encoded by backends as before."""
    ds = make_tiny_dataset(tmp_path / "d")
    path = ds.image_path(ds["four"])
    with Image.open(path) as im:
        im.convert("L").save(path)
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    assert isinstance(obs["image"], StoredView)
    assert originals.original_of(obs["image"]).sent is None
    url = png_data_url(obs["image"])
    assert url.startswith("data:image/png;base64,")
    assert np.array_equal(backend_base.decode_data_url(url), _file_pixels(path))
    obs, *_ = env.step({"tool": "tag", "points": [[100, 100]]})
    assert isinstance(obs["image"], np.ndarray)


def test_envs_pass_check_env_and_vector_envs_carry_the_pixels(tmp_path: Path) -> None:
    from gymnasium.utils.env_checker import check_env

    ds = _photos(tmp_path / "p")
    check_env(CountImageEnv(ds, tools=("tag",)), skip_render_check=True)
    vec = gym.vector.AsyncVectorEnv([lambda: CountImageEnv(ds, tools=("tag",))] * 2)
    try:
        obs, _ = vec.reset(seed=0, options={"stimulus_id": "p1"})
        assert all(np.array_equal(np.asarray(img), _file_pixels(ds.image_path(ds["p1"]))) for img in obs["image"])
    finally:
        vec.close()


def test_counterfactual_first_view_is_a_view_of_the_shared_image(tmp_path: Path) -> None:
    from countgym.scenes.counterfactual.generator import make_countercount

    ds = Dataset(make_countercount(tmp_path / "cc", limit=2, progress=False))
    env = CounterCountEnv(ds)
    sid = ds.ids()[0]
    obs, _ = env.reset(options={"stimulus_id": sid})
    assert isinstance(obs["image"], StoredView)
    assert np.array_equal(np.asarray(obs["image"]), _file_pixels(ds.image_path(ds[sid])))
    final, *_ = env.step("3")
    assert final["image"] == obs["image"]


def test_the_records_of_checked_files_are_a_cache_entry_that_clean_removes(tmp_path: Path, monkeypatch, capsys) -> None:
    from countgym.cli import main

    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "cache" / "derived"))
    ds = _photos(tmp_path / "p")
    _exif_jpeg(ds, "p1")  # one PNG (an empty record) and one JPEG (its verdict, a link)
    env = CountImageEnv(ds, tools=("tag",))
    for sid in ds.ids():
        _first_call(env, sid)
    sent = tmp_path / "cache" / "derived" / "sent"
    assert sorted(p.is_symlink() for p in sent.iterdir() if not p.name.startswith(".")) == [False, True]
    foreign = sent / "notes.txt"
    foreign.write_text("a user's file")
    # A user's links, even named like a record, are not countgym's: only a verdict's link is.
    (sent / ("ab" * 20)).symlink_to(foreign)
    (sent / "jpeg-link").symlink_to("jpeg 1 1 0 2")
    assert main(["cache"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert rows["sent"][1] == "complete" and "2 items" in " ".join(rows["sent"])
    assert main(["cache", "clean", "--all"]) == 0
    assert sorted(p.name for p in sent.iterdir() if not p.name.startswith(".")) == ["ab" * 20, "jpeg-link", "notes.txt"]
    assert foreign.read_text() == "a user's file"
    counts = _counting(monkeypatch)
    originals.clear()
    _first_call(env, "p0")
    assert counts["inflate"] == 1  # forgotten: checked again


def _exif_jpeg(ds: Any, sid: str) -> Path:
    """Re-save ``sid``'s image as a JPEG with an EXIF label (cut out of what is sent)."""
    path = ds.image_path(ds[sid])
    exif = Image.Exif()
    exif[0x010E] = "a label"
    with Image.open(path) as im:
        im.save(path, format="JPEG", quality=92, exif=exif)
    return path


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    parses: list[int] = []
    real = originals.jpeg_parse
    monkeypatch.setattr(originals, "jpeg_parse", lambda data: parses.append(1) or real(data))
    return parses


def _exif_photo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[CountImageEnv, list[int]]:
    """An environment whose stimulus ``p0`` is a JPEG with an EXIF label, and the list that
    counts each parse of a JPEG's segments."""
    ds = _photos(tmp_path / "p")
    _exif_jpeg(ds, "p0")
    return CountImageEnv(ds, tools=("tag",)), _counting_parses(monkeypatch)


def test_a_jpeg_verdict_is_recorded_once_and_a_bad_record_only_means_parsing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = _photos(tmp_path / "p")
    path = _exif_jpeg(ds, "p0")
    parses = _counting_parses(monkeypatch)
    env = CountImageEnv(ds, tools=("tag",))
    _, first = _first_call(env, "p0")
    sent = tmp_path / "derived" / "sent"
    records = [p for p in sent.iterdir() if not p.name.startswith(".")]
    assert parses == [1] and len(records) == 1
    record = records[0]
    # Kept as a link's target: read with one call, no open, no read.
    target = os.readlink(record)
    # Its size, then the spans kept: SOI and the JFIF segment, then all after the EXIF segment.
    assert re.fullmatch(rf"jpeg 96 96 0 20 \d+ {path.stat().st_size}", target), target
    good = target

    def link(text: str) -> None:
        record.unlink()
        os.symlink(text, record)

    def content(text: str) -> None:
        record.unlink()
        record.write_text(text)

    cases = [
        (None, 1),  # recorded: not parsed again
        (lambda: link("jpeg 96 96 0 999999999"), 2),  # spans beyond the file
        (lambda: link("jpeg 96 96 20 10"), 3),  # a span that ends before it starts
        (lambda: link("jpeg 96 96 0 2 ٣ 9"), 4),  # digits, but not ASCII ones
        (lambda: link("garbage"), 5),
        (lambda: content(good), 5),  # a verdict kept as content (an earlier version's record)
        (lambda: content("jpeg 96 96 0 999999999"), 6),
        (lambda: content("\xff\xfe not text"), 7),
    ]
    for spoil, expect_parses in cases:
        if spoil is not None:
            spoil()
        originals.clear()  # as a new process
        backend_base._VIEW_URLS.clear()
        obs, url = _first_call(env, "p0")
        assert len(parses) == expect_parses and url == first  # the same bytes, metadata cut
        if expect_parses > 1 and spoil is not cases[5][0]:
            assert os.readlink(record) == good  # a bad record is replaced by the verdict
    assert sorted(p.name for p in sent.iterdir() if not p.name.startswith(".")) == [record.name]
    assert b"a label" not in base64.b64decode(first.partition(",")[2])
    assert np.array_equal(np.asarray(obs["image"]), _file_pixels(path))


def test_where_links_cannot_be_made_the_jpeg_verdict_is_a_file_s_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "symbolic links are not allowed here")

    monkeypatch.setattr(originals.os, "symlink", no_links)
    env, parses = _exif_photo_env(tmp_path, monkeypatch)
    _, first = _first_call(env, "p0")
    (record,) = [p for p in (tmp_path / "derived" / "sent").iterdir() if not p.name.startswith(".")]
    assert not record.is_symlink() and record.read_text().startswith("jpeg 96 96 0 20 ")
    originals.clear()  # as a new process
    _, url = _first_call(env, "p0")
    assert parses == [1] and url == first


def test_a_temp_link_left_by_a_killed_process_is_replaced_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, parses = _exif_photo_env(tmp_path, monkeypatch)
    sent = tmp_path / "derived" / "sent"
    sent.mkdir(parents=True)
    path = env.dataset.image_path(env.dataset["p0"])
    st = path.stat()
    name = Path(originals._sent_record((str(path), st.st_size, st.st_mtime_ns, st.st_ino, MAX_LONG_SIDE))).name
    stale = sent / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
    stale.symlink_to("jpeg 1 1 0 2")  # a verdict link of the same id, never moved into place
    _, first = _first_call(env, "p0")
    names = sorted(p.name for p in sent.iterdir() if p.name != ".countgym-build")
    assert names == [name] and os.readlink(sent / name).startswith("jpeg 96 96 0 20 ")
    assert parses == [1] and first.startswith("data:image/jpeg;base64,")


def test_a_read_only_cache_records_no_verdict_and_still_sends_the_photo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(folder: Path) -> None:
        raise PermissionError(errno.EACCES, "read-only", str(folder))

    monkeypatch.setattr(originals, "_derived_folder", read_only)
    env, parses = _exif_photo_env(tmp_path, monkeypatch)
    _, first = _first_call(env, "p0")
    originals.clear()
    _, url = _first_call(env, "p0")
    assert parses == [1, 1] and url == first and url.startswith("data:image/jpeg;base64,")
    assert not (tmp_path / "derived" / "sent").exists() or not any(
        p for p in (tmp_path / "derived" / "sent").iterdir() if not p.name.startswith(".")
    )


def test_a_jpeg_whose_data_does_not_decode_is_one_clear_error_when_read(tmp_path: Path) -> None:
    """Its segments are sound, so it is sent as stored; reading its pixels says which file failed."""
    from countgym.errors import UserError

    ds = _photos(tmp_path / "p")
    path = ds.image_path(ds["p0"])
    with Image.open(path) as im:
        im.save(path, format="JPEG", quality=92)
    data = bytearray(path.read_bytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 2 + 2 + 6 + 2] = 3  # the first component names quantization table 3, never defined
    path.write_bytes(bytes(data))
    env = CountImageEnv(ds, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "p0"})
    assert originals.original_of(obs["image"]).sent_type == "image/jpeg"
    with pytest.raises(UserError, match="cannot read image .*p0"):
        np.asarray(obs["image"])
    with pytest.raises(UserError, match="cannot read image"):
        env.step({"tool": "tag", "points": [[100, 100]]})
