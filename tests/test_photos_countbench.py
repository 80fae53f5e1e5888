"""CountBench(QA) loader: the JSON release with downloaded images, and the parquet layout."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from countgym.errors import UserError
from countgym.scenes.photos import prepare_countbench, read_countbench
from countgym.scenes.photos.countbench import COUNTBENCH_DOCS, CountBenchItem, object_name
from countgym.stimulus import Dataset
from tests.test_photos_fixtures import disc_image, grid_points, make_countbench_release


def test_json_release_prepares_counts_2_to_10_with_images(tmp_path: Path) -> None:
    root = make_countbench_release(tmp_path / "cb")
    assert len(read_countbench(root)) == 6
    ds = Dataset(prepare_countbench(root, tmp_path / "out", progress=False))
    # 12 is out of range, the "dead" URL has no image
    assert [s.n for s in ds] == [2, 3, 5, 7]
    names = {s.n: (s.obj, s.obj_sing, s.meta["obj_source"]) for s in ds}
    assert names[2] == ("dogs", "dog", "caption")
    assert names[3] == ("red apples", "red apple", "caption")
    assert names[5] == ("cats", "cat", "caption")
    assert names[7] == ("wonders", "wonder", "caption")
    assert all(s.points is None and ds.load_image(s).size == (300, 200) for s in ds)


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (CountBenchItem(4, "x", question="How many horses are in the image?"), ("horses", "horse", "question")),
        (CountBenchItem(3, "three people standing on a bridge"), ("people", "person", "caption")),
        (CountBenchItem(6, "a plate with cookies"), ("objects", "object", "fallback")),
    ],
)
def test_object_names(item: CountBenchItem, expected: tuple[str, str, str]) -> None:
    assert object_name(item) == expected


def test_missing_release_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        read_countbench(tmp_path)
    assert "CountBench.json" in str(e.value) and COUNTBENCH_DOCS in str(e.value) and "\n" not in str(e.value)


def test_no_images_yet_names_the_download_helper(tmp_path: Path) -> None:
    root = make_countbench_release(tmp_path / "cb")
    for p in (root / "images").iterdir():
        p.unlink()
    with pytest.raises(UserError, match="download_countbench_images"):
        prepare_countbench(root, tmp_path / "out", progress=False)


def test_countbenchqa_parquet_with_embedded_images(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = []
    for n, q in ((2, "How many birds are in the image?"), (9, "How many coins are there?")):
        buf = io.BytesIO()
        disc_image((200, 150), grid_points(n, (200, 150))).save(buf, format="PNG")
        rows.append({"image": {"bytes": buf.getvalue(), "path": None}, "text": "caption", "question": q, "number": n})
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "test-00000-of-00001.parquet")
    ds = Dataset(prepare_countbench(tmp_path, tmp_path / "out", progress=False))
    assert [(s.n, s.obj, s.meta["obj_source"]) for s in ds] == [(2, "birds", "question"), (9, "coins", "question")]
    from countgym.scenes.photos import detect_release

    assert detect_release(tmp_path) == "countbench"
