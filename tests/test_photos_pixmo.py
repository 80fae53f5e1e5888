"""PixMo-Count loader and the image downloader (against a local http.server, never the network)."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from countgym.errors import UserError
from countgym.scenes.photos import (
    download_images,
    download_pixmo_images,
    prepare_pixmo,
    read_pixmo_table,
    url_image_stem,
)
from countgym.scenes.photos.pixmo import PIXMO_DOCS
from countgym.stimulus import Dataset
from tests.test_photos_fixtures import (
    disc_image,
    grid_points,
    make_pixmo_release,
    pixmo_rows,
    png_bytes,
)


class _Site:
    """What the local server serves: path -> list of (status, body) answered in turn (the last
    one repeats)."""

    def __init__(self) -> None:
        self.routes: dict[str, list[tuple[int, bytes]]] = {}
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()

    def answer(self, path: str) -> tuple[int, bytes]:
        with self.lock:
            self.hits[path] += 1
            seq = self.routes.get(path)
            if not seq:
                return 404, b"not found"
            return seq[min(self.hits[path], len(seq)) - 1]


@pytest.fixture
def site() -> Iterator[tuple[_Site, str]]:
    s = _Site()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            status, body = s.answer(self.path)
            self.send_response(status)
            if status in (301, 302):
                self.send_header("Location", body.decode())
                body = b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield s, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def _png(n: int = 3, size: tuple[int, int] = (64, 48)) -> bytes:
    return png_bytes(disc_image(size, grid_points(n, size, margin=4), radius=3))


def test_download_skips_dead_links_retries_and_guards(site: tuple[_Site, str], tmp_path: Path) -> None:
    s, base = site
    good, flaky, changed = _png(2), _png(3), _png(4)
    bomb = io.BytesIO()
    Image.new("1", (9000, 8000)).save(bomb, format="PNG")  # 72 Mpx: over the default 64 Mpx guard
    s.routes = {
        "/good.png": [(200, good)],
        "/flaky.png": [(503, b""), (500, b""), (200, flaky)],
        "/down.png": [(503, b"")],
        "/changed.png": [(200, changed)],
        "/page.html": [(200, b"<html>photo unavailable</html>")],
        "/bomb.png": [(200, bomb.getvalue())],
        "/gone.png": [(410, b"")],
        "/deleted.jpg": [(302, b"/images/photo_unavailable.png")],
        "/images/photo_unavailable.png": [(200, _png(1))],
        "/moved.png": [(301, b"/good.png")],
    }
    items = [
        (f"{base}/good.png", hashlib.sha256(good).hexdigest()),
        (f"{base}/flaky.png", None),
        (f"{base}/down.png", None),
        (f"{base}/changed.png", hashlib.sha256(b"other bytes").hexdigest()),
        (f"{base}/page.html", None),
        (f"{base}/bomb.png", None),
        (f"{base}/missing.png", None),  # 404
        (f"{base}/gone.png", None),
        ("ftp://example.invalid/x.png", None),
        (f"{base}/good.png", None),  # duplicate URL: fetched once
        (f"{base}/deleted.jpg", None),  # Flickr's placeholder for a deleted photo
        (f"{base}/moved.png", None),  # an ordinary redirect is followed
    ]
    rep = download_images(items, tmp_path / "images", workers=3, retries=2, backoff_s=0.01, timeout=5, progress=False)
    assert rep.downloaded == 3 and rep.present == 0
    dead = dict(rep.dead)
    assert set(dead) == {f"{base}/{p}" for p in ("changed.png", "page.html", "bomb.png", "missing.png", "gone.png",
                                                  "deleted.jpg")} | {"ftp://example.invalid/x.png"}
    assert "photo unavailable" in dead[f"{base}/deleted.jpg"]
    assert "sha256" in dead[f"{base}/changed.png"] and "HTTP 404" in dead[f"{base}/missing.png"]
    assert "decompression-bomb" in dead[f"{base}/bomb.png"] and "not a readable image" in dead[f"{base}/page.html"]
    assert [u for u, _ in rep.failed] == [f"{base}/down.png"] and "after 3 attempts" in rep.failed[0][1]
    assert s.hits["/down.png"] == 3 and s.hits["/flaky.png"] == 3 and s.hits["/missing.png"] == 1
    assert (tmp_path / "images" / f"{url_image_stem(f'{base}/good.png')}.png").read_bytes() == good
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == sorted(
        f"{url_image_stem(f'{base}/{n}')}.png" for n in ("good.png", "flaky.png", "moved.png")
    )  # named by the listed URL; no partial files left behind
    again = download_images(items[:2], tmp_path / "images", progress=False)
    assert again.present == 2 and again.downloaded == 0 and s.hits["/good.png"] == 2  # 1 + the redirect


def test_max_pixels_and_max_bytes_caps(site: tuple[_Site, str], tmp_path: Path) -> None:
    s, base = site
    s.routes = {"/wide.png": [(200, _png(2, (2000, 1000)))], "/small.png": [(200, _png(2))]}
    rep = download_images([(f"{base}/wide.png", None), (f"{base}/small.png", None)], tmp_path, max_pixels=1_000_000,
                          max_bytes=100_000, progress=False)
    assert rep.downloaded == 1 and "exceeds 1000000 pixels" in dict(rep.dead)[f"{base}/wide.png"]
    rep = download_images([(f"{base}/wide.png", None)], tmp_path / "b", max_bytes=100, progress=False)
    assert "too large" in dict(rep.dead)[f"{base}/wide.png"]


def test_download_pixmo_images_from_release_table(site: tuple[_Site, str], tmp_path: Path) -> None:
    s, base = site
    rows = pixmo_rows(per_count=1, host=base)
    root = tmp_path / "pixmo"
    root.mkdir()
    with (root / "test.jsonl").open("w") as f:
        for row, _ in rows:
            f.write(json.dumps(row) + "\n")
    # serve all but the first listed image (a dead link)
    s.routes = {row["image_url"][len(base):]: [(200, data)] for row, data in rows[1:]}
    rep = download_pixmo_images(root, workers=4, retries=1, backoff_s=0.01, progress=True)
    in_range = [r for r, _ in rows if 2 <= r["count"] <= 10]
    assert rep.downloaded == len(in_range) - 1 and [u for u, _ in rep.dead] == [rows[0][0]["image_url"]]
    assert len(list((root / "images").iterdir())) == rep.downloaded
    out_of_range = [r["image_url"][len(base):] for r, _ in rows if not 2 <= r["count"] <= 10]
    assert out_of_range and all(s.hits[p] == 0 for p in out_of_range)  # only counts 2-10 fetched
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # count 2 has no image left
        ds = Dataset(prepare_pixmo(root, tmp_path / "out", progress=False))
    assert len(ds) == len(in_range) - 1


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pixmo_release(tmp_path_factory.mktemp("pixmo_release"), per_count=3, skip=1)


def test_prepare_counts_subsets_and_names(release: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = Dataset(prepare_pixmo(release, tmp_path / "pixmo", per_count=2, progress=False))
    # counts 2-10 only, 2 each; count 2 lost one of its 3 images (dead link) and still has 2
    assert Counter(s.n for s in ds) == {n: 2 for n in range(2, 11)}
    assert not caught
    assert all(s.points is None and s.meta["battery"] == "pixmo" for s in ds)
    assert {(s.meta["label"], s.obj, s.obj_sing) for s in ds} <= {
        ("dog", "dogs", "dog"), ("people", "people", "person"), ("strawberries", "strawberries", "strawberry")}
    # common = the first 10 per count, i.e. all of these
    assert all(s.meta["subsets"] == ["common"] for s in ds)
    again = Dataset(prepare_pixmo(release, tmp_path / "again", per_count=2, progress=False))
    assert again.ids() == ds.ids()
    assert all(ds.load_image(s).size[0] > 0 for s in ds)


def test_per_count_shortfall_warns(release: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = Dataset(prepare_pixmo(release, tmp_path / "p", progress=False))  # 20 wanted
    assert len(ds) == 3 * 9 - 1
    assert any("count 2: 2 images present, 20 wanted" in str(w.message) for w in caught)


def test_release_errors_name_the_files(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        read_pixmo_table(tmp_path)
    assert "data/test-*.parquet" in str(e.value) and "test.jsonl" in str(e.value) and PIXMO_DOCS in str(e.value)
    make_pixmo_release(tmp_path / "r", with_images=False)
    with pytest.raises(UserError, match=r"images/ \(the downloaded images\).*download_pixmo_images"):
        prepare_pixmo(tmp_path / "r", tmp_path / "out", progress=False)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "test.jsonl").write_text('{"image_url": "http://x/1.png", "label": "dog"}\n')
    with pytest.raises(UserError, match="row 0 lacks image_url, count or label"):
        read_pixmo_table(tmp_path / "bad")


def test_parquet_release(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [r for r, _ in pixmo_rows(per_count=1)]
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "test-00000-of-00001.parquet")
    got = read_pixmo_table(tmp_path)
    assert [(r.url, r.count, r.label, r.sha256) for r in got] == [
        (r["image_url"], r["count"], r["label"], r["image_sha256"]) for r in rows]


def _jpeg_release(root: Path, truncate: int) -> tuple[Path, list[str]]:
    """The release in its official form (JPEG photos) with ``truncate`` count-2 images cut to
    half their bytes, as an interrupted download leaves them; returns (root, cut file names)."""
    from countgym.scenes.photos import url_image_stem

    make_pixmo_release(root, per_count=3)
    cut: list[str] = []
    rows = [json.loads(line) for line in (root / "test.jsonl").read_text().splitlines()]
    for row in rows:
        png = root / "images" / f"{url_image_stem(row['image_url'])}.png"
        jpg = png.with_suffix(".jpg")
        buf = io.BytesIO()
        Image.open(png).convert("RGB").save(buf, format="JPEG", quality=90)
        png.unlink()
        data = buf.getvalue()
        if row["count"] == 2 and len(cut) < truncate:
            data = data[: len(data) // 2]
            cut.append(jpg.name)
        jpg.write_bytes(data)
    return root, cut


def test_truncated_jpeg_is_skipped_and_reported(tmp_path: Path) -> None:
    root, cut = _jpeg_release(tmp_path / "rel", truncate=2)
    with Image.open(root / "images" / cut[0]) as im:
        im.verify()  # the container check alone passes a truncated JPEG
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = Dataset(prepare_pixmo(root, tmp_path / "out", per_count=3, progress=False))
    counts = Counter(s.n for s in ds)
    assert counts[2] == 1 and all(counts[n] == 3 for n in range(3, 11))
    assert all(ds.load_image(s).size[0] > 0 for s in ds)  # every selected image decodes in full
    msgs = [str(w.message) for w in caught]
    skipped = [m for m in msgs if "skipped 2 undecodable" in m]
    assert len(skipped) == 1 and all(name in skipped[0] for name in cut) and "truncated" in skipped[0]
    assert any("count 2: 1 images present, 3 wanted" in m for m in msgs)


def test_cached_set_rebuilds_when_a_broken_image_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from countgym.scenes.photos.pixmo import cached_pixmo

    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path / "cache"))
    root, cut = _jpeg_release(tmp_path / "rel", truncate=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = Dataset(cached_pixmo(root))
        whole = io.BytesIO()
        Image.new("RGB", (64, 48), "white").save(whole, format="JPEG")
        (root / "images" / cut[0]).write_bytes(whole.getvalue())  # downloaded again, same name
        second = Dataset(cached_pixmo(root))
    assert len(second) == len(first) + 1
