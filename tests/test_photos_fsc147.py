"""FSC-147 loader: release checks, bins, round-robin class balancing, upscaling with the dots."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from countgym.errors import UserError
from countgym.scenes.photos import check_fsc147_release, prepare_fsc147, read_fsc147, select_fsc147
from countgym.scenes.photos.fsc147 import BINS, FSC147_DOCS, FSCImage, bin_label
from countgym.stimulus import Dataset
from tests.test_photos_fixtures import FSC_TEST_COUNTS, make_fsc147_release


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fsc147_release(tmp_path_factory.mktemp("fsc_release"))


@pytest.fixture(scope="module")
def prepared(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny release fills no bin
        out = prepare_fsc147(release, tmp_path_factory.mktemp("fsc_prepared") / "fsc147", progress=False)
    return Dataset(out)


def test_missing_files_are_named_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "images_384_VarV2").mkdir()
    (tmp_path / "ImageClasses_FSC147.txt").write_text("1.jpg\tapples\n")
    with pytest.raises(UserError) as e:
        check_fsc147_release(tmp_path)
    msg = str(e.value)
    assert "annotation_FSC147_384.json" in msg and "Train_Test_Val_FSC_147.json" in msg
    assert "ImageClasses" not in msg and "images_384_VarV2" not in msg
    assert FSC147_DOCS in msg and "\n" not in msg
    with pytest.raises(UserError, match="the folder itself"):
        check_fsc147_release(tmp_path / "nope")


def test_missing_selected_image_is_named(release: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "rel"
    shutil.copytree(release, copy)
    first = json.loads((copy / "Train_Test_Val_FSC_147.json").read_text())["test"][0]
    (copy / "images_384_VarV2" / first).unlink()
    with warnings.catch_warnings(), pytest.raises(UserError, match=rf"images_384_VarV2/{first}"):
        warnings.simplefilter("ignore")
        prepare_fsc147(copy, tmp_path / "out", progress=False)


def test_reads_test_split_only(release: Path) -> None:
    images = read_fsc147(release)
    names = {im.name for im in images}
    split = json.loads((release / "Train_Test_Val_FSC_147.json").read_text())
    assert names == set(split["test"])
    assert all(im.n == len(im.points) for im in images)


def test_prepared_folder_bins_names_and_upscaling(release: Path, prepared: Dataset) -> None:
    stims = prepared.stimuli
    # every in-bin test image, none outside 8-80, none from train/val
    assert len(stims) == sum(len(v) for v in FSC_TEST_COUNTS.values())
    assert all(8 <= s.n <= 80 and s.meta["bin"] == bin_label(s.n) for s in stims)
    assert [s.meta["bin"] for s in stims] == sorted((s.meta["bin"] for s in stims), key=lambda b: int(b.split("-")[0]))
    by_class = {s.meta["class"]: (s.obj, s.obj_sing) for s in stims}
    assert by_class["deers"] == ("deer", "deer")
    assert by_class["sea shells"] == ("sea shells", "sea shell")
    assert by_class["apples"] == ("apples", "apple")
    ann = json.loads((release / "annotation_FSC147_384.json").read_text())
    for s in stims:
        src = ann[s.meta["source"]]
        img = prepared.load_image(s)
        assert img.height == 768 and abs(img.width - src["W"] * 2) <= 1
        pts = np.asarray(s.points)
        assert np.allclose(pts, np.asarray(src["points"]) * [img.width / src["W"], 2.0], atol=1e-2)
        # the upscaled image still has a dark disc under every scaled dot
        arr = np.asarray(img.convert("L"))
        vals = arr[np.round(pts[:, 1]).astype(int), np.round(pts[:, 0]).astype(int)]
        assert (vals < 90).all()
        assert s.id == "fsc147-" + Path(s.meta["source"]).stem
        assert set(s.meta["subsets"]) <= {"common", "ablation"}


def _synthetic(n_classes: int = 29, per_class_bin: int = 6, seed: int = 3) -> list[FSCImage]:
    rng = np.random.default_rng(seed)
    images = []
    k = 0
    for c in range(n_classes):
        for lo, hi in BINS:
            # uneven class sizes: some classes have few images in a bin
            for _ in range(int(rng.integers(0, per_class_bin + 1))):
                k += 1
                n = int(rng.integers(lo, hi + 1))
                images.append(FSCImage(f"{k}.jpg", f"class {c:02d}s", tuple((float(i), 1.0) for i in range(n))))
    return images


def test_round_robin_balances_classes_and_subsets_are_prefixes() -> None:
    images = _synthetic()
    sel = select_fsc147(images, per_bin=40)
    assert len(sel) == 200
    for lo, hi in BINS:
        label = f"{lo}-{hi}"
        in_bin = [s for s in sel if s.bin == label]
        assert len(in_bin) == 40 and [s.rank for s in in_bin] == list(range(40))
        avail = Counter(im.label for im in images if lo <= im.n <= hi)
        got = Counter(s.image.label for s in in_bin)
        # balanced: a class gets fewer than the most-picked class minus one only when exhausted
        top = max(got.values())
        assert all(got[c] >= top - 1 or got[c] == avail[c] for c in avail)
        for name, k in (("common", 20), ("ablation", 15)):
            members = [s for s in in_bin if name in s.subsets()]
            assert [s.rank for s in members] == list(range(k))
            sub = Counter(s.image.label for s in members)
            assert max(sub.values()) - min(sub.get(c, 0) for c in avail if avail[c] >= max(sub.values())) <= 1
    assert sum("common" in s.subsets() for s in sel) == 100
    assert sum("ablation" in s.subsets() for s in sel) == 75


def test_selection_is_deterministic_and_seeded() -> None:
    images = _synthetic()
    a = [s.image.name for s in select_fsc147(images)]
    b = [s.image.name for s in select_fsc147(list(reversed(images)))]
    assert a == b  # independent of the release's file order
    assert a != [s.image.name for s in select_fsc147(images, seed=1)]


def test_short_bin_warns_and_gives_what_it_has() -> None:
    images = [FSCImage(f"{i}.jpg", "cars", tuple((1.0, 1.0) for _ in range(10))) for i in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sel = select_fsc147(images)
    assert len(sel) == 3
    assert any("bin 8-15: 3 images available, 40 wanted" in str(w.message) for w in caught)


def test_env_reads_prepared_folder_and_oracle_is_perfect(prepared: Dataset, tmp_path: Path) -> None:
    from countgym.analysis import load_episodes, summarize
    from countgym.envs.image_env import CountImageEnv
    from countgym.runner import CellSpec, run_cell

    env = CountImageEnv(prepared)
    obs, _ = env.reset(seed=0, options={"stimulus_id": prepared.ids()[0]})
    assert max(obs["image"].shape[:2]) <= 1024  # wide 768-high images are fitted by the env
    res = run_cell(CellSpec(dataset=str(prepared.root), agent="oracle"), tmp_path / "runs", progress=False)
    assert res.ran == len(prepared) and res.errors == 0
    s = summarize(load_episodes([tmp_path / "runs"]), n_resamples=50).iloc[0]
    assert s["em"] == 1.0 and s["on_target_per100"] == pytest.approx(100.0)


def test_upscaled_image_is_jpeg_768_high(prepared: Dataset) -> None:
    s = prepared.stimuli[0]
    with Image.open(prepared.image_path(s)) as im:
        assert im.format == "JPEG" and im.height == 768
